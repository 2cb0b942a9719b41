// attention_masked_rows.cu — see attention_masked_rows.hpp. One thread per attention row, in a
// grid-stride loop; a row is touched only when its logsumexp is infinite, which is rare.
#include "attention_masked_rows.hpp"
#include "gpu_check.hpp"

#include <cmath>
#include <cstdint>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

unsigned int blocks_for(int64_t rows) {
  int64_t blocks = (rows + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned int>(blocks);
}

__global__ void clear_masked_rows_kernel(float* logsumexp, AttentionOutputRows out, int64_t rows) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += step) {
    const float l = logsumexp[r];
    if (l != INFINITY && l != -INFINITY) continue;
    logsumexp[r] = -INFINITY;
    const int64_t i = r % out.queries, bh = r / out.queries;
    const int64_t h = bh % out.heads, b = bh / out.heads;
    uint16_t* row = static_cast<uint16_t*>(out.data) + b * out.stride[0] + h * out.stride[1] + i * out.stride[2];
    for (int64_t j = 0; j < out.head_size; ++j) row[j] = 0;  // +0 in float16 and in bfloat16
  }
}

__global__ void backward_stats_kernel(const float* logsumexp, float* stats, int64_t rows) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += step) {
    const float l = logsumexp[r];
    stats[r] = l == -INFINITY ? INFINITY : l;
  }
}

}  // namespace

void launch_attention_clear_masked_rows(float* logsumexp, const AttentionOutputRows& out, int64_t rows,
                                        gpuStream_t stream) {
  if (rows <= 0) return;
  clear_masked_rows_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logsumexp, out, rows);
  check_launch("clear_masked_rows_kernel");
}

void launch_attention_backward_stats(const float* logsumexp, float* stats, int64_t rows, gpuStream_t stream) {
  if (rows <= 0) return;
  backward_stats_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logsumexp, stats, rows);
  check_launch("backward_stats_kernel");
}

}  // namespace fl::cuda
