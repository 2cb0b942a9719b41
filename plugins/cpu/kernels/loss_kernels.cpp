// loss_kernels.cpp — nll_loss_forward / nll_loss_backward (reduction none/mean/sum,
// ignore_index, optional class weights), input [N, C] or [C], int64 targets; mse_loss and
// its backward (input and target of one shape and dtype; the core passes them contiguous).
// An out-of-range target is reported as an asynchronous error (like ATen's IndexError).
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <optional>
#include <stdexcept>
#include <string>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

struct NllShape {
  int64_t batch = 1, classes = 0;
  bool batched = true;
};

NllShape nll_shape(const char* op, const TensorDesc& self, const TensorDesc& target) {
  NllShape s;
  if (self.ndim == 2) {
    s.batch = self.shape[0];
    s.classes = self.shape[1];
    if (target.ndim != 1 || target.shape[0] != s.batch) invalid(op, "target must be [N] for input [N, C]");
  } else if (self.ndim == 1) {
    s.batched = false;
    s.classes = self.shape[0];
    if (target.ndim > 1 || target.numel() != 1) invalid(op, "target must be a scalar for input [C]");
  } else {
    invalid(op, "input must be 1-D or 2-D, got " + shape_string(self));
  }
  if (target.dtype != FL_DTYPE_INT64) unsupported(op, std::string("target dtype ") + plugin::dtype_name(target.dtype));
  return s;
}

int64_t checked_target(int64_t t, int64_t classes, int64_t ignore_index) {
  if (t != ignore_index && (t < 0 || t >= classes))
    throw std::runtime_error("nll_loss: target " + std::to_string(t) + " is out of bounds [0, " +
                             std::to_string(classes) + ")");
  return t;
}

template <class T>
void nll_forward(NllShape s, const T* x, const int64_t* target, const T* weight, int64_t reduction,
                 int64_t ignore_index, T* out, T* total_weight) {
  using C = opmath_t<T>;
  C sum = 0, wsum = 0;
  for (int64_t n = 0; n < s.batch; ++n) {
    int64_t t = checked_target(target[n], s.classes, ignore_index);
    C v = 0;
    if (t != ignore_index) {
      C w = weight ? convert<C>(weight[t]) : C(1);
      v = -w * convert<C>(x[n * s.classes + t]);
      wsum += w;
    }
    if (reduction == kNone && s.batched) out[n] = convert<T>(v);
    sum += v;
  }
  if (reduction == kNone && !s.batched) out[0] = convert<T>(sum);
  if (reduction == kMean) out[0] = convert<T>(sum / wsum);  // 0/0 = NaN when all are ignored, as ATen
  if (reduction == kSum) out[0] = convert<T>(sum);
  *total_weight = convert<T>(reduction == kNone ? C(0) : wsum);
}

template <class T>
void nll_backward(NllShape s, const T* grad_out, const int64_t* target, const T* weight,
                  int64_t reduction, int64_t ignore_index, const T* total_weight, T* gi) {
  using C = opmath_t<T>;
  for (int64_t i = 0; i < s.batch * s.classes; ++i) gi[i] = convert<T>(C(0));
  C scale = convert<C>(grad_out[0]);
  if (reduction == kMean) scale /= convert<C>(total_weight[0]);
  for (int64_t n = 0; n < s.batch; ++n) {
    int64_t t = checked_target(target[n], s.classes, ignore_index);
    if (t == ignore_index) continue;
    C w = weight ? convert<C>(weight[t]) : C(1);
    C g = (reduction == kNone && s.batched) ? convert<C>(grad_out[n]) : scale;
    gi[n * s.classes + t] = convert<T>(-w * g);
  }
}

