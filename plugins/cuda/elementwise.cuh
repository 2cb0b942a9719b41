// elementwise.cuh — the one elementwise engine: a functor Op<C> applied to N inputs (tensors
// or scalars), broadcasting, any strides, any real dtype mix, grid-stride loops.
//  - fast path: every tensor operand dense and of one storage type T (output T, or bool for
//    comparisons; any float pair for conversions), pointers aligned: 128-bit vector loads;
//  - general path: per-element offsets from the coalesced dims, runtime-typed loads/stores;
//    in 32-bit multiply-shift arithmetic when every offset fits (as ATen's OffsetCalculator),
//    else in 64-bit.
// An Op<C> is constructed from OpParams on the host, is trivially copyable, and provides
// `C operator()(C...) const` (or `bool` for comparisons, with kBoolOut = true).
#pragma once

#include "device_state.hpp"
#include "dtype_convert.cuh"
#include "elementwise_plan.hpp"
#include "fast_divmod.cuh"
#include "gpu_check.hpp"

#include <plugin_support.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

namespace fl::cuda {

// Parameters of an elementwise functor (alpha, value, threshold, min/max, mode...).
struct OpParams {
  double a = 0.0;
  double b = 0.0;
  double c = 0.0;
  int mode = 0;
};

template <class T, int V>
struct alignas(sizeof(T) * V) AlignedVector {
  T v[V];
};

template <int N, class Op, class C>
__device__ __forceinline__ auto apply_op(const Op& op, const C* v) {
  if constexpr (N == 0) return op();
  else if constexpr (N == 1) return op(v[0]);
  else if constexpr (N == 2) return op(v[0], v[1]);
  else if constexpr (N == 3) return op(v[0], v[1], v[2]);
  else return op(v[0], v[1], v[2], v[3]);
}

template <class C, int N, class Op>
__global__ void elementwise_strided_kernel(ElementwiseOperands p, Op op) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t linear = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; linear < p.numel;
       linear += step) {
    int64_t out_off = 0;
    int64_t in_off[N > 0 ? N : 1] = {};
    int64_t rem = linear;
    for (int d = p.ndim - 1; d >= 0; --d) {
      const int64_t size = p.sizes[d];
      const int64_t i = rem % size;
      rem /= size;
      out_off += i * p.out_strides[d];
#pragma unroll
      for (int k = 0; k < N; ++k) in_off[k] += i * p.in_strides[k][d];
    }
    C v[N > 0 ? N : 1] = {};
#pragma unroll
    for (int k = 0; k < N; ++k)
      v[k] = p.in[k] != nullptr ? load_as<C>(p.in[k], in_off[k], p.in_dtype[k]) : static_cast<C>(p.scalar[k]);
    store_as(p.out, out_off, p.out_dtype, apply_op<N>(op, v));
  }
}

// The general path's index arithmetic in 32 bits: a divider per coalesced dim.
template <int N>
struct Offsets32 {
  int32_t ndim = 0;
  FastDivmod div[kMaxDims];
  uint32_t out_strides[kMaxDims];
  uint32_t in_strides[N > 0 ? N : 1][kMaxDims];

  // Adds the offsets (in elements) of the element at `linear` to `out_off` (the output's) and
  // `in_off[k]` (input k's); the caller zeroes them. In this form nvcc 13 emits the same SASS
  // as for the loop written out in each kernel; returning a struct changed one instantiation.
  __device__ __forceinline__ void add_offsets(uint32_t linear, uint32_t& out_off,
                                              uint32_t (&in_off)[N > 0 ? N : 1]) const {
    uint32_t rem = linear;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= ndim) continue;
      uint32_t q, i;
      div[d].divmod(rem, q, i);
      rem = q;
      out_off += i * out_strides[d];
#pragma unroll
      for (int k = 0; k < N; ++k) in_off[k] += i * in_strides[k][d];
    }
  }
};

