#include "generic_losses.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Reduction.h>

namespace fl::binding {
namespace {

const at::Tensor& tensor_at(const std::vector<c10::IValue>& in, size_t i) { return in[i].toTensor(); }

at::Tensor reduced(const at::Tensor& elementwise, int64_t reduction) {
  if (reduction == at::Reduction::Mean) return at::mean(elementwise);
  if (reduction == at::Reduction::Sum) return at::sum(elementwise);
  return elementwise;
}

// The scale of a reduced loss's gradient: 1/N for the mean, else 1.
double gradient_norm(const at::Tensor& self, int64_t reduction) {
  return reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(self.numel()) : 1.0;
}

bool written(at::Tensor& out, const at::Tensor& value) {
  out.copy_(value);
  return true;
}

}  // namespace

// |x - y| < beta ? 0.5 (x - y)^2 / beta : |x - y| - beta / 2 (beta 0: the L1 loss).
bool smooth_l1_loss(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const double beta = in[3].toDouble();
  const at::Tensor z = at::abs(at::sub(in_acc(tensor_at(in, 0)), in_acc(tensor_at(in, 1))));
  const at::Tensor loss = beta == 0.0 ? z : at::where(at::lt(z, beta), at::div(at::mul(at::mul(z, z), 0.5), beta),
                                                      at::sub(z, 0.5 * beta));
  return written(out[0], reduced(loss, in[2].toInt()));
}

// ATen's smooth_l1_backward: x = self - target; -norm·g for x <= -beta, norm·g for x >= beta,
// norm·x·g / beta between.
bool smooth_l1_loss_backward(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor g = in_acc(tensor_at(in, 0));
  const at::Tensor& self = tensor_at(in, 1);
  const double beta = in[4].toDouble(), norm = gradient_norm(self, in[3].toInt());
  const at::Tensor x = at::sub(in_acc(self), in_acc(tensor_at(in, 2)));
  const at::Tensor outer = at::where(at::le(x, -beta), at::mul(g, -norm), at::mul(g, norm));
  if (beta == 0.0) return written(out[0], outer);
  const at::Tensor inner = at::div(at::mul(at::mul(x, g), norm), beta);
  return written(out[0], at::where(at::logical_and(at::gt(x, -beta), at::lt(x, beta)), inner, outer));
}

// |x - y| < delta ? 0.5 (x - y)^2 : delta (|x - y| - delta / 2)
bool huber_loss(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const double delta = in[3].toDouble();
  const at::Tensor z = at::abs(at::sub(in_acc(tensor_at(in, 0)), in_acc(tensor_at(in, 1))));
  const at::Tensor loss = at::where(at::lt(z, delta), at::mul(at::mul(z, z), 0.5), at::mul(at::sub(z, 0.5 * delta), delta));
  return written(out[0], reduced(loss, in[2].toInt()));
}

// ATen's huber_backward: -norm·delta·g for x <= -delta, norm·delta·g for x >= delta, norm·x·g between.
bool huber_loss_backward(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor g = in_acc(tensor_at(in, 0));
  const at::Tensor& self = tensor_at(in, 1);
  const double delta = in[4].toDouble(), norm = gradient_norm(self, in[3].toInt());
  const at::Tensor x = at::sub(in_acc(self), in_acc(tensor_at(in, 2)));
  const at::Tensor outer = at::where(at::le(x, -delta), at::mul(g, -norm * delta), at::mul(g, norm * delta));
  const at::Tensor inner = at::mul(at::mul(x, g), norm);
  return written(out[0], at::where(at::logical_and(at::gt(x, -delta), at::lt(x, delta)), inner, outer));
}

// NaN where other is NaN, else 0 where self is 0, else self · log(other) (ATen's xlogy).
bool xlogy(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor& self = tensor_at(in, 0);
  const at::Tensor& other = tensor_at(in, 1);
  const at::ScalarType common = out[0].scalar_type();
  if (!at::isFloatingType(common)) return false;
  const auto acc = at::toOpMathType(common);
  const at::Tensor x = self.to(acc), y = other.to(acc);
  const at::Tensor product = at::mul(x, at::log(y));
  const at::Tensor zero_where_x_is = at::where(at::eq(x, 0), at::zeros_like(product), product);
  return written(out[0], at::where(at::isnan(y), y, zero_where_x_is));
}

}  // namespace fl::binding
