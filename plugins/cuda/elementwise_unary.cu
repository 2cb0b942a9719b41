// elementwise_unary.cu — unary math (sqrt, rsqrt, neg, exp, log, abs, tanh, sigmoid, relu,
// reciprocal), the tests isnan/isposinf/isneginf (bool output), the activations gelu
// (none / tanh) and silu, and the backward formulas threshold_backward, gelu_backward,
// silu_backward, tanh_backward, sigmoid_backward, native_dropout_backward. Formulas follow
// ATen's CUDA kernels.
#include "elementwise.cuh"
#include "kernels.hpp"
#include "kernel_glue.hpp"

#include <cmath>

namespace fl::cuda {
namespace {

using dmath::isnan_;

template <class C> struct SqrtOp : FloatOnly {
  explicit SqrtOp(const OpParams&) {}
  __device__ C operator()(C a) const { return dmath::sqrt_(a); }
};
template <class C> struct RsqrtOp : FloatOnly {
  explicit RsqrtOp(const OpParams&) {}
  __device__ C operator()(C a) const { return dmath::rsqrt_(a); }
};
template <class C> struct NegOp : OpTraits {
  explicit NegOp(const OpParams&) {}
  __device__ C operator()(C a) const { return -a; }
};
template <class C> struct ExpOp : FloatOnly {
  explicit ExpOp(const OpParams&) {}
  __device__ C operator()(C a) const { return dmath::exp_(a); }
};
template <class C> struct LogOp : FloatOnly {
  explicit LogOp(const OpParams&) {}
  __device__ C operator()(C a) const { return dmath::log_(a); }
};
template <class C> struct AbsOp : OpTraits {
  explicit AbsOp(const OpParams&) {}
  __device__ C operator()(C a) const { return dmath::abs_(a); }
};
template <class C> struct TanhOp : FloatOnly {
  explicit TanhOp(const OpParams&) {}
  __device__ C operator()(C a) const { return dmath::tanh_(a); }
};
template <class C> struct SigmoidOp : FloatOnly {
  explicit SigmoidOp(const OpParams&) {}
  __device__ C operator()(C a) const { return C(1) / (C(1) + dmath::exp_(-a)); }
};
template <class C> struct ReluOp : OpTraits {
  explicit ReluOp(const OpParams&) {}
  __device__ C operator()(C a) const { return (isnan_(a) || a > C(0)) ? a : C(0); }
};
template <class C> struct ReciprocalOp : FloatOnly {
  explicit ReciprocalOp(const OpParams&) {}
  __device__ C operator()(C a) const { return C(1) / a; }
};

constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/sqrt(2)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2*pi)
constexpr double kGeluKappa = 0.044715;

// mode 0: exact (erf); mode 1: tanh approximation.
template <class C> struct GeluOp : FloatOnly {
  int mode;
  explicit GeluOp(const OpParams& q) : mode(q.mode) {}
  __device__ C operator()(C x) const {
    if (mode == 1) {
      const C inner = C(kSqrt2OverPi) * (x + C(kGeluKappa) * x * x * x);
      return C(0.5) * x * (C(1) + dmath::tanh_(inner));
    }
    return x * C(0.5) * (C(1) + dmath::erf_(x * C(kSqrt1_2)));
  }
};

template <class C> struct GeluBackwardOp : FloatOnly {
  int mode;
  explicit GeluBackwardOp(const OpParams& q) : mode(q.mode) {}
  __device__ C operator()(C dy, C x) const {
    if (mode == 1) {
      const C x_sq = x * x;
      const C x_cube = x_sq * x;
      const C inner = C(kSqrt2OverPi) * (x + C(kGeluKappa) * x_cube);
      const C tanh_inner = dmath::tanh_(inner);
      const C left = C(0.5) * x;
      const C right = C(1) + tanh_inner;
      const C left_derivative = C(0.5) * right;
      const C right_derivative =
          left * (C(1) - tanh_inner * tanh_inner) * C(kSqrt2OverPi) * (C(1) + C(3) * C(kGeluKappa) * x_sq);
      return dy * (left_derivative + right_derivative);
    }
    const C cdf = C(0.5) * (C(1) + dmath::erf_(x * C(kSqrt1_2)));
    const C pdf = dmath::exp_(C(-0.5) * x * x) * C(kInvSqrt2Pi);
    return dy * (cdf + x * pdf);
  }
};

template <class C> struct SiluOp : FloatOnly {
  explicit SiluOp(const OpParams&) {}
  __device__ C operator()(C x) const { return x / (C(1) + dmath::exp_(-x)); }
};

template <class C> struct SiluBackwardOp : FloatOnly {
  explicit SiluBackwardOp(const OpParams&) {}
  __device__ C operator()(C dy, C x) const {
    const C s = C(1) / (C(1) + dmath::exp_(-x));
    return dy * s * (C(1) + x * (C(1) - s));
  }
};

template <class C> struct TanhBackwardOp : FloatOnly {
  explicit TanhBackwardOp(const OpParams&) {}
  __device__ C operator()(C dy, C y) const { return dy * (C(1) - y * y); }
};

template <class C> struct SigmoidBackwardOp : FloatOnly {
  explicit SigmoidBackwardOp(const OpParams&) {}
  __device__ C operator()(C dy, C y) const { return dy * (C(1) - y) * y; }
};

template <class C> struct ThresholdBackwardOp : OpTraits {
  C threshold;
  explicit ThresholdBackwardOp(const OpParams& q) : threshold(static_cast<C>(q.a)) {}
  __device__ C operator()(C dy, C x) const { return x <= threshold ? C(0) : dy; }
};

template <class C> struct DropoutBackwardOp : FloatOnly {
  C scale;
  explicit DropoutBackwardOp(const OpParams& q) : scale(static_cast<C>(q.a)) {}
  __device__ C operator()(C dy, C mask) const { return dy * mask * scale; }
};

// mode 1: a bool output (logical negation); else two's-complement negation of the bits.
template <class C> struct BitwiseNotOp : OpTraits {
  int mode;
  explicit BitwiseNotOp(const OpParams& q) : mode(q.mode) {}
  __device__ C operator()(C a) const {
    if constexpr (std::is_integral_v<C>) return mode == 1 ? C(a == C(0) ? 1 : 0) : C(~a);
    else return C(0);  // not reached: the entry refuses floating inputs
  }
};
template <class C> struct LogicalNotOp : OpTraits {
  explicit LogicalNotOp(const OpParams&) {}
  __device__ C operator()(C a) const { return a == C(0) ? C(1) : C(0); }
};

// isnan (mode 0), isposinf (1), isneginf (2), on the value widened to its compute type (float
// for the half types, which keeps NaN and inf); integers and bool are never NaN or infinite.
template <class C> struct FloatClassOp : OpTraits {
  static constexpr bool kBoolOut = true;
  int mode;
  explicit FloatClassOp(const OpParams& q) : mode(q.mode) {}
  __device__ bool operator()(C a) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (mode == 0) return isnan_(a);
      return mode == 1 ? a == C(INFINITY) : a == C(-INFINITY);
    } else {
      return false;
    }
  }
};

