#include "attention_decomposition.h"

#include <ATen/ATen.h>

#include <limits>

namespace fl::binding {
namespace {

// The dtype the softmax runs in: float for the 16-bit floats (as ATen's softmax accumulates).
c10::ScalarType compute_dtype(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? at::kFloat : t.scalar_type();
}

// The scaled, biased, masked scores [B,H,Lq,Lk] in the compute dtype (q and k converted first,
// as ATen's math path does for the 16-bit floats).
at::Tensor scores_of(const AttentionCall& c) {
  const auto dtype = compute_dtype(c.query);
  at::Tensor scores = at::matmul(c.query.to(dtype), c.key.to(dtype).transpose(-2, -1)).mul_(c.scale);
  if (c.bias.defined()) scores.add_(c.bias);
  if (c.causal) {
    const int64_t lq = c.query.size(2), lk = c.key.size(2);
    const at::Tensor above = at::ones({lq, lk}, c.query.options().dtype(at::kBool)).triu_(1);
    scores.masked_fill_(above, -std::numeric_limits<double>::infinity());
  }
  return scores;
}

// softmax from the scores and their row logsumexp; 0 in a row whose every key is masked.
at::Tensor probabilities(const at::Tensor& scores, const at::Tensor& lse) {
  const at::Tensor row_lse = lse.unsqueeze(-1).to(scores.scalar_type());
  at::Tensor p = at::exp(scores - row_lse);
  return at::where(at::isneginf(row_lse), at::zeros({}, p.options()), p);
}

}  // namespace

void attention_forward_decomposed(const AttentionCall& c, const at::Tensor& output, const at::Tensor& logsumexp) {
  const at::Tensor scores = scores_of(c);
  const at::Tensor lse = at::logsumexp(scores, {-1});
  const at::Tensor p = probabilities(scores, lse);
  output.copy_(at::matmul(p, c.value.to(p.scalar_type())));
  logsumexp.copy_(lse);
}

void attention_backward_decomposed(const AttentionCall& c, const at::Tensor& grad_out, const at::Tensor& out,
                                   const at::Tensor& logsumexp, const at::Tensor& grad_query,
                                   const at::Tensor& grad_key, const at::Tensor& grad_value,
                                   const at::Tensor& grad_bias) {
  // The logsumexp again, in the compute dtype: the saved one is float32, which would cap a
  // float64 call's gradients at float32 accuracy.
  (void)logsumexp;
  const at::Tensor scores = scores_of(c);
  const at::Tensor p = probabilities(scores, at::logsumexp(scores, {-1}));
  // Every product in the compute dtype (float for the 16-bit floats), rounded once into the
  // gradients by copy_.
  const auto dtype = p.scalar_type();
  const at::Tensor d_out = grad_out.to(dtype);
  if (grad_value.defined()) grad_value.copy_(at::matmul(p.transpose(-2, -1), d_out));
  if (!grad_query.defined() && !grad_key.defined() && !grad_bias.defined()) return;
  // ds = p * (dp - rowsum(dO * O)), the softmax backward of dp = dO @ V^T.
  const at::Tensor dp = at::matmul(d_out, c.value.to(dtype).transpose(-2, -1));
  const at::Tensor delta = (d_out * out.to(dtype)).sum(-1, true);
  const at::Tensor ds = p * (dp - delta);
  if (grad_bias.defined()) grad_bias.copy_(ds);
  const at::Tensor ds_scaled = ds * c.scale;
  if (grad_query.defined()) grad_query.copy_(at::matmul(ds_scaled, c.key.to(dtype)));
  if (grad_key.defined()) grad_key.copy_(at::matmul(ds_scaled.transpose(-2, -1), c.query.to(dtype)));
}

}  // namespace fl::binding
