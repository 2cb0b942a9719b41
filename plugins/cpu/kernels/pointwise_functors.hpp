// pointwise_functors.hpp — the scalar math of the elementwise kernels. Each functor is built
// from the plan's params and called with values of the compute type C (float for the 16-bit
// floats, as ATen's opmath). Formulas follow ATen's CPU kernels, but for addcdiv (below).
#pragma once

#include "elementwise_engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace fl::cpu::kernels::fn {

template <class C> constexpr bool kFloat = std::is_floating_point_v<C>;

// a * b + c. For the float types one rounding (std::fma), as ATen's CPU kernels compute add
// with alpha, addcmul and lerp (vectorised fmadd) and as the CUDA plugin computes them
// (plugins/cuda/dtype_convert.cuh's fma_): replicas of one model on ranks of the two plugins
// then take bit-identical optimizer steps (SGD's add, Adam's lerp, addcmul and addcdiv; for
// addcdiv that is ATen's CUDA form, fma(value, t1 / t2, self), where torch's CPU computes
// self + value * t1 / t2). Lerp with a weight of 0.5 or more is fma(-(end - self), 1 - weight,
// end), ATen's CUDA form: torch's CPU (fma(weight - 1, ...)) differs only in the sign of a zero
// result. Exact for the integer types.
template <class C>
inline C mul_add(C a, C b, C c) {
  if constexpr (kFloat<C>) return std::fma(a, b, c);
  else return static_cast<C>(a * b + c);
}

template <class C>
inline bool is_nan(C v) {
  if constexpr (kFloat<C>) return std::isnan(v);
  else return false;
}

#define FL_CPU_UNARY(NAME, EXPR)                          \
  template <class C>                                      \
  struct NAME {                                           \
    explicit NAME(const Param*) {}                        \
    C operator()(C a) const { return static_cast<C>(EXPR); } \
  };

FL_CPU_UNARY(Identity, a)
FL_CPU_UNARY(Sqrt, std::sqrt(a))
FL_CPU_UNARY(Rsqrt, C(1) / std::sqrt(a))
FL_CPU_UNARY(Neg, -a)
FL_CPU_UNARY(Exp, std::exp(a))
FL_CPU_UNARY(Log, std::log(a))
FL_CPU_UNARY(Tanh, std::tanh(a))
FL_CPU_UNARY(Sigmoid, C(1) / (C(1) + std::exp(-a)))
FL_CPU_UNARY(Reciprocal, C(1) / a)
FL_CPU_UNARY(Silu, a / (C(1) + std::exp(-a)))
// relu keeps NaN (ATen's clamp_min(0)).
FL_CPU_UNARY(Relu, (a > C(0) || is_nan(a)) ? a : C(0))
FL_CPU_UNARY(Sin, std::sin(a))
FL_CPU_UNARY(Cos, std::cos(a))
FL_CPU_UNARY(Erf, std::erf(a))
FL_CPU_UNARY(Expm1, std::expm1(a))
FL_CPU_UNARY(Log1p, std::log1p(a))
#undef FL_CPU_UNARY

// sign: (0 < a) - (a < 0) (NaN and both zeros give +0, as c10::signum); bool: the identity.
template <class C>
struct Sign {
  explicit Sign(const Param*) {}
  C operator()(C a) const {
    if constexpr (std::is_same_v<C, bool>) return a;
    else return static_cast<C>(static_cast<int>(C(0) < a) - static_cast<int>(a < C(0)));
  }
};

// Rounding to an integral value: the identity on integers (ATen copies them); round is to
// nearest, ties to even (std::nearbyint in the default mode, as ATen's CPU kernel).
#define FL_CPU_ROUNDING(NAME, EXPR)                              \
  template <class C>                                             \
  struct NAME {                                                  \
    explicit NAME(const Param*) {}                               \
    C operator()(C a) const {                                    \
      if constexpr (kFloat<C>) return EXPR;                      \
      else return a;                                             \
    }                                                            \
  };
