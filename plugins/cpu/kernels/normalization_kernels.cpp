// normalization_kernels.cpp — native_layer_norm and native_layer_norm_backward.
// Rows of N = prod(normalized_shape) elements; statistics accumulate in double.
// mean/rstd are stored in their own output dtype (ATen: the input's dtype on CPU).
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "tensor_desc.hpp"

#include <cmath>
#include <optional>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

template <class T>
void layer_norm_forward(NormalizedRows s, const T* x, const T* w, const T* b, double eps, T* y,
                        char* mean_out, char* rstd_out, ConvertFn store_mean, ConvertFn store_rstd) {
  std::vector<double> means(static_cast<size_t>(s.rows)), rstds(static_cast<size_t>(s.rows));
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.cols;
    double sum = 0;
    for (int64_t c = 0; c < s.cols; ++c) sum += convert<double>(xr[c]);
    double mean = sum / static_cast<double>(s.cols);
    double var = 0;
    for (int64_t c = 0; c < s.cols; ++c) {
      double d = convert<double>(xr[c]) - mean;
      var += d * d;
    }
    var /= static_cast<double>(s.cols);
    double rstd = 1.0 / std::sqrt(var + eps);
    T* yr = y + r * s.cols;
    for (int64_t c = 0; c < s.cols; ++c) {
      double v = (convert<double>(xr[c]) - mean) * rstd;
      if (w) v *= convert<double>(w[c]);
      if (b) v += convert<double>(b[c]);
      yr[c] = convert<T>(v);
    }
    means[static_cast<size_t>(r)] = mean;
    rstds[static_cast<size_t>(r)] = rstd;
  }
  if (mean_out) store_mean(reinterpret_cast<const char*>(means.data()), sizeof(double), mean_out, s.rows);
  if (rstd_out) store_rstd(reinterpret_cast<const char*>(rstds.data()), sizeof(double), rstd_out, s.rows);
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
void native_layer_norm(const fl_kernel_call* call) {
  const char* op = "aten::native_layer_norm";
  Args args(call);
  TensorDesc in = describe(args.tensor(0), op);
  std::vector<int64_t> normalized = args.ints(1);
  std::optional<TensorDesc> w, b;
  if (!args.is_none(2)) w = describe(args.tensor(2), op);
  if (!args.is_none(3)) b = describe(args.tensor(3), op);
  double eps = args.number(4);
  TensorDesc out = describe(args.output(0), op);
  std::optional<TensorDesc> mean, rstd;
  if (!plugin::is_undefined(args.output(1))) mean = describe(args.output(1), op);
  if (!plugin::is_undefined(args.output(2))) rstd = describe(args.output(2), op);
  NormalizedRows s = normalized_rows(op, in, normalized);
  if (out.dtype != in.dtype || (w && w->dtype != in.dtype) || (b && b->dtype != in.dtype))
    unsupported(op, "mixed dtypes");
  if ((w && w->numel() != s.cols) || (b && b->numel() != s.cols)) invalid(op, "weight/bias size");
  if ((mean && mean->numel() != s.rows) || (rstd && rstd->numel() != s.rows)) invalid(op, "mean/rstd size");
  ConvertFn store_mean = mean ? converter(FL_DTYPE_FLOAT64, mean->dtype) : nullptr;
  ConvertFn store_rstd = rstd ? converter(FL_DTYPE_FLOAT64, rstd->dtype) : nullptr;
  using Fn = void (*)(NormalizedRows, const char*, const char*, const char*, double, char*, char*, char*,
                      ConvertFn, ConvertFn);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](NormalizedRows sh, const char* x, const char* wp, const char* bp, double e, char* y, char* m,
              char* r, ConvertFn sm, ConvertFn sr) {
      layer_norm_forward<T>(sh, reinterpret_cast<const T*>(x), reinterpret_cast<const T*>(wp),
                            reinterpret_cast<const T*>(bp), e, reinterpret_cast<T*>(y), m, r, sm, sr);
    };
  });
  if (s.rows == 0) return;
  const char* x = in.data;
  const char* wp = w ? w->data : nullptr;
  const char* bp = b ? b->data : nullptr;
  char* y = out.data;
  char* m = mean ? mean->data : nullptr;
  char* r = rstd ? rstd->data : nullptr;
  submit(call, [=] { fn(s, x, wp, bp, eps, y, m, r, store_mean, store_rstd); });
}

