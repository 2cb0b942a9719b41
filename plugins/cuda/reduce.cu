// reduce.cu — one reduction engine for sum, mean, amax, amin, argmax, all, any and
// linalg_vector_norm (orders 0, 1, 2, inf, -inf) over any set of dims.
// The input's dims are split into kept and reduced groups (each coalesced); output element o
// reduces over r in [0, n_red). Three launch shapes:
//  - warp per output, when the reduced group holds the innermost (stride-1) dim and is short;
//  - block per output, when it holds the innermost dim and is long;
//  - columns (threads over outputs, block rows over r), when the kept group is innermost.
// Half types accumulate in float, float64 in double, integers in int64. Reductions are done
// in a fixed order, so results are reproducible run to run.
#include "dtype_convert.cuh"
#include "elementwise_plan.hpp"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "reduce.hpp"
#include "scratch_buffer.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

namespace fl::cuda {
namespace {

constexpr int kMaxReduceDims = 8;

struct ReduceGeometry {
  int32_t n_kept = 0;
  int32_t n_red = 0;
  int64_t kept_sizes[kMaxReduceDims] = {};
  int64_t kept_strides[kMaxReduceDims] = {};
  int64_t red_sizes[kMaxReduceDims] = {};
  int64_t red_strides[kMaxReduceDims] = {};
  int64_t out_count = 0;
  int64_t red_count = 0;
};

__device__ __forceinline__ int64_t group_offset(int64_t linear, int32_t n, const int64_t* sizes,
                                                const int64_t* strides) {
  if (n == 1) return linear * strides[0];  // the common case: no division
  int64_t off = 0;
  for (int d = n - 1; d >= 0; --d) {
    const int64_t i = linear % sizes[d];
    linear /= sizes[d];
    off += i * strides[d];
  }
  return off;
}

template <class V>
struct ArgPair {
  V v;
  int64_t i;
};

__device__ __forceinline__ float shfl_down(float v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double shfl_down(double v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ int32_t shfl_down(int32_t v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ int64_t shfl_down(int64_t v, int o) {
  return static_cast<int64_t>(__shfl_down_sync(0xffffffffu, static_cast<long long>(v), o));
}
template <class V>
__device__ __forceinline__ ArgPair<V> shfl_down(ArgPair<V> p, int o) {
  return ArgPair<V>{shfl_down(p.v, o), shfl_down(p.i, o)};
}

template <class A>
__device__ __forceinline__ A lowest() {
  if constexpr (std::is_floating_point_v<A>) return -INFINITY;
  else return LLONG_MIN;
}
template <class A>
__device__ __forceinline__ A highest() {
  if constexpr (std::is_floating_point_v<A>) return INFINITY;
  else return LLONG_MAX;
}

// Policies: Acc, identity, load, combine, store.
template <class A, bool kMean>
struct SumPolicy {
  using Acc = A;
  __device__ static Acc identity() { return A(0); }
  __device__ static Acc load(const void* in, int64_t off, fl_dtype_t dt, int64_t) { return load_as<A>(in, off, dt); }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static void store(void* out, int64_t o, fl_dtype_t dt, Acc a, int64_t n) {
    if constexpr (kMean) store_as(out, o, dt, a / static_cast<A>(n));
    else store_as(out, o, dt, a);
  }
};

template <class A, bool kMax>
struct ExtremePolicy {
  using Acc = A;
  __device__ static Acc identity() { return kMax ? lowest<A>() : highest<A>(); }
  __device__ static Acc load(const void* in, int64_t off, fl_dtype_t dt, int64_t) { return load_as<A>(in, off, dt); }
  __device__ static Acc combine(Acc a, Acc b) {
    if (dmath::isnan_(a)) return a;
    if (dmath::isnan_(b)) return b;
    if constexpr (kMax) return a > b ? a : b;
    else return a < b ? a : b;
  }
  __device__ static void store(void* out, int64_t o, fl_dtype_t dt, Acc a, int64_t) { store_as(out, o, dt, a); }
};

// First index of the maximum (kMax) or minimum; NaN counts as the extreme (first NaN wins),
// as in ATen.
template <class A, bool kMax>
struct ArgPolicy {
  using Acc = ArgPair<A>;
  __device__ static Acc identity() { return Acc{kMax ? lowest<A>() : highest<A>(), LLONG_MAX}; }
  __device__ static Acc load(const void* in, int64_t off, fl_dtype_t dt, int64_t r) {
    return Acc{load_as<A>(in, off, dt), r};
  }
  __device__ static Acc combine(Acc a, Acc b) {
    const bool a_nan = dmath::isnan_(a.v), b_nan = dmath::isnan_(b.v);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.i < b.i ? a : b;
      return a_nan ? a : b;
    }
    if (kMax ? a.v > b.v : a.v < b.v) return a;
    if (kMax ? b.v > a.v : b.v < a.v) return b;
    return a.i < b.i ? a : b;
  }
  __device__ static void store(void* out, int64_t o, fl_dtype_t dt, Acc a, int64_t) { store_as(out, o, dt, a.i); }
};

// linalg_vector_norm, as ATen's CUDA norm reductions: kZero counts the non-zero elements (NaN
// included), kOne sums |x|, kTwo is sqrt(sum x^2), kInf/kNegInf the max/min of |x| (NaN
// propagates), accumulated in A (float for the half types and float32, double for float64).
enum class NormOrder { kZero, kOne, kTwo, kInf, kNegInf };

template <class A, NormOrder K>
struct NormPolicy {
  using Acc = A;
  __device__ static Acc identity() { return K == NormOrder::kNegInf ? highest<A>() : A(0); }
  __device__ static Acc load(const void* in, int64_t off, fl_dtype_t dt, int64_t) {
    const A v = dmath::abs_(load_as<A>(in, off, dt));
    if constexpr (K == NormOrder::kZero) return v != A(0) ? A(1) : A(0);
    else if constexpr (K == NormOrder::kTwo) return v * v;
    else return v;
  }
  __device__ static Acc combine(Acc a, Acc b) {
    if constexpr (K == NormOrder::kInf || K == NormOrder::kNegInf) {
      if (dmath::isnan_(a)) return a;
      if (dmath::isnan_(b)) return b;
      if constexpr (K == NormOrder::kInf) return a > b ? a : b;
      else return a < b ? a : b;
    } else {
      return a + b;
    }
  }
  __device__ static void store(void* out, int64_t o, fl_dtype_t dt, Acc a, int64_t) {
    if constexpr (K == NormOrder::kTwo) store_as(out, o, dt, dmath::sqrt_(a));
    else store_as(out, o, dt, a);
  }
};

// all (kAll) / any: x != 0 (NaN counts as non-zero), read as A (double for float64, float for
// the other floats, int64 for integers and bool), combined with and / or; an empty set gives
// true for all, false for any. Stored as 0/1 (the output is bool or uint8).
template <class A, bool kAll>
struct AllAnyPolicy {
  using Acc = int32_t;
  __device__ static Acc identity() { return kAll ? 1 : 0; }
  __device__ static Acc load(const void* in, int64_t off, fl_dtype_t dt, int64_t) {
    return load_as<A>(in, off, dt) != A(0) ? 1 : 0;
  }
  __device__ static Acc combine(Acc a, Acc b) { return kAll ? (a & b) : (a | b); }
  __device__ static void store(void* out, int64_t o, fl_dtype_t dt, Acc a, int64_t) { store_as(out, o, dt, a); }
};

template <class P>
__device__ __forceinline__ typename P::Acc warp_reduce(typename P::Acc v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = P::combine(v, shfl_down(v, offset));
  return v;
}

template <class P>
__global__ void reduce_warp_per_output(ReduceGeometry g, const void* in, fl_dtype_t in_dt, void* out,
                                       fl_dtype_t out_dt) {
  const int lane = threadIdx.x % 32;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; o < g.out_count;
       o += warps_total) {
    const int64_t base = group_offset(o, g.n_kept, g.kept_sizes, g.kept_strides);
    typename P::Acc acc = P::identity();
    for (int64_t r = lane; r < g.red_count; r += 32)
      acc = P::combine(acc, P::load(in, base + group_offset(r, g.n_red, g.red_sizes, g.red_strides), in_dt, r));
    acc = warp_reduce<P>(acc);
    if (lane == 0) P::store(out, o, out_dt, acc, g.red_count);
  }
}

constexpr int kBlockThreads = 256;

template <class P>
__global__ void reduce_block_per_output(ReduceGeometry g, const void* in, fl_dtype_t in_dt, void* out,
                                        fl_dtype_t out_dt) {
  __shared__ typename P::Acc partial[kBlockThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t o = blockIdx.x; o < g.out_count; o += gridDim.x) {
    const int64_t base = group_offset(o, g.n_kept, g.kept_sizes, g.kept_strides);
    typename P::Acc acc = P::identity();
    for (int64_t r = threadIdx.x; r < g.red_count; r += kBlockThreads)
      acc = P::combine(acc, P::load(in, base + group_offset(r, g.n_red, g.red_sizes, g.red_strides), in_dt, r));
    acc = warp_reduce<P>(acc);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
      acc = lane < kBlockThreads / 32 ? partial[lane] : P::identity();
      acc = warp_reduce<P>(acc);
      if (lane == 0) P::store(out, o, out_dt, acc, g.red_count);
    }
    __syncthreads();
  }
}

constexpr int kColX = 32, kColY = 16;

template <class P>
__global__ void reduce_columns(ReduceGeometry g, const void* in, fl_dtype_t in_dt, void* out, fl_dtype_t out_dt) {
  __shared__ typename P::Acc partial[kColY][kColX + 1];
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kColX; o0 < g.out_count;
       o0 += static_cast<int64_t>(gridDim.x) * kColX) {
    const int64_t o = o0 + threadIdx.x;
    typename P::Acc acc = P::identity();
    if (o < g.out_count) {
      const int64_t base = group_offset(o, g.n_kept, g.kept_sizes, g.kept_strides);
      for (int64_t r = threadIdx.y; r < g.red_count; r += kColY)
        acc = P::combine(acc, P::load(in, base + group_offset(r, g.n_red, g.red_sizes, g.red_strides), in_dt, r));
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < g.out_count) {
      for (int k = 1; k < kColY; ++k) acc = P::combine(acc, partial[k][threadIdx.x]);
      P::store(out, o, out_dt, acc, g.red_count);
    }
    __syncthreads();
  }
}

// Columns split along the reduced dim (few outputs, many rows: a wide bias gradient): block
// (x, y) reduces outputs [32x, 32x+32) over rows [y*chunk, (y+1)*chunk) into
// partial[y * out_count + o]; reduce_column_splits then combines the splits in order.
template <class P>
__global__ void reduce_columns_split(ReduceGeometry g, const void* in, fl_dtype_t in_dt, int64_t chunk,
                                     typename P::Acc* partial) {
  __shared__ typename P::Acc tile[kColY][kColX + 1];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kColX + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < g.red_count ? r0 + chunk : g.red_count;
  typename P::Acc acc = P::identity();
  if (o < g.out_count) {
    const int64_t base = group_offset(o, g.n_kept, g.kept_sizes, g.kept_strides);
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY)
      acc = P::combine(acc, P::load(in, base + group_offset(r, g.n_red, g.red_sizes, g.red_strides), in_dt, r));
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < g.out_count) {
    for (int k = 1; k < kColY; ++k) acc = P::combine(acc, tile[k][threadIdx.x]);
    partial[static_cast<int64_t>(blockIdx.y) * g.out_count + o] = acc;
  }
}