FL_CPU_ROUNDING(Floor, std::floor(a))
FL_CPU_ROUNDING(Ceil, std::ceil(a))
FL_CPU_ROUNDING(Round, std::nearbyint(a))
FL_CPU_ROUNDING(Trunc, std::trunc(a))
#undef FL_CPU_ROUNDING

template <class C>
struct Abs {
  explicit Abs(const Param*) {}
  C operator()(C a) const {
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>) return a;
    else if constexpr (kFloat<C>) return std::fabs(a);
    else return static_cast<C>(a < 0 ? -a : a);
  }
};

template <class C>
struct PowScalar {
  C e;
  explicit PowScalar(const Param* p) : e(param_as<C>(p[0])) {}
  C operator()(C a) const {
    if (e == C(2)) return a * a;
    if (e == C(0.5)) return std::sqrt(a);
    if (e == C(1)) return a;
    if (e == C(-1)) return C(1) / a;
    return std::pow(a, e);
  }
};

// params[0]: 0 = exact erf form, 1 = tanh approximation.
template <class C>
struct Gelu {
  bool tanh_form;
  explicit Gelu(const Param* p) : tanh_form(p[0].i != 0) {}
  C operator()(C x) const {
    if (tanh_form) {
      const C k_beta = C(M_SQRT2 * M_2_SQRTPI * 0.5);
      const C k_kappa = C(0.044715);
      C inner = k_beta * (x + k_kappa * x * x * x);
      return C(0.5) * x * (C(1) + std::tanh(inner));
    }
    return x * C(0.5) * (C(1) + std::erf(x * C(M_SQRT1_2)));
  }
};

// ---- binary ----------------------------------------------------------------------------

template <class C>
struct Add {
  C alpha;
  explicit Add(const Param* p) : alpha(param_as<C>(p[0])) {}
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) return a || (alpha && b);
    else if (alpha == C(1)) return static_cast<C>(a + b);  // the common case, no fma call
    else return mul_add(alpha, b, a);
  }
};

template <class C>
struct Sub {
  C alpha;
  explicit Sub(const Param* p) : alpha(param_as<C>(p[0])) {}
  C operator()(C a, C b) const {
    if (alpha == C(1)) return static_cast<C>(a - b);
    return mul_add(static_cast<C>(-alpha), b, a);
  }
};

template <class C>
struct Mul {
  explicit Mul(const Param*) {}
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) return a && b;
    else return static_cast<C>(a * b);
  }
};

template <class C>
struct Div {
  explicit Div(const Param*) {}
  C operator()(C a, C b) const { return a / b; }
};

template <class C>
inline void check_integer_divisor(C b) {
  if constexpr (!kFloat<C>)
    if (b == C(0)) throw std::runtime_error("ZeroDivisionError: integer division by zero");
}

template <class C>
struct DivTrunc {
  explicit DivTrunc(const Param*) {}
  // By a single value of a 16-bit float op (contiguous_kernel_opmath_b), and for the other
  // dtypes: the float quotient, truncated.
  C operator()(C a, C b) const {
    if constexpr (kFloat<C>) {
      return std::trunc(a / b);
    } else {
      check_integer_divisor(b);
      return static_cast<C>(a / b);
    }
  }
  // By a tensor (the contiguous loop calls this when the functor has it). For the 16-bit
  // floats, ATen's CPU kernel (Vectorized<BFloat16>'s operator/, c10's BFloat16 / BFloat16 in
  // its scalar loop) rounds the quotient to the storage type before truncating: bf16
  // 1.3984375 / -0.10009765625 is -13.97 in float, -14 in bf16, so -14 (the float quotient
  // gives -13). By a single value (TensorIterator's is_scalar) it truncates the float quotient.
  template <class S>
  C in_storage(C a, C b) const {
    if constexpr (kFloat<C>) return std::trunc(convert<C>(convert<S>(a / b)));
    else return (*this)(a, b);
  }
};

