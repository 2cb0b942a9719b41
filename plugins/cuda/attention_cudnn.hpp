// attention_cudnn.hpp — lifetime hook of the cuDNN state the fused-attention entries keep per
// device (attention_cudnn.cpp).
#pragma once

namespace fl::cuda {

// Drops every cached attention plan and destroys the attention cuDNN handles (called by
// shutdown).
void shutdown_attention();

}  // namespace fl::cuda