template <class P>
__global__ void reduce_column_splits(const typename P::Acc* partial, int64_t splits, int64_t out_count,
                                     int64_t red_count, void* out, fl_dtype_t out_dt) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_count; o += step) {
    typename P::Acc acc = partial[o];
    for (int64_t s = 1; s < splits; ++s) acc = P::combine(acc, partial[s * out_count + o]);
    P::store(out, o, out_dt, acc, red_count);
  }
}

// Splits and coalesces the dims of `in` (reduce[d] true: reduced).
ReduceGeometry make_geometry(const fl_tensor& in, const std::vector<bool>& reduce) {
  ReduceGeometry g;
  std::vector<int64_t> ks, kst, rs, rst;
  auto push = [](std::vector<int64_t>& sizes, std::vector<int64_t>& strides, int64_t size, int64_t stride) {
    if (size == 1) return;
    if (!sizes.empty() && strides.back() == stride * size) {
      sizes.back() *= size;
      strides.back() = stride;
      return;
    }
    sizes.push_back(size);
    strides.push_back(stride);
  };
  g.out_count = 1;
  g.red_count = 1;
  for (int d = 0; d < in.ndim; ++d) {
    if (reduce[static_cast<size_t>(d)]) {
      push(rs, rst, in.shape[d], in.strides[d]);
      g.red_count *= in.shape[d];
    } else {
      push(ks, kst, in.shape[d], in.strides[d]);
      g.out_count *= in.shape[d];
    }
  }
  if (ks.size() > static_cast<size_t>(kMaxReduceDims) || rs.size() > static_cast<size_t>(kMaxReduceDims))
    plugin::raise(FL_ERR_NOT_SUPPORTED, "reduction over too many non-mergeable dims");
  g.n_kept = static_cast<int32_t>(ks.size());
  g.n_red = static_cast<int32_t>(rs.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    g.kept_sizes[i] = ks[i];
    g.kept_strides[i] = kst[i];
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    g.red_sizes[i] = rs[i];
    g.red_strides[i] = rst[i];
  }
  return g;
}

