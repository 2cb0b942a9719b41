#include "generic_rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/ops/_fused_rms_norm_compositeimplicitautograd_dispatch.h>

#include <numeric>

namespace fl::binding {

bool fused_rms_norm(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const std::vector<int64_t> normalized = in[1].toIntVector();
  const at::Tensor* weight = optional_tensor(in, 2);
  const std::optional<double> eps = in[3].isNone() ? std::nullopt : std::optional<double>(in[3].toDouble());
  auto [output, rstd] =
      at::compositeimplicitautograd::_fused_rms_norm(in[0].toTensor(), normalized, weight ? std::optional(*weight) : std::nullopt, eps);
  out[0].copy_(output);
  if (out[1].defined()) out[1].copy_(rstd.view(out[1].sizes()));
  return true;
}

// With y = x · rstd · w over the last k dims (N elements per row), rstd = (mean(x²) + eps)^-½:
//   grad_input  = rstd · (g·w − x · rstd² · mean(g·w·x))    (row-wise mean)
//   grad_weight = Σ over the rows of g · x · rstd
bool fused_rms_norm_backward(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor g = in_acc(in[0].toTensor());
  const at::Tensor& input = in[1].toTensor();
  const at::Tensor x = in_acc(input);
  const size_t k = in[2].toIntVector().size();
  const at::Tensor rstd = in_acc(in[3].toTensor());
  const at::Tensor* weight = optional_tensor(in, 4);
  const int64_t ndim = input.dim();
  std::vector<int64_t> row_dims(k), batch_dims(static_cast<size_t>(ndim) - k);
  std::iota(row_dims.begin(), row_dims.end(), ndim - static_cast<int64_t>(k));
  std::iota(batch_dims.begin(), batch_dims.end(), 0);
  if (out[0].defined()) {
    const at::Tensor gw = weight ? at::mul(g, in_acc(*weight)) : g;
    const at::Tensor row_mean = at::mean(at::mul(gw, x), row_dims, /*keepdim=*/true);
    out[0].copy_(at::mul(rstd, at::sub(gw, at::mul(x, at::mul(at::mul(rstd, rstd), row_mean)))));
  }
  if (out.size() > 1 && out[1].defined() && weight) {
    const at::Tensor per_element = at::mul(at::mul(g, x), rstd);
    out[1].copy_(batch_dims.empty() ? per_element : at::sum(per_element, batch_dims));
  }
  return true;
}

}  // namespace fl::binding
