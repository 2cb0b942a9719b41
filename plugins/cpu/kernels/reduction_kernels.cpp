// reduction_kernels.cpp — sum, mean, amax, amin, argmax, argmin, max.dim, min.dim,
// linalg_vector_norm, all and any. Any input strides. Accumulation is in double (floating outputs) or int64 (integral), row by
// row over the input's innermost dimension; results are converted to the output dtype.
// sum/mean of float32 therefore round once at the end (more exact than ATen's cascade sum,
// so results can differ from ATen in the last bits).
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "pointwise_common.hpp"
#include "reduce_plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

enum class Kind { kSum, kMean, kMax, kMin };

template <class Acc>
Acc initial(Kind kind) {
  // Each type's own extremes: a conditional expression would convert INT64_MAX through
  // double (2^63), which does not fit back into int64.
  if (kind == Kind::kMax) {
    if constexpr (std::is_same_v<Acc, double>) return -std::numeric_limits<double>::infinity();
    else return std::numeric_limits<Acc>::min();
  }
  if (kind == Kind::kMin) {
    if constexpr (std::is_same_v<Acc, double>) return std::numeric_limits<double>::infinity();
    else return std::numeric_limits<Acc>::max();
  }
  return Acc(0);
}

template <class Acc>
inline Acc combine(Kind kind, Acc a, Acc v) {
  switch (kind) {
    case Kind::kMax:
      if constexpr (std::is_same_v<Acc, double>) if (std::isnan(a) || std::isnan(v)) return std::isnan(a) ? a : v;
      return v > a ? v : a;
    case Kind::kMin:
      if constexpr (std::is_same_v<Acc, double>) if (std::isnan(a) || std::isnan(v)) return std::isnan(a) ? a : v;
      return v < a ? v : a;
    default: return a + v;
  }
}

