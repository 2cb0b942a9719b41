// attention_masked_rows.hpp — fused attention's rows whose every key is masked (a bias row of
// -inf). ATen's safe softmax gives such a row output 0 and logsumexp -inf, and zero
// gradients. cuDNN leaves the row's logsumexp infinite, and its backward, which evaluates
// exp(s - logsumexp), gets -inf - (-inf) = NaN there (cudnn-frontend issue #262). These two
// kernels, run around the cuDNN passes of a call with a bias (attention_cudnn_graph.cpp), give
// ATen's results instead. Only a bias can mask a whole row: the causal mask keeps key 0.
#pragma once

#include "gpu_runtime.h"

#include <cstdint>

namespace fl::cuda {

// The forward output [B,H,Lq,Ev] (2-byte elements, unit stride along Ev) as the kernel walks
// it: rows r = (b*H + h)*Lq + i.
struct AttentionOutputRows {
  void* data = nullptr;
  int64_t heads = 0, queries = 0, head_size = 0;
  int64_t stride[3] = {};  // elements, of B, H and Lq
};

// After the forward pass: each of the `rows` rows whose logsumexp is infinite gets output 0
// and logsumexp -inf. Enqueued on `stream`.
void launch_attention_clear_masked_rows(float* logsumexp, const AttentionOutputRows& out, int64_t rows,
                                        gpuStream_t stream);

// Before the backward pass: stats = logsumexp with -inf replaced by +inf, so that
// exp(s - stats) is 0 on a fully masked row rather than NaN (FlashAttention's convention), and
// the row's gradients come out 0. Enqueued on `stream`.
void launch_attention_backward_stats(const float* logsumexp, float* stats, int64_t rows, gpuStream_t stream);

}  // namespace fl::cuda