// nll_loss_forward.output(self, target, weight?, reduction, ignore_index) -> (output, total_weight)
void nll_loss_forward_out(const fl_kernel_call* call) {
  const char* op = "aten::nll_loss_forward.output";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc target = describe(args.tensor(1), op);
  std::optional<TensorDesc> weight;
  if (!args.is_none(2)) weight = describe(args.tensor(2), op);
  int64_t reduction = args.integer(3), ignore_index = args.integer(4);
  TensorDesc out = describe(args.output(0), op);
  TensorDesc total = describe(args.output(1), op);
  NllShape s = nll_shape(op, self, target);
  if (reduction < 0 || reduction > 2) invalid(op, "bad reduction " + std::to_string(reduction));
  if (out.dtype != self.dtype || total.dtype != self.dtype || (weight && weight->dtype != self.dtype))
    unsupported(op, "mixed dtypes");
  if (weight && weight->numel() != s.classes) invalid(op, "weight must have C elements");
  using Fn = void (*)(NllShape, const char*, const int64_t*, const char*, int64_t, int64_t, char*, char*);
  Fn fn = dispatch<kFloatingMask>(self.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](NllShape sh, const char* x, const int64_t* t, const char* w, int64_t red, int64_t ign,
              char* o, char* tw) {
      nll_forward<T>(sh, reinterpret_cast<const T*>(x), t, reinterpret_cast<const T*>(w), red, ign,
                     reinterpret_cast<T*>(o), reinterpret_cast<T*>(tw));
    };
  });
  const char* x = self.data;
  const int64_t* t = target.ptr<const int64_t>();
  const char* w = weight ? weight->data : nullptr;
  char* o = out.data;
  char* tw = total.data;
  submit(call, [=] { fn(s, x, t, w, reduction, ignore_index, o, tw); });
}

// nll_loss_backward.grad_input(grad_output, self, target, weight?, reduction, ignore_index,
//                              total_weight)
void nll_loss_backward_out(const fl_kernel_call* call) {
  const char* op = "aten::nll_loss_backward.grad_input";
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc self = describe(args.tensor(1), op);
  TensorDesc target = describe(args.tensor(2), op);
  std::optional<TensorDesc> weight;
  if (!args.is_none(3)) weight = describe(args.tensor(3), op);
  int64_t reduction = args.integer(4), ignore_index = args.integer(5);
  TensorDesc total = describe(args.tensor(6), op);
  TensorDesc gi = describe(args.output(0), op);
  NllShape s = nll_shape(op, self, target);
  if (grad.dtype != self.dtype || gi.dtype != self.dtype || total.dtype != self.dtype ||
      (weight && weight->dtype != self.dtype))
    unsupported(op, "mixed dtypes");
  if (weight && weight->numel() != s.classes) invalid(op, "weight must have C elements");
  using Fn = void (*)(NllShape, const char*, const int64_t*, const char*, int64_t, int64_t, const char*, char*);
  Fn fn = dispatch<kFloatingMask>(self.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](NllShape sh, const char* g, const int64_t* t, const char* w, int64_t red, int64_t ign,
              const char* tw, char* o) {
      nll_backward<T>(sh, reinterpret_cast<const T*>(g), t, reinterpret_cast<const T*>(w), red, ign,
                      reinterpret_cast<const T*>(tw), reinterpret_cast<T*>(o));
    };
  });
  const char* g = grad.data;
  const int64_t* t = target.ptr<const int64_t>();
  const char* w = weight ? weight->data : nullptr;
  const char* tw = total.data;
  char* o = gi.data;
  submit(call, [=] { fn(s, g, t, w, reduction, ignore_index, tw, o); });
}

// ---- mse_loss ----------------------------------------------------------------------------

// What ATen's mse kernels compute, element by element, each operation rounded to the dtype
// (the 16-bit floats compute in float and round after every operation, as ATen's scalar and
// vectorised paths do): d = x - y, then d * d (a reduction sums those in double here; ATen's
// cascade sum may differ in the last bits); the gradient (norm * d) * g, with norm 2, or 2/N
// for the mean.
void check_mse_operands(const char* op, const TensorDesc& self, const TensorDesc& target, const TensorDesc& out,
                        int64_t reduction) {
  if (reduction < 0 || reduction > 2) invalid(op, "bad reduction " + std::to_string(reduction));
  if (target.dtype != self.dtype || out.dtype != self.dtype) unsupported(op, "mixed dtypes");
  if (target.ndim != self.ndim) unsupported(op, "broadcast target " + shape_string(target));
  for (int d = 0; d < self.ndim; ++d)
    if (target.shape[d] != self.shape[d]) unsupported(op, "broadcast target " + shape_string(target));
}

// a - b, or a * b, rounded to T.
template <class T>
inline T rounded_sub(T a, T b) { return convert<T>(convert<opmath_t<T>>(a) - convert<opmath_t<T>>(b)); }
template <class T>
inline T rounded_mul(T a, T b) { return convert<T>(convert<opmath_t<T>>(a) * convert<opmath_t<T>>(b)); }