template <class C>
struct DivFloor {
  explicit DivFloor(const Param*) {}
  C operator()(C a, C b) const {
    if constexpr (kFloat<C>) {  // ATen's div_floor_floating
      if (b == C(0)) return a / b;
      C mod = std::fmod(a, b);
      C div = (a - mod) / b;
      if (mod != C(0) && (b < C(0)) != (mod < C(0))) div -= C(1);
      if (div != C(0)) {
        C floordiv = std::floor(div);
        if (div - floordiv > C(0.5)) floordiv += C(1);
        return floordiv;
      }
      return std::copysign(C(0), a / b);
    } else {
      check_integer_divisor(b);
      C q = static_cast<C>(a / b);
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return q;
    }
  }
  // By a tensor (the contiguous loop calls this when the functor has it): ATen's CPU kernel
  // runs div_floor_floating_vec on Vectorized<S>, whose every operation rounds to S (for
  // bfloat16/half: each of the quotient, a - mod, (a - mod) / b, div - 1, div - floor, floor + 1),
  // and which takes a itself for a - mod where a / b overflows. The float formula above
  // differed from torch's CPU in 1.4% of bfloat16 quotients of randn*8 by randn*0.5.
  template <class S>
  C in_storage(C a, C b) const {
    if constexpr (kFloat<C>) {
      const auto r = [](C x) { return convert<C>(convert<S>(x)); };
      const C basic_div = r(a / b);
      if (b == C(0)) return basic_div;
      const C mod = r(std::fmod(a, b));
      const C inf = std::numeric_limits<C>::infinity();
      const C floor = std::abs(basic_div) == inf && std::abs(a) != inf ? a : r(a - mod);
      C div = r(floor / b);
      if (mod != C(0) && (b < C(0)) != (mod < C(0))) div = r(div - C(1));
      if (div == C(0)) return std::copysign(C(0), basic_div);
      C floordiv = std::floor(div);
      if (r(div - floordiv) > C(0.5)) floordiv = r(floordiv + C(1));
      return floordiv;
    } else {
      return (*this)(a, b);
    }
  }
};

template <class C>
struct Maximum {
  explicit Maximum(const Param*) {}
  C operator()(C a, C b) const {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return a > b ? a : b;
  }
};

template <class C>
struct Minimum {
  explicit Minimum(const Param*) {}
  C operator()(C a, C b) const {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return a < b ? a : b;
  }
};

template <class C>
struct PowTensor {
  explicit PowTensor(const Param*) {}
  C operator()(C a, C b) const { return std::pow(a, b); }
};

#define FL_CPU_COMPARE(NAME, OP)                       \
  template <class C>                                   \
  struct NAME {                                        \
    explicit NAME(const Param*) {}                     \
    bool operator()(C a, C b) const { return a OP b; } \
  };
FL_CPU_COMPARE(Eq, ==)
FL_CPU_COMPARE(Ne, !=)
FL_CPU_COMPARE(Lt, <)
FL_CPU_COMPARE(Le, <=)
FL_CPU_COMPARE(Gt, >)
FL_CPU_COMPARE(Ge, >=)
#undef FL_CPU_COMPARE

// Predicates of one value (bool out): integers are never NaN or infinite.
#define FL_CPU_PREDICATE(NAME, EXPR)                   \
  template <class C>                                   \
  struct NAME {                                        \
    explicit NAME(const Param*) {}                     \
    bool operator()(C a) const {                       \
      if constexpr (kFloat<C>) return EXPR;            \
      else return static_cast<void>(a), false;         \
    }                                                  \
  };
FL_CPU_PREDICATE(IsNan, std::isnan(a))
FL_CPU_PREDICATE(IsPosInf, a == std::numeric_limits<C>::infinity())
FL_CPU_PREDICATE(IsNegInf, a == -std::numeric_limits<C>::infinity())
#undef FL_CPU_PREDICATE

