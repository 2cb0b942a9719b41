#include "generic_kernels.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>

#include <algorithm>
#include <unordered_map>

namespace fl::binding {
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

at::Tensor in_acc(const at::Tensor& t) {
  const auto acc = at::toOpMathType(t.scalar_type());
  return t.scalar_type() == acc ? t : t.to(acc);
}

const at::Tensor* optional_tensor(const std::vector<c10::IValue>& in, size_t i) {
  return in[i].isTensor() && in[i].toTensor().defined() ? &in[i].toTensor() : nullptr;
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

const std::unordered_map<std::string, GenericKernel>& registry() {
  static const std::unordered_map<std::string, GenericKernel> kernels = {
      // self + value * t1 * t2
      {"aten::addcmul.out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), at::mul(T(in, 1), T(in, 2)), S(in, 3)));
       }},
      // self + value * t1 / t2
      {"aten::addcdiv.out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), at::div(T(in, 1), T(in, 2)), S(in, 3)));
       }},
      // self + weight * (end - self)
      {"aten::lerp.Scalar_out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), at::sub(T(in, 1), T(in, 0)), S(in, 2)));
       }},
      {"aten::lerp.Tensor_out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), at::mul(at::sub(T(in, 1), T(in, 0)), T(in, 2))));
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
      {"aten::batch_norm_stats.out", batch_norm_stats},
      {"aten::batch_norm_gather_stats_with_counts.out", batch_norm_gather_stats_with_counts},
      {"aten::batch_norm_elemt.out", batch_norm_elemt},
      {"aten::batch_norm_backward_reduce.out", batch_norm_backward_reduce},
      {"aten::batch_norm_backward_elemt.out", batch_norm_backward_elemt},
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
