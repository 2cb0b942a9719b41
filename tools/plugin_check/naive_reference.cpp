// naive_reference.cpp — double-precision loops for the ops fl-plugin-check can check without
// a reference plugin.
#include "naive_reference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

namespace fl::check {
namespace {

using Fn = std::function<double(const std::vector<double>& t, const std::vector<double>& s)>;

double number(const CaseArg& a) {
  switch (a.kind) {
    case CaseArg::Kind::Int: return static_cast<double>(a.i);
    case CaseArg::Kind::Double: return a.d;
    case CaseArg::Kind::Bool: return a.b ? 1 : 0;
    default: return 0;
  }
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

const std::map<std::string, Fn>& elementwise_table() {
  static const std::map<std::string, Fn> table = {
      {"aten::abs.out", [](auto& t, auto&) { return std::fabs(t[0]); }},
      {"aten::neg.out", [](auto& t, auto&) { return -t[0]; }},
      {"aten::exp.out", [](auto& t, auto&) { return std::exp(t[0]); }},
      {"aten::log.out", [](auto& t, auto&) { return std::log(t[0]); }},
      {"aten::sqrt.out", [](auto& t, auto&) { return std::sqrt(t[0]); }},
      {"aten::rsqrt.out", [](auto& t, auto&) { return 1 / std::sqrt(t[0]); }},
      {"aten::relu.out", [](auto& t, auto&) { return t[0] > 0 ? t[0] : 0.0; }},
      {"aten::sigmoid.out", [](auto& t, auto&) { return sigmoid(t[0]); }},
      {"aten::tanh.out", [](auto& t, auto&) { return std::tanh(t[0]); }},
      {"aten::silu.out", [](auto& t, auto&) { return t[0] * sigmoid(t[0]); }},
      {"aten::sign.out", [](auto& t, auto&) { return static_cast<double>((t[0] > 0) - (t[0] < 0)); }},
      {"aten::sgn.out", [](auto& t, auto&) { return static_cast<double>((t[0] > 0) - (t[0] < 0)); }},
      {"aten::reciprocal.out", [](auto& t, auto&) { return 1 / t[0]; }},
      {"aten::zero.out", [](auto&, auto&) { return 0.0; }},
      {"aten::add.out", [](auto& t, auto& s) { return t[0] + s[0] * t[1]; }},
      {"aten::sub.out", [](auto& t, auto& s) { return t[0] - s[0] * t[1]; }},
      {"aten::mul.out", [](auto& t, auto&) { return t[0] * t[1]; }},
      {"aten::div.out", [](auto& t, auto&) { return t[0] / t[1]; }},
      {"aten::maximum.out", [](auto& t, auto&) { return std::max(t[0], t[1]); }},
      {"aten::minimum.out", [](auto& t, auto&) { return std::min(t[0], t[1]); }},
      {"aten::max.out", [](auto& t, auto&) { return std::max(t[0], t[1]); }},
      {"aten::min.out", [](auto& t, auto&) { return std::min(t[0], t[1]); }},
      {"aten::eq.Tensor_out", [](auto& t, auto&) { return double(t[0] == t[1]); }},
      {"aten::ne.Tensor_out", [](auto& t, auto&) { return double(t[0] != t[1]); }},
      {"aten::lt.Tensor_out", [](auto& t, auto&) { return double(t[0] < t[1]); }},
      {"aten::le.Tensor_out", [](auto& t, auto&) { return double(t[0] <= t[1]); }},
      {"aten::gt.Tensor_out", [](auto& t, auto&) { return double(t[0] > t[1]); }},
      {"aten::ge.Tensor_out", [](auto& t, auto&) { return double(t[0] >= t[1]); }},
      {"aten::eq.Scalar_out", [](auto& t, auto& s) { return double(t[0] == s[0]); }},
      {"aten::ne.Scalar_out", [](auto& t, auto& s) { return double(t[0] != s[0]); }},
      {"aten::lt.Scalar_out", [](auto& t, auto& s) { return double(t[0] < s[0]); }},
      {"aten::le.Scalar_out", [](auto& t, auto& s) { return double(t[0] <= s[0]); }},
      {"aten::gt.Scalar_out", [](auto& t, auto& s) { return double(t[0] > s[0]); }},
      {"aten::ge.Scalar_out", [](auto& t, auto& s) { return double(t[0] >= s[0]); }},
      {"aten::isnan.out", [](auto& t, auto&) { return double(std::isnan(t[0])); }},
      {"aten::isposinf.out", [](auto& t, auto&) { return double(t[0] == INFINITY); }},
      {"aten::isneginf.out", [](auto& t, auto&) { return double(t[0] == -INFINITY); }},
      {"aten::logical_and.out", [](auto& t, auto&) { return double(t[0] != 0 && t[1] != 0); }},
      {"aten::logical_or.out", [](auto& t, auto&) { return double(t[0] != 0 || t[1] != 0); }},
      {"aten::logical_xor.out", [](auto& t, auto&) { return double((t[0] != 0) != (t[1] != 0)); }},
      {"aten::addcmul.out", [](auto& t, auto& s) { return t[0] + s[0] * t[1] * t[2]; }},
      {"aten::addcdiv.out", [](auto& t, auto& s) { return t[0] + s[0] * t[1] / t[2]; }},
      {"aten::where.self_out", [](auto& t, auto&) { return t[0] != 0 ? t[1] : t[2]; }},
      {"aten::clamp.out", [](auto& t, auto& s) { return std::min(std::max(t[0], s[0]), s[1]); }},
      {"aten::fill.Scalar_out", [](auto&, auto& s) { return s[0]; }},
      {"aten::masked_fill.Scalar_out", [](auto& t, auto& s) { return t[1] != 0 ? s[0] : t[0]; }},
      {"aten::sin.out", [](auto& t, auto&) { return std::sin(t[0]); }},
      {"aten::cos.out", [](auto& t, auto&) { return std::cos(t[0]); }},
      {"aten::erf.out", [](auto& t, auto&) { return std::erf(t[0]); }},
      {"aten::expm1.out", [](auto& t, auto&) { return std::expm1(t[0]); }},
      {"aten::log1p.out", [](auto& t, auto&) { return std::log1p(t[0]); }},
      {"aten::floor.out", [](auto& t, auto&) { return std::floor(t[0]); }},
      {"aten::ceil.out", [](auto& t, auto&) { return std::ceil(t[0]); }},
      {"aten::round.out", [](auto& t, auto&) { return std::nearbyint(t[0]); }},
      {"aten::trunc.out", [](auto& t, auto&) { return std::trunc(t[0]); }},
      {"aten::bitwise_and.Tensor_out", [](auto& t, auto&) { return double(int64_t(t[0]) & int64_t(t[1])); }},
      {"aten::bitwise_or.Tensor_out", [](auto& t, auto&) { return double(int64_t(t[0]) | int64_t(t[1])); }},
      {"aten::bitwise_xor.Tensor_out", [](auto& t, auto&) { return double(int64_t(t[0]) ^ int64_t(t[1])); }},
      {"aten::leaky_relu.out", [](auto& t, auto& s) { return t[0] > 0 ? t[0] : t[0] * s[0]; }},
      {"aten::leaky_relu_backward.grad_input", [](auto& t, auto& s) { return t[1] > 0 ? t[0] : t[0] * s[0]; }},
      {"aten::hardtanh.out", [](auto& t, auto& s) { return std::min(std::max(t[0], s[0]), s[1]); }},
      {"aten::hardtanh_backward.grad_input",
       [](auto& t, auto& s) { return (t[1] <= s[0] || t[1] >= s[1]) ? 0.0 : t[0]; }},
      {"aten::elu.out",
       [](auto& t, auto& s) { return t[0] > 0 ? t[0] * s[1] : std::expm1(t[0] * s[2]) * s[0] * s[1]; }},
      {"aten::softplus.out",
       [](auto& t, auto& s) { return t[0] * s[0] > s[1] ? t[0] : std::log1p(std::exp(t[0] * s[0])) / s[0]; }},
      {"aten::log_sigmoid_backward.grad_input", [](auto& t, auto&) {
         const double z = std::exp(-std::fabs(t[1]));
         return t[0] * ((t[1] < 0 ? 1.0 : 0.0) - (t[1] < 0 ? 1.0 : -1.0) * (z / (1 + z)));
       }},
      {"aten::softplus_backward.grad_input", [](auto& t, auto& s) {
         const double z = std::exp(t[1] * s[0]);
         return t[1] * s[0] > s[1] ? t[0] : t[0] * z / (z + 1);
       }},
  };
  return table;
}

std::vector<HostTensor> run_elementwise(const Fn& fn, const KernelCase& c) {
  const OutputSpec& spec = c.outputs.at(0);
  std::vector<const HostTensor*> tensors;
  std::vector<double> scalars;
  for (const CaseArg& a : c.inputs) {
    if (a.kind == CaseArg::Kind::Tensor) tensors.push_back(&a.tensor);
    else scalars.push_back(number(a));
  }
  std::vector<double> out;
  Shape index(spec.shape.size(), 0);
  std::vector<double> values(tensors.size());
  if (shape_numel(spec.shape) > 0) do {
      for (size_t k = 0; k < tensors.size(); ++k)
        values[k] = tensors[k]->host_scalar ? tensors[k]->get_storage(0) : tensors[k]->broadcast_at(spec.shape, index);
      out.push_back(fn(values, scalars));
    } while (next_index(index, spec.shape));
  return {HostTensor::from_values(spec.dtype, spec.shape, out)};
}

std::vector<HostTensor> run_sum(const KernelCase& c) {
  const HostTensor& x = c.inputs[0].tensor;
  const OutputSpec& spec = c.outputs.at(0);
  std::vector<int64_t> dims;
  if (c.inputs[1].kind == CaseArg::Kind::IntList) dims = c.inputs[1].ints;
  for (int64_t& d : dims) if (d < 0) d += static_cast<int64_t>(x.shape.size());
  // Accumulate each input element into its output slot.
  HostTensor acc = HostTensor::zeros(FL_DTYPE_FLOAT64, spec.shape);
  Shape index(x.shape.size(), 0);
  if (x.numel() > 0) do {
      int64_t flat = 0, stride = 1;
      std::vector<int64_t> kept;
      for (size_t d = x.shape.size(); d-- > 0;) {
        bool reduced = dims.empty() || std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end();
        if (!reduced) {
          flat += index[d] * stride;
          stride *= x.shape[d];
        }
      }
      acc.set_storage(flat, acc.get_storage(flat) + x.at(index));
    } while (next_index(index, x.shape));
  return {HostTensor::from_values(spec.dtype, spec.shape, acc.values())};
}

// linalg_vector_norm.out(self, ord, dim?, keepdim, dtype?): sum |x|^ord then ^(1/ord); ord 0
// counts non-zeros, inf/-inf take the max/min of |x|.
std::vector<HostTensor> run_vector_norm(const KernelCase& c) {
  const HostTensor& x = c.inputs[0].tensor;
  const double ord = number(c.inputs[1]);
  const OutputSpec& spec = c.outputs.at(0);
  std::vector<int64_t> dims;
  if (c.inputs[2].kind == CaseArg::Kind::IntList) dims = c.inputs[2].ints;
  for (int64_t& d : dims) if (d < 0) d += static_cast<int64_t>(x.shape.size());
  const bool extreme = std::isinf(ord);
  std::vector<double> acc(static_cast<size_t>(shape_numel(spec.shape)), ord == -INFINITY ? INFINITY : 0.0);
  Shape index(x.shape.size(), 0);
  if (x.numel() > 0) do {
      int64_t flat = 0, stride = 1;
      for (size_t d = x.shape.size(); d-- > 0;) {
        bool reduced = dims.empty() || std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end();
        if (!reduced) {
          flat += index[d] * stride;
          stride *= x.shape[d];
        }
      }
      const double v = std::fabs(x.at(index));
      double& a = acc[static_cast<size_t>(flat)];
      if (extreme) a = ord > 0 ? std::max(a, v) : std::min(a, v);
      else if (ord == 0) a += v != 0 ? 1.0 : 0.0;
      else a += std::pow(v, ord);
    } while (next_index(index, x.shape));
  if (!extreme && ord != 0 && ord != 1)
    for (double& a : acc) a = std::pow(a, 1.0 / ord);
  return {HostTensor::from_values(spec.dtype, spec.shape, acc)};
}

// mse_loss.out(self, target, reduction): (x - t)^2, its mean (1) or sum (2).
// mse_loss_backward.grad_input(grad, self, target, reduction): 2 (x - t) grad, / numel for mean.
std::vector<HostTensor> run_mse_loss(const KernelCase& c, bool backward) {
  const size_t first = backward ? 1 : 0;
  const HostTensor& x = c.inputs[first].tensor;
  const HostTensor& t = c.inputs[first + 1].tensor;
  const auto reduction = static_cast<int64_t>(number(c.inputs[first + 2]));
  const OutputSpec& spec = c.outputs.at(0);
  std::vector<double> values;
  Shape index(x.shape.size(), 0);
  if (x.numel() > 0) do {
      const double d = x.at(index) - t.at(index);
      if (!backward) {
        values.push_back(d * d);
      } else {
        const double g = reduction == 0 ? c.inputs[0].tensor.at(index) : c.inputs[0].tensor.get_storage(0);
        values.push_back(2.0 * d * g / (reduction == 1 ? static_cast<double>(x.numel()) : 1.0));
      }
    } while (next_index(index, x.shape));
  if (!backward && reduction != 0) {
    double total = 0;
    for (double v : values) total += v;
    values = {reduction == 1 ? total / static_cast<double>(x.numel()) : total};
  }
  return {HostTensor::from_values(spec.dtype, spec.shape, values)};
}

// all / any in their three forms (case_catalog_nn.cpp's logical_reduction): a value is true
// when non-zero (NaN too); all of nothing is true, any of nothing false.
std::vector<HostTensor> run_logical_reduction(const KernelCase& c, bool is_all) {
  const HostTensor& x = c.inputs[0].tensor;
  const OutputSpec& spec = c.outputs.at(0);
  std::vector<int64_t> dims;
  bool reduce_all = true;
  if (c.inputs.size() > 1 && c.inputs[1].kind == CaseArg::Kind::Int) {
    dims = {c.inputs[1].i};
    reduce_all = false;
  } else if (c.inputs.size() > 1 && c.inputs[1].kind == CaseArg::Kind::IntList) {
    dims = c.inputs[1].ints;
    reduce_all = false;
  }
  for (int64_t& d : dims) if (d < 0) d += static_cast<int64_t>(x.shape.size());
  std::vector<double> acc(static_cast<size_t>(shape_numel(spec.shape)), is_all ? 1.0 : 0.0);
  Shape index(x.shape.size(), 0);
  if (x.numel() > 0) do {
      int64_t flat = 0, stride = 1;
      for (size_t d = x.shape.size(); d-- > 0;) {
        bool reduced = reduce_all || std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end();
        if (!reduced) {
          flat += index[d] * stride;
          stride *= x.shape[d];
        }
      }
      const bool nonzero = x.at(index) != 0;  // NaN != 0
      double& a = acc[static_cast<size_t>(flat)];
      a = is_all ? double(a != 0 && nonzero) : double(a != 0 || nonzero);
    } while (next_index(index, x.shape));
  return {HostTensor::from_values(spec.dtype, spec.shape, acc)};
}

// tril / triu (self, diagonal) over the last two dims.
std::vector<HostTensor> run_triangle(const KernelCase& c, bool lower) {
  const HostTensor& x = c.inputs[0].tensor;
  const int64_t diagonal = c.inputs[1].i;
  std::vector<double> values;
  Shape index(x.shape.size(), 0);
  const size_t n = x.shape.size();
  if (x.numel() > 0) do {
      const int64_t offset = index[n - 1] - index[n - 2];
      const bool keep = lower ? offset <= diagonal : offset >= diagonal;
      values.push_back(keep ? x.at(index) : 0.0);
    } while (next_index(index, x.shape));
  return {HostTensor::from_values(c.outputs.at(0).dtype, c.outputs.at(0).shape, values)};
}

std::vector<HostTensor> run_mm(const KernelCase& c) {
  const HostTensor& a = c.inputs[0].tensor;
  const HostTensor& b = c.inputs[1].tensor;
  const OutputSpec& spec = c.outputs.at(0);
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a.at({i, p}) * b.at({p, j});
      out[static_cast<size_t>(i * n + j)] = s;
    }
  return {HostTensor::from_values(spec.dtype, spec.shape, out)};
}

// ---- batch norm: x [N, C, *] as [n, c, inner], per-channel vectors of any floating dtype ----

struct ChannelView {
  int64_t n = 0, c = 0, inner = 1;
  int64_t at(int64_t b, int64_t ch, int64_t i) const { return (b * c + ch) * inner + i; }
};

ChannelView channel_view(const HostTensor& x) {
  ChannelView v{x.shape.at(0), x.shape.at(1), 1};
  for (size_t d = 2; d < x.shape.size(); ++d) v.inner *= x.shape[d];
  return v;
}

std::vector<double> per_channel(const CaseArg& a, int64_t c, double fill) {
  if (a.kind != CaseArg::Kind::Tensor) return std::vector<double>(static_cast<size_t>(c), fill);
  return a.tensor.values();
}

// native_batch_norm / _native_batch_norm_legit (x, w?, b?, running_mean?, running_var?, training,
// momentum, eps); `no_training`: _native_batch_norm_legit_no_training (x, w?, b?, rm, rv, momentum,
// eps). Outputs: y, save_mean, save_invstd (the last two empty in eval).
std::vector<HostTensor> run_batch_norm(const KernelCase& c, bool no_training) {
  const HostTensor& x = c.inputs[0].tensor;
  const ChannelView v = channel_view(x);
  const bool training = !no_training && c.inputs[5].b;
  const double eps = number(c.inputs[no_training ? 6 : 7]);
  const std::vector<double> w = per_channel(c.inputs[1], v.c, 1.0), b = per_channel(c.inputs[2], v.c, 0.0);
  std::vector<double> mean = per_channel(c.inputs[3], v.c, 0.0), invstd = per_channel(c.inputs[4], v.c, 1.0);
  if (training) {
    batch_norm_stats(x, eps, mean, invstd);
  } else {
    for (double& var : invstd) var = 1.0 / std::sqrt(var + eps);  // the running variance was passed
  }
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t bt = 0; bt < v.n; ++bt)
    for (int64_t ch = 0; ch < v.c; ++ch)
      for (int64_t i = 0; i < v.inner; ++i) {
        const auto k = static_cast<size_t>(ch);
        const int64_t at = v.at(bt, ch, i);
        y[static_cast<size_t>(at)] = (x.get_storage(at) - mean[k]) * invstd[k] * w[k] + b[k];
      }
  std::vector<HostTensor> out{HostTensor::from_values(c.outputs[0].dtype, c.outputs[0].shape, y)};
  for (size_t o = 1; o < 3; ++o) {
    const OutputSpec& spec = c.outputs[o];
    out.push_back(shape_numel(spec.shape) == v.c ? HostTensor::from_values(spec.dtype, spec.shape, o == 1 ? mean : invstd)
                                                  : HostTensor::zeros(spec.dtype, spec.shape));
  }
  return out;
}

// native_batch_norm_backward(grad_out, x, w?, running_mean?, running_var?, save_mean?, save_invstd?,
// train, eps, output_mask) -> (grad_input, grad_weight, grad_bias).
std::vector<HostTensor> run_batch_norm_backward(const KernelCase& c) {
  const HostTensor& g = c.inputs[0].tensor;
  const HostTensor& x = c.inputs[1].tensor;
  const ChannelView v = channel_view(x);
  const bool training = c.inputs[7].b;
  const double eps = number(c.inputs[8]);
  const std::vector<double> w = per_channel(c.inputs[2], v.c, 1.0);
  const std::vector<double> mean = per_channel(c.inputs[training ? 5 : 3], v.c, 0.0);
  std::vector<double> invstd = per_channel(c.inputs[training ? 6 : 4], v.c, 1.0);
  if (!training)
    for (double& var : invstd) var = 1.0 / std::sqrt(var + eps);
  std::vector<double> sum_g(static_cast<size_t>(v.c), 0.0), sum_gxhat(static_cast<size_t>(v.c), 0.0);
  for (int64_t bt = 0; bt < v.n; ++bt)
    for (int64_t ch = 0; ch < v.c; ++ch)
      for (int64_t i = 0; i < v.inner; ++i) {
        const auto k = static_cast<size_t>(ch);
        const int64_t at = v.at(bt, ch, i);
        sum_g[k] += g.get_storage(at);
        sum_gxhat[k] += g.get_storage(at) * (x.get_storage(at) - mean[k]) * invstd[k];
      }
  const double m = static_cast<double>(v.n * v.inner);
  std::vector<double> dx(static_cast<size_t>(x.numel()));
  for (int64_t bt = 0; bt < v.n; ++bt)
    for (int64_t ch = 0; ch < v.c; ++ch)
      for (int64_t i = 0; i < v.inner; ++i) {
        const auto k = static_cast<size_t>(ch);
        const int64_t at = v.at(bt, ch, i);
        const double xhat = (x.get_storage(at) - mean[k]) * invstd[k];
        const double d = training ? g.get_storage(at) - sum_g[k] / m - xhat * sum_gxhat[k] / m : g.get_storage(at);
        dx[static_cast<size_t>(at)] = d * w[k] * invstd[k];
      }
  return {HostTensor::from_values(c.outputs[0].dtype, c.outputs[0].shape, dx),
          HostTensor::from_values(c.outputs[1].dtype, c.outputs[1].shape, sum_gxhat),
          HostTensor::from_values(c.outputs[2].dtype, c.outputs[2].shape, sum_g)};
}

}  // namespace

