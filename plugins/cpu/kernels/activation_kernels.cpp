// activation_kernels.cpp — leaky_relu, hardtanh, elu, softplus and log_sigmoid with their backward ops,
// on the broadcasting elementwise engine (functors in activation_functors.hpp). hardtanh is
// ATen's clamp between its two bounds.
#include "activation_functors.hpp"
#include "kernel_table.hpp"
#include "pointwise_common.hpp"
#include "pointwise_functors.hpp"

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// (grad, saved, ...) -> grad_input
template <template <class> class Op, uint64_t Mask>
void activation_backward_body(const fl_kernel_call* call, const char* op, int32_t grad_index,
                              int32_t saved_index, std::initializer_list<Param> params) {
  Args args(call);
  TensorDesc grad = describe(args.tensor(grad_index), op);
  TensorDesc saved = describe(args.tensor(saved_index), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&grad, &saved}, {&grad, &saved}, &select_kernel<Op, 2, Mask>, Promotion::kSame,
                   params);
}

// leaky_relu.out(self, negative_slope)
void leaky_relu_out(const fl_kernel_call* call) {
  Args args(call);
  unary_body<fn::LeakyRelu, kFloatingMask, Promotion::kSame>(call, "aten::leaky_relu.out", {param_arg(args, 1)});
}

// leaky_relu_backward.grad_input(grad_output, self, negative_slope, self_is_result): the
// formula reads self's sign, which the result shares for a slope >= 0 (autograd refuses the
// in-place form with a negative slope).
void leaky_relu_backward_out(const fl_kernel_call* call) {
  Args args(call);
  activation_backward_body<fn::LeakyReluBackward, kFloatingMask>(call, "aten::leaky_relu_backward.grad_input", 0, 1,
                                                                  {param_arg(args, 2)});
}

// hardtanh.out(self, min_val, max_val) = clamp(self, min_val, max_val)
void hardtanh_out(const fl_kernel_call* call) {
  Args args(call);
  unary_body<fn::Clamp, kArithmeticMask, Promotion::kSame>(call, "aten::hardtanh.out",
                                              {param_arg(args, 1), param_arg(args, 2), param_int(3)});
}

// hardtanh_backward.grad_input(grad_output, self, min_val, max_val)
void hardtanh_backward_out(const fl_kernel_call* call) {
  Args args(call);
  activation_backward_body<fn::HardtanhBackward, kArithmeticMask>(
      call, "aten::hardtanh_backward.grad_input", 0, 1, {param_arg(args, 2), param_arg(args, 3)});
}

// elu.out(self, alpha, scale, input_scale)
void elu_out(const fl_kernel_call* call) {
  Args args(call);
  unary_body<fn::Elu, kFloatingMask, Promotion::kSame>(call, "aten::elu.out",
                                          {param_arg(args, 1), param_arg(args, 2), param_arg(args, 3)});
}

// elu_backward.grad_input(grad_output, alpha, scale, input_scale, is_result, self_or_result)
void elu_backward_out(const fl_kernel_call* call) {
  Args args(call);
  activation_backward_body<fn::EluBackward, kFloatingMask>(
      call, "aten::elu_backward.grad_input", 0, 5,
      {param_arg(args, 1), param_arg(args, 2), param_arg(args, 3), param_int(args.boolean(4) ? 1 : 0)});
}

// softplus.out(self, beta, threshold)
void softplus_out(const fl_kernel_call* call) {
  Args args(call);
  unary_body<fn::Softplus, kFloatingMask, Promotion::kSame>(call, "aten::softplus.out", {param_arg(args, 1), param_arg(args, 2)});
}

// softplus_backward.grad_input(grad_output, self, beta, threshold)
void softplus_backward_out(const fl_kernel_call* call) {
  Args args(call);
  activation_backward_body<fn::SoftplusBackward, kFloatingMask>(call, "aten::softplus_backward.grad_input", 0, 1,
                                                                 {param_arg(args, 2), param_arg(args, 3)});
}

// log_sigmoid_forward.output(self) -> (output, buffer): two passes over self.
void log_sigmoid_forward_out(const fl_kernel_call* call) {
  const char* op = "aten::log_sigmoid_forward.output";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  TensorDesc buffer = describe(args.output(1), op);
  launch_pointwise(call, op, out, {&self}, {&self}, &select_kernel<fn::LogSigmoid, 1, kFloatingMask>,
                   Promotion::kSame);
  if (buffer.numel() > 0)
    launch_pointwise(call, op, buffer, {&self}, {&self}, &select_kernel<fn::LogSigmoidBuffer, 1, kFloatingMask>,
                     Promotion::kSame);
}

// log_sigmoid_backward.grad_input(grad_output, self, buffer)
void log_sigmoid_backward_out(const fl_kernel_call* call) {
  activation_backward_body<fn::LogSigmoidBackward, kFloatingMask>(call, "aten::log_sigmoid_backward.grad_input", 0, 1,
                                                                   {});
}

}  // namespace

void register_activation_kernels(KernelRegistry& r) {
  constexpr uint32_t f = kPointwiseFlags;
  r.add("aten::leaky_relu.out", kFloatingMask, f, guarded<leaky_relu_out>);
  r.add("aten::leaky_relu_backward.grad_input", kFloatingMask, f, guarded<leaky_relu_backward_out>);
  r.add("aten::hardtanh.out", kArithmeticMask, f, guarded<hardtanh_out>);
  r.add("aten::hardtanh_backward.grad_input", kArithmeticMask, f, guarded<hardtanh_backward_out>);
  r.add("aten::elu.out", kFloatingMask, f, guarded<elu_out>);
  r.add("aten::elu_backward.grad_input", kFloatingMask, f, guarded<elu_backward_out>);
  r.add("aten::softplus.out", kFloatingMask, f, guarded<softplus_out>);
  r.add("aten::softplus_backward.grad_input", kFloatingMask, f, guarded<softplus_backward_out>);
  // Two outputs, each its own pass: not in place over self.
  r.add("aten::log_sigmoid_forward.output", kFloatingMask, FL_KERNEL_STRIDED_INPUTS, guarded<log_sigmoid_forward_out>);
  r.add("aten::log_sigmoid_backward.grad_input", kFloatingMask, f, guarded<log_sigmoid_backward_out>);
}

}  // namespace fl::cpu::kernels