// Reduces `in` (type T) into acc (size out_numel).
template <class T, class Acc>
void reduce_into(const ReducePlan& p, Kind kind, std::vector<Acc>& acc) {
  acc.assign(static_cast<size_t>(p.out_numel), initial<Acc>(kind));
  const bool is_sum = kind == Kind::kSum || kind == Kind::kMean;
  for_each_row_split<T>(p, [&](const T* ptr, int64_t stride, int64_t n, int64_t out_index, int64_t out_step,
                               int64_t, int64_t) {
    if (out_step == 0) {
      Acc a = initial<Acc>(kind);
      if (is_sum && stride == 1) {
        for (int64_t i = 0; i < n; ++i) a += convert<Acc>(ptr[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) a = combine(kind, a, convert<Acc>(ptr[i * stride]));
      }
      acc[static_cast<size_t>(out_index)] = combine(kind, acc[static_cast<size_t>(out_index)], a);
    } else {
      Acc* dst = acc.data() + out_index;
      if (is_sum && stride == 1 && out_step == 1) {
        for (int64_t i = 0; i < n; ++i) dst[i] += convert<Acc>(ptr[i]);
      } else {
        for (int64_t i = 0; i < n; ++i)
          dst[i * out_step] = combine(kind, dst[i * out_step], convert<Acc>(ptr[i * stride]));
      }
    }
  });
}

void check_output_numel(const char* op, const TensorDesc& out, int64_t expected) {
  if (out.numel() != expected)
    invalid(op, "output " + shape_string(out) + " has " + std::to_string(out.numel()) +
                    " elements, expected " + std::to_string(expected));
  if (!out.contiguous()) unsupported(op, "non-contiguous output");
}

// sum / mean / amax / amin into `out` (contiguous).
void launch_reduce(const fl_kernel_call* call, const char* op, const TensorDesc& in,
                   const TensorDesc& out, std::vector<int64_t> dims, Kind kind) {
  ReducePlan plan = plan_reduce(op, in, std::move(dims));
  check_output_numel(op, out, plan.out_numel);
  if (in.dtype >= FL_DTYPE_COMPLEX64 || out.dtype >= FL_DTYPE_COMPLEX64) unsupported(op, "complex");
  const bool floating_acc = is_floating(out.dtype);
  if (kind == Kind::kMean && !floating_acc)
    unsupported(op, std::string("integral output ") + plugin::dtype_name(out.dtype));
  if ((kind == Kind::kMax || kind == Kind::kMin) && out.dtype != in.dtype)
    unsupported(op, "output dtype differs from input");
  if (out.dtype == FL_DTYPE_BOOL && kind != Kind::kMax && kind != Kind::kMin)
    unsupported(op, "bool output");
  if ((kind == Kind::kMax || kind == Kind::kMin) && plan.reduce_numel == 0 && plan.out_numel > 0)
    invalid(op, "cannot reduce over a zero-size dimension");
  ConvertFn store = converter(floating_acc ? FL_DTYPE_FLOAT64 : FL_DTYPE_INT64, out.dtype);
  char* out_data = out.data;
  if (plan.out_numel == 0) return;
  // The input's element loader, chosen now so unsupported dtypes fail before enqueuing.
  using Reducer = void (*)(const ReducePlan&, Kind, char*, ConvertFn, bool);
  Reducer reducer = dispatch<kAllMask>(in.dtype, op, [&](auto tag) -> Reducer {
    using T = typename decltype(tag)::type;
    return [](const ReducePlan& p, Kind k, char* dst, ConvertFn st, bool floating) {
      if (floating) {
        std::vector<double> acc;
        reduce_into<T, double>(p, k, acc);
        if (k == Kind::kMean)
          for (double& v : acc) v /= static_cast<double>(p.reduce_numel);
        st(reinterpret_cast<const char*>(acc.data()), sizeof(double), dst, p.out_numel);
      } else {
        std::vector<int64_t> acc;
        reduce_into<T, int64_t>(p, k, acc);
        st(reinterpret_cast<const char*>(acc.data()), sizeof(int64_t), dst, p.out_numel);
      }
    };
  });
  submit(call, [plan, kind, out_data, store, floating_acc, reducer] {
    reducer(plan, kind, out_data, store, floating_acc);
  });
}

// sum.IntList_out(self, int[1]? dim, bool keepdim, *, ScalarType? dtype)
void sum_intlist_out(const fl_kernel_call* call) {
  const char* op = "aten::sum.IntList_out";
  Args args(call);
  TensorDesc in = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  launch_reduce(call, op, in, out, optional_dims(args, 1), Kind::kSum);
}

// sum.out(self, *, ScalarType? dtype)
void sum_out(const fl_kernel_call* call) {
  const char* op = "aten::sum.out";
  Args args(call);
  launch_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op), {}, Kind::kSum);
}

// mean.out(self, int[1]? dim, bool keepdim, *, ScalarType? dtype)
void mean_out(const fl_kernel_call* call) {
  const char* op = "aten::mean.out";
  Args args(call);
  launch_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op),
                optional_dims(args, 1), Kind::kMean);
}

void mean_dtype_out(const fl_kernel_call* call) {
  const char* op = "aten::mean.dtype_out";
  Args args(call);
  launch_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op), {}, Kind::kMean);
}

// amax.out(self, int[1] dim=[], bool keepdim): [] reduces everything.
void amax_out(const fl_kernel_call* call) {
  const char* op = "aten::amax.out";
  Args args(call);
  launch_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op),
                optional_dims(args, 1), Kind::kMax);
}

void amin_out(const fl_kernel_call* call) {
  const char* op = "aten::amin.out";
  Args args(call);
  launch_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op),
                optional_dims(args, 1), Kind::kMin);
}

// max.unary_out / min.unary_out(self): every element; NaN wins, an empty input is an error.
void max_unary_out(const fl_kernel_call* call) {
  const char* op = "aten::max.unary_out";
  Args args(call);
  launch_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op), {}, Kind::kMax);
}

void min_unary_out(const fl_kernel_call* call) {
  const char* op = "aten::min.unary_out";
  Args args(call);
  launch_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op), {}, Kind::kMin);
}

// ---- arg reductions --------------------------------------------------------------------

