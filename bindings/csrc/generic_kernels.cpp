#include "generic_kernels.h"

#include "generic_indexing.h"
#include "generic_losses.h"
#include "generic_rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/native/TypeProperties.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <unordered_map>

namespace fl::binding {

at::Tensor in_acc(const at::Tensor& t) {
  const auto acc = at::toOpMathType(t.scalar_type());
  return t.scalar_type() == acc ? t : t.to(acc);
}

const at::Tensor* optional_tensor(const std::vector<c10::IValue>& in, size_t i) {
  return in[i].isTensor() && in[i].toTensor().defined() ? &in[i].toTensor() : nullptr;
}
namespace {

const at::Tensor& T(const std::vector<c10::IValue>& in, size_t i) { return in[i].toTensor(); }
at::Scalar S(const std::vector<c10::IValue>& in, size_t i) { return in[i].toScalar(); }

// Writes `value` into `out` (already sized by the router).
bool assign(at::Tensor& out, const at::Tensor& value) {
  out.copy_(value);
  return true;
}

// ---- SyncBatchNorm's ops (torch.nn.SyncBatchNorm; PyTorch has them for CUDA only), after
// ATen's CUDA kernels (Normalization.cuh), in the accumulation type (float for the 16-bit
// floats). Channels are dim 1; statistics reduce over every other dim.

std::vector<int64_t> non_channel_dims(const at::Tensor& t) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < t.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector [C] shaped to broadcast against `like` ([N, C, ...]).
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& like) {
  std::vector<int64_t> shape(static_cast<size_t>(like.dim()), 1);
  shape[1] = v.numel();
  return v.reshape(shape);
}

// 1 / sqrt(var + eps); 0 where var and eps are both 0 (a constant channel with eps = 0), as
// ATen's InvStd gives, so that normalising it gives 0 rather than NaN.
at::Tensor inverse_std(const at::Tensor& var, double eps) {
  const at::Tensor invstd = at::reciprocal(at::sqrt(at::add(var, eps)));
  if (eps != 0.0) return invstd;
  return at::where(at::eq(var, 0), at::zeros_like(invstd), invstd);
}

// (input, eps) -> (mean, invstd), biased variance.
bool batch_norm_stats(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor x = in_acc(T(in, 0));
  const auto dims = non_channel_dims(x);
  const at::Tensor mean = at::mean(x, dims);
  const at::Tensor centered = at::sub(x, per_channel(mean, x));
  const at::Tensor var = at::mean(at::mul(centered, centered), dims);
  assign(out[0], mean);
  return assign(out[1], inverse_std(var, in[1].toDouble()));
}

// (input, mean [W, C], invstd [W, C], running_mean?, running_var?, momentum, eps, counts [W])
// -> (mean, invstd) of all W ranks' rows together; updates the running statistics in place
// (unbiased variance), as batch_norm_reduce_statistics_kernel does.
bool batch_norm_gather_stats_with_counts(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor& means = T(in, 1);
  const at::Tensor& invstds = T(in, 2);
  const double momentum = in[5].toDouble(), eps = in[6].toDouble();
  const at::Tensor counts = T(in, 7).to(means.scalar_type()).reshape({-1, 1});
  const at::Tensor n = at::sum(counts);
  const at::Tensor mean = at::div(at::sum(at::mul(means, counts), 0), n);
  // Each rank's biased variance back from its invstd, then the sum of squares about the
  // global mean: Σ_i n_i·(var_i + (mean_i - mean)²).
  const at::Tensor var_i = at::where(at::eq(invstds, 0), at::zeros_like(invstds),  // inverse_std's 0
                                     at::sub(at::reciprocal(at::mul(invstds, invstds)), eps));
  const at::Tensor delta = at::sub(means, mean);
  const at::Tensor m2 = at::sum(at::mul(counts, at::add(var_i, at::mul(delta, delta))), 0);
  assign(out[0], mean);
  assign(out[1], inverse_std(at::div(m2, n), eps));
  if (const at::Tensor* running_mean = optional_tensor(in, 3)) {
    running_mean->copy_(at::add(at::mul(*running_mean, 1.0 - momentum), at::mul(mean, momentum)));
  }
  if (const at::Tensor* running_var = optional_tensor(in, 4)) {
    const at::Tensor unbiased = at::div(m2, at::sub(n, 1));
    running_var->copy_(at::add(at::mul(*running_var, 1.0 - momentum), at::mul(unbiased, momentum)));
  }
  return true;
}

// (input, weight?, bias?, mean, invstd, eps) -> (input - mean)·invstd·weight + bias.
bool batch_norm_elemt(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor x = in_acc(T(in, 0));
  at::Tensor y = at::mul(at::sub(x, per_channel(T(in, 3), x)), per_channel(T(in, 4), x));
  if (const at::Tensor* weight = optional_tensor(in, 1)) y = at::mul(y, per_channel(in_acc(*weight), x));
  if (const at::Tensor* bias = optional_tensor(in, 2)) y = at::add(y, per_channel(in_acc(*bias), x));
  return assign(out[0], y);
}

// (grad_out, input, mean, invstd, weight?, input_g, weight_g, bias_g)
// -> (Σ dy, Σ dy·(x - mean), grad_weight = Σ dy·(x - mean)·invstd, grad_bias = Σ dy),
// each only where asked for (the router leaves the others undefined).
bool batch_norm_backward_reduce(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor dy = in_acc(T(in, 0));
  const at::Tensor x = in_acc(T(in, 1));
  const auto dims = non_channel_dims(x);
  const at::Tensor sum_dy = at::sum(dy, dims);
  const at::Tensor sum_dy_xmu = at::sum(at::mul(dy, at::sub(x, per_channel(T(in, 2), x))), dims);
  if (out[0].defined()) assign(out[0], sum_dy);
  if (out[1].defined()) assign(out[1], sum_dy_xmu);
  if (out[2].defined()) assign(out[2], at::mul(sum_dy_xmu, T(in, 3)));
  if (out[3].defined()) assign(out[3], sum_dy);
  return true;
}

// (grad_out, input, mean, invstd, weight?, sum_dy, sum_dy_xmu, count [W]) -> grad_input, with
// sum_dy and sum_dy_xmu summed over the ranks and count each rank's rows.
bool batch_norm_backward_elemt(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor dy = in_acc(T(in, 0));
  const at::Tensor x = in_acc(T(in, 1));
  const at::Tensor& mean = T(in, 2);
  const at::Tensor& invstd = T(in, 3);
  const at::Tensor n = at::sum(T(in, 7).to(mean.scalar_type()));
  const at::Tensor mean_dy = at::div(T(in, 5), n);
  const at::Tensor mean_dy_xmu = at::div(T(in, 6), n);
  at::Tensor scale = invstd;
  if (const at::Tensor* weight = optional_tensor(in, 4)) scale = at::mul(scale, in_acc(*weight));
  const at::Tensor xmu = at::sub(x, per_channel(mean, x));
  const at::Tensor projection = at::mul(xmu, per_channel(at::mul(at::mul(invstd, invstd), mean_dy_xmu), x));
  return assign(out[0], at::mul(at::sub(at::sub(dy, per_channel(mean_dy, x)), projection), per_channel(scale, x)));
}

// ---- LSTM and GRU cells. ATen's RNN runs its cells fused on CUDA, XPU and PrivateUse1
// devices (RNN.cpp), and has these four ops for CUDA only; after ATen's CUDA kernels
// (cuda/RNN.cu), in the accumulation type. Gates are [N, 4H] (LSTM: input, forget, cell,
// output) or [N, 3H] (GRU: reset, input, new), hidden states [N, H].

// input_gates + hidden_gates (+ input_bias + hidden_bias), in the accumulation type.
at::Tensor summed_gates(const std::vector<c10::IValue>& in) {
  at::Tensor gates = at::add(in_acc(T(in, 0)), in_acc(T(in, 1)));
  if (const at::Tensor* input_bias = optional_tensor(in, 3)) gates = at::add(gates, in_acc(*input_bias));
  if (const at::Tensor* hidden_bias = optional_tensor(in, 4)) gates = at::add(gates, in_acc(*hidden_bias));
  return gates;
}

// (input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy, cy, workspace): the
// workspace keeps the activated gates for the backward.
bool fused_lstm_cell(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const auto gates = summed_gates(in).chunk(4, 1);
  const at::Tensor i = at::sigmoid(gates[0]), f = at::sigmoid(gates[1]);
  const at::Tensor g = at::tanh(gates[2]), o = at::sigmoid(gates[3]);
  const at::Tensor cy = at::add(at::mul(f, in_acc(T(in, 2))), at::mul(i, g));
  assign(out[0], at::mul(o, at::tanh(cy)));
  assign(out[1], cy);
  return assign(out[2], at::cat({i, f, g, o}, 1));
}

// (grad_hy?, grad_cy?, cx, cy, workspace, has_bias) -> (grad_gates, grad_cx, grad_bias?).
bool fused_lstm_cell_backward(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  // Neither gradient: no gradient flows, and the outputs stay undefined, as ATen's CUDA kernel
  // returns them (its meta function sized none).
  if (!optional_tensor(in, 0) && !optional_tensor(in, 1)) return true;
  const at::Tensor cx = in_acc(T(in, 2)), cy = in_acc(T(in, 3));
  const auto w = in_acc(T(in, 4)).chunk(4, 1);
  const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  const at::Tensor* grad_hy = optional_tensor(in, 0);
  const at::Tensor* grad_cy = optional_tensor(in, 1);
  const at::Tensor go = grad_hy ? in_acc(*grad_hy) : at::zeros_like(cy);
  const at::Tensor tanh_cy = at::tanh(cy);
  at::Tensor gcx = at::mul(at::mul(go, o), at::rsub(at::mul(tanh_cy, tanh_cy), 1));
  if (grad_cy) gcx = at::add(gcx, in_acc(*grad_cy));
  const auto sigmoid_grad = [](const at::Tensor& grad, const at::Tensor& s) {
    return at::mul(at::mul(grad, at::rsub(s, 1)), s);
  };
  const at::Tensor grad_gates = at::cat({sigmoid_grad(at::mul(gcx, g), i), sigmoid_grad(at::mul(gcx, cx), f),
                                         at::mul(at::mul(gcx, i), at::rsub(at::mul(g, g), 1)),
                                         sigmoid_grad(at::mul(go, tanh_cy), o)},
                                        1);
  assign(out[0], grad_gates);
  assign(out[1], at::mul(gcx, f));
  if (in[5].toBool() && out[2].defined()) assign(out[2], at::sum(grad_gates, 0));
  return true;
}

// (input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy, workspace [N, 5H]:
// reset, input and new gates, hx, and the hidden new gate with its bias).
bool fused_gru_cell(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const auto x = in_acc(T(in, 0)).chunk(3, 1);
  const auto h = in_acc(T(in, 1)).chunk(3, 1);
  const at::Tensor hx = in_acc(T(in, 2));
  at::Tensor xr = x[0], xi = x[1], xn = x[2], hr = h[0], hi = h[1], hn = h[2];
  if (const at::Tensor* input_bias = optional_tensor(in, 3)) {
    const auto b = in_acc(*input_bias).chunk(3, 0);
    xr = at::add(xr, b[0]), xi = at::add(xi, b[1]), xn = at::add(xn, b[2]);
  }
  if (const at::Tensor* hidden_bias = optional_tensor(in, 4)) {
    const auto b = in_acc(*hidden_bias).chunk(3, 0);
    hr = at::add(hr, b[0]), hi = at::add(hi, b[1]), hn = at::add(hn, b[2]);
  }
  const at::Tensor r = at::sigmoid(at::add(xr, hr)), z = at::sigmoid(at::add(xi, hi));
  const at::Tensor n = at::tanh(at::add(xn, at::mul(r, hn)));
  assign(out[0], at::add(n, at::mul(z, at::sub(hx, n))));
  return assign(out[1], at::cat({r, z, n, hx, hn}, 1));
}

// (grad_hy, workspace, has_bias) -> (grad_input_gates, grad_hidden_gates, grad_hx,
// grad_input_bias?, grad_hidden_bias?).
bool fused_gru_cell_backward(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor go = in_acc(T(in, 0));
  const auto w = in_acc(T(in, 1)).chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor gz = at::mul(at::mul(at::mul(go, at::sub(hx, n)), at::rsub(z, 1)), z);
  const at::Tensor gn = at::mul(at::mul(go, at::rsub(z, 1)), at::rsub(at::mul(n, n), 1));
  const at::Tensor gr = at::mul(at::mul(at::mul(gn, hn), at::rsub(r, 1)), r);
  const at::Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  const at::Tensor grad_hidden_gates = at::cat({gr, gz, at::mul(gn, r)}, 1);
  assign(out[0], grad_input_gates);
  assign(out[1], grad_hidden_gates);
  assign(out[2], at::mul(go, z));
  if (in[2].toBool()) {
    if (out[3].defined()) assign(out[3], at::sum(grad_input_gates, 0));
    if (out[4].defined()) assign(out[4], at::sum(grad_hidden_gates, 0));
  }
  return true;
}

// The operands of a pointwise op as ATen's TensorIterator computes with them: each cast to the
// inputs' common dtype (a bfloat16 self with a float32 0-dim tensor computes in bfloat16), then
// widened to that dtype's op-math type (float for half and bfloat16).
std::vector<at::Tensor> pointwise_operands(std::initializer_list<at::Tensor> tensors) {
  at::native::ResultTypeState state{};
  for (const at::Tensor& t : tensors) state = at::native::update_result_type_state(t, state);
  const at::ScalarType common = at::native::result_type(state);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : tensors) out.push_back(in_acc(t.scalar_type() == common ? t : t.to(common)));
  return out;
}

