// attention_unavailable.cu — the fused-attention entries where there is no cuDNN: built
// instead of attention_cudnn.cpp when meson found no cuDNN, and by the HIP plugin (which
// compiles every *.cu of this directory and lists the shared kernel table). The entries stay
// in the table and answer FL_ERR_NOT_SUPPORTED, so the core computes attention with other
// kernels. Host code only; a .cu file so that the HIP build picks it up.
#include "attention_cudnn.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

namespace fl::cuda {

void shutdown_attention() {}

FL_CUDA_KERNEL(k_scaled_dot_product_fused_attention) {
  (void)call;
  return plugin::fail(FL_ERR_NOT_SUPPORTED,
                      "aten::_scaled_dot_product_fused_attention_overrideable: plugin built without cuDNN");
}

FL_CUDA_KERNEL(k_scaled_dot_product_fused_attention_backward) {
  (void)call;
  return plugin::fail(FL_ERR_NOT_SUPPORTED,
                      "aten::_scaled_dot_product_fused_attention_overrideable_backward: plugin built without cuDNN");
}

}  // namespace fl::cuda