template <class T>
void layer_norm_backward(NormalizedRows s, const T* dy, const T* x, const double* mean, const double* rstd,
                         const T* w, T* dx, T* dw, T* db) {
  std::vector<double> gw(static_cast<size_t>(s.cols), 0.0), gb(static_cast<size_t>(s.cols), 0.0);
  const double inv_n = 1.0 / static_cast<double>(s.cols);
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* dyr = dy + r * s.cols;
    const T* xr = x + r * s.cols;
    double m = mean[r], rs = rstd[r];
    double sum_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < s.cols; ++c) {
      double xhat = (convert<double>(xr[c]) - m) * rs;
      double d = convert<double>(dyr[c]);
      double g = d * (w ? convert<double>(w[c]) : 1.0);
      sum_g += g;
      sum_gx += g * xhat;
      gw[static_cast<size_t>(c)] += d * xhat;
      gb[static_cast<size_t>(c)] += d;
    }
    if (dx) {
      T* dxr = dx + r * s.cols;
      for (int64_t c = 0; c < s.cols; ++c) {
        double xhat = (convert<double>(xr[c]) - m) * rs;
        double g = convert<double>(dyr[c]) * (w ? convert<double>(w[c]) : 1.0);
        dxr[c] = convert<T>(rs * (g - sum_g * inv_n - xhat * sum_gx * inv_n));
      }
    }
  }
  if (dw)
    for (int64_t c = 0; c < s.cols; ++c) dw[c] = convert<T>(gw[static_cast<size_t>(c)]);
  if (db)
    for (int64_t c = 0; c < s.cols; ++c) db[c] = convert<T>(gb[static_cast<size_t>(c)]);
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
//                            bool[3] output_mask) -> (grad_input, grad_weight, grad_bias)
void native_layer_norm_backward(const fl_kernel_call* call) {
  const char* op = "aten::native_layer_norm_backward";
  Args args(call);
  TensorDesc dy = describe(args.tensor(0), op);
  TensorDesc in = describe(args.tensor(1), op);
  std::vector<int64_t> normalized = args.ints(2);
  TensorDesc mean = describe(args.tensor(3), op);
  TensorDesc rstd = describe(args.tensor(4), op);
  std::optional<TensorDesc> w;
  if (!args.is_none(5)) w = describe(args.tensor(5), op);
  std::vector<bool> mask = args.is_none(7) ? std::vector<bool>{true, true, true} : args.bools(7);
  if (mask.size() != 3) invalid(op, "output_mask must have 3 entries");
  std::optional<TensorDesc> dx, dw, db;
  if (mask[0] && !plugin::is_undefined(args.output(0))) dx = describe(args.output(0), op);
  if (mask[1] && args.num_outputs() > 1 && !plugin::is_undefined(args.output(1))) dw = describe(args.output(1), op);
  if (mask[2] && args.num_outputs() > 2 && !plugin::is_undefined(args.output(2))) db = describe(args.output(2), op);
  NormalizedRows s = normalized_rows(op, in, normalized);
  for (const std::optional<TensorDesc>* t : {&w, &dx, &dw, &db})
    if (*t && (*t)->dtype != in.dtype) unsupported(op, "mixed dtypes");
  if (dy.dtype != in.dtype) unsupported(op, "mixed dtypes");
  if (mean.numel() != s.rows || rstd.numel() != s.rows) invalid(op, "mean/rstd size");
  if ((dw && dw->numel() != s.cols) || (db && db->numel() != s.cols) || (w && w->numel() != s.cols))
    invalid(op, "weight size");
  ConvertFn load_mean = converter(mean.dtype, FL_DTYPE_FLOAT64);
  ConvertFn load_rstd = converter(rstd.dtype, FL_DTYPE_FLOAT64);
  using Fn = void (*)(NormalizedRows, const char*, const char*, const double*, const double*, const char*,
                      char*, char*, char*);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](NormalizedRows sh, const char* g, const char* x, const double* m, const double* r, const char* wp,
              char* gx, char* gw, char* gb) {
      layer_norm_backward<T>(sh, reinterpret_cast<const T*>(g), reinterpret_cast<const T*>(x), m, r,
                             reinterpret_cast<const T*>(wp), reinterpret_cast<T*>(gx), reinterpret_cast<T*>(gw),
                             reinterpret_cast<T*>(gb));
    };
  });
  const char* g = dy.data;
  const char* x = in.data;
  const char* mp = mean.data;
  const char* rp = rstd.data;
  const char* wp = w ? w->data : nullptr;
  char* gx = dx ? dx->data : nullptr;
  char* gw = dw ? dw->data : nullptr;
  char* gb = db ? db->data : nullptr;
  submit(call, [=] {
    std::vector<double> m(static_cast<size_t>(s.rows)), r(static_cast<size_t>(s.rows));
    if (s.rows > 0) {
      load_mean(mp, static_cast<int64_t>(plugin::dtype_size(mean.dtype)), reinterpret_cast<char*>(m.data()), s.rows);
      load_rstd(rp, static_cast<int64_t>(plugin::dtype_size(rstd.dtype)), reinterpret_cast<char*>(r.data()), s.rows);
    }
    fn(s, g, x, m.data(), r.data(), wp, gx, gw, gb);
  });
}

}  // namespace

void register_normalization_kernels(KernelRegistry& r) {
  // The ABI names out= overloads where they exist; ATen 2.13 has generated .out overloads
  // for these, so both names are registered (same inputs and outputs).
  r.add("aten::native_layer_norm", kFloatingMask, 0, guarded<native_layer_norm>);
  r.add("aten::native_layer_norm.out", kFloatingMask, 0, guarded<native_layer_norm>);
  r.add("aten::native_layer_norm_backward", kFloatingMask, 0, guarded<native_layer_norm_backward>);
  r.add("aten::native_layer_norm_backward.out", kFloatingMask, 0, guarded<native_layer_norm_backward>);
}

}  // namespace fl::cpu::kernels
