// attention_cudnn_graph.hpp — fused scaled-dot-product attention, forward and backward, as
// cuDNN graph-API plans (cudnn-frontend Graph::sdpa / sdpa_backward), one plan built per
// shape, layout, dtype, mask and flags and cached (the 256 most recently used), so that a call
// costs one plan execution. A configuration cuDNN offers no plan for is remembered too, with
// cuDNN's reason, so it is not rebuilt at every call.
//
// Built when the cudnn-frontend headers are found (meson: FL_CUDNN_FRONTEND_ROOT, then the
// python's site-packages/include); without them every pass is declined.
#pragma once

#include "gpu_runtime.h"

#include <fl_abi.h>

#include <cstdint>
#include <string>

// cudnn.h's handle type, declared here so that this header stays free of cuDNN (the HIP
// plugin compiles every header of this directory).
typedef struct cudnnContext* cudnnHandle_t;

namespace fl::cuda {

enum class AttentionGraphPass { Forward = 0, Backward = 1 };

// One 4-D operand as cuDNN is given it: its device address and (B, H, L, D) sizes and
// element strides, already checked and normalised by the caller (attention_cudnn.cpp).
struct AttentionOperand {
  void* data = nullptr;
  int64_t dim[4] = {};
  int64_t stride[4] = {};
};

// Everything one pass reads and writes. Query [B,H,Lq,E], key [B,H,Lk,E], value [B,H,Lk,Ev],
// output [B,H,Lq,Ev]; stats is the logsumexp, [B,H,Lq] float32 contiguous.
// Forward: reads q, k, v (and bias), writes o and, when stats != nullptr, stats.
// Backward: reads q, k, v, o, stats, d_o (and bias), writes d_q, d_k, d_v. cuDNN writes all
// three gradients: one the caller does not want has data == nullptr (and packed strides) and
// goes to scratch memory.
struct AttentionGraphCall {
  AttentionGraphPass pass = AttentionGraphPass::Forward;
  fl_dtype_t dtype = FL_DTYPE_FLOAT16;  // float16 or bfloat16, every operand but stats
  float scale = 1.0f;                   // multiplies q·k before the bias and the mask
  bool causal = false;                  // key j masked for query i when j > i (top-left)
  bool deterministic = false;           // only engines without a non-deterministic note
  AttentionOperand q, k, v, o;
  bool has_bias = false;
  AttentionOperand bias;                // added to the scaled scores; dims of 1 broadcast
  void* stats = nullptr;
  AttentionOperand d_o, d_q, d_k, d_v;  // backward only
};

// Enqueues the pass with a cached (or newly built) plan on `handle`, whose stream the caller
// has set to `stream`; the plan's workspace (and the unwanted gradients) is one stream-ordered
// allocation on `stream`. With a bias, rows whose every key is masked get ATen's results
// (attention_masked_rows.hpp: one small kernel after the forward, one before the backward).
// Returns false, having launched nothing, when cuDNN offers no plan for this configuration
// (or the frontend was not built in), with the reason in *why_not. Raises (plugin::raise)
// when a plan fails to execute. The caller serialises calls on one handle.
bool run_attention_graph(int32_t device, cudnnHandle_t handle, const AttentionGraphCall& call, gpuStream_t stream,
                         std::string* why_not);

// Drops every cached plan (at plugin shutdown, before the handles are destroyed).
void clear_attention_graphs();

}  // namespace fl::cuda
