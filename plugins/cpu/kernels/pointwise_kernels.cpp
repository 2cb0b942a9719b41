// pointwise_kernels.cpp — unary, binary, comparison, predicate (isnan...), logical and
// activation-backward entries (`aten::<op>.out` and friends), all on the broadcasting
// elementwise engine.
#include "kernel_table.hpp"
#include "pointwise_common.hpp"
#include "pointwise_functors.hpp"

#include <optional>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

constexpr uint64_t kAddMask = kArithmeticMask | bit(FL_DTYPE_BOOL);

// ---- unary: (self) -> out --------------------------------------------------------------


FL_CPU_UNARY_ENTRY(sqrt_out, "aten::sqrt.out", Sqrt, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(rsqrt_out, "aten::rsqrt.out", Rsqrt, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(neg_out, "aten::neg.out", Neg, kArithmeticMask, kSame)
FL_CPU_UNARY_ENTRY(exp_out, "aten::exp.out", Exp, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(log_out, "aten::log.out", Log, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(abs_out, "aten::abs.out", Abs, kAllMask, kSame)
FL_CPU_UNARY_ENTRY(tanh_out, "aten::tanh.out", Tanh, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(sigmoid_out, "aten::sigmoid.out", Sigmoid, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(relu_out, "aten::relu.out", Relu, kArithmeticMask, kSame)
FL_CPU_UNARY_ENTRY(reciprocal_out, "aten::reciprocal.out", Reciprocal, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(silu_out, "aten::silu.out", Silu, kFloatingMask, kSame)
FL_CPU_UNARY_ENTRY(bitwise_not_out, "aten::bitwise_not.out", BitwiseNot, kIntegralMask | bit(FL_DTYPE_BOOL), kSame)

// isnan / isposinf / isneginf: (self) -> bool out, any real dtype (integers give false).
template <template <class> class Op>
void predicate_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&self}, {&self}, &select_kernel<Op, 1, kAllMask, true>, Promotion::kCompare);
}

void isnan_out(const fl_kernel_call* call) { predicate_body<fn::IsNan>(call, "aten::isnan.out"); }
void isposinf_out(const fl_kernel_call* call) { predicate_body<fn::IsPosInf>(call, "aten::isposinf.out"); }
void isneginf_out(const fl_kernel_call* call) { predicate_body<fn::IsNegInf>(call, "aten::isneginf.out"); }

// pow.Tensor_Scalar_out(self, Scalar exponent): floating self and floating result only.
void pow_tensor_scalar_out(const fl_kernel_call* call) {
  const char* op = "aten::pow.Tensor_Scalar_out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  ScalarOperand exponent(args, 1, op);
  if (!is_floating(self.dtype)) unsupported(op, std::string("integer base ") + plugin::dtype_name(self.dtype));
  launch_pointwise(call, op, out, {&self, &exponent.desc()}, {&self},
                   &select_kernel<fn::PowScalar, 1, kFloatingMask>, Promotion::kSame,
                   {param_arg(args, 1)});
}

// gelu.out(self, *, approximate)
void gelu_out(const fl_kernel_call* call) {
  const char* op = "aten::gelu.out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&self}, {&self}, &select_kernel<fn::Gelu, 1, kFloatingMask>,
                   Promotion::kSame, {param_int(gelu_approximation(args, 1))});
}

// ---- binary: (self, other[, alpha]) -> out ---------------------------------------------

// The binary ops whose ATen CPU kernel keeps a single-value second operand of a 16-bit float
// computation in float (see contiguous_kernel_opmath_b). add and sub round it (and alpha) to
// the tensor's dtype on ATen's CPU, as the plugin does.
template <template <class> class Op>
inline constexpr OpmathOperandSelector kOpmathOther = nullptr;
template <> inline constexpr OpmathOperandSelector kOpmathOther<fn::Mul> = &select_kernel_opmath_b<fn::Mul>;
template <> inline constexpr OpmathOperandSelector kOpmathOther<fn::Div> = &select_kernel_opmath_b<fn::Div>;
template <>
inline constexpr OpmathOperandSelector kOpmathOther<fn::DivTrunc> = &select_kernel_opmath_b<fn::DivTrunc>;
template <>
inline constexpr OpmathOperandSelector kOpmathOther<fn::DivFloor> = &select_kernel_opmath_b<fn::DivFloor>;

// `other` is a Tensor (Tensor overloads) or a Scalar (Scalar_out overloads).
template <template <class> class Op, uint64_t Mask, Promotion P, bool ScalarOther, bool HasAlpha,
          bool BoolOut = false>
void binary_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  Param alpha = param_int(1);
  if (HasAlpha && !args.is_none(2)) alpha = param_arg(args, 2);
  constexpr KernelSelector select = &select_kernel<Op, 2, Mask, BoolOut>;
  if constexpr (ScalarOther) {
    ScalarOperand other(args, 1, op);
    launch_pointwise(call, op, out, {&self, &other.desc()}, {&self, &other.desc()}, select, P, {alpha},
                     kOpmathOther<Op>);
  } else {
    TensorDesc other = describe(args.tensor(1), op);
    launch_pointwise(call, op, out, {&self, &other}, {&self, &other}, select, P, {alpha}, kOpmathOther<Op>);
  }
}

#define FL_CPU_BINARY_ENTRY(FN, OP_NAME, FUNCTOR, MASK, PROMOTION, SCALAR, ALPHA, BOOL_OUT)       \
  void FN(const fl_kernel_call* call) {                                                          \
    binary_body<fn::FUNCTOR, MASK, Promotion::PROMOTION, SCALAR, ALPHA, BOOL_OUT>(call, OP_NAME); \
  }

FL_CPU_BINARY_ENTRY(add_out, "aten::add.out", Add, kAddMask, kSame, false, true, false)
FL_CPU_BINARY_ENTRY(add_scalar_out, "aten::add.Scalar_out", Add, kAddMask, kSame, true, true, false)
FL_CPU_BINARY_ENTRY(sub_out, "aten::sub.out", Sub, kArithmeticMask, kSame, false, true, false)
FL_CPU_BINARY_ENTRY(sub_scalar_out, "aten::sub.Scalar_out", Sub, kArithmeticMask, kSame, true, true, false)
FL_CPU_BINARY_ENTRY(mul_out, "aten::mul.out", Mul, kAllMask, kSame, false, false, false)
FL_CPU_BINARY_ENTRY(mul_scalar_out, "aten::mul.Scalar_out", Mul, kAllMask, kSame, true, false, false)
FL_CPU_BINARY_ENTRY(div_out, "aten::div.out", Div, kFloatingMask, kIntToFloat, false, false, false)
FL_CPU_BINARY_ENTRY(div_scalar_out, "aten::div.Scalar_out", Div, kFloatingMask, kIntToFloat, true, false, false)
FL_CPU_BINARY_ENTRY(maximum_out, "aten::maximum.out", Maximum, kAllMask, kSame, false, false, false)
FL_CPU_BINARY_ENTRY(minimum_out, "aten::minimum.out", Minimum, kAllMask, kSame, false, false, false)
FL_CPU_BINARY_ENTRY(pow_tensor_tensor_out, "aten::pow.Tensor_Tensor_out", PowTensor, kFloatingMask, kSame, false, false, false)
FL_CPU_BINARY_ENTRY(eq_tensor_out, "aten::eq.Tensor_out", Eq, kAllMask, kCompare, false, false, true)
FL_CPU_BINARY_ENTRY(ne_tensor_out, "aten::ne.Tensor_out", Ne, kAllMask, kCompare, false, false, true)
FL_CPU_BINARY_ENTRY(lt_tensor_out, "aten::lt.Tensor_out", Lt, kAllMask, kCompare, false, false, true)
FL_CPU_BINARY_ENTRY(le_tensor_out, "aten::le.Tensor_out", Le, kAllMask, kCompare, false, false, true)
FL_CPU_BINARY_ENTRY(gt_tensor_out, "aten::gt.Tensor_out", Gt, kAllMask, kCompare, false, false, true)
FL_CPU_BINARY_ENTRY(ge_tensor_out, "aten::ge.Tensor_out", Ge, kAllMask, kCompare, false, false, true)
FL_CPU_BINARY_ENTRY(eq_scalar_out, "aten::eq.Scalar_out", Eq, kAllMask, kCompare, true, false, true)
FL_CPU_BINARY_ENTRY(ne_scalar_out, "aten::ne.Scalar_out", Ne, kAllMask, kCompare, true, false, true)
FL_CPU_BINARY_ENTRY(lt_scalar_out, "aten::lt.Scalar_out", Lt, kAllMask, kCompare, true, false, true)
FL_CPU_BINARY_ENTRY(le_scalar_out, "aten::le.Scalar_out", Le, kAllMask, kCompare, true, false, true)
FL_CPU_BINARY_ENTRY(gt_scalar_out, "aten::gt.Scalar_out", Gt, kAllMask, kCompare, true, false, true)
FL_CPU_BINARY_ENTRY(ge_scalar_out, "aten::ge.Scalar_out", Ge, kAllMask, kCompare, true, false, true)
// Logical ops: computed in the operands' promoted dtype; a bool output only (ATen also
// writes other dtypes: those fall back).
FL_CPU_BINARY_ENTRY(logical_and_out, "aten::logical_and.out", LogicalAnd, kAllMask, kCompare, false, false, true)
FL_CPU_BINARY_ENTRY(logical_or_out, "aten::logical_or.out", LogicalOr, kAllMask, kCompare, false, false, true)
FL_CPU_BINARY_ENTRY(logical_xor_out, "aten::logical_xor.out", LogicalXor, kAllMask, kCompare, false, false, true)
// Backward ops: (grad_output, saved) -> grad_input, same dtype throughout.
FL_CPU_BINARY_ENTRY(tanh_backward_out, "aten::tanh_backward.grad_input", TanhBackward, kFloatingMask, kSame, false, false, false)
FL_CPU_BINARY_ENTRY(sigmoid_backward_out, "aten::sigmoid_backward.grad_input", SigmoidBackward, kFloatingMask, kSame, false, false, false)
FL_CPU_BINARY_ENTRY(silu_backward_out, "aten::silu_backward.grad_input", SiluBackward, kFloatingMask, kSame, false, false, false)
#undef FL_CPU_BINARY_ENTRY

// div.out_mode / div.Scalar_mode_out: rounding_mode None (true division), "trunc", "floor".
template <bool ScalarOther>
void div_mode_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  std::string mode;
  if (!args.is_none(2)) {
    const fl_value& v = args.at(2);
    if (v.kind != FL_VALUE_STRING || v.u.str == nullptr) invalid(op, "rounding_mode is not a string");
    mode = v.u.str;
  }
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  std::optional<ScalarOperand> scalar_other;
  TensorDesc tensor_other;
  const TensorDesc* other = nullptr;
  if constexpr (ScalarOther) {
    scalar_other.emplace(args, 1, op);
    other = &scalar_other->desc();
  } else {
    tensor_other = describe(args.tensor(1), op);
    other = &tensor_other;
  }
  if (mode.empty()) {
    launch_pointwise(call, op, out, {&self, other}, {&self, other},
                     &select_kernel<fn::Div, 2, kFloatingMask>, Promotion::kIntToFloat, {}, kOpmathOther<fn::Div>);
  } else if (mode == "trunc") {
    launch_pointwise(call, op, out, {&self, other}, {&self, other},
                     &select_kernel<fn::DivTrunc, 2, kArithmeticMask>, Promotion::kSame, {},
                     kOpmathOther<fn::DivTrunc>);  // (see DivTrunc)
  } else if (mode == "floor") {
    launch_pointwise(call, op, out, {&self, other}, {&self, other},
                     &select_kernel<fn::DivFloor, 2, kArithmeticMask>, Promotion::kSame, {},
                     kOpmathOther<fn::DivFloor>);
  } else {
    invalid(op, "rounding_mode must be None, 'trunc' or 'floor', got '" + mode + "'");
  }
}

void div_out_mode(const fl_kernel_call* call) { div_mode_body<false>(call, "aten::div.out_mode"); }
void div_scalar_mode_out(const fl_kernel_call* call) {
  div_mode_body<true>(call, "aten::div.Scalar_mode_out");
}

// threshold_backward.grad_input(grad_output, self, Scalar threshold)
void threshold_backward_out(const fl_kernel_call* call) {
  const char* op = "aten::threshold_backward.grad_input";
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc self = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&grad, &self}, {&grad, &self},
                   &select_kernel<fn::ThresholdBackward, 2, kArithmeticMask>, Promotion::kSame,
                   {param_arg(args, 2)});
}

