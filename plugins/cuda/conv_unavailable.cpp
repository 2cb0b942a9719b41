// conv_unavailable.cpp — built instead of conv_cudnn.cpp when meson found no cuDNN: the
// convolution entries stay in the table and answer FL_ERR_NOT_SUPPORTED, so the core falls
// back for them.
#include "conv_cudnn.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

namespace fl::cuda {

void shutdown_conv() {}

FL_CUDA_KERNEL(k_convolution) {
  (void)call;
  return plugin::fail(FL_ERR_NOT_SUPPORTED, "aten::convolution_overrideable: cuda plugin built without cuDNN");
}

FL_CUDA_KERNEL(k_convolution_backward) {
  (void)call;
  return plugin::fail(FL_ERR_NOT_SUPPORTED,
                      "aten::convolution_backward_overrideable: cuda plugin built without cuDNN");
}

}  // namespace fl::cuda