template <class T>
void mse_forward(int64_t n, const T* x, const T* y, int64_t reduction, T* out) {
  if (reduction == kNone) {
    parallel_for(n, kParallelGrain, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T d = rounded_sub(x[i], y[i]);
        out[i] = rounded_mul(d, d);
      }
    });
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const T d = rounded_sub(x[i], y[i]);
    sum += convert<double>(rounded_mul(d, d));
  }
  out[0] = convert<T>(reduction == kMean ? sum / static_cast<double>(n) : sum);  // 0/0 = NaN for no elements, as ATen
}

template <class T>
void mse_backward(int64_t n, const T* grad, bool grad_per_element, const T* x, const T* y, int64_t reduction,
                  T* gi) {
  const T norm = convert<T>(reduction == kMean ? 2.0 / static_cast<double>(n) : 2.0);
  parallel_for(n, kParallelGrain, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      gi[i] = rounded_mul(rounded_mul(norm, rounded_sub(x[i], y[i])), grad[grad_per_element ? i : 0]);
  });
}

// mse_loss.out(self, target, int reduction=Mean)
void mse_loss_out(const fl_kernel_call* call) {
  const char* op = "aten::mse_loss.out";
  Args args(call);
  const TensorDesc self = describe(args.tensor(0), op);
  const TensorDesc target = describe(args.tensor(1), op);
  const int64_t reduction = args.is_none(2) ? int64_t{kMean} : args.integer(2);
  const TensorDesc out = describe(args.output(0), op);
  check_mse_operands(op, self, target, out, reduction);
  const int64_t n = self.numel();
  if (out.numel() != (reduction == kNone ? n : 1))
    invalid(op, "output " + shape_string(out) + " for input " + shape_string(self));
  using Fn = void (*)(int64_t, const char*, const char*, int64_t, char*);
  Fn fn = dispatch<kFloatingMask>(self.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](int64_t count, const char* x, const char* y, int64_t red, char* o) {
      mse_forward<T>(count, reinterpret_cast<const T*>(x), reinterpret_cast<const T*>(y), red, reinterpret_cast<T*>(o));
    };
  });
  const char* x = self.data;
  const char* y = target.data;
  char* o = out.data;
  submit(call, [=] { fn(n, x, y, reduction, o); });
}

// mse_loss_backward.grad_input(grad_output, self, target, int reduction): grad_output has one
// element (mean, sum) or one per input element (none).
void mse_loss_backward_out(const fl_kernel_call* call) {
  const char* op = "aten::mse_loss_backward.grad_input";
  Args args(call);
  const TensorDesc grad = describe(args.tensor(0), op);
  const TensorDesc self = describe(args.tensor(1), op);
  const TensorDesc target = describe(args.tensor(2), op);
  const int64_t reduction = args.integer(3);
  const TensorDesc gi = describe(args.output(0), op);
  check_mse_operands(op, self, target, gi, reduction);
  if (grad.dtype != self.dtype) unsupported(op, "mixed dtypes");
  const int64_t n = self.numel();
  const bool per_element = grad.numel() != 1;
  if (per_element && grad.numel() != n) unsupported(op, "grad_output " + shape_string(grad) + " to broadcast");
  if (gi.numel() != n) invalid(op, "grad_input " + shape_string(gi) + " for input " + shape_string(self));
  using Fn = void (*)(int64_t, const char*, bool, const char*, const char*, int64_t, char*);
  Fn fn = dispatch<kFloatingMask>(self.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](int64_t count, const char* g, bool each, const char* x, const char* y, int64_t red, char* o) {
      mse_backward<T>(count, reinterpret_cast<const T*>(g), each, reinterpret_cast<const T*>(x),
                      reinterpret_cast<const T*>(y), red, reinterpret_cast<T*>(o));
    };
  });
  const char* g = grad.data;
  const char* x = self.data;
  const char* y = target.data;
  char* o = gi.data;
  submit(call, [=] { fn(n, g, per_element, x, y, reduction, o); });
}

}  // namespace

void register_loss_kernels(KernelRegistry& r) {
  r.add("aten::nll_loss_forward.output", kFloatingMask, 0, guarded<nll_loss_forward_out>);
  r.add("aten::nll_loss_backward.grad_input", kFloatingMask, 0, guarded<nll_loss_backward_out>);
  r.add("aten::mse_loss.out", kFloatingMask, FL_KERNEL_DETERMINISTIC, guarded<mse_loss_out>);
  r.add("aten::mse_loss_backward.grad_input", kFloatingMask, FL_KERNEL_DETERMINISTIC, guarded<mse_loss_backward_out>);
}

}  // namespace fl::cpu::kernels
