// fast_divmod.cuh — unsigned 32-bit division by a run-time constant as a multiply-high and a
// shift (the method of Granlund and Montgomery, as in ATen's IntDivider). Valid for
// dividends and divisors below 2^31.
#pragma once

#include "gpu_runtime.h"

#include <cstdint>

namespace fl::cuda {

struct FastDivmod {
  uint32_t divisor;
  uint32_t multiplier;
  uint32_t shift;
  __device__ __forceinline__ void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    const uint32_t t = __umulhi(n, multiplier);
    q = (t + n) >> shift;
    r = n - q * divisor;
  }
};

// divisor >= 1.
inline FastDivmod make_fast_divmod(uint32_t divisor) {
  FastDivmod f{};
  f.divisor = divisor;
  uint32_t shift = 0;
  while (shift < 32 && (uint64_t{1} << shift) < divisor) ++shift;
  f.shift = shift;
  f.multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  return f;
}

}  // namespace fl::cuda
