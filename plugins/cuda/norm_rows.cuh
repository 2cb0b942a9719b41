// norm_rows.cuh — what layer_norm.cu and rms_norm.cu share: the input seen as M rows of N (the
// trailing normalized_shape dims), which outputs a call wants, and the second half of their
// parameter gradients: per-chunk column partials (blocks of kColX columns by kColY row
// lanes) summed over the chunks in a fixed order, so the result is the same run to run.
#pragma once

#include "dtype_convert.cuh"
#include "kernel_glue.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <string>
#include <vector>

namespace fl::cuda {

constexpr int kColX = 32, kColY = 8;  // a column-partial block: 32 columns, 8 row lanes

struct RowsCols {
  int64_t m = 1, n = 1;
};

inline RowsCols rows_cols(const fl_tensor& input, const std::vector<int64_t>& normalized_shape, const char* name) {
  const int32_t k = static_cast<int32_t>(normalized_shape.size());
  if (k > input.ndim || k == 0)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": bad normalized_shape rank");
  RowsCols rc;
  for (int32_t d = 0; d < input.ndim; ++d) {
    if (d < input.ndim - k) {
      rc.m *= input.shape[d];
    } else {
      if (input.shape[d] != normalized_shape[static_cast<size_t>(d - (input.ndim - k))])
        plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": normalized_shape does not match the input");
      rc.n *= input.shape[d];
    }
  }
  return rc;
}

// Output i when the call wants it (passed, not ndim -1, not empty storage).
inline bool output_requested(const plugin::Args& a, int32_t i) {
  return i < a.num_outputs() && !plugin::is_undefined(a.output(i)) && a.output(i).data != nullptr;
}

// out[j] = sum over the chunks c, in order, of partial[c][j]; zeros when there are no chunks.
template <class Acc>
__global__ void sum_chunks(const Acc* __restrict__ partial, int64_t chunks, int64_t n, void* out, fl_dtype_t out_dt) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * n + j];
    store_as(out, j, out_dt, s);
  }
}

}  // namespace fl::cuda
