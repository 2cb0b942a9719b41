// reduce.hpp — the reduction engine's host entry, for other kernels that need a sum over
// dims (convolution bias gradients).
#pragma once

#include "device_state.hpp"

#include <fl_abi.h>

#include <vector>

namespace fl::cuda {

// out = in summed over `dims` (out holds the kept dims, in order, any size-1 dims allowed),
// accumulated in float for the half types. Enqueued on ctx.stream.
void launch_sum(const fl_tensor& in, const std::vector<int>& dims, const fl_tensor& out,
                const LaunchContext& ctx);

}  // namespace fl::cuda