template <class C, int N, class Op>
__global__ void elementwise_strided32_kernel(ElementwiseOperands p, Offsets32<N> o, Op op) {
  const uint32_t total = static_cast<uint32_t>(p.numel);
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t linear = blockIdx.x * blockDim.x + threadIdx.x; linear < total; linear += step) {
    uint32_t out_off = 0;
    uint32_t in_off[N > 0 ? N : 1] = {};
    o.add_offsets(linear, out_off, in_off);
    C v[N > 0 ? N : 1] = {};
#pragma unroll
    for (int k = 0; k < N; ++k)
      v[k] = p.in[k] != nullptr ? load_as<C>(p.in[k], in_off[k], p.in_dtype[k]) : static_cast<C>(p.scalar[k]);
    store_as(p.out, out_off, p.out_dtype, apply_op<N>(op, v));
  }
}

// The 32-bit offsets of `p`, when the element count and every operand's furthest offset stay
// below 2^31 (and no stride is negative).
template <int N>
bool offsets32(const ElementwiseOperands& p, Offsets32<N>& o) {
  constexpr int64_t kLimit = 2147483647LL;
  if (p.numel > kLimit) return false;
  auto fits = [&](const int64_t* strides) {
    int64_t furthest = 0;
    for (int d = 0; d < p.ndim; ++d) {
      if (strides[d] < 0) return false;
      furthest += (p.sizes[d] - 1) * strides[d];
    }
    return furthest <= kLimit;
  };
  if (!fits(p.out_strides)) return false;
  for (int k = 0; k < N; ++k)
    if (p.in[k] != nullptr && !fits(p.in_strides[k])) return false;
  o.ndim = p.ndim;
  for (int d = 0; d < p.ndim; ++d) {
    o.div[d] = make_fast_divmod(static_cast<uint32_t>(p.sizes[d]));
    o.out_strides[d] = static_cast<uint32_t>(p.out_strides[d]);
    for (int k = 0; k < N; ++k) o.in_strides[k][d] = static_cast<uint32_t>(p.in[k] != nullptr ? p.in_strides[k][d] : 0);
  }
  return true;
}

template <class T, class C, int N>
struct DenseInputs {
  const T* ptr[N > 0 ? N : 1];
  C scalar[N > 0 ? N : 1];
};

template <class T, class TO, class C, int N, int VEC, class Op>
__global__ void elementwise_dense_kernel(int64_t n, TO* out, DenseInputs<T, C, N> in, Op op) {  // out may alias an input
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / VEC;
  for (int64_t i = tid; i < nvec; i += step) {
    AlignedVector<T, VEC> a[N > 0 ? N : 1];
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (in.ptr[k] != nullptr) a[k] = reinterpret_cast<const AlignedVector<T, VEC>*>(in.ptr[k])[i];
    AlignedVector<TO, VEC> r;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      C v[N > 0 ? N : 1] = {};
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = in.ptr[k] != nullptr ? convert<C>(a[k].v[j]) : in.scalar[k];
      r.v[j] = convert<TO>(apply_op<N>(op, v));
    }
    reinterpret_cast<AlignedVector<TO, VEC>*>(out)[i] = r;
  }
  for (int64_t i = nvec * VEC + tid; i < n; i += step) {
    C v[N > 0 ? N : 1] = {};
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = in.ptr[k] != nullptr ? convert<C>(in.ptr[k][i]) : in.scalar[k];
    out[i] = convert<TO>(apply_op<N>(op, v));
  }
}

template <class T>
constexpr fl_dtype_t dtype_of() {
  if constexpr (std::is_same_v<T, float>) return FL_DTYPE_FLOAT32;
  else if constexpr (std::is_same_v<T, double>) return FL_DTYPE_FLOAT64;
  else if constexpr (std::is_same_v<T, gpu_half>) return FL_DTYPE_FLOAT16;
  else if constexpr (std::is_same_v<T, gpu_bfloat16>) return FL_DTYPE_BFLOAT16;
  else if constexpr (std::is_same_v<T, int64_t>) return FL_DTYPE_INT64;
  else if constexpr (std::is_same_v<T, int32_t>) return FL_DTYPE_INT32;
  else if constexpr (std::is_same_v<T, bool>) return FL_DTYPE_BOOL;
  else return FL_DTYPE_COUNT;
}

