// elementwise_math.cu — sin, cos, erf, expm1, log1p, sign; the rounding ops floor, ceil, round
// (ties to even), trunc, the identity on integers as in ATen; bitwise and/or/xor of integers
// and bools. Formulas follow ATen's CUDA kernels; the float types compute in float (16-bit
// storage included) or double.
#include "elementwise.cuh"
#include "kernels.hpp"
#include "kernel_glue.hpp"

namespace fl::cuda {
namespace {

#define FL_CUDA_FLOAT_UNARY(NAME, EXPR)                       \
  template <class C> struct NAME : FloatOnly {                \
    explicit NAME(const OpParams&) {}                         \
    __device__ C operator()(C a) const { return EXPR; }       \
  };
FL_CUDA_FLOAT_UNARY(SinOp, dmath::sin_(a))
FL_CUDA_FLOAT_UNARY(CosOp, dmath::cos_(a))
FL_CUDA_FLOAT_UNARY(ErfOp, dmath::erf_(a))
FL_CUDA_FLOAT_UNARY(Expm1Op, dmath::expm1_(a))
FL_CUDA_FLOAT_UNARY(Log1pOp, dmath::log1p_(a))
#undef FL_CUDA_FLOAT_UNARY

// Integers pass through unchanged (their compute kind is Int).
#define FL_CUDA_ROUNDING(NAME, EXPR)                          \
  template <class C> struct NAME : OpTraits {                 \
    explicit NAME(const OpParams&) {}                         \
    __device__ C operator()(C a) const {                      \
      if constexpr (std::is_floating_point_v<C>) return EXPR; \
      else return a;                                          \
    }                                                         \
  };
FL_CUDA_ROUNDING(FloorOp, dmath::floor_(a))
FL_CUDA_ROUNDING(CeilOp, dmath::ceil_(a))
FL_CUDA_ROUNDING(RoundOp, dmath::nearbyint_(a))
FL_CUDA_ROUNDING(TruncOp, dmath::trunc_(a))
#undef FL_CUDA_ROUNDING

// c10::signum: (0 < a) - (a < 0) (NaN and both zeros give +0); integers and bools (as 0/1,
// stored back as bool: the identity) alike.
template <class C> struct SignOp : OpTraits {
  explicit SignOp(const OpParams&) {}
  __device__ C operator()(C a) const { return C(static_cast<int>(C(0) < a) - static_cast<int>(a < C(0))); }
};

// mode 0 and, 1 or, 2 xor; on int64 values (bools arrive as 0/1 and are stored back as bools).
template <class C> struct BitwiseOp : OpTraits {
  int mode;
  explicit BitwiseOp(const OpParams& q) : mode(q.mode) {}
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return mode == 0 ? C(a & b) : mode == 1 ? C(a | b) : C(a ^ b);
    else return a;  // not reached: the entry refuses floating operands
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

// Integer and bool operands only (a Scalar `other` must be integral or bool too).
fl_status_t run_bitwise(const fl_kernel_call* call, int mode, const char* name) {
  return plugin::guard([&] {
    Args a(call);
    const fl_value& other = a.at(1);
    const bool float_operand = is_floating_dtype(a.tensor(0).dtype) || is_floating_dtype(a.output(0).dtype) ||
                               other.kind == FL_VALUE_DOUBLE ||
                               (other.kind == FL_VALUE_TENSOR && other.u.tensor != nullptr &&
                                is_floating_dtype(other.u.tensor->dtype));
    if (float_operand) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": floating operands");
    OpParams q;
    q.mode = mode;
    return run_op<BitwiseOp, 2>(call, name, q);
  });
}

}  // namespace

FL_CUDA_KERNEL(k_sin_out) { return run_op<SinOp, 1>(call, "aten::sin", {}); }
FL_CUDA_KERNEL(k_cos_out) { return run_op<CosOp, 1>(call, "aten::cos", {}); }
FL_CUDA_KERNEL(k_erf_out) { return run_op<ErfOp, 1>(call, "aten::erf", {}); }
FL_CUDA_KERNEL(k_expm1_out) { return run_op<Expm1Op, 1>(call, "aten::expm1", {}); }
FL_CUDA_KERNEL(k_log1p_out) { return run_op<Log1pOp, 1>(call, "aten::log1p", {}); }
FL_CUDA_KERNEL(k_floor_out) { return run_op<FloorOp, 1>(call, "aten::floor", {}); }
FL_CUDA_KERNEL(k_ceil_out) { return run_op<CeilOp, 1>(call, "aten::ceil", {}); }
FL_CUDA_KERNEL(k_round_out) { return run_op<RoundOp, 1>(call, "aten::round", {}); }
FL_CUDA_KERNEL(k_trunc_out) { return run_op<TruncOp, 1>(call, "aten::trunc", {}); }
FL_CUDA_KERNEL(k_sign_out) { return run_op<SignOp, 1>(call, "aten::sign", {}); }
// bitwise_<op>.Tensor_out(self, other) and .Scalar_out(self, Scalar other)
FL_CUDA_KERNEL(k_bitwise_and_out) { return run_bitwise(call, 0, "aten::bitwise_and"); }
FL_CUDA_KERNEL(k_bitwise_or_out) { return run_bitwise(call, 1, "aten::bitwise_or"); }
FL_CUDA_KERNEL(k_bitwise_xor_out) { return run_bitwise(call, 2, "aten::bitwise_xor"); }

}  // namespace fl::cuda