void batch_norm_stats(const HostTensor& x, double eps, std::vector<double>& mean, std::vector<double>& invstd) {
  const ChannelView v = channel_view(x);
  const double m = static_cast<double>(v.n * v.inner);
  mean.assign(static_cast<size_t>(v.c), 0.0);
  invstd.assign(static_cast<size_t>(v.c), 0.0);
  for (int64_t ch = 0; ch < v.c; ++ch) {
    const auto k = static_cast<size_t>(ch);
    double s = 0, s2 = 0;
    for (int64_t bt = 0; bt < v.n; ++bt)
      for (int64_t i = 0; i < v.inner; ++i) s += x.get_storage(v.at(bt, ch, i));
    mean[k] = s / m;
    for (int64_t bt = 0; bt < v.n; ++bt)
      for (int64_t i = 0; i < v.inner; ++i) s2 += std::pow(x.get_storage(v.at(bt, ch, i)) - mean[k], 2);
    invstd[k] = s2 / m + eps == 0 ? 0.0 : 1.0 / std::sqrt(s2 / m + eps);
  }
}

// Fused attention (abi/fl_abi.h's contract): per row, scores s_j = scale q.k_j + bias_ij with
// keys j > i masked when causal; logsumexp over them (-inf when every key is masked, output 0).
struct AttentionCase {
  const HostTensor *q, *k, *v, *bias;
  int64_t b, h, lq, lk, e, ev;
  bool causal;
  double scale;
};

