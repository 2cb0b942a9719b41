// blas_handles.hpp — lifetime hooks of the cuBLAS state kept per device (handle, and a
// 32 MiB workspace per stream that has run a GEMM).
#pragma once

#include "gpu_runtime.h"

#include <cstdint>

namespace fl::cuda {

// Frees the workspace of `stream` (called by stream_destroy after the stream is idle).
void release_stream_blas_workspace(int32_t device, gpuStream_t stream);
// Destroys every handle and workspace (called by shutdown).
void shutdown_blas();

}  // namespace fl::cuda
