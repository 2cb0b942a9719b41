// conv_cudnn.hpp — lifetime hook of the cuDNN state kept per device.
#pragma once

namespace fl::cuda {

// Destroys every cuDNN handle and cached algorithm choice (called by shutdown).
void shutdown_conv();

}  // namespace fl::cuda
