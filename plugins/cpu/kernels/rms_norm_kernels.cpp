// rms_norm_kernels.cpp — _fused_rms_norm and _fused_rms_norm_backward (what F.rms_norm and
// nn.RMSNorm call) on contiguous input viewed as M rows of N = prod(normalized_shape).
// Everything accumulates in double, per row:
//   rstd = 1/sqrt(mean(x^2) + eps)   (eps None: float32's epsilon, float64's for float64 input,
//                                     ATen's accumulation-dtype default)
//   out  = x * rstd * w               (rounded once into the input's dtype)
//   dx   = rstd * (dy*w - x*rstd * sum(dy*w*x*rstd) / N),   dw = sum over rows of dy*x*rstd
// The backward uses the rstd it is given. rstd may have any floating dtype (ATen: float32 for
// the 16-bit types and float32, float64 for float64); input, weight, out and the gradients
// share the input's dtype (a weight of another dtype is declined: ATen's rms_norm runs its
// composite then and never calls these). Rows run in parallel; dw sums each column in row
// order, so results do not depend on the thread count.
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// Rows worth a thread of their own.
int64_t row_grain(NormalizedRows s) { return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s.cols)); }

void require_contiguous(const char* op, const TensorDesc& t, const char* what) {
  if (!t.contiguous()) unsupported(op, std::string("non-contiguous ") + what);
}

// Input or output i, when the call passes one (an optional argument, a masked-off output).
std::optional<TensorDesc> optional_input(const Args& args, int32_t i, const char* op) {
  if (args.is_none(i)) return std::nullopt;
  return describe(args.tensor(i), op);
}
std::optional<TensorDesc> optional_output(const Args& args, int32_t i, const char* op) {
  if (i >= args.num_outputs() || plugin::is_undefined(args.output(i))) return std::nullopt;
  return describe(args.output(i), op);
}

template <class T>
void rms_norm_forward(NormalizedRows s, const T* x, const T* w, double eps, T* y, double* rstd) {
  parallel_for(s.rows, row_grain(s), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * s.cols;
      double sum_sq = 0;
      for (int64_t c = 0; c < s.cols; ++c) {
        const double v = convert<double>(xr[c]);
        sum_sq += v * v;
      }
      const double rs = 1.0 / std::sqrt(sum_sq / static_cast<double>(s.cols) + eps);
      T* yr = y + r * s.cols;
      for (int64_t c = 0; c < s.cols; ++c) {
        double v = convert<double>(xr[c]) * rs;
        if (w != nullptr) v *= convert<double>(w[c]);
        yr[c] = convert<T>(v);
      }
      rstd[r] = rs;
    }
  });
}

// _fused_rms_norm(input, normalized_shape, weight?, eps?) -> (output, rstd)
void fused_rms_norm(const fl_kernel_call* call) {
  const char* op = "aten::_fused_rms_norm";
  Args args(call);
  const TensorDesc in = describe(args.tensor(0), op);
  const NormalizedRows s = normalized_rows(op, in, args.ints(1));
  const std::optional<TensorDesc> w = optional_input(args, 2, op);
  const double eps = !args.is_none(3) ? args.number(3)
                     : in.dtype == FL_DTYPE_FLOAT64 ? std::numeric_limits<double>::epsilon()
                                                    : static_cast<double>(std::numeric_limits<float>::epsilon());
  const TensorDesc out = describe(args.output(0), op);
  const std::optional<TensorDesc> rstd = optional_output(args, 1, op);
  if (out.dtype != in.dtype || (w && w->dtype != in.dtype)) unsupported(op, "mixed dtypes");
  if (w && w->numel() != s.cols) invalid(op, "weight must have prod(normalized_shape) elements");
  if (out.numel() != in.numel()) invalid(op, "output size");
  if (rstd && rstd->numel() != s.rows) invalid(op, "rstd must have one element per row");
  if (rstd && !is_floating(rstd->dtype)) unsupported(op, "rstd must be floating");
  require_contiguous(op, in, "input");
  require_contiguous(op, out, "output");
  if (w) require_contiguous(op, *w, "weight");
  if (rstd) require_contiguous(op, *rstd, "rstd");
  ConvertFn store_rstd = rstd ? converter(FL_DTYPE_FLOAT64, rstd->dtype) : nullptr;
  using Fn = void (*)(NormalizedRows, const char*, const char*, double, char*, double*);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](NormalizedRows sh, const char* x, const char* wp, double e, char* y, double* r) {
      rms_norm_forward<T>(sh, reinterpret_cast<const T*>(x), reinterpret_cast<const T*>(wp), e,
                          reinterpret_cast<T*>(y), r);
    };
  });
  if (s.rows == 0 || (s.cols == 0 && !rstd)) return;
  const char* x = in.data;
  const char* wp = w ? w->data : nullptr;
  char* y = out.data;
  char* rp = rstd ? rstd->data : nullptr;
  submit(call, [=] {
    std::vector<double> r(static_cast<size_t>(s.rows));
    fn(s, x, wp, eps, y, r.data());
    if (rp != nullptr) store_rstd(reinterpret_cast<const char*>(r.data()), sizeof(double), rp, s.rows);
  });
}