template <class P>
void launch_policy(const ReduceGeometry& g, const fl_tensor& in, const fl_tensor& out, const LaunchContext& ctx) {
  if (g.out_count == 0) return;
  const void* src = plugin::data_ptr<const void>(in);
  void* dst = plugin::data_ptr<void>(out);
  const bool inner_reduced = g.n_kept == 0 || (g.n_red > 0 && g.red_strides[g.n_red - 1] == 1) ||
                             (g.n_red > 0 && g.kept_strides[g.n_kept - 1] != 1);
  const int64_t max_blocks = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 1) * 32;
  if (inner_reduced && g.red_count <= 1024) {
    const int64_t warps_per_block = kBlockThreads / 32;
    int64_t blocks = (g.out_count + warps_per_block - 1) / warps_per_block;
    if (blocks > max_blocks) blocks = max_blocks;
    reduce_warp_per_output<P><<<static_cast<unsigned>(blocks), kBlockThreads, 0, ctx.stream>>>(
        g, src, in.dtype, dst, out.dtype);
    check_launch("reduce_warp_per_output");
  } else if (inner_reduced) {
    int64_t blocks = g.out_count < max_blocks ? g.out_count : max_blocks;
    reduce_block_per_output<P><<<static_cast<unsigned>(blocks), kBlockThreads, 0, ctx.stream>>>(
        g, src, in.dtype, dst, out.dtype);
    check_launch("reduce_block_per_output");
  } else {
    int64_t blocks = (g.out_count + kColX - 1) / kColX;
    const int64_t want = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 1) * 4;
    // Split the rows when the columns alone would leave most of the GPU idle and each split
    // still gets at least 256 rows.
    int64_t splits = blocks < want ? (want + blocks - 1) / blocks : 1;
    if (splits > g.red_count / 256) splits = g.red_count / 256;
    if (splits > 65535) splits = 65535;
    if (splits >= 2) {
      const int64_t chunk = (g.red_count + splits - 1) / splits;
      splits = (g.red_count + chunk - 1) / chunk;
      ScratchBuffer partial(static_cast<size_t>(splits * g.out_count) * sizeof(typename P::Acc), ctx.stream);
      reduce_columns_split<P><<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(splits)), dim3(kColX, kColY),
                                0, ctx.stream>>>(g, src, in.dtype, chunk, partial.get<typename P::Acc>());
      check_launch("reduce_columns_split");
      reduce_column_splits<P><<<grid_for(g.out_count, 256, ctx), 256, 0, ctx.stream>>>(
          partial.get<typename P::Acc>(), splits, g.out_count, g.red_count, dst, out.dtype);
      check_launch("reduce_column_splits");
      return;
    }
    if (blocks > max_blocks) blocks = max_blocks;
    reduce_columns<P><<<static_cast<unsigned>(blocks), dim3(kColX, kColY), 0, ctx.stream>>>(
        g, src, in.dtype, dst, out.dtype);
    check_launch("reduce_columns");
  }
}

