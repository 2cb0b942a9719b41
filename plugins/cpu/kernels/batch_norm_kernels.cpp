// batch_norm_kernels.cpp — native_batch_norm (training and eval; also the _native_batch_norm_legit
// overloads) and native_batch_norm_backward, on contiguous (N, C, *) tensors.
// Per channel c the statistics run over N × prod(*) elements and accumulate in double. The
// per-channel vectors (weight, bias, running and saved statistics, weight/bias gradients) may
// have another floating dtype than the input (float32 parameters beside bfloat16 activations).
// Semantics as ATen's CPU kernels: training normalises with the batch statistics (biased
// variance), stores save_mean and save_invstd = 1/sqrt(var + eps), and updates the running
// statistics in place with the unbiased variance; eval normalises with the running statistics.
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "tensor_desc.hpp"

#include <cmath>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// 1/sqrt(var + eps) of batch statistics, 0 where var + eps is 0 (ATen's InvStd in training:
// a constant channel with eps 0 normalises to the bias instead of NaN). Eval uses the running
// variance without this guard, as ATen does.
double inverse_std(double var, double eps) {
  const double v = var + eps;
  return v == 0 ? 0.0 : 1.0 / std::sqrt(v);
}

// x viewed as [n, c, inner].
struct BatchNormShape {
  int64_t n = 0, c = 0, inner = 1;
  int64_t per_channel() const { return n * inner; }
};

BatchNormShape batch_norm_shape(const char* op, const TensorDesc& x) {
  if (x.ndim < 2) unsupported(op, "input must have at least 2 dims, got " + shape_string(x));
  if (!x.contiguous()) unsupported(op, "non-contiguous input");
  BatchNormShape s{x.shape[0], x.shape[1], 1};
  for (int d = 2; d < x.ndim; ++d) s.inner *= x.shape[d];
  return s;
}

// A per-channel vector in device memory (any floating dtype), or none. load/store run on the
// stream worker, so they see what earlier queued kernels wrote.
struct Channels {
  char* data = nullptr;
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;

  explicit operator bool() const { return data != nullptr; }

  std::vector<double> load(int64_t c, double fill) const {
    std::vector<double> v(static_cast<size_t>(c), fill);
    if (data != nullptr && c > 0)
      converter(dtype, FL_DTYPE_FLOAT64)(data, static_cast<int64_t>(plugin::dtype_size(dtype)),
                                         reinterpret_cast<char*>(v.data()), c);
    return v;
  }
  void store(const std::vector<double>& v) const {
    if (data != nullptr && !v.empty())
      converter(FL_DTYPE_FLOAT64, dtype)(reinterpret_cast<const char*>(v.data()), sizeof(double), data,
                                         static_cast<int64_t>(v.size()));
  }
};

Channels channels_of(const TensorDesc& t, int64_t c, const char* op, const char* what) {
  if (t.numel() != c) invalid(op, std::string(what) + " must have " + std::to_string(c) + " elements, got " + shape_string(t));
  if ((bit(t.dtype) & kFloatingMask) == 0) unsupported(op, std::string(what) + " must be floating");
  if (!t.contiguous()) unsupported(op, std::string("non-contiguous ") + what);
  return Channels{t.data, t.dtype};
}

// Input i as a per-channel vector; none when the argument is None.
Channels channel_input(const Args& args, int32_t i, int64_t c, const char* op, const char* what) {
  if (args.is_none(i)) return {};
  return channels_of(describe(args.tensor(i), op), c, op, what);
}

// Output i as a per-channel vector; none when it is absent, undefined or empty (ATen's eval
// mode returns empty save_mean/save_invstd).
Channels channel_output(const Args& args, int32_t i, int64_t c, const char* op, const char* what) {
  if (i >= args.num_outputs() || plugin::is_undefined(args.output(i))) return {};
  TensorDesc t = describe(args.output(i), op);
  if (t.numel() == 0) return {};
  return channels_of(t, c, op, what);
}

struct ForwardParams {
  Channels weight, bias, running_mean, running_var, save_mean, save_invstd;
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
};