AttentionCase attention_case(const KernelCase& c, size_t first) {
  AttentionCase a{};
  a.q = &c.inputs[first].tensor;
  a.k = &c.inputs[first + 1].tensor;
  a.v = &c.inputs[first + 2].tensor;
  a.bias = c.inputs[first + 3].kind == CaseArg::Kind::Tensor ? &c.inputs[first + 3].tensor : nullptr;
  a.b = a.q->shape[0], a.h = a.q->shape[1], a.lq = a.q->shape[2], a.lk = a.k->shape[2];
  a.e = a.q->shape[3], a.ev = a.v->shape[3];
  return a;
}

std::vector<double> attention_scores(const AttentionCase& a, int64_t b, int64_t h, int64_t i) {
  std::vector<double> s(static_cast<size_t>(a.lk), -INFINITY);
  for (int64_t j = 0; j < a.lk; ++j) {
    if (a.causal && j > i) continue;
    double dot = 0;
    for (int64_t x = 0; x < a.e; ++x) dot += a.q->at({b, h, i, x}) * a.k->at({b, h, j, x});
    s[static_cast<size_t>(j)] = dot * a.scale + (a.bias ? a.bias->at({b, h, i, j}) : 0.0);
  }
  return s;
}

double log_sum_exp(const std::vector<double>& s) {
  double max = -INFINITY;
  for (double x : s) max = std::max(max, x);
  if (max == -INFINITY) return -INFINITY;
  double sum = 0;
  for (double x : s) sum += std::exp(x - max);
  return max + std::log(sum);
}

