// attention_decomposition.h — fused attention's forward and backward written as other ATen
// ops (matmul, logsumexp, exp, ...), each of which reaches the plugin's own kernels: the
// generic tier of the fused-attention entries, for a call the plugin's fused kernel declines.
// Same results as the entries' contract in abi/fl_abi.h (logsumexp included), in float for the
// 16-bit floats.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace fl::binding {

struct AttentionCall {
  at::Tensor query, key, value;  // [B,H,Lq,E], [B,H,Lk,E], [B,H,Lk,Ev]
  at::Tensor bias;               // [B,H,Lq,Lk] (expanded), or undefined
  bool causal = false;           // key j masked for query i when j > i
  double scale = 1.0;
};

// Writes output [B,H,Lq,Ev] and logsumexp [B,H,Lq] (float32).
void attention_forward_decomposed(const AttentionCall& call, const at::Tensor& output, const at::Tensor& logsumexp);

// Writes each defined gradient: grad_query/key/value shaped as query/key/value, grad_bias
// [B,H,Lq,Lk].
void attention_backward_decomposed(const AttentionCall& call, const at::Tensor& grad_out, const at::Tensor& out,
                                   const at::Tensor& logsumexp, const at::Tensor& grad_query,
                                   const at::Tensor& grad_key, const at::Tensor& grad_value,
                                   const at::Tensor& grad_bias);

}  // namespace fl::binding
