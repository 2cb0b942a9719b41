// elementwise_arith.cu — add, sub, mul, div (true / trunc / floor), pow, lerp, addcmul,
// addcdiv: ATen semantics, computed in float for the half types (opmath), double for
// float64, int64 for the integer types where ATen allows integers.
#include "elementwise.cuh"
#include "kernels.hpp"
#include "kernel_glue.hpp"

namespace fl::cuda {
namespace {

using dmath::isnan_;

template <class C>
struct AddOp : OpTraits {
  C alpha;
  explicit AddOp(const OpParams& q) : alpha(static_cast<C>(q.a)) {}
  __device__ C operator()(C a, C b) const { return dmath::fma_(alpha, b, a); }
};

template <class C>
struct SubOp : OpTraits {
  C alpha;
  explicit SubOp(const OpParams& q) : alpha(static_cast<C>(q.a)) {}
  __device__ C operator()(C a, C b) const { return dmath::fma_(-alpha, b, a); }
};

template <class C>
struct MulOp : OpTraits {
  explicit MulOp(const OpParams&) {}
  __device__ C operator()(C a, C b) const { return a * b; }
};

template <class C>
struct DivTrueOp : FloatOnly {
  explicit DivTrueOp(const OpParams&) {}
  __device__ C operator()(C a, C b) const { return a / b; }
};

// `x` rounded to the 16-bit float type `storage` (FL_DTYPE_BFLOAT16 / FL_DTYPE_FLOAT16) and
// back, else `x`. ATen's CUDA div kernels compute some steps in the tensor's own type, and
// c10::Half/BFloat16 arithmetic rounds each result: these steps round alike here.
template <class C>
__device__ __forceinline__ C round_to_storage(C x, int storage) {
  if constexpr (std::is_same_v<C, float>) {
    if (storage == FL_DTYPE_BFLOAT16) return convert<float>(convert<gpu_bfloat16>(x));
    if (storage == FL_DTYPE_FLOAT16) return convert<float>(convert<gpu_half>(x));
  }
  return x;
}

// Integer division by zero gives 0 here (ATen raises); float division follows IEEE. For
// bfloat16/half the quotient is rounded to the dtype before it is truncated, as ATen's CUDA
// `std::trunc(a / b)` on scalar_t does (bf16 1.3984375 / -0.10009765625: -14, not -13).
template <class C>
struct DivTruncOp : OpTraits {
  int storage;
  explicit DivTruncOp(const OpParams& q) : storage(q.mode) {}
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) return dmath::trunc_(round_to_storage(a / b, storage));
    else return b == 0 ? C(0) : a / b;
  }
};

// The end of ATen's div_floor_floating, from div = (a - mod) / b (or (a - mod) * (1 / b)): one
// less where the remainder's sign differs from b's, then the floor, rounded up past .5; a zero
// takes the sign of the quotient (`quotient()`, computed only then). For bfloat16/half ATen's
// `floordiv` is of the tensor's type, so it is rounded where ATen's is.
template <class C, class Quotient>
__device__ __forceinline__ C floor_division(C div, C mod, C b, const Quotient& quotient, int storage) {
  if ((mod != C(0)) && ((b < C(0)) != (mod < C(0)))) div -= C(1);
  if (div == C(0)) return dmath::copysign_(C(0), quotient());
  C floordiv = round_to_storage(dmath::floor_(div), storage);
  if (div - floordiv > C(0.5)) floordiv = round_to_storage(floordiv + C(1), storage);
  return floordiv;
}

// ATen's div_floor_floating (floor_division).
template <class C>
struct DivFloorOp : OpTraits {
  int storage;
  explicit DivFloorOp(const OpParams& q) : storage(q.mode) {}
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (b == C(0)) return a / b;
      const C mod = dmath::fmod_(a, b);
      return floor_division((a - mod) / b, mod, b, [&] { return a / b; }, storage);
    } else {
      if (b == 0) return C(0);
      C q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
      return q;
    }
  }
};

// Division by a host scalar (a Python number, or a 0-dim CPU tensor) in a floating compute
// type: ATen's CUDA kernels multiply by its reciprocal, computed once in the op math type
// ("may lose one bit of precision compared to computing the division", BinaryDivTrueKernel.cu,
// BinaryDivTruncKernel.cu, BinaryDivFloorKernel.cu); these three do the same. q.a: the divisor;
// q.mode: the storage type for the rounding of DivFloorOp's steps.
template <class C>
struct DivTrueByScalarOp : FloatOnly {
  C inv;
  explicit DivTrueByScalarOp(const OpParams& q) : inv(C(1) / static_cast<C>(q.a)) {}
  __device__ C operator()(C a) const { return a * inv; }
};