// Writes the index (within the reduced dims, row-major) of the first max/min per output,
// NaN counting as the extreme (ATen); optionally the values too.
template <class T>
void arg_reduce(const ReducePlan& p, bool is_max, int64_t* indices, char* values) {
  using C = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;
  std::vector<C> best(static_cast<size_t>(p.out_numel));
  std::vector<int64_t> best_index(static_cast<size_t>(p.out_numel), -1);
  for_each_row_split<T>(p, [&](const T* ptr, int64_t stride, int64_t n, int64_t out_index, int64_t out_step,
                               int64_t reduce_index, int64_t reduce_step) {
    for (int64_t i = 0; i < n; ++i) {
      size_t o = static_cast<size_t>(out_index + i * out_step);
      C v = convert<C>(ptr[i * stride]);
      int64_t r = reduce_index + i * reduce_step;
      int64_t& bi = best_index[o];
      if (bi < 0) {
        best[o] = v;
        bi = r;
        continue;
      }
      C b = best[o];
      bool take;
      if constexpr (std::is_same_v<C, double>) {
        if (std::isnan(b)) take = false;
        else if (std::isnan(v)) take = true;
        else take = is_max ? v > b : v < b;
      } else {
        take = is_max ? v > b : v < b;
      }
      // Rows may visit reduced indices out of order only when the reduced dim is not
      // innermost; ties keep the smallest index.
      if (take || (v == b && r < bi)) {
        best[o] = v;
        bi = r;
      }
    }
  });
  std::memcpy(indices, best_index.data(), best_index.size() * sizeof(int64_t));
  if (values) {
    T* out = reinterpret_cast<T*>(values);
    for (size_t o = 0; o < best.size(); ++o) out[o] = convert<T>(best[o]);
  }
}

void launch_arg_reduce(const fl_kernel_call* call, const char* op, const TensorDesc& in,
                       std::vector<int64_t> dims, bool is_max, const TensorDesc& indices,
                       const TensorDesc* values) {
  ReducePlan plan = plan_reduce(op, in, std::move(dims));
  check_output_numel(op, indices, plan.out_numel);
  if (indices.dtype != FL_DTYPE_INT64) invalid(op, "indices must be int64");
  if (values) {
    check_output_numel(op, *values, plan.out_numel);
    if (values->dtype != in.dtype) unsupported(op, "values dtype differs from input");
  }
  if (plan.reduce_numel == 0 && plan.out_numel > 0)
    invalid(op, "cannot reduce over a zero-size dimension");
  if (plan.out_numel == 0) return;
  using Fn = void (*)(const ReducePlan&, bool, int64_t*, char*);
  Fn fn = dispatch<kAllMask>(in.dtype, op, [](auto tag) -> Fn {
    return &arg_reduce<typename decltype(tag)::type>;
  });
  int64_t* idx = indices.ptr<int64_t>();
  char* vals = values ? values->data : nullptr;
  submit(call, [plan, is_max, idx, vals, fn] { fn(plan, is_max, idx, vals); });
}

// argmax.out(self, int? dim, bool keepdim): dim None = over the flattened input.
template <bool IsMax>
void arg_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc in = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  std::vector<int64_t> dims;
  if (!args.is_none(1)) dims.push_back(args.integer(1));
  launch_arg_reduce(call, op, in, dims, IsMax, out, nullptr);
}
void argmax_out(const fl_kernel_call* call) { arg_body<true>(call, "aten::argmax.out"); }
void argmin_out(const fl_kernel_call* call) { arg_body<false>(call, "aten::argmin.out"); }

// max.dim_max(self, int dim, bool keepdim, *, max, max_values): outputs (values, indices).
template <bool IsMax>
void dim_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc in = describe(args.tensor(0), op);
  TensorDesc values = describe(args.output(0), op);
  TensorDesc indices = describe(args.output(1), op);
  launch_arg_reduce(call, op, in, {args.integer(1)}, IsMax, indices, &values);
}
void max_dim_max(const fl_kernel_call* call) { dim_body<true>(call, "aten::max.dim_max"); }
void min_dim_min(const fl_kernel_call* call) { dim_body<false>(call, "aten::min.dim_min"); }