template <class T>
void batch_norm_forward(BatchNormShape s, const T* x, T* y, const ForwardParams& p) {
  const std::vector<double> w = p.weight.load(s.c, 1.0), b = p.bias.load(s.c, 0.0);
  std::vector<double> mean(static_cast<size_t>(s.c)), invstd(static_cast<size_t>(s.c));
  const int64_t m = s.per_channel();
  if (p.training) {
    std::vector<double> running_mean = p.running_mean.load(s.c, 0.0), running_var = p.running_var.load(s.c, 1.0);
    for (int64_t c = 0; c < s.c; ++c) {
      double sum = 0;
      for (int64_t n = 0; n < s.n; ++n) {
        const T* row = x + (n * s.c + c) * s.inner;
        for (int64_t i = 0; i < s.inner; ++i) sum += convert<double>(row[i]);
      }
      const double mu = sum / static_cast<double>(m);
      double squares = 0;
      for (int64_t n = 0; n < s.n; ++n) {
        const T* row = x + (n * s.c + c) * s.inner;
        for (int64_t i = 0; i < s.inner; ++i) {
          const double d = convert<double>(row[i]) - mu;
          squares += d * d;
        }
      }
      const auto k = static_cast<size_t>(c);
      mean[k] = mu;
      invstd[k] = inverse_std(squares / static_cast<double>(m), p.eps);
      running_mean[k] = (1.0 - p.momentum) * running_mean[k] + p.momentum * mu;
      running_var[k] = (1.0 - p.momentum) * running_var[k] + p.momentum * squares / static_cast<double>(m - 1);
    }
    p.running_mean.store(running_mean);
    p.running_var.store(running_var);
  } else {
    mean = p.running_mean.load(s.c, 0.0);
    const std::vector<double> var = p.running_var.load(s.c, 1.0);
    for (size_t k = 0; k < var.size(); ++k) invstd[k] = 1.0 / std::sqrt(var[k] + p.eps);
  }
  p.save_mean.store(mean);
  p.save_invstd.store(invstd);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c) {
      const auto k = static_cast<size_t>(c);
      const double scale = invstd[k] * w[k], shift = b[k] - mean[k] * scale;
      const int64_t base = (n * s.c + c) * s.inner;
      for (int64_t i = 0; i < s.inner; ++i) y[base + i] = convert<T>(convert<double>(x[base + i]) * scale + shift);
    }
}

// Where each argument sits in the schema of the overload (-1: absent).
struct ForwardLayout {
  int32_t running_mean, running_var, training, momentum, eps;
};

void batch_norm_forward_call(const fl_kernel_call* call, const char* op, ForwardLayout layout) {
  Args args(call);
  TensorDesc x = describe(args.tensor(0), op);
  TensorDesc y = describe(args.output(0), op);
  const BatchNormShape s = batch_norm_shape(op, x);
  if (y.dtype != x.dtype || y.numel() != x.numel() || !y.contiguous()) unsupported(op, "output must be a contiguous tensor of the input's dtype and size");
  ForwardParams p;
  p.weight = channel_input(args, 1, s.c, op, "weight");
  p.bias = channel_input(args, 2, s.c, op, "bias");
  if (layout.running_mean >= 0) p.running_mean = channel_input(args, layout.running_mean, s.c, op, "running_mean");
  if (layout.running_var >= 0) p.running_var = channel_input(args, layout.running_var, s.c, op, "running_var");
  p.training = layout.training < 0 ? false : args.boolean(layout.training);
  p.momentum = args.number(layout.momentum);
  p.eps = args.number(layout.eps);
  if (!p.training && (!p.running_mean || !p.running_var)) invalid(op, "eval mode needs running_mean and running_var");
  if (p.training && s.per_channel() == 0) return;  // ATen: an empty batch leaves the running statistics as they are
  p.save_mean = channel_output(args, 1, s.c, op, "save_mean");
  p.save_invstd = channel_output(args, 2, s.c, op, "save_invstd");
  using Fn = void (*)(BatchNormShape, const char*, char*, const ForwardParams&);
  Fn fn = dispatch<kFloatingMask>(x.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](BatchNormShape sh, const char* in, char* out, const ForwardParams& params) {
      batch_norm_forward<T>(sh, reinterpret_cast<const T*>(in), reinterpret_cast<T*>(out), params);
    };
  });
  if (s.c == 0) return;
  const char* in = x.data;
  char* out = y.data;
  submit(call, [=] { fn(s, in, out, p); });
}

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
//   -> (out, save_mean, save_invstd)
void native_batch_norm(const fl_kernel_call* call) {
  batch_norm_forward_call(call, "aten::native_batch_norm", ForwardLayout{3, 4, 5, 6, 7});
}
// _native_batch_norm_legit(input, weight?, bias?, running_mean!, running_var!, training, momentum, eps)
void native_batch_norm_legit(const fl_kernel_call* call) {
  batch_norm_forward_call(call, "aten::_native_batch_norm_legit", ForwardLayout{3, 4, 5, 6, 7});
}
// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var, momentum, eps)
void native_batch_norm_legit_no_training(const fl_kernel_call* call) {
  batch_norm_forward_call(call, "aten::_native_batch_norm_legit_no_training", ForwardLayout{3, 4, -1, 5, 6});
}

struct BackwardParams {
  Channels weight, mean, invstd_or_var, grad_weight, grad_bias;
  bool training = true;
  double eps = 1e-5;
};