std::vector<HostTensor> run_fused_attention(const KernelCase& c) {
  AttentionCase a = attention_case(c, 0);
  a.causal = c.inputs[5].b;
  a.scale = c.inputs[7].kind == CaseArg::Kind::None ? 1.0 / std::sqrt(static_cast<double>(a.e)) : number(c.inputs[7]);
  std::vector<double> out, lse;
  for (int64_t b = 0; b < a.b; ++b)
    for (int64_t h = 0; h < a.h; ++h)
      for (int64_t i = 0; i < a.lq; ++i) {
        const std::vector<double> s = attention_scores(a, b, h, i);
        const double l = log_sum_exp(s);
        lse.push_back(l);
        for (int64_t x = 0; x < a.ev; ++x) {
          double acc = 0;
          if (l != -INFINITY)
            for (int64_t j = 0; j < a.lk; ++j) acc += std::exp(s[static_cast<size_t>(j)] - l) * a.v->at({b, h, j, x});
          out.push_back(acc);
        }
      }
  return {HostTensor::from_values(c.outputs[0].dtype, c.outputs[0].shape, out),
          HostTensor::from_values(FL_DTYPE_FLOAT32, c.outputs[1].shape, lse)};
}

// dS = P * (dO V^T - rowsum(dO * O)); dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO, dbias = dS.
std::vector<HostTensor> run_fused_attention_backward(const KernelCase& c) {
  AttentionCase a = attention_case(c, 1);
  a.causal = c.inputs[13].b;
  a.scale = c.inputs[16].kind == CaseArg::Kind::None ? 1.0 / std::sqrt(static_cast<double>(a.e)) : number(c.inputs[16]);
  const HostTensor& grad = c.inputs[0].tensor;
  const HostTensor& out = c.inputs[6].tensor;
  std::vector<double> dq(static_cast<size_t>(a.b * a.h * a.lq * a.e)), dk(static_cast<size_t>(a.b * a.h * a.lk * a.e)),
      dv(static_cast<size_t>(a.b * a.h * a.lk * a.ev)), dbias(static_cast<size_t>(a.b * a.h * a.lq * a.lk));
  for (int64_t b = 0; b < a.b; ++b)
    for (int64_t h = 0; h < a.h; ++h) {
      const int64_t bh = b * a.h + h;
      for (int64_t i = 0; i < a.lq; ++i) {
        const std::vector<double> s = attention_scores(a, b, h, i);
        const double l = log_sum_exp(s);  // exact: the saved one is float32
        double delta = 0;
        for (int64_t x = 0; x < a.ev; ++x) delta += grad.at({b, h, i, x}) * out.at({b, h, i, x});
        for (int64_t j = 0; j < a.lk; ++j) {
          const double p = l == -INFINITY ? 0.0 : std::exp(s[static_cast<size_t>(j)] - l);
          double dp = 0;
          for (int64_t x = 0; x < a.ev; ++x) {
            dp += grad.at({b, h, i, x}) * a.v->at({b, h, j, x});
            dv[static_cast<size_t>((bh * a.lk + j) * a.ev + x)] += p * grad.at({b, h, i, x});
          }
          const double ds = p * (dp - delta);
          dbias[static_cast<size_t>((bh * a.lq + i) * a.lk + j)] = ds;
          for (int64_t x = 0; x < a.e; ++x) {
            dq[static_cast<size_t>((bh * a.lq + i) * a.e + x)] += a.scale * ds * a.k->at({b, h, j, x});
            dk[static_cast<size_t>((bh * a.lk + j) * a.e + x)] += a.scale * ds * a.q->at({b, h, i, x});
          }
        }
      }
    }
  std::vector<HostTensor> results;
  const std::vector<double>* values[] = {&dq, &dk, &dv, &dbias};
  for (size_t o = 0; o < c.outputs.size(); ++o)
    results.push_back(HostTensor::from_values(c.outputs[o].dtype, c.outputs[o].shape, *values[o]));
  return results;
}

