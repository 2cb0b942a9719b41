// variance_kernels.cpp — var, std, var_mean and std_mean (the .correction_out overloads, which
// the binding routes torch.var/std/var_mean/std_mean to). Any input strides, floating dtypes.
// Two passes in double per output (the mean, then the sum of squared deviations), which is
// at least as exact as ATen's Welford; results are rounded once to the output dtype.
// var = m2 / max(0, n - correction), as ATen: n <= correction gives inf (or NaN when m2 is 0,
// e.g. one element with correction 1), and an empty reduction gives NaN for var and mean.
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "reduce_plan.hpp"

#include <cmath>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// mean[o] and m2[o] (sum of squared deviations from mean[o]) of every output o.
template <class T>
void mean_and_m2(const ReducePlan& p, std::vector<double>& mean, std::vector<double>& m2) {
  mean.assign(static_cast<size_t>(p.out_numel), 0.0);
  m2.assign(static_cast<size_t>(p.out_numel), 0.0);
  for_each_row_split<T>(p, [&](const T* ptr, int64_t stride, int64_t n, int64_t out_index, int64_t out_step,
                               int64_t, int64_t) {
    for (int64_t i = 0; i < n; ++i) mean[static_cast<size_t>(out_index + i * out_step)] += convert<double>(ptr[i * stride]);
  });
  const double count = static_cast<double>(p.reduce_numel);
  for (double& m : mean) m /= count;  // 0/0 = NaN for an empty reduction, as ATen
  for_each_row_split<T>(p, [&](const T* ptr, int64_t stride, int64_t n, int64_t out_index, int64_t out_step,
                               int64_t, int64_t) {
    for (int64_t i = 0; i < n; ++i) {
      const auto o = static_cast<size_t>(out_index + i * out_step);
      const double d = convert<double>(ptr[i * stride]) - mean[o];
      m2[o] += d * d;
    }
  });
}

struct VarianceCall {
  ReducePlan plan;
  double correction = 1.0;
  bool take_sqrt = false;
  char* var_out = nullptr;    // var or std
  char* mean_out = nullptr;   // var_mean / std_mean only
  ConvertFn store_var = nullptr, store_mean = nullptr;
};

template <class T>
void run_variance(const VarianceCall& v) {
  std::vector<double> mean, m2;
  mean_and_m2<T>(v.plan, mean, m2);
  const double divisor = std::max(0.0, static_cast<double>(v.plan.reduce_numel) - v.correction);
  for (size_t o = 0; o < m2.size(); ++o) {
    m2[o] /= divisor;
    if (v.take_sqrt) m2[o] = std::sqrt(m2[o]);
  }
  v.store_var(reinterpret_cast<const char*>(m2.data()), sizeof(double), v.var_out, v.plan.out_numel);
  if (v.mean_out) v.store_mean(reinterpret_cast<const char*>(mean.data()), sizeof(double), v.mean_out, v.plan.out_numel);
}

void check_output(const char* op, const TensorDesc& out, int64_t expected) {
  if (out.numel() != expected)
    invalid(op, "output " + shape_string(out) + " has " + std::to_string(out.numel()) + " elements, expected " +
                    std::to_string(expected));
  if (!out.contiguous()) unsupported(op, "non-contiguous output");
  if (!is_floating(out.dtype)) unsupported(op, std::string("output dtype ") + plugin::dtype_name(out.dtype));
}

// (self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> out[, mean]
template <bool TakeSqrt, bool WithMean>
void variance_correction_out(const fl_kernel_call* call) {
  const char* op = TakeSqrt ? (WithMean ? "aten::std_mean.correction_out" : "aten::std.correction_out")
                            : (WithMean ? "aten::var_mean.correction_out" : "aten::var.correction_out");
  Args args(call);
  const TensorDesc in = describe(args.tensor(0), op);
  VarianceCall v;
  v.plan = plan_reduce(op, in, optional_dims(args, 1));
  v.correction = args.is_none(2) ? 1.0 : args.number(2);
  v.take_sqrt = TakeSqrt;
  const TensorDesc out = describe(args.output(0), op);
  check_output(op, out, v.plan.out_numel);
  v.var_out = out.data;
  v.store_var = converter(FL_DTYPE_FLOAT64, out.dtype);
  if constexpr (WithMean) {
    const TensorDesc mean = describe(args.output(1), op);
    check_output(op, mean, v.plan.out_numel);
    v.mean_out = mean.data;
    v.store_mean = converter(FL_DTYPE_FLOAT64, mean.dtype);
  }
  using Fn = void (*)(const VarianceCall&);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn { return &run_variance<typename decltype(tag)::type>; });
  if (v.plan.out_numel == 0) return;
  submit(call, [v, fn] { fn(v); });
}

}  // namespace

void register_variance_kernels(KernelRegistry& r) {
  const uint32_t f = FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_DETERMINISTIC;
  r.add("aten::var.correction_out", kFloatingMask, f, guarded<variance_correction_out<false, false>>);
  r.add("aten::std.correction_out", kFloatingMask, f, guarded<variance_correction_out<true, false>>);
  r.add("aten::var_mean.correction_out", kFloatingMask, f, guarded<variance_correction_out<false, true>>);
  r.add("aten::std_mean.correction_out", kFloatingMask, f, guarded<variance_correction_out<true, true>>);
}

}  // namespace fl::cpu::kernels