template <class T>
void rms_norm_backward(NormalizedRows s, const T* dy, const T* x, const double* rstd, const T* w, T* dx, T* dw) {
  const double inv_n = 1.0 / static_cast<double>(s.cols);
  if (dx != nullptr)
    parallel_for(s.rows, row_grain(s), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* dyr = dy + r * s.cols;
        const T* xr = x + r * s.cols;
        const double rs = rstd[r];
        double sum_gx = 0;
        for (int64_t c = 0; c < s.cols; ++c)
          sum_gx += convert<double>(dyr[c]) * (w ? convert<double>(w[c]) : 1.0) * convert<double>(xr[c]) * rs;
        T* dxr = dx + r * s.cols;
        for (int64_t c = 0; c < s.cols; ++c) {
          const double g = convert<double>(dyr[c]) * (w ? convert<double>(w[c]) : 1.0);
          dxr[c] = convert<T>(rs * (g - convert<double>(xr[c]) * rs * sum_gx * inv_n));
        }
      }
    });
  if (dw != nullptr)
    parallel_for(s.cols, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s.rows)),
                 [&](int64_t begin, int64_t end) {
                   std::vector<double> acc(static_cast<size_t>(end - begin), 0.0);
                   for (int64_t r = 0; r < s.rows; ++r) {
                     const T* dyr = dy + r * s.cols;
                     const T* xr = x + r * s.cols;
                     for (int64_t c = begin; c < end; ++c)
                       acc[static_cast<size_t>(c - begin)] += convert<double>(dyr[c]) * convert<double>(xr[c]) * rstd[r];
                   }
                   for (int64_t c = begin; c < end; ++c) dw[c] = convert<T>(acc[static_cast<size_t>(c - begin)]);
                 });
}

// _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight?, bool[2] output_mask)
// -> (grad_input, grad_weight); grad_weight only with a weight (ATen returns None without one).
void fused_rms_norm_backward(const fl_kernel_call* call) {
  const char* op = "aten::_fused_rms_norm_backward";
  Args args(call);
  const TensorDesc dy = describe(args.tensor(0), op);
  const TensorDesc in = describe(args.tensor(1), op);
  const NormalizedRows s = normalized_rows(op, in, args.ints(2));
  const TensorDesc rstd = describe(args.tensor(3), op);
  const std::optional<TensorDesc> w = optional_input(args, 4, op);
  const std::vector<bool> mask = args.is_none(5) ? std::vector<bool>{true, true} : args.bools(5);
  if (mask.size() != 2) invalid(op, "output_mask must have 2 entries");
  std::optional<TensorDesc> dx = mask[0] ? optional_output(args, 0, op) : std::nullopt;
  std::optional<TensorDesc> dw = mask[1] && w ? optional_output(args, 1, op) : std::nullopt;
  if (dy.dtype != in.dtype || (w && w->dtype != in.dtype) || (dx && dx->dtype != in.dtype) ||
      (dw && dw->dtype != in.dtype))
    unsupported(op, "mixed dtypes");
  if (dy.numel() != in.numel() || (dx && dx->numel() != in.numel())) invalid(op, "grad_out/grad_input size");
  if (rstd.numel() != s.rows) invalid(op, "rstd must have one element per row");
  if ((w && w->numel() != s.cols) || (dw && dw->numel() != s.cols))
    invalid(op, "weight/grad_weight must have prod(normalized_shape) elements");
  if (!is_floating(rstd.dtype)) unsupported(op, "rstd must be floating");
  for (auto [t, what] : {std::pair{&dy, "grad_out"}, std::pair{&in, "input"}, std::pair{&rstd, "rstd"}})
    require_contiguous(op, *t, what);
  if (w) require_contiguous(op, *w, "weight");
  if (dx) require_contiguous(op, *dx, "grad_input");
  if (dw) require_contiguous(op, *dw, "grad_weight");
  ConvertFn load_rstd = converter(rstd.dtype, FL_DTYPE_FLOAT64);
  ConvertFn zero_fill = converter(FL_DTYPE_FLOAT64, in.dtype);
  using Fn = void (*)(NormalizedRows, const char*, const char*, const double*, const char*, char*, char*);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](NormalizedRows sh, const char* g, const char* x, const double* r, const char* wp, char* gx, char* gw) {
      rms_norm_backward<T>(sh, reinterpret_cast<const T*>(g), reinterpret_cast<const T*>(x), r,
                           reinterpret_cast<const T*>(wp), reinterpret_cast<T*>(gx), reinterpret_cast<T*>(gw));
    };
  });
  if (!dx && !dw) return;
  const char* g = dy.data;
  const char* x = in.data;
  const char* rp = rstd.data;
  const char* wp = w ? w->data : nullptr;
  char* gx = dx ? dx->data : nullptr;
  char* gw = dw ? dw->data : nullptr;
  const int64_t rstd_bytes = static_cast<int64_t>(plugin::dtype_size(rstd.dtype));
  submit(call, [=] {
    if (s.rows == 0) {  // no rows: grad_weight is zeros (ATen's zeros_like), grad_input empty
      const std::vector<double> zeros(static_cast<size_t>(s.cols), 0.0);
      if (gw != nullptr && s.cols > 0) zero_fill(reinterpret_cast<const char*>(zeros.data()), sizeof(double), gw, s.cols);
      return;
    }
    std::vector<double> r(static_cast<size_t>(s.rows));
    load_rstd(rp, rstd_bytes, reinterpret_cast<char*>(r.data()), s.rows);
    fn(s, g, x, r.data(), wp, gx, gw);
  });
}

}  // namespace

void register_rms_norm_kernels(KernelRegistry& r) {
  // No out= overload exists in ATen 2.13: the functional names, outputs = the returns.
  r.add("aten::_fused_rms_norm", kFloatingMask, FL_KERNEL_DETERMINISTIC, guarded<fused_rms_norm>);
  r.add("aten::_fused_rms_norm_backward", kFloatingMask, FL_KERNEL_DETERMINISTIC, guarded<fused_rms_norm_backward>);
}

}  // namespace fl::cpu::kernels