// ---- vector norms ----------------------------------------------------------------------

// linalg_vector_norm's orders, as ATen computes them: 0 counts the non-zero elements (NaN
// included), 1 sums |x|, 2 is sqrt(sum x^2), inf/-inf the max/min of |x|, any other p
// (sum |x|^p)^(1/p). NaN propagates.
enum class NormKind { kZero, kOne, kTwo, kInf, kNegInf, kPower };

NormKind norm_kind(double ord) {
  if (ord == 0.0) return NormKind::kZero;
  if (ord == 1.0) return NormKind::kOne;
  if (ord == 2.0) return NormKind::kTwo;
  if (std::isinf(ord)) return ord > 0 ? NormKind::kInf : NormKind::kNegInf;
  return NormKind::kPower;
}

template <NormKind K>
inline double norm_term(double magnitude, double p) {
  if constexpr (K == NormKind::kZero) return magnitude != 0.0 ? 1.0 : 0.0;
  else if constexpr (K == NormKind::kTwo) return magnitude * magnitude;
  else if constexpr (K == NormKind::kPower) return std::pow(magnitude, p);
  else return magnitude;
}

template <NormKind K>
inline double norm_combine(double acc, double term) {
  if constexpr (K == NormKind::kInf || K == NormKind::kNegInf) {
    if (std::isnan(acc) || std::isnan(term)) return std::isnan(acc) ? acc : term;
    return K == NormKind::kInf ? (term > acc ? term : acc) : (term < acc ? term : acc);
  } else {
    return acc + term;
  }
}

// Accumulates in double per output (in row order, as reduce_into), then maps the sums and
// stores them in the output's dtype. For an output narrower than float64 (`float_acc`),
// ATen's sum is a float: past FLT_MAX it overflows to inf (a gradient norm of 1e20 x 10 is inf
// there, and clip_grad_norm_ then raises or zeroes the gradients as on ATen).
template <class T, NormKind K>
void vector_norm(const ReducePlan& p, double ord, char* dst, ConvertFn store, bool float_acc) {
  const double identity = K == NormKind::kNegInf ? std::numeric_limits<double>::infinity() : 0.0;
  std::vector<double> acc(static_cast<size_t>(p.out_numel), identity);
  for_each_row_split<T>(p, [&](const T* ptr, int64_t stride, int64_t n, int64_t out_index, int64_t out_step,
                               int64_t, int64_t) {
    if (out_step == 0) {
      double a = identity;
      for (int64_t i = 0; i < n; ++i) a = norm_combine<K>(a, norm_term<K>(std::abs(convert<double>(ptr[i * stride])), ord));
      acc[static_cast<size_t>(out_index)] = norm_combine<K>(acc[static_cast<size_t>(out_index)], a);
    } else {
      double* out = acc.data() + out_index;
      for (int64_t i = 0; i < n; ++i)
        out[i * out_step] = norm_combine<K>(out[i * out_step], norm_term<K>(std::abs(convert<double>(ptr[i * stride])), ord));
    }
  });
  if constexpr (K == NormKind::kOne || K == NormKind::kTwo || K == NormKind::kPower) {
    if (float_acc)
      for (double& v : acc)
        if (v > static_cast<double>(std::numeric_limits<float>::max())) v = std::numeric_limits<double>::infinity();
  }
  if constexpr (K == NormKind::kTwo) {
    for (double& v : acc) v = std::sqrt(v);
  } else if constexpr (K == NormKind::kPower) {
    for (double& v : acc) v = std::pow(v, 1.0 / ord);
  }
  store(reinterpret_cast<const char*>(acc.data()), sizeof(double), dst, p.out_numel);
}