enum class ReduceOp { Sum, Mean, Amax, Amin, Argmax, Argmin };

void check_reduce_dtypes(const char* name, const fl_tensor& in, const fl_tensor& out) {
  if (!is_real_dtype(in.dtype)) unsupported_dtype(name, in.dtype);
  if (!is_real_dtype(out.dtype)) unsupported_dtype(name, out.dtype);
}

void run_reduce(const char* name, ReduceOp op, const fl_tensor& in, const std::vector<bool>& reduce,
                const fl_tensor& out, const LaunchContext& ctx) {
  check_reduce_dtypes(name, in, out);
  const ReduceGeometry g = make_geometry(in, reduce);
  if (plugin::numel(out) != g.out_count)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output has " + std::to_string(plugin::numel(out)) +
                                               " elements, expected " + std::to_string(g.out_count));
  if (g.red_count == 0 && op != ReduceOp::Sum && op != ReduceOp::Mean)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": reduction over zero elements");
  const bool dbl = in.dtype == FL_DTYPE_FLOAT64 || (op == ReduceOp::Sum || op == ReduceOp::Mean ? out.dtype == FL_DTYPE_FLOAT64 : false);
  const bool flt = is_floating_dtype(in.dtype) || ((op == ReduceOp::Sum || op == ReduceOp::Mean) && is_floating_dtype(out.dtype));
  switch (op) {
    case ReduceOp::Sum:
      if (dbl) launch_policy<SumPolicy<double, false>>(g, in, out, ctx);
      else if (flt) launch_policy<SumPolicy<float, false>>(g, in, out, ctx);
      else launch_policy<SumPolicy<int64_t, false>>(g, in, out, ctx);
      return;
    case ReduceOp::Mean:
      if (dbl) launch_policy<SumPolicy<double, true>>(g, in, out, ctx);
      else if (flt) launch_policy<SumPolicy<float, true>>(g, in, out, ctx);
      else unsupported_dtype(name, in.dtype);
      return;
    case ReduceOp::Amax:
      if (dbl) launch_policy<ExtremePolicy<double, true>>(g, in, out, ctx);
      else if (flt) launch_policy<ExtremePolicy<float, true>>(g, in, out, ctx);
      else launch_policy<ExtremePolicy<int64_t, true>>(g, in, out, ctx);
      return;
    case ReduceOp::Amin:
      if (dbl) launch_policy<ExtremePolicy<double, false>>(g, in, out, ctx);
      else if (flt) launch_policy<ExtremePolicy<float, false>>(g, in, out, ctx);
      else launch_policy<ExtremePolicy<int64_t, false>>(g, in, out, ctx);
      return;
    case ReduceOp::Argmax:
      if (out.dtype != FL_DTYPE_INT64) unsupported_dtype(name, out.dtype);
      if (dbl) launch_policy<ArgPolicy<double, true>>(g, in, out, ctx);
      else if (flt) launch_policy<ArgPolicy<float, true>>(g, in, out, ctx);
      else launch_policy<ArgPolicy<int64_t, true>>(g, in, out, ctx);
      return;
    case ReduceOp::Argmin:
      if (out.dtype != FL_DTYPE_INT64) unsupported_dtype(name, out.dtype);
      if (dbl) launch_policy<ArgPolicy<double, false>>(g, in, out, ctx);
      else if (flt) launch_policy<ArgPolicy<float, false>>(g, in, out, ctx);
      else launch_policy<ArgPolicy<int64_t, false>>(g, in, out, ctx);
      return;
  }
}