// bitwise_not: ~a for integers, logical not for bool.
template <class C>
struct BitwiseNot {
  explicit BitwiseNot(const Param*) {}
  C operator()(C a) const {
    if constexpr (std::is_same_v<C, bool>) return !a;
    else if constexpr (std::is_integral_v<C>) return static_cast<C>(~a);
    else return a;  // not reached: the entry takes integer and bool dtypes only
  }
};

// Bitwise and/or/xor of integers; for bool the logical form (the entries take integer and
// bool dtypes only).
#define FL_CPU_BITWISE(NAME, OP)                                  \
  template <class C>                                              \
  struct NAME {                                                   \
    explicit NAME(const Param*) {}                                \
    C operator()(C a, C b) const {                                \
      if constexpr (std::is_integral_v<C>) return static_cast<C>(a OP b); \
      else return a;  /* not reached */                           \
    }                                                             \
  };
FL_CPU_BITWISE(BitwiseAnd, &)
FL_CPU_BITWISE(BitwiseOr, |)
FL_CPU_BITWISE(BitwiseXor, ^)
#undef FL_CPU_BITWISE

// logical_not (bool out): true where the value is zero (NaN is non-zero).
template <class C>
struct LogicalNot {
  explicit LogicalNot(const Param*) {}
  bool operator()(C a) const { return a == C(0); }
};

// Logical ops (bool out): a value is true when non-zero, NaN included.
#define FL_CPU_LOGICAL(NAME, OP)                                          \
  template <class C>                                                      \
  struct NAME {                                                           \
    explicit NAME(const Param*) {}                                        \
    bool operator()(C a, C b) const { return (a != C(0)) OP (b != C(0)); } \
  };
FL_CPU_LOGICAL(LogicalAnd, &&)
FL_CPU_LOGICAL(LogicalOr, ||)
FL_CPU_LOGICAL(LogicalXor, !=)
#undef FL_CPU_LOGICAL

// ---- backward ops: (grad, saved) -------------------------------------------------------

template <class C>
struct ThresholdBackward {
  C threshold;
  explicit ThresholdBackward(const Param* p) : threshold(param_as<C>(p[0])) {}
  C operator()(C grad, C x) const { return x <= threshold ? C(0) : grad; }
};

template <class C>
struct TanhBackward {
  explicit TanhBackward(const Param*) {}
  C operator()(C grad, C y) const { return grad * (C(1) - y * y); }
};

template <class C>
struct SigmoidBackward {
  explicit SigmoidBackward(const Param*) {}
  C operator()(C grad, C y) const { return grad * (C(1) - y) * y; }
};

template <class C>
struct SiluBackward {
  explicit SiluBackward(const Param*) {}
  C operator()(C grad, C x) const {
    C s = C(1) / (C(1) + std::exp(-x));
    return grad * s * (C(1) + x * (C(1) - s));
  }
};

template <class C>
struct GeluBackward {
  bool tanh_form;
  explicit GeluBackward(const Param* p) : tanh_form(p[0].i != 0) {}
  C operator()(C dy, C x) const {
    if (tanh_form) {
      const C k_beta = C(M_SQRT2 * M_2_SQRTPI * 0.5);
      const C k_kappa = C(0.044715);
      C x_sq = x * x;
      C x_cube = x_sq * x;
      C inner = k_beta * (x + k_kappa * x_cube);
      C tanh_inner = std::tanh(inner);
      C left = C(0.5) * x;
      C right = C(1) + tanh_inner;
      C left_derivative = C(0.5) * right;
      C right_derivative = left * (C(1) - tanh_inner * tanh_inner) * k_beta * (C(1) + C(3) * k_kappa * x_sq);
      return dy * (left_derivative + right_derivative);
    }
    const C k_alpha = C(M_SQRT1_2);
    const C k_beta = C(M_2_SQRTPI * M_SQRT1_2 * 0.5);
    C cdf = C(0.5) * (C(1) + std::erf(x * k_alpha));
    C pdf = k_beta * std::exp(x * x * C(-0.5));
    return dy * (cdf + x * pdf);
  }
};

