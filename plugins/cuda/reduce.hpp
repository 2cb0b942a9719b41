// reduce.hpp — the reduction engine's host entries, for other kernels that need a sum or a
// mean over dims (convolution bias gradients, mse_loss).
#pragma once

#include "device_state.hpp"

#include <fl_abi.h>

#include <vector>

namespace fl::cuda {

// out = in summed over `dims` (out holds the kept dims, in order, any size-1 dims allowed),
// accumulated in float for the half types. Enqueued on ctx.stream.
void launch_sum(const fl_tensor& in, const std::vector<int>& dims, const fl_tensor& out,
                const LaunchContext& ctx);
// out = the mean of in over `dims`, accumulated as launch_sum's.
void launch_mean(const fl_tensor& in, const std::vector<int>& dims, const fl_tensor& out,
                 const LaunchContext& ctx);

}  // namespace fl::cuda