// linalg_vector_norm.out(self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *,
//                        ScalarType? dtype=None): floating input; the output has the input's
// dtype, or float64 (dtype=torch.float64: ATen converts the input first, which for a
// narrower input is what accumulating in double computes). Other dtype pairs are declined.
void linalg_vector_norm_out(const fl_kernel_call* call) {
  const char* op = "aten::linalg_vector_norm.out";
  Args args(call);
  const TensorDesc in = describe(args.tensor(0), op);
  const TensorDesc out = describe(args.output(0), op);
  const double ord = args.is_none(1) ? 2.0 : args.number(1);
  ReducePlan plan = plan_reduce(op, in, optional_dims(args, 2));
  check_output_numel(op, out, plan.out_numel);
  if (!is_floating(in.dtype)) unsupported(op, std::string("input dtype ") + plugin::dtype_name(in.dtype));
  if (out.dtype != in.dtype && out.dtype != FL_DTYPE_FLOAT64)
    unsupported(op, std::string("output dtype ") + plugin::dtype_name(out.dtype) + " for input " +
                        plugin::dtype_name(in.dtype));
  const NormKind kind = norm_kind(ord);
  if (plan.reduce_numel == 0 && plan.out_numel > 0 && (ord < 0 || kind == NormKind::kInf))
    invalid(op, "linalg.vector_norm cannot compute the " + std::string(kind == NormKind::kInf ? "inf" : std::to_string(ord)) +
                    " norm on an empty tensor because the operation does not have an identity");
  if (plan.out_numel == 0) return;
  ConvertFn store = converter(FL_DTYPE_FLOAT64, out.dtype);
  using Fn = void (*)(const ReducePlan&, double, char*, ConvertFn, bool);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [kind](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    switch (kind) {
      case NormKind::kZero: return &vector_norm<T, NormKind::kZero>;
      case NormKind::kOne: return &vector_norm<T, NormKind::kOne>;
      case NormKind::kTwo: return &vector_norm<T, NormKind::kTwo>;
      case NormKind::kInf: return &vector_norm<T, NormKind::kInf>;
      case NormKind::kNegInf: return &vector_norm<T, NormKind::kNegInf>;
      default: return &vector_norm<T, NormKind::kPower>;
    }
  });
  char* dst = out.data;
  const bool float_acc = out.dtype != FL_DTYPE_FLOAT64;
  submit(call, [plan, ord, dst, store, fn, float_acc] { fn(plan, ord, dst, store, float_acc); });
}

// ---- all / any ------------------------------------------------------------------------

// Whether every (all) or some (any) element is non-zero, NaN included; over no element all is
// true and any false. The output is bool, or uint8 (0/1) for a uint8 input, as ATen's.
void launch_logical_reduce(const fl_kernel_call* call, const char* op, const TensorDesc& in,
                           const TensorDesc& out, std::optional<std::vector<int64_t>> dims, bool is_all) {
  ReducePlan plan = dims ? plan_reduce(op, in, *dims, true) : plan_reduce(op, in, {});
  check_output_numel(op, out, plan.out_numel);
  if (in.dtype >= FL_DTYPE_COMPLEX64) unsupported(op, "complex");
  const fl_dtype_t expected = in.dtype == FL_DTYPE_UINT8 ? FL_DTYPE_UINT8 : FL_DTYPE_BOOL;
  if (out.dtype != expected)
    unsupported(op, std::string("output dtype ") + plugin::dtype_name(out.dtype) + " (expected " +
                        plugin::dtype_name(expected) + ")");
  if (plan.out_numel == 0) return;
  using Reducer = void (*)(const ReducePlan&, bool, char*);
  Reducer reducer = dispatch<kAllMask>(in.dtype, op, [&](auto tag) -> Reducer {
    using T = typename decltype(tag)::type;
    return [](const ReducePlan& p, bool all, char* dst) {
      // 0/1 bytes: bool and uint8 outputs alike.
      auto* acc = reinterpret_cast<uint8_t*>(dst);
      std::fill(acc, acc + p.out_numel, static_cast<uint8_t>(all ? 1 : 0));
      for_each_row_split<T>(p, [&](const T* ptr, int64_t stride, int64_t n, int64_t out_index, int64_t out_step,
                                   int64_t, int64_t) {
        for (int64_t i = 0; i < n; ++i) {
          const bool nonzero = convert<double>(ptr[i * stride]) != 0.0;  // NaN != 0
          uint8_t& a = acc[out_index + i * out_step];
          a = all ? static_cast<uint8_t>(a && nonzero) : static_cast<uint8_t>(a || nonzero);
        }
      });
    };
  });
  char* dst = out.data;
  const bool all = is_all;
  submit(call, [plan, all, dst, reducer] { reducer(plan, all, dst); });
}