// gelu_backward.grad_input(grad_output, self, *, approximate)
void gelu_backward_out(const fl_kernel_call* call) {
  const char* op = "aten::gelu_backward.grad_input";
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc self = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&grad, &self}, {&grad, &self},
                   &select_kernel<fn::GeluBackward, 2, kFloatingMask>, Promotion::kSame,
                   {param_int(gelu_approximation(args, 2))});
}

}  // namespace

void register_pointwise_kernels(KernelRegistry& r) {
  constexpr uint32_t f = kPointwiseFlags;
  r.add("aten::sqrt.out", kArithmeticMask | bit(FL_DTYPE_BOOL), f, guarded<sqrt_out>);
  r.add("aten::rsqrt.out", kAllMask, f, guarded<rsqrt_out>);
  r.add("aten::neg.out", kArithmeticMask, f, guarded<neg_out>);
  r.add("aten::exp.out", kAllMask, f, guarded<exp_out>);
  r.add("aten::log.out", kAllMask, f, guarded<log_out>);
  r.add("aten::abs.out", kAllMask, f, guarded<abs_out>);
  r.add("aten::tanh.out", kAllMask, f, guarded<tanh_out>);
  r.add("aten::sigmoid.out", kAllMask, f, guarded<sigmoid_out>);
  r.add("aten::relu.out", kArithmeticMask, f, guarded<relu_out>);
  r.add("aten::reciprocal.out", kAllMask, f, guarded<reciprocal_out>);
  r.add("aten::silu.out", kFloatingMask, f, guarded<silu_out>);
  r.add("aten::pow.Tensor_Scalar_out", kFloatingMask, f, guarded<pow_tensor_scalar_out>);
  r.add("aten::pow.Tensor_Tensor_out", kFloatingMask, f, guarded<pow_tensor_tensor_out>);
  r.add("aten::gelu.out", kFloatingMask, f, guarded<gelu_out>);
  r.add("aten::add.out", kAllMask, f, guarded<add_out>);
  r.add("aten::add.Scalar_out", kAllMask, f, guarded<add_scalar_out>);
  r.add("aten::sub.out", kArithmeticMask, f, guarded<sub_out>);
  r.add("aten::sub.Scalar_out", kArithmeticMask, f, guarded<sub_scalar_out>);
  r.add("aten::mul.out", kAllMask, f, guarded<mul_out>);
  r.add("aten::mul.Scalar_out", kAllMask, f, guarded<mul_scalar_out>);
  r.add("aten::div.out", kAllMask, f, guarded<div_out>);
  r.add("aten::div.Scalar_out", kAllMask, f, guarded<div_scalar_out>);
  r.add("aten::div.out_mode", kArithmeticMask, f, guarded<div_out_mode>);
  r.add("aten::div.Scalar_mode_out", kArithmeticMask, f, guarded<div_scalar_mode_out>);
  r.add("aten::maximum.out", kAllMask, f, guarded<maximum_out>);
  r.add("aten::minimum.out", kAllMask, f, guarded<minimum_out>);
  r.add("aten::max.out", kAllMask, f, guarded<maximum_out>);
  r.add("aten::min.out", kAllMask, f, guarded<minimum_out>);
  r.add("aten::eq.Tensor_out", kAllMask, f, guarded<eq_tensor_out>);
  r.add("aten::ne.Tensor_out", kAllMask, f, guarded<ne_tensor_out>);
  r.add("aten::lt.Tensor_out", kAllMask, f, guarded<lt_tensor_out>);
  r.add("aten::le.Tensor_out", kAllMask, f, guarded<le_tensor_out>);
  r.add("aten::gt.Tensor_out", kAllMask, f, guarded<gt_tensor_out>);
  r.add("aten::ge.Tensor_out", kAllMask, f, guarded<ge_tensor_out>);
  r.add("aten::eq.Scalar_out", kAllMask, f, guarded<eq_scalar_out>);
  r.add("aten::ne.Scalar_out", kAllMask, f, guarded<ne_scalar_out>);
  r.add("aten::lt.Scalar_out", kAllMask, f, guarded<lt_scalar_out>);
  r.add("aten::le.Scalar_out", kAllMask, f, guarded<le_scalar_out>);
  r.add("aten::gt.Scalar_out", kAllMask, f, guarded<gt_scalar_out>);
  r.add("aten::ge.Scalar_out", kAllMask, f, guarded<ge_scalar_out>);
  r.add("aten::bitwise_not.out", kIntegralMask | bit(FL_DTYPE_BOOL), f, guarded<bitwise_not_out>);
  r.add("aten::isnan.out", kAllMask, f, guarded<isnan_out>);
  r.add("aten::isposinf.out", kAllMask, f, guarded<isposinf_out>);
  r.add("aten::isneginf.out", kAllMask, f, guarded<isneginf_out>);
  r.add("aten::logical_and.out", kAllMask, f, guarded<logical_and_out>);
  r.add("aten::logical_or.out", kAllMask, f, guarded<logical_or_out>);
  r.add("aten::logical_xor.out", kAllMask, f, guarded<logical_xor_out>);
  r.add("aten::threshold_backward.grad_input", kArithmeticMask, f, guarded<threshold_backward_out>);
  r.add("aten::tanh_backward.grad_input", kFloatingMask, f, guarded<tanh_backward_out>);
  r.add("aten::sigmoid_backward.grad_input", kFloatingMask, f, guarded<sigmoid_backward_out>);
  r.add("aten::silu_backward.grad_input", kFloatingMask, f, guarded<silu_backward_out>);
  r.add("aten::gelu_backward.grad_input", kFloatingMask, f, guarded<gelu_backward_out>);
}

}  // namespace fl::cpu::kernels
