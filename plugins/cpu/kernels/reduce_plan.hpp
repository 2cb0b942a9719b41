// reduce_plan.hpp — how the CPU reductions walk their input: the plan of a reduction over a
// set of dims (each input dim's step in the output and within the reduced set), and loops
// over the input's innermost rows, on one thread or split over the kept dims. Shared by
// reduction_kernels.cpp and variance_kernels.cpp.
#pragma once

#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace fl::cpu::kernels {

struct ReducePlan {
  TensorDesc in;
  int64_t out_numel = 1;
  int64_t reduce_numel = 1;
  int64_t out_stride[kMaxDims] = {};     // per input dim, in output elements; 0 when reduced
  int64_t reduce_stride[kMaxDims] = {};  // per input dim, row-major index within the reduced set
};

// The plan of a reduction of `in` over `dims` (wrapped, checked for repeats). `dims` empty:
// reduce everything, unless `empty_reduces_nothing` (all.dims/any.dims with dim=[], which keep
// every dim).
ReducePlan plan_reduce(const char* op, const TensorDesc& in, std::vector<int64_t> dims,
                       bool empty_reduces_nothing = false);

// A dim-list argument (int[1]? dim): none is empty, which plan_reduce reads as every dim.
inline std::vector<int64_t> optional_dims(const plugin::Args& args, int32_t index) {
  if (args.is_none(index)) return {};
  return args.ints(index);
}

// Calls row(ptr, stride, n, out_index, out_step, reduce_index, reduce_step) for every
// innermost row of the input, in row-major order; out_index counts from out_base.
template <class T, class Row>
void for_each_row(const ReducePlan& p, int64_t out_base, Row&& row) {
  const TensorDesc& t = p.in;
  if (t.numel() == 0) return;
  if (t.ndim == 0) {
    row(t.ptr<const T>(), int64_t{1}, int64_t{1}, out_base, int64_t{0}, int64_t{0}, int64_t{0});
    return;
  }
  const int last = t.ndim - 1;
  int64_t index[kMaxDims] = {};
  for (;;) {
    int64_t offset = 0, out_index = out_base, reduce_index = 0;
    for (int d = 0; d < last; ++d) {
      offset += index[d] * t.strides[d];
      out_index += index[d] * p.out_stride[d];
      reduce_index += index[d] * p.reduce_stride[d];
    }
    row(t.ptr<const T>() + offset, t.strides[last], t.shape[last], out_index, p.out_stride[last],
        reduce_index, p.reduce_stride[last]);
    int d = last - 1;
    for (; d >= 0; --d) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// for_each_row split over the threads along the kept (not reduced) dim of most indices: each
// output lies in one part, and within it its elements come in the same order as in one
// for_each_row, so `row` may write its outputs unlocked and sums keep their bits. A full
// reduction (no kept dim) runs on one thread.
template <class T, class Row>
void for_each_row_split(const ReducePlan& p, Row&& row) {
  int split = -1;
  for (int d = 0; d < p.in.ndim; ++d)
    if (p.out_stride[d] != 0 && (split < 0 || p.in.shape[d] > p.in.shape[split])) split = d;
  const int64_t numel = p.in.numel();
  if (split < 0 || numel == 0) {
    for_each_row<T>(p, 0, row);
    return;
  }
  const int64_t extent = p.in.shape[split];
  const int64_t per_index = numel / extent;  // input elements under one index of `split`
  // Split along the innermost dim, every chunk cuts each row: keep the pieces of rows long
  // (summing [4096, 64] over dim 0 in 8 chunks of 8 columns took 5x as long as one chunk).
  const int64_t min_row_piece = split == p.in.ndim - 1 ? 256 : 1;
  const int64_t grain = std::max({int64_t{1}, kParallelGrain / per_index, min_row_piece});
  parallel_for(extent, grain, [&](int64_t begin, int64_t end) {
    ReducePlan part = p;
    part.in.data += begin * p.in.strides[split] * static_cast<int64_t>(sizeof(T));
    part.in.shape[split] = end - begin;
    for_each_row<T>(part, begin * p.out_stride[split], row);
  });
}

}  // namespace fl::cpu::kernels
