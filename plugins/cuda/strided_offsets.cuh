// strided_offsets.cuh — the element offsets of N tensors at a row-major position of a shape of
// at most kMaxDims dims, each tensor with its own strides (negative ones allowed: a flipped dim).
// Built on the host, passed to kernels by value, evaluated per element in 64-bit arithmetic.
// For kernels that address tensors of any layout one position per thread (gather/scatter,
// flip, cumsum's lines); the elementwise engine coalesces dims and has faster paths.
#pragma once

#include "elementwise_plan.hpp"
#include "gpu_runtime.h"

#include <plugin_support.hpp>

#include <cstdint>
#include <string>

namespace fl::cuda {

template <int N>
struct StridedOffsets {
  int32_t ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};  // elements

  // Appends a dimension (outermost first) and each tensor's stride along it. Raises
  // FL_ERR_NOT_SUPPORTED past kMaxDims dims, naming `op`.
  void add_dim(int64_t size, const int64_t (&dim_strides)[N], const char* op) {
    if (ndim >= kMaxDims)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": more than " + std::to_string(kMaxDims) + " dims");
    sizes[ndim] = size;
    for (int k = 0; k < N; ++k) strides[k][ndim] = dim_strides[k];
    ++ndim;
  }

  int64_t positions() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }

  // offset[k] = tensor k's element offset at row-major `position` (< positions()).
  __device__ __forceinline__ void at(int64_t position, int64_t (&offset)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) offset[k] = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= ndim) continue;
      const int64_t i = position % sizes[d];
      position /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) offset[k] += i * strides[k][d];
    }
  }
};

// Calls f(TypeTag-like E{}) with an unsigned integer type of `bytes` bytes (1, 2, 4, 8): for
// kernels that move elements without reading their values. False for another size.
template <class F>
bool dispatch_element_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); return true;
    case 2: f(uint16_t{}); return true;
    case 4: f(uint32_t{}); return true;
    case 8: f(uint64_t{}); return true;
    default: return false;
  }
}

}  // namespace fl::cuda
