// generic_rms_norm.h — generic-tier kernels (see generic_kernels.h) for PyTorch's fused RMSNorm
// (`F.rms_norm` / `nn.RMSNorm` call `_fused_rms_norm`; its autograd formula calls
// `_fused_rms_norm_backward`), for a plugin without native entries. The binding routes
// `_fused_rms_norm` to the plugin although ATen has a composite for it (op_router.cpp), so that
// a plugin's one-pass kernel serves it; without one, these run instead:
//  - the forward is ATen's own composite (pow, mean, rsqrt and mul: what ran before);
//  - the backward, which ATen only has for CUDA and MPS, is the closed form below, computed in
//    the op-math type (float for the 16-bit floats) as the forward is.
#pragma once

#include "generic_kernels.h"

namespace fl::binding {

// _fused_rms_norm(input, normalized_shape, weight?, eps?) -> (output, rstd)
bool fused_rms_norm(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);
// _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight?, output_mask[2])
//   -> (grad_input, grad_weight)
bool fused_rms_norm_backward(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);

}  // namespace fl::binding
