#include "attention_decomposition.h"

#include <ATen/ATen.h>

#include <limits>

namespace fl::binding {
namespace {

// The dtype the softmax runs in: float for the 16-bit floats (as ATen's softmax accumulates).
c10::ScalarType compute_dtype(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? at::kFloat : t.scalar_type();
}

// The scaled, biased, masked scores [B,H,Lq,Lk] in the compute dtype.
at::Tensor scores_of(const AttentionCall& c) {
  at::Tensor scores = at::matmul(c.query, c.key.transpose(-2, -1)).to(compute_dtype(c.query)).mul_(c.scale);
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
  output.copy_(at::matmul(p.to(c.value.scalar_type()), c.value));
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
  const auto dtype = c.query.scalar_type();
  if (grad_value.defined()) grad_value.copy_(at::matmul(p.to(dtype).transpose(-2, -1), grad_out));
  if (!grad_query.defined() && !grad_key.defined() && !grad_bias.defined()) return;
  // ds = p * (dp - rowsum(dO * O)), the softmax backward of dp = dO @ V^T.
  const at::Tensor dp = at::matmul(grad_out, c.value.transpose(-2, -1)).to(p.scalar_type());
  const at::Tensor delta = (grad_out.to(p.scalar_type()) * out.to(p.scalar_type())).sum(-1, true);
  const at::Tensor ds = p * (dp - delta);
  if (grad_bias.defined()) grad_bias.copy_(ds);
  const at::Tensor ds_scaled = (ds * c.scale).to(dtype);
  if (grad_query.defined()) grad_query.copy_(at::matmul(ds_scaled, c.key));
  if (grad_key.defined()) grad_key.copy_(at::matmul(ds_scaled.transpose(-2, -1), c.query));
}

}  // namespace fl::binding