// Which dims of `in` a dim-list argument names; NONE or an empty list means all.
std::vector<bool> reduce_mask(const Args& a, int32_t i, const fl_tensor& in, const char* name) {
  std::vector<bool> mask(static_cast<size_t>(in.ndim), false);
  std::vector<int64_t> dims;
  if (!a.is_none(i)) dims = a.ints(i);
  if (dims.empty()) {
    std::fill(mask.begin(), mask.end(), true);
    return mask;
  }
  for (int64_t d : dims) {
    const int32_t nd = normalize_dim(d, in.ndim, name);
    if (in.ndim == 0) continue;
    if (mask[static_cast<size_t>(nd)])
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": dim " + std::to_string(d) + " repeated");
    mask[static_cast<size_t>(nd)] = true;
  }
  return mask;
}

fl_status_t reduce_entry(const fl_kernel_call* call, const char* name, ReduceOp op, bool has_dims) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    const std::vector<bool> mask = has_dims ? reduce_mask(a, 1, in, name)
                                            : std::vector<bool>(static_cast<size_t>(in.ndim), true);
    run_reduce(name, op, in, mask, a.output(0), ctx);
  });
}

}  // namespace

void launch_sum(const fl_tensor& in, const std::vector<int>& dims, const fl_tensor& out, const LaunchContext& ctx) {
  std::vector<bool> mask(static_cast<size_t>(in.ndim), false);
  for (int d : dims) mask[static_cast<size_t>(normalize_dim(d, in.ndim, "sum"))] = true;
  run_reduce("sum", ReduceOp::Sum, in, mask, out, ctx);
}