// all.out / any.out (self, int dim, bool keepdim)
template <bool IsAll>
void logical_reduce_dim_out(const fl_kernel_call* call) {
  const char* op = IsAll ? "aten::all.out" : "aten::any.out";
  Args args(call);
  launch_logical_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op),
                        std::vector<int64_t>{args.integer(1)}, IsAll);
}

// all.dims_out / any.dims_out (self, int[]? dim, bool keepdim): None reduces every dim, []
// none.
template <bool IsAll>
void logical_reduce_dims_out(const fl_kernel_call* call) {
  const char* op = IsAll ? "aten::all.dims_out" : "aten::any.dims_out";
  Args args(call);
  std::optional<std::vector<int64_t>> dims;
  if (!args.is_none(1)) dims = args.ints(1);
  launch_logical_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op), dims, IsAll);
}

// all.all_out / any.all_out (self)
template <bool IsAll>
void logical_reduce_all_out(const fl_kernel_call* call) {
  const char* op = IsAll ? "aten::all.all_out" : "aten::any.all_out";
  Args args(call);
  launch_logical_reduce(call, op, describe(args.tensor(0), op), describe(args.output(0), op), std::nullopt, IsAll);
}

}  // namespace

void register_reduction_kernels(KernelRegistry& r) {
  const uint32_t f = FL_KERNEL_STRIDED_INPUTS;
  r.add("aten::sum.IntList_out", kAllMask, f, guarded<sum_intlist_out>);
  r.add("aten::sum.out", kAllMask, f, guarded<sum_out>);
  r.add("aten::mean.out", kAllMask, f, guarded<mean_out>);
  r.add("aten::mean.dtype_out", kAllMask, f, guarded<mean_dtype_out>);
  r.add("aten::amax.out", kAllMask, f, guarded<amax_out>);
  r.add("aten::amin.out", kAllMask, f, guarded<amin_out>);
  r.add("aten::max.unary_out", kAllMask, f, guarded<max_unary_out>);
  r.add("aten::min.unary_out", kAllMask, f, guarded<min_unary_out>);
  r.add("aten::argmax.out", kAllMask, f, guarded<argmax_out>);
  r.add("aten::argmin.out", kAllMask, f, guarded<argmin_out>);
  r.add("aten::max.dim_max", kAllMask, f, guarded<max_dim_max>);
  r.add("aten::min.dim_min", kAllMask, f, guarded<min_dim_min>);
  r.add("aten::all.out", kAllMask, f | FL_KERNEL_DETERMINISTIC, guarded<logical_reduce_dim_out<true>>);
  r.add("aten::all.dims_out", kAllMask, f | FL_KERNEL_DETERMINISTIC, guarded<logical_reduce_dims_out<true>>);
  r.add("aten::all.all_out", kAllMask, f | FL_KERNEL_DETERMINISTIC, guarded<logical_reduce_all_out<true>>);
  r.add("aten::any.out", kAllMask, f | FL_KERNEL_DETERMINISTIC, guarded<logical_reduce_dim_out<false>>);
  r.add("aten::any.dims_out", kAllMask, f | FL_KERNEL_DETERMINISTIC, guarded<logical_reduce_dims_out<false>>);
  r.add("aten::any.all_out", kAllMask, f | FL_KERNEL_DETERMINISTIC, guarded<logical_reduce_all_out<false>>);
  r.add("aten::linalg_vector_norm.out", kFloatingMask, f | FL_KERNEL_DETERMINISTIC, guarded<linalg_vector_norm_out>);
}

}  // namespace fl::cpu::kernels
