// variance.cu — var, std, var_mean and std_mean (the .correction_out overloads, which the
// binding routes torch.var/std/var_mean/std_mean to) on the reduction engine
// (reduce_engine.cuh): one pass of Welford's algorithm per output, partial results merged
// with Chan's formula, in float (double for float64) as ATen's CUDA kernels. Any input strides;
// floating dtypes. var = m2 / max(0, n - correction) as ATen: n <= correction gives inf (or
// NaN when m2 is 0), and an empty reduction gives NaN for var and mean.
#include "kernels.hpp"
#include "reduce_engine.cuh"

#include <string>

namespace fl::cuda {
namespace {

template <class A>
struct WelfordAcc {
  A mean;
  A m2;  // sum of squared deviations from mean
  int64_t n;
};

template <class A>
__device__ __forceinline__ WelfordAcc<A> shfl_down(WelfordAcc<A> w, int o) {
  return WelfordAcc<A>{fl::cuda::shfl_down(w.mean, o), fl::cuda::shfl_down(w.m2, o),
                       fl::cuda::shfl_down(w.n, o)};
}

// Store: var (or std with kSqrt) into out.data, the mean into out.second when set; out.param
// is the correction.
template <class A, bool kSqrt>
struct WelfordPolicy {
  using Acc = WelfordAcc<A>;
  __device__ static Acc identity() { return Acc{A(0), A(0), 0}; }
  __device__ static Acc load(const void* in, int64_t off, fl_dtype_t dt, int64_t) {
    return Acc{load_as<A>(in, off, dt), A(0), 1};
  }
  __device__ static Acc combine(Acc a, Acc b) {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const A delta = b.mean - a.mean;
    const A b_share = static_cast<A>(b.n) / static_cast<A>(n);
    return Acc{a.mean + delta * b_share, a.m2 + b.m2 + delta * delta * static_cast<A>(a.n) * b_share, n};
  }
  __device__ static void store(const ReduceOutput& out, int64_t o, Acc a, int64_t) {
    const A count = static_cast<A>(a.n);
    const A correction = static_cast<A>(out.param);
    const A divisor = count > correction ? count - correction : A(0);
    const A var = a.m2 / divisor;
    store_as(out.data, o, out.dtype, kSqrt ? dmath::sqrt_(var) : var);
    if (out.second != nullptr) store_as(out.second, o, out.second_dtype, a.n == 0 ? A(NAN) : a.mean);
  }
};

// (self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> out[, mean]
fl_status_t variance_entry(const fl_kernel_call* call, const char* name, bool take_sqrt, bool with_mean) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    if (!is_floating_dtype(in.dtype)) unsupported_dtype(name, in.dtype);
    const ReduceGeometry g = make_geometry(in, reduce_mask(a, 1, in, name));
    ReduceOutput out;
    out.param = a.is_none(2) ? 1.0 : a.number(2);
    const fl_tensor& var = a.output(0);
    auto check_output = [&](const fl_tensor& t) {
      if (!is_floating_dtype(t.dtype)) unsupported_dtype(name, t.dtype);
      if (plugin::numel(t) != g.out_count)
        plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output has " + std::to_string(plugin::numel(t)) +
                                                   " elements, expected " + std::to_string(g.out_count));
    };
    check_output(var);
    out.data = plugin::data_ptr<void>(var);
    out.dtype = var.dtype;
    if (with_mean) {
      const fl_tensor& mean = a.output(1);
      check_output(mean);
      out.second = plugin::data_ptr<void>(mean);
      out.second_dtype = mean.dtype;
    }
    auto launch = [&](auto tag) {
      using A = decltype(tag);
      if (take_sqrt) launch_policy<WelfordPolicy<A, true>>(g, in, out, ctx);
      else launch_policy<WelfordPolicy<A, false>>(g, in, out, ctx);
    };
    if (in.dtype == FL_DTYPE_FLOAT64) launch(double{});
    else launch(float{});
  });
}

}  // namespace

FL_CUDA_KERNEL(k_var_correction_out) { return variance_entry(call, "aten::var.correction_out", false, false); }
FL_CUDA_KERNEL(k_std_correction_out) { return variance_entry(call, "aten::std.correction_out", true, false); }
FL_CUDA_KERNEL(k_var_mean_correction_out) { return variance_entry(call, "aten::var_mean.correction_out", false, true); }
FL_CUDA_KERNEL(k_std_mean_correction_out) { return variance_entry(call, "aten::std_mean.correction_out", true, true); }

}  // namespace fl::cuda