// ---- ternary and masked ----------------------------------------------------------------

template <class C>
inline C lerp(C self, C end, C weight) {
  const C diff = end - self;
  return std::abs(weight) < C(0.5) ? mul_add(weight, diff, self) : mul_add(-diff, C(1) - weight, end);
}

template <class C>
struct LerpScalar {
  C weight;
  explicit LerpScalar(const Param* p) : weight(param_as<C>(p[0])) {}
  C operator()(C a, C b) const { return lerp(a, b, weight); }
};

template <class C>
struct LerpTensor {
  explicit LerpTensor(const Param*) {}
  C operator()(C a, C b, C w) const { return lerp(a, b, w); }
};

template <class C>
struct Addcmul {
  C value;
  explicit Addcmul(const Param* p) : value(param_as<C>(p[0])) {}
  C operator()(C self, C t1, C t2) const { return mul_add(static_cast<C>(value * t1), t2, self); }
};

template <class C>
struct Addcdiv {
  C value;
  explicit Addcdiv(const Param* p) : value(param_as<C>(p[0])) {}
  C operator()(C self, C t1, C t2) const { return mul_add(value, static_cast<C>(t1 / t2), self); }
};

// (condition converted to C, self, other)
template <class C>
struct Where {
  explicit Where(const Param*) {}
  C operator()(C cond, C a, C b) const { return cond != C(0) ? a : b; }
};

// params: [0] min, [1] max, [2].i bit 0 = has min, bit 1 = has max.
template <class C>
struct Clamp {
  C lo, hi;
  bool has_lo, has_hi;
  explicit Clamp(const Param* p)
      : lo(param_as<C>(p[0])), hi(param_as<C>(p[1])), has_lo(p[2].i & 1), has_hi(p[2].i & 2) {}
  C operator()(C x) const {
    if (is_nan(x)) return x;
    if (has_lo && x < lo) x = lo;
    if (has_hi && x > hi) x = hi;
    return x;
  }
};

// Clamp with tensor bounds: (x, lo, hi); an absent bound arrives as x itself.
template <class C>
struct ClampTensor {
  explicit ClampTensor(const Param*) {}
  C operator()(C x, C lo, C hi) const {
    if (is_nan(x)) return x;
    if (is_nan(lo)) return lo;
    if (is_nan(hi)) return hi;
    C r = x < lo ? lo : x;
    return r > hi ? hi : r;
  }
};

// (self, mask converted to C) -> mask ? value : self
template <class C>
struct MaskedFillScalar {
  C value;
  explicit MaskedFillScalar(const Param* p) : value(param_as<C>(p[0])) {}
  C operator()(C a, C mask) const { return mask != C(0) ? value : a; }
};

template <class C>
struct MaskedFillTensor {
  explicit MaskedFillTensor(const Param*) {}
  C operator()(C a, C mask, C value) const { return mask != C(0) ? value : a; }
};

// dropout backward: grad * mask * scale
template <class C>
struct ScaledMask {
  C scale;
  explicit ScaledMask(const Param* p) : scale(param_as<C>(p[0])) {}
  C operator()(C grad, C mask) const { return grad * mask * scale; }
};

}  // namespace fl::cpu::kernels::fn

namespace fl::cpu::kernels {
// The ops whose math uses fn::mul_add (see kUsesFma in elementwise_engine.hpp).
template <> inline constexpr bool kUsesFma<fn::Add> = true;
template <> inline constexpr bool kUsesFma<fn::Sub> = true;
template <> inline constexpr bool kUsesFma<fn::LerpScalar> = true;
template <> inline constexpr bool kUsesFma<fn::LerpTensor> = true;
template <> inline constexpr bool kUsesFma<fn::Addcmul> = true;
template <> inline constexpr bool kUsesFma<fn::Addcdiv> = true;
}  // namespace fl::cpu::kernels