template <class T>
void batch_norm_backward(BatchNormShape s, const T* dy, const T* x, T* dx, const BackwardParams& p) {
  const std::vector<double> w = p.weight.load(s.c, 1.0), mean = p.mean.load(s.c, 0.0);
  std::vector<double> invstd = p.invstd_or_var.load(s.c, 1.0);
  if (!p.training)  // eval: the running variance was passed
    for (double& v : invstd) v = 1.0 / std::sqrt(v + p.eps);
  std::vector<double> sum_dy(static_cast<size_t>(s.c), 0.0), sum_dy_xhat(static_cast<size_t>(s.c), 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c) {
      const auto k = static_cast<size_t>(c);
      const int64_t base = (n * s.c + c) * s.inner;
      double g = 0, gx = 0;
      for (int64_t i = 0; i < s.inner; ++i) {
        const double d = convert<double>(dy[base + i]);
        g += d;
        gx += d * (convert<double>(x[base + i]) - mean[k]);
      }
      sum_dy[k] += g;
      sum_dy_xhat[k] += gx * invstd[k];
    }
  p.grad_weight.store(sum_dy_xhat);
  p.grad_bias.store(sum_dy);
  if (dx == nullptr) return;
  const double inv_m = s.per_channel() > 0 ? 1.0 / static_cast<double>(s.per_channel()) : 0.0;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c) {
      const auto k = static_cast<size_t>(c);
      const double scale = w[k] * invstd[k];
      const int64_t base = (n * s.c + c) * s.inner;
      if (!p.training) {
        for (int64_t i = 0; i < s.inner; ++i) dx[base + i] = convert<T>(convert<double>(dy[base + i]) * scale);
        continue;
      }
      const double mean_dy = sum_dy[k] * inv_m, proj = sum_dy_xhat[k] * inv_m * invstd[k];
      for (int64_t i = 0; i < s.inner; ++i) {
        const double centred = convert<double>(x[base + i]) - mean[k];
        dx[base + i] = convert<T>(scale * (convert<double>(dy[base + i]) - mean_dy - centred * proj));
      }
    }
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
//   save_invstd?, train, eps, output_mask[3]) -> (grad_input, grad_weight, grad_bias)
void native_batch_norm_backward(const fl_kernel_call* call) {
  const char* op = "aten::native_batch_norm_backward";
  Args args(call);
  TensorDesc dy = describe(args.tensor(0), op);
  TensorDesc x = describe(args.tensor(1), op);
  const BatchNormShape s = batch_norm_shape(op, x);
  if (dy.dtype != x.dtype || dy.numel() != x.numel() || !dy.contiguous()) unsupported(op, "grad_out must be contiguous, of the input's dtype and size");
  std::vector<bool> mask = args.is_none(9) ? std::vector<bool>{true, true, true} : args.bools(9);
  if (mask.size() != 3) invalid(op, "output_mask must have 3 entries");
  BackwardParams p;
  p.training = args.boolean(7);
  p.eps = args.number(8);
  p.weight = channel_input(args, 2, s.c, op, "weight");
  p.mean = channel_input(args, p.training ? 5 : 3, s.c, op, p.training ? "save_mean" : "running_mean");
  p.invstd_or_var = channel_input(args, p.training ? 6 : 4, s.c, op, p.training ? "save_invstd" : "running_var");
  if (!p.mean || !p.invstd_or_var) invalid(op, "saved or running statistics missing");
  if (mask[1]) p.grad_weight = channel_output(args, 1, s.c, op, "grad_weight");
  if (mask[2]) p.grad_bias = channel_output(args, 2, s.c, op, "grad_bias");
  char* gx = nullptr;
  if (mask[0] && args.num_outputs() > 0 && !plugin::is_undefined(args.output(0))) {
    TensorDesc dx = describe(args.output(0), op);
    if (dx.dtype != x.dtype || dx.numel() != x.numel() || !dx.contiguous()) unsupported(op, "grad_input must be contiguous, of the input's dtype and size");
    gx = dx.data;
  }
  using Fn = void (*)(BatchNormShape, const char*, const char*, char*, const BackwardParams&);
  Fn fn = dispatch<kFloatingMask>(x.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](BatchNormShape sh, const char* g, const char* in, char* out, const BackwardParams& params) {
      batch_norm_backward<T>(sh, reinterpret_cast<const T*>(g), reinterpret_cast<const T*>(in),
                             reinterpret_cast<T*>(out), params);
    };
  });
  if (s.c == 0) return;
  const char* g = dy.data;
  const char* in = x.data;
  submit(call, [=] { fn(s, g, in, gx, p); });
}

}  // namespace

void register_batch_norm_kernels(KernelRegistry& r) {
  // Both the functional names and their generated .out overloads (same inputs and outputs).
  r.add("aten::native_batch_norm", kFloatingMask, 0, guarded<native_batch_norm>);
  r.add("aten::native_batch_norm.out", kFloatingMask, 0, guarded<native_batch_norm>);
  r.add("aten::_native_batch_norm_legit", kFloatingMask, 0, guarded<native_batch_norm_legit>);
  r.add("aten::_native_batch_norm_legit.out", kFloatingMask, 0, guarded<native_batch_norm_legit>);
  r.add("aten::_native_batch_norm_legit_no_training", kFloatingMask, 0, guarded<native_batch_norm_legit_no_training>);
  r.add("aten::_native_batch_norm_legit_no_training.out", kFloatingMask, 0,
        guarded<native_batch_norm_legit_no_training>);
  r.add("aten::native_batch_norm_backward", kFloatingMask, 0, guarded<native_batch_norm_backward>);
  r.add("aten::native_batch_norm_backward.out", kFloatingMask, 0, guarded<native_batch_norm_backward>);
}

}  // namespace fl::cpu::kernels