template <class C>
struct DivTruncByScalarOp : FloatOnly {
  C inv;
  explicit DivTruncByScalarOp(const OpParams& q) : inv(C(1) / static_cast<C>(q.a)) {}
  __device__ C operator()(C a) const { return dmath::trunc_(a * inv); }
};

// The caller runs DivTrueByScalarOp for a zero divisor, as ATen does.
template <class C>
struct DivFloorByScalarOp : FloatOnly {
  C b, inv;
  int storage;
  explicit DivFloorByScalarOp(const OpParams& q)
      : b(static_cast<C>(q.a)), inv(C(1) / static_cast<C>(q.a)), storage(q.mode) {}
  __device__ C operator()(C a) const {
    const C mod = dmath::fmod_(a, b);
    return floor_division((a - mod) * inv, mod, b, [&] { return a * inv; }, storage);
  }
};

template <class C>
struct PowOp : FloatOnly {
  explicit PowOp(const OpParams&) {}
  __device__ C operator()(C a, C b) const { return dmath::pow_(a, b); }
};

// pow(x, scalar) with the common exponents done exactly as ATen's pow_tensor_scalar does.
template <class C>
struct PowScalarOp : FloatOnly {
  C e;
  int kind;  // 0 general, 1: e == 2, 2: e == 0.5, 3: e == -1, 4: e == 1, 5: e == 3, 6: e == -0.5, 7: e == -2
  explicit PowScalarOp(const OpParams& q) : e(static_cast<C>(q.a)), kind(q.mode) {}
  __device__ C operator()(C a) const {
    switch (kind) {
      case 1: return a * a;
      case 2: return dmath::sqrt_(a);
      case 3: return C(1) / a;
      case 4: return a;
      case 5: return a * a * a;
      case 6: return dmath::rsqrt_(a);
      case 7: return C(1) / (a * a);
      default: return dmath::pow_(a, e);
    }
  }
};

template <class C>
struct LerpOp : FloatOnly {
  explicit LerpOp(const OpParams&) {}
  __device__ C operator()(C self, C end, C w) const {
    const C diff = end - self;
    return dmath::abs_(w) < C(0.5) ? dmath::fma_(w, diff, self) : dmath::fma_(-diff, C(1) - w, end);
  }
};

template <class C>
struct AddcmulOp : OpTraits {
  C value;
  explicit AddcmulOp(const OpParams& q) : value(static_cast<C>(q.a)) {}
  __device__ C operator()(C self, C t1, C t2) const { return dmath::fma_(value * t1, t2, self); }
};

template <class C>
struct AddcdivOp : FloatOnly {
  C value;
  explicit AddcdivOp(const OpParams& q) : value(static_cast<C>(q.a)) {}
  __device__ C operator()(C self, C t1, C t2) const { return dmath::fma_(value, t1 / t2, self); }
};

double optional_number(const Args& a, int32_t i, double fallback) {
  return a.is_none(i) ? fallback : a.number(i);
}

template <template <class> class Op, int N>
fl_status_t run_arith(const fl_kernel_call* call, const char* name, const std::vector<int32_t>& inputs,
                      const OpParams& q) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    std::vector<ElementwiseInput> ins;
    for (int32_t i : inputs) ins.push_back(elementwise_input(a, i));
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    launch_elementwise<Op, N>(name, p, compute_kind_for(p, ins, true), q, ctx);
  });
}

// The storage type whose rounding the div functors copy: the output's, when it is a 16-bit
// float (ATen's scalar_t, the common dtype, which is the output's for div), else none (-1).
int sixteen_bit_storage(const fl_tensor& out) {
  return out.dtype == FL_DTYPE_BFLOAT16 || out.dtype == FL_DTYPE_FLOAT16 ? static_cast<int>(out.dtype) : -1;
}

