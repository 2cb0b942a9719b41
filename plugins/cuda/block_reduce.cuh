// block_reduce.cuh — reductions across a group of TPR threads (a warp, or a whole block of
// TPR threads), every thread receiving the result.
#pragma once

#include "gpu_runtime.h"

namespace fl::cuda {

struct SumOf {
  template <class A>
  __device__ A operator()(A a, A b) const { return a + b; }
};
struct MaxOf {
  template <class A>
  __device__ A operator()(A a, A b) const { return a > b ? a : b; }
};

// `shared` holds at least TPR / 32 values. With TPR > 32, every thread of the block must
// call this (it synchronizes the block).
template <int TPR, class A, class F>
__device__ __forceinline__ A group_reduce(A v, F f, A* shared) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = f(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if constexpr (TPR > 32) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x % TPR) / 32;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = shared[0];
#pragma unroll
    for (int w = 1; w < TPR / 32; ++w) v = f(v, shared[w]);
  }
  return v;
}

}  // namespace fl::cuda