void launch_mean(const fl_tensor& in, const std::vector<int>& dims, const fl_tensor& out, const LaunchContext& ctx) {
  std::vector<bool> mask(static_cast<size_t>(in.ndim), false);
  for (int d : dims) mask[static_cast<size_t>(normalize_dim(d, in.ndim, "mean"))] = true;
  run_reduce("mean", ReduceOp::Mean, in, mask, out, ctx);
}

// sum.IntList_out(self, dim?, keepdim, dtype?) and sum.out(self, dtype?) (all dims).
FL_CUDA_KERNEL(k_sum_out) { return reduce_entry(call, "aten::sum", ReduceOp::Sum, true); }
FL_CUDA_KERNEL(k_sum_all_out) { return reduce_entry(call, "aten::sum", ReduceOp::Sum, false); }
// mean.out(self, dim?, keepdim, dtype?) and mean.dtype_out(self, dtype?) (all dims).
FL_CUDA_KERNEL(k_mean_out) { return reduce_entry(call, "aten::mean", ReduceOp::Mean, true); }
FL_CUDA_KERNEL(k_mean_all_out) { return reduce_entry(call, "aten::mean", ReduceOp::Mean, false); }
// amax.out(self, dim=[], keepdim) / amin.out.
FL_CUDA_KERNEL(k_amax_out) { return reduce_entry(call, "aten::amax", ReduceOp::Amax, true); }
FL_CUDA_KERNEL(k_amin_out) { return reduce_entry(call, "aten::amin", ReduceOp::Amin, true); }

// max.unary_out(self) / min.unary_out(self): over all elements.
FL_CUDA_KERNEL(k_max_all_out) { return reduce_entry(call, "aten::max", ReduceOp::Amax, false); }
FL_CUDA_KERNEL(k_min_all_out) { return reduce_entry(call, "aten::min", ReduceOp::Amin, false); }

