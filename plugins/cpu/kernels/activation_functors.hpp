// activation_functors.hpp — the scalar math of leaky_relu, hardtanh, elu and softplus and of
// their backward ops, in the compute type C (float for the 16-bit floats). Formulas follow
// ATen's CPU kernels (aten/src/ATen/native/cpu/Activation.cpp): the same comparisons, so NaN
// and the boundary values take the same branch.
#pragma once

#include "elementwise_engine.hpp"

#include <algorithm>
#include <cmath>

namespace fl::cpu::kernels::fn {

// params: [0] negative_slope
template <class C>
struct LeakyRelu {
  C slope;
  explicit LeakyRelu(const Param* p) : slope(param_as<C>(p[0])) {}
  C operator()(C a) const { return a > C(0) ? a : static_cast<C>(a * slope); }
};

// (grad, self) -> grad where self > 0, else grad * negative_slope. params: [0] negative_slope
template <class C>
struct LeakyReluBackward {
  C slope;
  explicit LeakyReluBackward(const Param* p) : slope(param_as<C>(p[0])) {}
  C operator()(C grad, C x) const { return x > C(0) ? grad : static_cast<C>(grad * slope); }
};

// (grad, self) -> 0 where self is at or beyond a bound. params: [0] min_val, [1] max_val
template <class C>
struct HardtanhBackward {
  C lo, hi;
  explicit HardtanhBackward(const Param* p) : lo(param_as<C>(p[0])), hi(param_as<C>(p[1])) {}
  C operator()(C grad, C x) const { return (x <= lo || x >= hi) ? C(0) : grad; }
};

// params: [0] alpha, [1] scale, [2] input_scale
template <class C>
struct Elu {
  C negcoef, poscoef, negiptcoef;
  explicit Elu(const Param* p)
      : negcoef(param_as<C>(p[0]) * param_as<C>(p[1])), poscoef(param_as<C>(p[1])), negiptcoef(param_as<C>(p[2])) {}
  C operator()(C a) const { return a <= C(0) ? std::expm1(a * negiptcoef) * negcoef : a * poscoef; }
};

// (grad, self_or_result). params: [0] alpha, [1] scale, [2] input_scale, [3].i is_result
template <class C>
struct EluBackward {
  C negcoef, poscoef, negiptcoef;
  bool is_result;
  explicit EluBackward(const Param* p)
      : negcoef(param_as<C>(p[0]) * param_as<C>(p[1])),
        poscoef(param_as<C>(p[1])),
        negiptcoef(param_as<C>(p[2])),
        is_result(p[3].i != 0) {}
  C operator()(C grad, C b) const {
    if (!(b <= C(0))) return grad * poscoef;  // NaN takes this branch, as in ATen
    if (is_result) return grad * negiptcoef * (b + negcoef);
    return grad * negiptcoef * negcoef * std::exp(b * negiptcoef);
  }
};

// params: [0] beta, [1] threshold
template <class C>
struct Softplus {
  C beta, threshold;
  explicit Softplus(const Param* p) : beta(param_as<C>(p[0])), threshold(param_as<C>(p[1])) {}
  C operator()(C a) const { return (a * beta) > threshold ? a : std::log1p(std::exp(a * beta)) / beta; }
};

// (grad, self). params: [0] beta, [1] threshold
template <class C>
struct SoftplusBackward {
  C beta, threshold;
  explicit SoftplusBackward(const Param* p) : beta(param_as<C>(p[0])), threshold(param_as<C>(p[1])) {}
  C operator()(C grad, C x) const {
    const C z = std::exp(x * beta);
    return (x * beta) > threshold ? grad : grad * z / (z + C(1));
  }
};

// log_sigmoid_forward: output min(x, 0) - log1p(exp(-|x|)), buffer exp(-|x|) (ATen's CPU pair).
template <class C>
struct LogSigmoid {
  explicit LogSigmoid(const Param*) {}
  C operator()(C a) const { return std::min(C(0), a) - std::log1p(std::exp(-std::abs(a))); }
};

template <class C>
struct LogSigmoidBuffer {
  explicit LogSigmoidBuffer(const Param*) {}
  C operator()(C a) const { return std::exp(-std::abs(a)); }
};

// (grad, self): the derivative from self alone (as ATen's CUDA kernel; the buffer is not read).
template <class C>
struct LogSigmoidBackward {
  explicit LogSigmoidBackward(const Param*) {}
  C operator()(C grad, C a) const {
    const bool negative = a < C(0);
    const C z = std::exp(-std::abs(a));
    return ((negative ? C(1) : C(0)) - (negative ? C(1) : C(-1)) * (z / (C(1) + z))) * grad;
  }
};

}  // namespace fl::cpu::kernels::fn
