// activations.cu — leaky_relu, elu, softplus and log_sigmoid, and the backward ops of leaky_relu,
// hardtanh, elu, softplus and log_sigmoid (hardtanh itself is clamp: the table maps it to k_clamp_out).
// Formulas and branch conditions follow ATen's CUDA kernels (ActivationLeakyReluKernel.cu,
// ActivationEluKernel.cu, ActivationSoftplusKernel.cu, ActivationHardtanhKernel.cu), in the
// compute type (float for the 16-bit floats), so NaN and the bounds take the same branch.
#include "elementwise.cuh"
#include "kernels.hpp"
#include "kernel_glue.hpp"

namespace fl::cuda {
namespace {

// q.a: negative_slope
template <class C> struct LeakyReluOp : FloatOnly {
  C slope;
  explicit LeakyReluOp(const OpParams& q) : slope(static_cast<C>(q.a)) {}
  __device__ C operator()(C a) const { return a > C(0) ? a : a * slope; }
};

// (grad, self); q.a: negative_slope
template <class C> struct LeakyReluBackwardOp : FloatOnly {
  C slope;
  explicit LeakyReluBackwardOp(const OpParams& q) : slope(static_cast<C>(q.a)) {}
  __device__ C operator()(C grad, C x) const { return x > C(0) ? grad : grad * slope; }
};

// (grad, self); q.a: min_val, q.b: max_val
template <class C> struct HardtanhBackwardOp : OpTraits {
  C lo, hi;
  explicit HardtanhBackwardOp(const OpParams& q) : lo(static_cast<C>(q.a)), hi(static_cast<C>(q.b)) {}
  __device__ C operator()(C grad, C x) const { return (x <= lo || x >= hi) ? C(0) : grad; }
};

// q.a: alpha * scale (negcoef), q.b: scale (poscoef), q.c: input_scale (negiptcoef)
template <class C> struct EluOp : FloatOnly {
  C negcoef, poscoef, negiptcoef;
  explicit EluOp(const OpParams& q)
      : negcoef(static_cast<C>(q.a)), poscoef(static_cast<C>(q.b)), negiptcoef(static_cast<C>(q.c)) {}
  __device__ C operator()(C a) const { return a > C(0) ? a * poscoef : dmath::expm1_(a * negiptcoef) * negcoef; }
};

// (grad, self_or_result); as EluOp, and q.mode 1 when the saved value is the result.
template <class C> struct EluBackwardOp : FloatOnly {
  C negcoef, poscoef, negiptcoef;
  bool is_result;
  explicit EluBackwardOp(const OpParams& q)
      : negcoef(static_cast<C>(q.a)),
        poscoef(static_cast<C>(q.b)),
        negiptcoef(static_cast<C>(q.c)),
        is_result(q.mode == 1) {}
  __device__ C operator()(C grad, C b) const {
    if (is_result) return b <= C(0) ? grad * negiptcoef * (b + negcoef) : grad * poscoef;
    return b <= C(0) ? grad * negiptcoef * negcoef * dmath::exp_(b * negiptcoef) : grad * poscoef;
  }
};

// q.a: beta, q.b: threshold
template <class C> struct SoftplusOp : FloatOnly {
  C beta, threshold;
  explicit SoftplusOp(const OpParams& q) : beta(static_cast<C>(q.a)), threshold(static_cast<C>(q.b)) {}
  __device__ C operator()(C a) const {
    return (a * beta) > threshold ? a : dmath::log1p_(dmath::exp_(a * beta)) / beta;
  }
};

// (grad, self); q.a: beta, q.b: threshold
template <class C> struct SoftplusBackwardOp : FloatOnly {
  C beta, threshold;
  explicit SoftplusBackwardOp(const OpParams& q) : beta(static_cast<C>(q.a)), threshold(static_cast<C>(q.b)) {}
  __device__ C operator()(C grad, C x) const {
    const C z = dmath::exp_(x * beta);
    return (x * beta) > threshold ? grad : grad * z / (z + C(1));
  }
};

// log_sigmoid_forward's output min(x, 0) - log1p(exp(-|x|)) and buffer exp(-|x|) (ATen's CPU
// kernel fills the buffer and its CPU backward reads it: a CPU fallback of the backward then
// finds it filled); the backward below recomputes it from self, as ATen's CUDA kernel does.
template <class C> struct LogSigmoidOp : FloatOnly {
  explicit LogSigmoidOp(const OpParams&) {}
  __device__ C operator()(C a) const {
    const C lo = a < C(0) ? a : C(0);
    return lo - dmath::log1p_(dmath::exp_(-dmath::abs_(a)));
  }
};
template <class C> struct LogSigmoidBufferOp : FloatOnly {
  explicit LogSigmoidBufferOp(const OpParams&) {}
  __device__ C operator()(C a) const { return dmath::exp_(-dmath::abs_(a)); }
};
// (grad, self)
template <class C> struct LogSigmoidBackwardOp : FloatOnly {
  explicit LogSigmoidBackwardOp(const OpParams&) {}
  __device__ C operator()(C grad, C a) const {
    const bool negative = a < C(0);
    const C z = dmath::exp_(-dmath::abs_(a));
    return grad * ((negative ? C(1) : C(0)) - (negative ? C(1) : C(-1)) * (z / (C(1) + z)));
  }
};

// Runs Op over the tensors at `tensor_inputs` of the call.
template <template <class> class Op, int N>
fl_status_t run_op(const fl_kernel_call* call, const char* name, const int32_t (&tensor_inputs)[N],
                   const OpParams& q) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    std::vector<ElementwiseInput> ins;
    for (int32_t i : tensor_inputs) ins.push_back(elementwise_input(a, i));
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    launch_elementwise<Op, N>(name, p, compute_kind_for(p, ins, true), q, ctx);
  });
}