inline bool aligned_to(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

constexpr int kElementwiseThreads = 256;

// Launches the dense kernel when every tensor input has storage T and the output TO.
template <class T, class TO, class C, int N, class Op>
bool try_dense(const ElementwiseOperands& p, const Op& op, const LaunchContext& ctx) {
  if (p.out_dtype != dtype_of<TO>()) return false;
  constexpr int VEC = 16 / sizeof(T) > 0 ? static_cast<int>(16 / sizeof(T)) : 1;
  if (!aligned_to(p.out, sizeof(TO) * VEC)) return false;
  DenseInputs<T, C, N> in{};
  for (int k = 0; k < N; ++k) {
    if (p.in[k] == nullptr) {
      in.ptr[k] = nullptr;
      in.scalar[k] = static_cast<C>(p.scalar[k]);
    } else {
      if (p.in_dtype[k] != dtype_of<T>() || !aligned_to(p.in[k], sizeof(T) * VEC)) return false;
      in.ptr[k] = static_cast<const T*>(p.in[k]);
      in.scalar[k] = C(0);
    }
  }
  const unsigned int grid = grid_for((p.numel + VEC - 1) / VEC, kElementwiseThreads, ctx);
  elementwise_dense_kernel<T, TO, C, N, VEC, Op>
      <<<grid, kElementwiseThreads, 0, ctx.stream>>>(p.numel, static_cast<TO*>(p.out), in, op);
  check_launch("elementwise_dense_kernel");
  return true;
}

// Storage type of the dense path's output given the input storage T.
template <class Op, class T>
using DenseOut = std::conditional_t<Op::kBoolOut, bool, T>;

template <template <class> class Op, int N, class C>
void run_elementwise(const ElementwiseOperands& p, const OpParams& q, const LaunchContext& ctx) {
  const Op<C> op(q);
  static_assert(!(Op<C>::kBoolOut && Op<C>::kConverts), "a converting op cannot have a bool output");
  if (p.contiguous) {
    if constexpr (std::is_same_v<C, float>) {
      if (try_dense<float, DenseOut<Op<C>, float>, C, N>(p, op, ctx)) return;
      if (try_dense<gpu_bfloat16, DenseOut<Op<C>, gpu_bfloat16>, C, N>(p, op, ctx)) return;
      if (try_dense<gpu_half, DenseOut<Op<C>, gpu_half>, C, N>(p, op, ctx)) return;
      if constexpr (Op<C>::kConverts) {  // dtype conversions among the float types
        if (try_dense<float, gpu_bfloat16, C, N>(p, op, ctx)) return;
        if (try_dense<float, gpu_half, C, N>(p, op, ctx)) return;
        if (try_dense<gpu_bfloat16, float, C, N>(p, op, ctx)) return;
        if (try_dense<gpu_half, float, C, N>(p, op, ctx)) return;
      }
    }
  }
  const unsigned int grid = grid_for(p.numel, kElementwiseThreads, ctx);
  Offsets32<N> o;
  if (offsets32<N>(p, o)) {
    elementwise_strided32_kernel<C, N, Op<C>><<<grid, kElementwiseThreads, 0, ctx.stream>>>(p, o, op);
    check_launch("elementwise_strided32_kernel");
    return;
  }
  elementwise_strided_kernel<C, N, Op<C>><<<grid, kElementwiseThreads, 0, ctx.stream>>>(p, op);
  check_launch("elementwise_strided_kernel");
}

// Runs Op over the planned operands in the given compute kind. Ops with kInt == false
// refuse integer arithmetic (FL_ERR_NOT_SUPPORTED, nothing enqueued).
template <template <class> class Op, int N>
void launch_elementwise(const char* op_name, const ElementwiseOperands& p, ComputeKind kind,
                        const OpParams& q, const LaunchContext& ctx) {
  if (p.numel == 0) return;
  switch (kind) {
    case ComputeKind::Float: run_elementwise<Op, N, float>(p, q, ctx); return;
    case ComputeKind::Double: run_elementwise<Op, N, double>(p, q, ctx); return;
    case ComputeKind::Int:
      if constexpr (Op<int64_t>::kInt) {
        run_elementwise<Op, N, int64_t>(p, q, ctx);
        return;
      } else {
        plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op_name) + ": integer inputs (" +
                                                plugin::dtype_name(p.out_dtype) + " output) not supported");
      }
  }
}

// Base for functors: defaults of the traits the engine reads.
struct OpTraits {
  static constexpr bool kBoolOut = false;
  static constexpr bool kConverts = false;
  static constexpr bool kInt = true;
};
struct FloatOnly : OpTraits {
  static constexpr bool kInt = false;
};

}  // namespace fl::cuda