template <template <class> class Op, int N>
fl_status_t run_op(const fl_kernel_call* call, const char* name, const OpParams& q) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    std::vector<ElementwiseInput> ins;
    for (int32_t i = 0; i < N; ++i) ins.push_back(elementwise_input(a, i));
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    launch_elementwise<Op, N>(name, p, compute_kind_for(p, ins, true), q, ctx);
  });
}

int gelu_mode(const Args& a, int32_t i) {
  const std::string approximate = a.size() > i ? optional_string(a, i) : "";
  if (approximate.empty() || approximate == "none") return 0;
  if (approximate == "tanh") return 1;
  plugin::raise(FL_ERR_INVALID_ARGUMENT, "aten::gelu: approximate '" + approximate + "' is not none or tanh");
}

// A bool output only (ATen's isposinf/isneginf refuse others); another is declined.
fl_status_t run_float_class(const fl_kernel_call* call, int mode, const char* name) {
  return plugin::guard([&] {
    const fl_tensor& out = Args(call).output(0);
    if (out.dtype != FL_DTYPE_BOOL) unsupported_dtype(name, out.dtype);
    OpParams q;
    q.mode = mode;
    return run_op<FloatClassOp, 1>(call, name, q);
  });
}

}  // namespace

FL_CUDA_KERNEL(k_sqrt_out) { return run_op<SqrtOp, 1>(call, "aten::sqrt", {}); }
FL_CUDA_KERNEL(k_rsqrt_out) { return run_op<RsqrtOp, 1>(call, "aten::rsqrt", {}); }
FL_CUDA_KERNEL(k_neg_out) { return run_op<NegOp, 1>(call, "aten::neg", {}); }
FL_CUDA_KERNEL(k_exp_out) { return run_op<ExpOp, 1>(call, "aten::exp", {}); }
FL_CUDA_KERNEL(k_log_out) { return run_op<LogOp, 1>(call, "aten::log", {}); }
FL_CUDA_KERNEL(k_abs_out) { return run_op<AbsOp, 1>(call, "aten::abs", {}); }
FL_CUDA_KERNEL(k_tanh_out) { return run_op<TanhOp, 1>(call, "aten::tanh", {}); }
FL_CUDA_KERNEL(k_sigmoid_out) { return run_op<SigmoidOp, 1>(call, "aten::sigmoid", {}); }
FL_CUDA_KERNEL(k_relu_out) { return run_op<ReluOp, 1>(call, "aten::relu", {}); }
FL_CUDA_KERNEL(k_reciprocal_out) { return run_op<ReciprocalOp, 1>(call, "aten::reciprocal", {}); }
// bitwise_not.out(self): integers and bool only.
FL_CUDA_KERNEL(k_bitwise_not_out) {
  if (call != nullptr && call->num_inputs >= 1 && call->num_outputs >= 1 && call->inputs[0].kind == FL_VALUE_TENSOR &&
      call->inputs[0].u.tensor != nullptr) {
    const fl_dtype_t in = call->inputs[0].u.tensor->dtype, out = call->outputs[0].dtype;
    if (is_floating_dtype(in) || !is_real_dtype(in) || (in == FL_DTYPE_BOOL) != (out == FL_DTYPE_BOOL))
      return plugin::fail(FL_ERR_NOT_SUPPORTED, "aten::bitwise_not: dtype not supported");
    OpParams q;
    q.mode = out == FL_DTYPE_BOOL ? 1 : 0;
    return run_op<BitwiseNotOp, 1>(call, "aten::bitwise_not", q);
  }
  return plugin::fail(FL_ERR_INVALID_ARGUMENT, "aten::bitwise_not: bad arguments");
}
FL_CUDA_KERNEL(k_logical_not_out) { return run_op<LogicalNotOp, 1>(call, "aten::logical_not", {}); }
// isnan.out / isposinf.out / isneginf.out(self): any real input, bool output.
FL_CUDA_KERNEL(k_isnan_out) { return run_float_class(call, 0, "aten::isnan"); }
FL_CUDA_KERNEL(k_isposinf_out) { return run_float_class(call, 1, "aten::isposinf"); }
FL_CUDA_KERNEL(k_isneginf_out) { return run_float_class(call, 2, "aten::isneginf"); }
FL_CUDA_KERNEL(k_silu_out) { return run_op<SiluOp, 1>(call, "aten::silu", {}); }
FL_CUDA_KERNEL(k_silu_backward) { return run_op<SiluBackwardOp, 2>(call, "aten::silu_backward", {}); }
FL_CUDA_KERNEL(k_tanh_backward) { return run_op<TanhBackwardOp, 2>(call, "aten::tanh_backward", {}); }
FL_CUDA_KERNEL(k_sigmoid_backward) {
  return run_op<SigmoidBackwardOp, 2>(call, "aten::sigmoid_backward", {});
}

FL_CUDA_KERNEL(k_gelu_out) {
  return plugin::guard([&] {
    OpParams q;
    q.mode = gelu_mode(Args(call), 1);
    return run_op<GeluOp, 1>(call, "aten::gelu", q);
  });
}

FL_CUDA_KERNEL(k_gelu_backward) {
  return plugin::guard([&] {
    OpParams q;
    q.mode = gelu_mode(Args(call), 2);
    return run_op<GeluBackwardOp, 2>(call, "aten::gelu_backward", q);
  });
}

// threshold_backward.grad_input(grad_output, self, threshold).
FL_CUDA_KERNEL(k_threshold_backward) {
  return plugin::guard([&] {
    OpParams q;
    q.a = Args(call).number(2);
    return run_op<ThresholdBackwardOp, 2>(call, "aten::threshold_backward", q);
  });
}

// native_dropout_backward(grad_output, mask, scale).
FL_CUDA_KERNEL(k_native_dropout_backward) {
  return plugin::guard([&] {
    OpParams q;
    q.a = Args(call).number(2);
    return run_op<DropoutBackwardOp, 2>(call, "aten::native_dropout_backward", q);
  });
}

}  // namespace fl::cuda