OpParams params(double a, double b = 0.0, double c = 0.0, int mode = 0) {
  OpParams q;
  q.a = a;
  q.b = b;
  q.c = c;
  q.mode = mode;
  return q;
}

}  // namespace

// log_sigmoid_forward.output(self) -> (output, buffer)
FL_CUDA_KERNEL(k_log_sigmoid_forward) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const std::vector<ElementwiseInput> ins{elementwise_input(a, 0)};
    const ElementwiseOperands out = plan_elementwise(a.output(0), ins);
    launch_elementwise<LogSigmoidOp, 1>("aten::log_sigmoid_forward", out, compute_kind_for(out, ins, true), {}, ctx);
    if (plugin::numel(a.output(1)) == 0) return;
    const ElementwiseOperands buffer = plan_elementwise(a.output(1), ins);
    launch_elementwise<LogSigmoidBufferOp, 1>("aten::log_sigmoid_forward", buffer, compute_kind_for(buffer, ins, true),
                                              {}, ctx);
  });
}

// log_sigmoid_backward.grad_input(grad_output, self, buffer): the buffer is not read.
FL_CUDA_KERNEL(k_log_sigmoid_backward) {
  return run_op<LogSigmoidBackwardOp, 2>(call, "aten::log_sigmoid_backward", {0, 1}, {});
}

// leaky_relu.out(self, negative_slope)
FL_CUDA_KERNEL(k_leaky_relu_out) {
  return plugin::guard([&] { return run_op<LeakyReluOp, 1>(call, "aten::leaky_relu", {0}, params(Args(call).number(1))); });
}

// leaky_relu_backward.grad_input(grad_output, self, negative_slope, self_is_result)
FL_CUDA_KERNEL(k_leaky_relu_backward) {
  return plugin::guard([&] {
    return run_op<LeakyReluBackwardOp, 2>(call, "aten::leaky_relu_backward", {0, 1}, params(Args(call).number(2)));
  });
}

// hardtanh_backward.grad_input(grad_output, self, min_val, max_val)
FL_CUDA_KERNEL(k_hardtanh_backward) {
  return plugin::guard([&] {
    Args a(call);
    return run_op<HardtanhBackwardOp, 2>(call, "aten::hardtanh_backward", {0, 1}, params(a.number(2), a.number(3)));
  });
}

// elu.out(self, alpha, scale, input_scale)
FL_CUDA_KERNEL(k_elu_out) {
  return plugin::guard([&] {
    Args a(call);
    return run_op<EluOp, 1>(call, "aten::elu", {0}, params(a.number(1) * a.number(2), a.number(2), a.number(3)));
  });
}

// elu_backward.grad_input(grad_output, alpha, scale, input_scale, is_result, self_or_result)
FL_CUDA_KERNEL(k_elu_backward) {
  return plugin::guard([&] {
    Args a(call);
    return run_op<EluBackwardOp, 2>(
        call, "aten::elu_backward", {0, 5},
        params(a.number(1) * a.number(2), a.number(2), a.number(3), a.boolean(4) ? 1 : 0));
  });
}

// softplus.out(self, beta, threshold)
FL_CUDA_KERNEL(k_softplus_out) {
  return plugin::guard([&] {
    Args a(call);
    return run_op<SoftplusOp, 1>(call, "aten::softplus", {0}, params(a.number(1), a.number(2)));
  });
}

// softplus_backward.grad_input(grad_output, self, beta, threshold)
FL_CUDA_KERNEL(k_softplus_backward) {
  return plugin::guard([&] {
    Args a(call);
    return run_op<SoftplusBackwardOp, 2>(call, "aten::softplus_backward", {0, 1}, params(a.number(2), a.number(3)));
  });
}

}  // namespace fl::cuda