namespace {

// argmax.out / argmin.out(self, dim?, keepdim): with no dim, the index into the flattened tensor.
fl_status_t arg_entry(const fl_kernel_call* call, const char* name, ReduceOp op) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    std::vector<bool> mask(static_cast<size_t>(in.ndim), true);
    if (!a.is_none(1) && in.ndim > 0) {
      std::fill(mask.begin(), mask.end(), false);
      mask[static_cast<size_t>(normalize_dim(a.integer(1), in.ndim, name))] = true;
    }
    run_reduce(name, op, in, mask, a.output(0), ctx);
  });
}

// max.dim_max / min.dim_min(self, dim, keepdim) -> (values, indices): two reductions whose
// results agree (both take the first NaN, or the extreme value).
fl_status_t dim_extreme_entry(const fl_kernel_call* call, const char* name, bool is_max) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    std::vector<bool> mask(static_cast<size_t>(in.ndim), in.ndim == 0);
    if (in.ndim > 0) mask[static_cast<size_t>(normalize_dim(a.integer(1), in.ndim, name))] = true;
    const fl_tensor& values = a.output(0);
    const fl_tensor& indices = a.output(1);
    if (indices.dtype != FL_DTYPE_INT64) unsupported_dtype(name, indices.dtype);
    check_reduce_dtypes(name, in, values);
    if (plugin::numel(in) == 0) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": empty input");
    run_reduce(name, is_max ? ReduceOp::Amax : ReduceOp::Amin, in, mask, values, ctx);
    run_reduce(name, is_max ? ReduceOp::Argmax : ReduceOp::Argmin, in, mask, indices, ctx);
  });
}

}  // namespace

FL_CUDA_KERNEL(k_argmax_out) { return arg_entry(call, "aten::argmax", ReduceOp::Argmax); }
FL_CUDA_KERNEL(k_argmin_out) { return arg_entry(call, "aten::argmin", ReduceOp::Argmin); }
FL_CUDA_KERNEL(k_max_dim) { return dim_extreme_entry(call, "aten::max.dim", true); }
FL_CUDA_KERNEL(k_min_dim) { return dim_extreme_entry(call, "aten::min.dim", false); }

namespace {

// How all/any's overloads name the reduced dims: all.out(self, int dim, keepdim), all.dims_out
// (self, int[]? dim, keepdim: None reduces every dim, [] none) and all.all_out(self).
enum class AllAnyDims { kOne, kList, kEvery };

std::vector<bool> all_any_mask(const Args& a, const fl_tensor& in, AllAnyDims dims, const char* name) {
  std::vector<bool> mask(static_cast<size_t>(in.ndim), true);
  if (dims == AllAnyDims::kOne) {
    const int32_t d = normalize_dim(a.integer(1), in.ndim, name);
    if (in.ndim > 0) {
      std::fill(mask.begin(), mask.end(), false);
      mask[static_cast<size_t>(d)] = true;
    }
  } else if (dims == AllAnyDims::kList && !a.is_none(1)) {
    std::fill(mask.begin(), mask.end(), false);
    for (int64_t d : a.ints(1)) {
      const int32_t nd = normalize_dim(d, in.ndim, name);
      if (in.ndim == 0) continue;
      if (mask[static_cast<size_t>(nd)])
        plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": dim " + std::to_string(d) + " repeated");
      mask[static_cast<size_t>(nd)] = true;
    }
  }
  return mask;
}

// Any real input; a bool or uint8 output (ATen's out= accepts both; a uint8 input gives uint8).
fl_status_t all_any_entry(const fl_kernel_call* call, const char* name, bool is_all, AllAnyDims dims) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    const fl_tensor& out = a.output(0);
    if (!is_real_dtype(in.dtype)) unsupported_dtype(name, in.dtype);
    if (out.dtype != FL_DTYPE_BOOL && out.dtype != FL_DTYPE_UINT8) unsupported_dtype(name, out.dtype);
    const ReduceGeometry g = make_geometry(in, all_any_mask(a, in, dims, name));
    if (plugin::numel(out) != g.out_count)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output has " + std::to_string(plugin::numel(out)) +
                                                 " elements, expected " + std::to_string(g.out_count));
    auto launch = [&](auto tag) {
      using A = decltype(tag);
      if (is_all) launch_policy<AllAnyPolicy<A, true>>(g, in, out, ctx);
      else launch_policy<AllAnyPolicy<A, false>>(g, in, out, ctx);
    };
    if (in.dtype == FL_DTYPE_FLOAT64) launch(double{});
    else if (is_floating_dtype(in.dtype)) launch(float{});
    else launch(int64_t{});
  });
}

}  // namespace