std::optional<std::vector<HostTensor>> naive_run(const std::string& op, const KernelCase& c) {
  auto it = elementwise_table().find(op);
  if (it != elementwise_table().end()) return run_elementwise(it->second, c);
  if (op == "aten::sum.IntList_out" || op == "aten::sum.out") return run_sum(c);
  if (op == "aten::mm.out") return run_mm(c);
  if (op == "aten::linalg_vector_norm.out") return run_vector_norm(c);
  if (op.rfind("aten::all.", 0) == 0) return run_logical_reduction(c, true);
  if (op.rfind("aten::any.", 0) == 0) return run_logical_reduction(c, false);
  if (op == "aten::tril.out") return run_triangle(c, true);
  if (op == "aten::arange.start_out") {
    std::vector<double> v;
    for (int64_t i = 0; i < shape_numel(c.outputs.at(0).shape); ++i)
      v.push_back(number(c.inputs[0]) + static_cast<double>(i) * number(c.inputs[2]));
    return std::vector<HostTensor>{HostTensor::from_values(c.outputs.at(0).dtype, c.outputs.at(0).shape, v)};
  }
  if (op == "aten::triu.out") return run_triangle(c, false);
  if (op == "aten::mse_loss.out") return run_mse_loss(c, false);
  if (op == "aten::_scaled_dot_product_fused_attention_overrideable") return run_fused_attention(c);
  if (op == "aten::_scaled_dot_product_fused_attention_overrideable_backward") return run_fused_attention_backward(c);
  if (op == "aten::mse_loss_backward.grad_input") return run_mse_loss(c, true);
  const std::string base = op.substr(0, op.find('.'));
  if (base == "aten::native_batch_norm" || base == "aten::_native_batch_norm_legit") return run_batch_norm(c, false);
  if (base == "aten::_native_batch_norm_legit_no_training") return run_batch_norm(c, true);
  if (base == "aten::native_batch_norm_backward") return run_batch_norm_backward(c);
  if (auto statistics = naive_run_statistics(op, c)) return statistics;
  if (auto rms_norm = naive_run_rms_norm(op, c)) return rms_norm;
  if (auto sorting = naive_run_sorting(op, c)) return sorting;
  return naive_run_indexing(op, c);
}

}  // namespace fl::check
