// philox.cuh — the Philox4x32-10 counter-based generator (Salmon et al., SC'11), the same
// algorithm as curand's Philox4_32_10, written out so kernels need no curand headers.
#pragma once

#include "gpu_runtime.h"

#include <cstdint>

namespace fl::cuda {

struct Philox4 {
  uint32_t x, y, z, w;
};

__device__ __forceinline__ Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(kM0, ctr.x), lo0 = kM0 * ctr.x;
    const uint32_t hi1 = __umulhi(kM1, ctr.z), lo1 = kM1 * ctr.z;
    ctr = Philox4{hi1 ^ ctr.y ^ key0, lo1, hi0 ^ ctr.w ^ key1, lo0};
    key0 += kW0;
    key1 += kW1;
  }
  return ctr;
}

// Uniform float in [0, 1) from the top 24 bits.
__device__ __forceinline__ float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

}  // namespace fl::cuda
