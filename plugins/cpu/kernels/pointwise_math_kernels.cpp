// pointwise_math_kernels.cpp — more elementwise math on the broadcasting engine: sin, cos,
// erf, expm1, log1p, sign; the rounding ops floor, ceil, round, trunc (the identity on integers, as
// ATen); logical_not; bitwise and/or/xor of integers and bools; pow with a Scalar base.
#include "kernel_table.hpp"
#include "pointwise_common.hpp"
#include "pointwise_functors.hpp"

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

FL_CPU_UNARY_ENTRY(sin_out, "aten::sin.out", Sin, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(cos_out, "aten::cos.out", Cos, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(erf_out, "aten::erf.out", Erf, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(expm1_out, "aten::expm1.out", Expm1, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(log1p_out, "aten::log1p.out", Log1p, kFloatingMask, kIntToFloat)
FL_CPU_UNARY_ENTRY(floor_out, "aten::floor.out", Floor, kArithmeticMask, kSame)
FL_CPU_UNARY_ENTRY(ceil_out, "aten::ceil.out", Ceil, kArithmeticMask, kSame)
FL_CPU_UNARY_ENTRY(round_out, "aten::round.out", Round, kArithmeticMask, kSame)
FL_CPU_UNARY_ENTRY(trunc_out, "aten::trunc.out", Trunc, kArithmeticMask, kSame)
FL_CPU_UNARY_ENTRY(sign_out, "aten::sign.out", Sign, kAllMask, kSame)

// logical_not.out(self): a bool output only (ATen also writes other dtypes: those fall back).
void logical_not_out(const fl_kernel_call* call) {
  const char* op = "aten::logical_not.out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&self}, {&self}, &select_kernel<fn::LogicalNot, 1, kAllMask, true>,
                   Promotion::kCompare);
}

// bitwise_<op>.Tensor_out(self, other) / .Scalar_out(self, Scalar other).
template <template <class> class Op, bool ScalarOther>
void bitwise_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  constexpr KernelSelector select = &select_kernel<Op, 2, kIntegralMask | bit(FL_DTYPE_BOOL)>;
  if constexpr (ScalarOther) {
    ScalarOperand other(args, 1, op);
    launch_pointwise(call, op, out, {&self, &other.desc()}, {&self, &other.desc()}, select, Promotion::kSame);
  } else {
    TensorDesc other = describe(args.tensor(1), op);
    launch_pointwise(call, op, out, {&self, &other}, {&self, &other}, select, Promotion::kSame);
  }
}

void bitwise_and_out(const fl_kernel_call* c) { bitwise_body<fn::BitwiseAnd, false>(c, "aten::bitwise_and.Tensor_out"); }
void bitwise_or_out(const fl_kernel_call* c) { bitwise_body<fn::BitwiseOr, false>(c, "aten::bitwise_or.Tensor_out"); }
void bitwise_xor_out(const fl_kernel_call* c) { bitwise_body<fn::BitwiseXor, false>(c, "aten::bitwise_xor.Tensor_out"); }
void bitwise_and_scalar_out(const fl_kernel_call* c) {
  bitwise_body<fn::BitwiseAnd, true>(c, "aten::bitwise_and.Scalar_out");
}
void bitwise_or_scalar_out(const fl_kernel_call* c) {
  bitwise_body<fn::BitwiseOr, true>(c, "aten::bitwise_or.Scalar_out");
}
void bitwise_xor_scalar_out(const fl_kernel_call* c) {
  bitwise_body<fn::BitwiseXor, true>(c, "aten::bitwise_xor.Scalar_out");
}

// pow.Scalar_out(Scalar self, Tensor exponent): a floating result only (e.g. the rotary
// embedding's 10000 ** (arange / d)); integer powers are declined.
void pow_scalar_out(const fl_kernel_call* call) {
  const char* op = "aten::pow.Scalar_out";
  Args args(call);
  ScalarOperand base(args, 0, op);
  TensorDesc exponent = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&base.desc(), &exponent}, {&base.desc(), &exponent},
                   &select_kernel<fn::PowTensor, 2, kFloatingMask>, Promotion::kSame);
}

}  // namespace

void register_pointwise_math_kernels(KernelRegistry& r) {
  constexpr uint32_t f = kPointwiseFlags;
  r.add("aten::sin.out", kAllMask, f, guarded<sin_out>);
  r.add("aten::cos.out", kAllMask, f, guarded<cos_out>);
  r.add("aten::erf.out", kAllMask, f, guarded<erf_out>);
  r.add("aten::expm1.out", kAllMask, f, guarded<expm1_out>);
  r.add("aten::log1p.out", kAllMask, f, guarded<log1p_out>);
  r.add("aten::floor.out", kArithmeticMask, f, guarded<floor_out>);
  r.add("aten::ceil.out", kArithmeticMask, f, guarded<ceil_out>);
  r.add("aten::round.out", kArithmeticMask, f, guarded<round_out>);
  r.add("aten::trunc.out", kArithmeticMask, f, guarded<trunc_out>);
  // sgn is sign for real dtypes (the plugin holds no complex ones): L1 losses' backward calls it
  r.add("aten::sign.out", kAllMask, f, guarded<sign_out>);
  r.add("aten::sgn.out", kAllMask, f, guarded<sign_out>);
  r.add("aten::logical_not.out", kAllMask, f, guarded<logical_not_out>);
  constexpr uint64_t kBitwise = kIntegralMask | bit(FL_DTYPE_BOOL);
  r.add("aten::bitwise_and.Tensor_out", kBitwise, f, guarded<bitwise_and_out>);
  r.add("aten::bitwise_or.Tensor_out", kBitwise, f, guarded<bitwise_or_out>);
  r.add("aten::bitwise_xor.Tensor_out", kBitwise, f, guarded<bitwise_xor_out>);
  r.add("aten::bitwise_and.Scalar_out", kBitwise, f, guarded<bitwise_and_scalar_out>);
  r.add("aten::bitwise_or.Scalar_out", kBitwise, f, guarded<bitwise_or_scalar_out>);
  r.add("aten::bitwise_xor.Scalar_out", kBitwise, f, guarded<bitwise_xor_scalar_out>);
  // Any exponent dtype: an integer exponent with a float base computes in float; integer
  // results are declined by the kernel.
  r.add("aten::pow.Scalar_out", kAllMask, f, guarded<pow_scalar_out>);
}

}  // namespace fl::cpu::kernels