// div(a, b) in rounding mode `mode` ("", "trunc", "floor"): by a host scalar b in a floating
// compute type as ATen's CUDA does (the reciprocal), else elementwise.
fl_status_t run_div(const fl_kernel_call* call, const std::string& mode) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const std::vector<ElementwiseInput> ins{elementwise_input(a, 0), elementwise_input(a, 1)};
    OpParams q;
    q.mode = sixteen_bit_storage(a.output(0));
    const ElementwiseOperands both = plan_elementwise(a.output(0), ins);
    const ComputeKind kind = compute_kind_for(both, ins, true);
    if (ins[1].tensor == nullptr && kind != ComputeKind::Int) {
      q.a = ins[1].scalar;
      const ElementwiseOperands p = plan_elementwise(a.output(0), {ins[0]});
      if (mode.empty() || (mode == "floor" && q.a == 0.0))
        launch_elementwise<DivTrueByScalarOp, 1>("aten::div", p, kind, q, ctx);
      else if (mode == "trunc")
        launch_elementwise<DivTruncByScalarOp, 1>("aten::div(trunc)", p, kind, q, ctx);
      else
        launch_elementwise<DivFloorByScalarOp, 1>("aten::div(floor)", p, kind, q, ctx);
      return;
    }
    if (mode.empty()) launch_elementwise<DivTrueOp, 2>("aten::div", both, kind, q, ctx);
    else if (mode == "trunc") launch_elementwise<DivTruncOp, 2>("aten::div(trunc)", both, kind, q, ctx);
    else launch_elementwise<DivFloorOp, 2>("aten::div(floor)", both, kind, q, ctx);
  });
}

OpParams params_a(double a) {
  OpParams q;
  q.a = a;
  return q;
}

}  // namespace

FL_CUDA_KERNEL(k_add_out) {
  return plugin::guard([&] {
    Args a(call);
    return run_arith<AddOp, 2>(call, "aten::add", {0, 1}, params_a(optional_number(a, 2, 1.0)));
  });
}

FL_CUDA_KERNEL(k_sub_out) {
  return plugin::guard([&] {
    Args a(call);
    return run_arith<SubOp, 2>(call, "aten::sub", {0, 1}, params_a(optional_number(a, 2, 1.0)));
  });
}

FL_CUDA_KERNEL(k_mul_out) { return run_arith<MulOp, 2>(call, "aten::mul", {0, 1}, OpParams{}); }

// div.out / div.Scalar_out (2 inputs) and div.out_mode / div.Scalar_mode_out (rounding_mode).
FL_CUDA_KERNEL(k_div_out) {
  return plugin::guard([&] {
    Args a(call);
    const std::string mode = a.size() > 2 ? optional_string(a, 2) : "";
    if (mode.empty() || mode == "trunc" || mode == "floor") return run_div(call, mode);
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "aten::div: rounding_mode '" + mode + "' is not trunc or floor");
  });
}

FL_CUDA_KERNEL(k_pow_tensor_scalar_out) {
  return plugin::guard([&] {
    Args a(call);
    const double e = a.number(1);
    OpParams q;
    q.a = e;
    q.mode = e == 2.0 ? 1 : e == 0.5 ? 2 : e == -1.0 ? 3 : e == 1.0 ? 4 : e == 3.0 ? 5 : e == -0.5 ? 6
           : e == -2.0 ? 7 : 0;
    return run_arith<PowScalarOp, 1>(call, "aten::pow.Tensor_Scalar", {0}, q);
  });
}

// pow.Tensor_Tensor_out(self, exponent) and pow.Scalar_out(Scalar self, exponent).
FL_CUDA_KERNEL(k_pow_out) { return run_arith<PowOp, 2>(call, "aten::pow", {0, 1}, OpParams{}); }

// lerp.Scalar_out (weight a Scalar) and lerp.Tensor_out (weight a tensor).
FL_CUDA_KERNEL(k_lerp_out) { return run_arith<LerpOp, 3>(call, "aten::lerp", {0, 1, 2}, OpParams{}); }

FL_CUDA_KERNEL(k_addcmul_out) {
  return plugin::guard([&] {
    Args a(call);
    return run_arith<AddcmulOp, 3>(call, "aten::addcmul", {0, 1, 2}, params_a(optional_number(a, 3, 1.0)));
  });
}

FL_CUDA_KERNEL(k_addcdiv_out) {
  return plugin::guard([&] {
    Args a(call);
    return run_arith<AddcdivOp, 3>(call, "aten::addcdiv", {0, 1, 2}, params_a(optional_number(a, 3, 1.0)));
  });
}

}  // namespace fl::cuda

namespace fl::cuda {

// out += addend (broadcast to out), in place; used for convolution bias.
void launch_add_inplace(const fl_tensor& out, const fl_tensor& addend, const LaunchContext& ctx) {
  ElementwiseInput self, other;
  self.tensor = &out;
  other.tensor = &addend;
  const std::vector<ElementwiseInput> ins = {self, other};
  const ElementwiseOperands p = plan_elementwise(out, ins);
  launch_elementwise<AddOp, 2>("add", p, compute_kind_for(p, ins, true), params_a(1.0), ctx);
}

}  // namespace fl::cuda
