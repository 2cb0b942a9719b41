// conv_cudnn_graph.hpp — the three convolution passes through cuDNN's graph API
// (cudnn-frontend), one execution plan built per shape, layout, dtype and flags and cached
// for the life of the plugin, so that a call costs one plan execution.
//
// Why: on the H200 (cuDNN 9.19) the legacy cudnnConvolution{Forward,BackwardData,
// BackwardFilter} path cost 0.6 ms (forward) and 1.2 ms (backward) of host time per call,
// with algorithms already cached (torch_fl.profile(device_time=True) on ResNet-50), which
// left the GPU waiting. PyTorch's own cuDNN convolutions use the frontend with a plan cache.
//
// Built when the cudnn-frontend headers are found (meson: FL_CUDNN_FRONTEND_ROOT, then the
// python's site-packages/include from the nvidia-cudnn-frontend wheel); without them, and for
// a configuration cuDNN offers no graph plan for, the caller takes the legacy path.
// FL_CUDA_CONV_API=legacy in the environment forces the legacy path (for comparisons).
#pragma once

#include "gpu_runtime.h"

#include <fl_abi.h>

#include <cstdint>

// cudnn.h's handle type, declared here so that this header stays free of cuDNN (the HIP
// plugin compiles every header of this directory).
typedef struct cudnnContext* cudnnHandle_t;

namespace fl::cuda {

enum class ConvGraphPass { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

// The operands in their forward roles, each a 4-D tensor packed in the call's layout:
// Forward reads x and w and writes y; BackwardData reads y (dy) and w and writes x (dx);
// BackwardFilter reads y (dy) and x and writes w (dw).
struct ConvGraphOperands {
  const fl_tensor* x;
  const fl_tensor* w;
  const fl_tensor* y;
};

struct ConvGraphParams {
  int pad[2];
  int stride[2];
  int dilation[2];
  bool precise;        // float32 without TF32
  bool deterministic;  // no engine with a non-deterministic note
};

// Runs the pass with a cached (or newly built) plan on `handle`'s stream, its workspace a
// stream-ordered allocation on `stream`. Returns false, having launched nothing, when graph
// plans are unavailable (not built in, FL_CUDA_CONV_API=legacy, or none for this
// configuration: remembered per configuration). Raises (plugin::raise) when a plan fails to
// execute. The caller serialises calls on one handle.
bool run_conv_graph(ConvGraphPass pass, int32_t device, cudnnHandle_t handle, const ConvGraphOperands& ops,
                    const ConvGraphParams& params, gpuStream_t stream);

// Drops every cached plan (at plugin shutdown, before the handles are destroyed).
void clear_conv_graphs();

}  // namespace fl::cuda