FL_CUDA_KERNEL(k_all_out) { return all_any_entry(call, "aten::all", true, AllAnyDims::kOne); }
FL_CUDA_KERNEL(k_all_dims_out) { return all_any_entry(call, "aten::all", true, AllAnyDims::kList); }
FL_CUDA_KERNEL(k_all_all_out) { return all_any_entry(call, "aten::all", true, AllAnyDims::kEvery); }
FL_CUDA_KERNEL(k_any_out) { return all_any_entry(call, "aten::any", false, AllAnyDims::kOne); }
FL_CUDA_KERNEL(k_any_dims_out) { return all_any_entry(call, "aten::any", false, AllAnyDims::kList); }
FL_CUDA_KERNEL(k_any_all_out) { return all_any_entry(call, "aten::any", false, AllAnyDims::kEvery); }

// linalg_vector_norm.out(self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *,
// ScalarType? dtype=None): floating input; the output has the input's dtype or is float64
// (then the input is read as double, what ATen's conversion to float64 first computes).
// Other orders (3, 0.5, -1, ...) and dtype pairs are declined: the core runs them elsewhere.
FL_CUDA_KERNEL(k_linalg_vector_norm_out) {
  return plugin::guard([&] {
    const char* name = "aten::linalg_vector_norm";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    const fl_tensor& out = a.output(0);
    const double ord = a.is_none(1) ? 2.0 : a.number(1);
    if (!is_floating_dtype(in.dtype)) unsupported_dtype(name, in.dtype);
    if (out.dtype != in.dtype && out.dtype != FL_DTYPE_FLOAT64) unsupported_dtype(name, out.dtype);
    NormOrder order;
    if (ord == 0.0) order = NormOrder::kZero;
    else if (ord == 1.0) order = NormOrder::kOne;
    else if (ord == 2.0) order = NormOrder::kTwo;
    else if (std::isinf(ord)) order = ord > 0 ? NormOrder::kInf : NormOrder::kNegInf;
    else plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": order " + std::to_string(ord));
    const ReduceGeometry g = make_geometry(in, reduce_mask(a, 2, in, name));
    if (plugin::numel(out) != g.out_count)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output has " + std::to_string(plugin::numel(out)) +
                                                 " elements, expected " + std::to_string(g.out_count));
    if (g.red_count == 0 && g.out_count > 0 && (order == NormOrder::kInf || order == NormOrder::kNegInf))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": cannot compute the " +
                                                 (order == NormOrder::kInf ? "inf" : "-inf") +
                                                 " norm on an empty tensor because the operation does not have an identity");
    const bool dbl = in.dtype == FL_DTYPE_FLOAT64 || out.dtype == FL_DTYPE_FLOAT64;
    auto launch = [&](auto tag) {
      using A = decltype(tag);
      switch (order) {
        case NormOrder::kZero: return launch_policy<NormPolicy<A, NormOrder::kZero>>(g, in, out, ctx);
        case NormOrder::kOne: return launch_policy<NormPolicy<A, NormOrder::kOne>>(g, in, out, ctx);
        case NormOrder::kTwo: return launch_policy<NormPolicy<A, NormOrder::kTwo>>(g, in, out, ctx);
        case NormOrder::kInf: return launch_policy<NormPolicy<A, NormOrder::kInf>>(g, in, out, ctx);
        case NormOrder::kNegInf: return launch_policy<NormPolicy<A, NormOrder::kNegInf>>(g, in, out, ctx);
      }
    };
    if (dbl) launch(double{});
    else launch(float{});
  });
}

}  // namespace fl::cuda