struct LerpWeight {
  at::Scalar weight;  // the weight as the op-math type holds it
  bool small;         // |weight| < 0.5
  at::Scalar rest;    // 1 - weight, in the op-math type
};

// lerp's Scalar weight converted to the op-math type `op` before the test and 1 - w, as ATen's
// kernel converts it (a float32 lerp with weight 0.6 takes 0.6f, and 1 - 0.6f, not 0.4).
LerpWeight lerp_weight(const at::Scalar& weight, at::ScalarType op) {
  if (op == at::kComplexFloat) {
    const c10::complex<float> w = weight.toComplexFloat();
    return {c10::complex<double>(w), std::abs(w) < 0.5f, c10::complex<double>(c10::complex<float>(1.0f) - w)};
  }
  if (at::isComplexType(op)) {
    const c10::complex<double> w = weight.toComplexDouble();
    return {w, std::abs(w) < 0.5, c10::complex<double>(1.0) - w};
  }
  if (op == at::kFloat) {
    const float w = weight.toFloat();
    return {static_cast<double>(w), std::abs(w) < 0.5f, static_cast<double>(1.0f - w)};
  }
  const double w = weight.toDouble();
  return {w, std::abs(w) < 0.5, 1.0 - w};
}

const std::unordered_map<std::string, GenericKernel>& registry() {
  static const std::unordered_map<std::string, GenericKernel> kernels = {
      // addcmul, addcdiv and lerp as ATen's CPU kernels compute them (PointwiseOpsKernel.cpp,
      // Lerp.h): in the op-math type (float for half and bfloat16; the output rounds once), in
      // the same order of operations. Composed in the tensors' own type, every intermediate
      // rounded to it (a bfloat16 addcmul differed from the CPU's in a quarter of the elements),
      // and lerp's single formula missed `end` exactly at weight 1.
      // self + value * t1 * t2
      {"aten::addcmul.out",
       [](const auto& in, auto& out) {
         const auto x = pointwise_operands({T(in, 0), T(in, 1), T(in, 2)});
         return assign(out[0], at::add(x[0], at::mul(at::mul(x[1], S(in, 3)), x[2])));
       }},
      // self + value * t1 / t2
      {"aten::addcdiv.out",
       [](const auto& in, auto& out) {
         const auto x = pointwise_operands({T(in, 0), T(in, 1), T(in, 2)});
         return assign(out[0], at::add(x[0], at::div(at::mul(x[1], S(in, 3)), x[2])));
       }},
      // |weight| < 0.5: self + weight * (end - self); else end - (end - self) * (1 - weight),
      // with the weight in the op-math type first, as ATen's kernel takes it.
      {"aten::lerp.Scalar_out",
       [](const auto& in, auto& out) {
         const at::Tensor self = in_acc(T(in, 0)), end = in_acc(T(in, 1));
         const auto [weight, small, rest] = lerp_weight(S(in, 2), self.scalar_type());
         const at::Tensor diff = at::sub(end, self);
         if (small) return assign(out[0], at::add(self, at::mul(diff, weight)));
         return assign(out[0], at::sub(end, at::mul(diff, rest)));
       }},
      {"aten::lerp.Tensor_out",
       [](const auto& in, auto& out) {
         const at::Tensor self = in_acc(T(in, 0)), end = in_acc(T(in, 1)), weight = in_acc(T(in, 2));
         const at::Tensor diff = at::sub(end, self);
         return assign(out[0], at::where(at::lt(at::abs(weight), 0.5), at::add(self, at::mul(weight, diff)),
                                         at::sub(end, at::mul(diff, at::rsub(weight, 1)))));
       }},
      // self - alpha * other == self + (-alpha) * other
      {"aten::sub.out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), T(in, 1), -S(in, 2)));
       }},
      {"aten::rsqrt.out",
       [](const auto& in, auto& out) { return assign(out[0], at::reciprocal(at::sqrt(T(in, 0)))); }},
      {"aten::sigmoid.out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::reciprocal(at::add(at::exp(at::neg(T(in, 0))), 1)));
       }},
      {"aten::silu.out",
       [](const auto& in, auto& out) { return assign(out[0], at::mul(T(in, 0), at::sigmoid(T(in, 0)))); }},
      {"aten::zero.out",
       [](const auto& in, auto& out) {
         (void)in;
         out[0].fill_(0);
         return true;
       }},
      {"aten::smooth_l1_loss.out", smooth_l1_loss},
      {"aten::smooth_l1_loss_backward.grad_input", smooth_l1_loss_backward},
      {"aten::huber_loss.out", huber_loss},
      {"aten::huber_loss_backward.out", huber_loss_backward},
      {"aten::xlogy.OutTensor", xlogy},
      {"aten::index.Tensor_out", index_tensor},
      {"aten::_index_put_impl.out", index_put},
      {"aten::_fused_rms_norm", fused_rms_norm},
      {"aten::_fused_rms_norm_backward", fused_rms_norm_backward},
      {"aten::batch_norm_stats.out", batch_norm_stats},
      {"aten::batch_norm_gather_stats_with_counts.out", batch_norm_gather_stats_with_counts},
      {"aten::batch_norm_elemt.out", batch_norm_elemt},
      {"aten::batch_norm_backward_reduce.out", batch_norm_backward_reduce},
      {"aten::batch_norm_backward_elemt.out", batch_norm_backward_elemt},
      {"aten::_thnn_fused_lstm_cell.out", fused_lstm_cell},
      {"aten::_thnn_fused_lstm_cell_backward_impl.out", fused_lstm_cell_backward},
      {"aten::_thnn_fused_gru_cell.out", fused_gru_cell},
      {"aten::_thnn_fused_gru_cell_backward.out", fused_gru_cell_backward},
      // mean = sum / count over the reduced dims
      {"aten::mean.out",
       [](const auto& in, auto& out) {
         const at::Tensor& self = T(in, 0);
         std::optional<at::IntArrayRef> dims;
         std::vector<int64_t> dim_list;
         if (!in[1].isNone()) dim_list = in[1].toIntVector();
         int64_t count = 1;
         if (dim_list.empty()) {
           count = self.numel();
         } else {
           for (int64_t d : dim_list) count *= self.size(d);
         }
         const bool keepdim = in[2].toBool();
         auto dtype = in[3].isNone() ? std::optional<at::ScalarType>() : in[3].toScalarType();
         at::Tensor sum = dim_list.empty() && !keepdim ? at::sum(self, dtype)
                                                       : at::sum(self, dim_list, keepdim, dtype);
         return assign(out[0], at::div(sum, static_cast<double>(count)));
       }},
  };
  return kernels;
}

}  // namespace

const GenericKernel* find_generic_kernel(const std::string& kernel_name) {
  auto it = registry().find(kernel_name);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> generic_kernel_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : registry()) names.push_back(k);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace fl::binding
