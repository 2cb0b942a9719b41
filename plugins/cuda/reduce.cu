// reduce.cu — sum, mean, amax, amin, argmax, all, any and linalg_vector_norm (orders 0, 1,
// 2, inf, -inf) over any set of dims: their policies on the reduction engine
// (reduce_engine.cuh). Half types accumulate in float, float64 in double, integers in int64.
#include "elementwise_plan.hpp"
#include "kernels.hpp"
#include "reduce.hpp"
#include "reduce_engine.cuh"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

namespace fl::cuda {
namespace {

template <class V>
struct ArgPair {
  V v;
  int64_t i;
};

template <class V>
__device__ __forceinline__ ArgPair<V> shfl_down(ArgPair<V> p, int o) {
  return ArgPair<V>{fl::cuda::shfl_down(p.v, o), fl::cuda::shfl_down(p.i, o)};
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
  __device__ static void store(const ReduceOutput& out, int64_t o, Acc a, int64_t n) {
    if constexpr (kMean) store_as(out.data, o, out.dtype, a / static_cast<A>(n));
    else store_as(out.data, o, out.dtype, a);
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
  __device__ static void store(const ReduceOutput& out, int64_t o, Acc a, int64_t) {
    store_as(out.data, o, out.dtype, a);
  }
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
  __device__ static void store(const ReduceOutput& out, int64_t o, Acc a, int64_t) {
    store_as(out.data, o, out.dtype, a.i);
  }
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
  __device__ static void store(const ReduceOutput& out, int64_t o, Acc a, int64_t) {
    if constexpr (K == NormOrder::kTwo) store_as(out.data, o, out.dtype, dmath::sqrt_(a));
    else store_as(out.data, o, out.dtype, a);
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
  __device__ static void store(const ReduceOutput& out, int64_t o, Acc a, int64_t) {
    store_as(out.data, o, out.dtype, a);
  }
};

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
