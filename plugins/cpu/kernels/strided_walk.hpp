// strided_walk.hpp — a row-major walk over a shape that keeps the element offset of N tensors
// (each with its own strides, negative ones allowed) as it goes: one add per step and tensor,
// plus a carry at the end of each row. For kernels that index tensors of any layout element
// by element (gather/scatter, flip, cumsum); the elementwise engine has its own, faster plan.
#pragma once

#include "tensor_desc.hpp"

#include <cstdint>
#include <cstring>

namespace fl::cpu::kernels {

template <int N>
struct StridedWalk {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};  // elements
  int64_t coord[kMaxDims] = {};
  int64_t offset[N] = {};             // of the current position, in elements

  // Appends a dimension (outermost first) with each tensor's stride along it.
  void add_dim(int64_t size, const int64_t (&dim_strides)[N]) {
    shape[ndim] = size;
    for (int k = 0; k < N; ++k) strides[k][ndim] = dim_strides[k];
    ++ndim;
  }

  int64_t positions() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }

  // Moves to row-major position `position` of the shape (which has positions: no size 0).
  void seek(int64_t position) {
    for (int k = 0; k < N; ++k) offset[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      coord[d] = position % shape[d];
      position /= shape[d];
      for (int k = 0; k < N; ++k) offset[k] += coord[d] * strides[k][d];
    }
  }

  // Moves to the next position (after the last one: back to the first).
  void next() {
    for (int d = ndim - 1; d >= 0; --d) {
      for (int k = 0; k < N; ++k) offset[k] += strides[k][d];
      if (++coord[d] < shape[d]) return;
      for (int k = 0; k < N; ++k) offset[k] -= shape[d] * strides[k][d];
      coord[d] = 0;
    }
  }
};

// Copies one element of `bytes` bytes (1, 2, 4 or 8; each a single move).
inline void copy_element(char* dst, const char* src, size_t bytes) {
  switch (bytes) {
    case 1: *dst = *src; break;
    case 2: std::memcpy(dst, src, 2); break;
    case 4: std::memcpy(dst, src, 4); break;
    default: std::memcpy(dst, src, 8); break;
  }
}

}  // namespace fl::cpu::kernels
