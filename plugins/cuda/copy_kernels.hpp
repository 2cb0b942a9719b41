// copy_kernels.hpp — the elementwise engine's copy, for library glue (GEMM, convolution)
// that must broadcast a bias into an output or make an operand dense.
#pragma once

#include "device_state.hpp"

#include <fl_abi.h>

#include <cstdint>
#include <vector>

namespace fl::cuda {

// dst = src, broadcast to dst's shape and converted to dst's dtype. Enqueued on ctx.stream.
void launch_broadcast_copy(const fl_tensor& src, const fl_tensor& dst, const LaunchContext& ctx);

// A contiguous tensor descriptor over `data`; get() points the view at this object's own
// shape and strides (call it after any copy or move).
struct DenseTensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  fl_tensor view{};
  const fl_tensor& get() {
    view.shape = shape.data();
    view.strides = strides.data();
    return view;
  }
};
DenseTensor make_dense(void* data, fl_dtype_t dtype, const std::vector<int64_t>& shape, int32_t device);

}  // namespace fl::cuda
