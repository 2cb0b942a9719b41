// naive_reference_statistics.cpp — double-precision loops for native_group_norm_backward and
// var/std/var_mean/std_mean (.correction_out), straight from their definitions.
#include "naive_reference.h"

#include <algorithm>
#include <cmath>

namespace fl::check {
namespace {

double number_or(const CaseArg& a, double fallback) {
  switch (a.kind) {
    case CaseArg::Kind::Int: return static_cast<double>(a.i);
    case CaseArg::Kind::Double: return a.d;
    case CaseArg::Kind::Bool: return a.b ? 1 : 0;
    default: return fallback;
  }
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask),
// with the saved mean/rstd as given: per (n, g) of M elements, xhat = (x - mean) * rstd,
// dx = rstd * (dy*w - sum(dy*w)/M - xhat * sum(dy*w*xhat)/M); per channel dgamma = sum dy*xhat,
// dbeta = sum dy.
std::vector<HostTensor> run_group_norm_backward(const KernelCase& c) {
  const HostTensor& dy = c.inputs[0].tensor;
  const HostTensor& x = c.inputs[1].tensor;
  const HostTensor& mean = c.inputs[2].tensor;
  const HostTensor& rstd = c.inputs[3].tensor;
  const bool has_weight = c.inputs[4].kind == CaseArg::Kind::Tensor;
  const int64_t n = c.inputs[5].i, ch = c.inputs[6].i, hw = c.inputs[7].i, group = c.inputs[8].i;
  const int64_t d = ch / group;
  auto w = [&](int64_t k) { return has_weight ? c.inputs[4].tensor.get_storage(k) : 1.0; };
  std::vector<double> dx(static_cast<size_t>(x.numel())), dgamma(static_cast<size_t>(ch)), dbeta(dgamma.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t g = 0; g < group; ++g) {
      const int64_t ng = b * group + g;
      const double mu = mean.get_storage(ng), rs = rstd.get_storage(ng);
      double sum_g = 0, sum_gx = 0;
      for (int64_t k = g * d; k < (g + 1) * d; ++k)
        for (int64_t i = 0; i < hw; ++i) {
          const int64_t at = (b * ch + k) * hw + i;
          const double xhat = (x.get_storage(at) - mu) * rs;
          sum_g += dy.get_storage(at) * w(k);
          sum_gx += dy.get_storage(at) * w(k) * xhat;
          dgamma[static_cast<size_t>(k)] += dy.get_storage(at) * xhat;
          dbeta[static_cast<size_t>(k)] += dy.get_storage(at);
        }
      const double m = static_cast<double>(d * hw);
      for (int64_t k = g * d; k < (g + 1) * d; ++k)
        for (int64_t i = 0; i < hw; ++i) {
          const int64_t at = (b * ch + k) * hw + i;
          const double xhat = (x.get_storage(at) - mu) * rs;
          dx[static_cast<size_t>(at)] = rs * (dy.get_storage(at) * w(k) - sum_g / m - xhat * sum_gx / m);
        }
    }
  return {HostTensor::from_values(c.outputs[0].dtype, c.outputs[0].shape, dx),
          HostTensor::from_values(c.outputs[1].dtype, c.outputs[1].shape, dgamma),
          HostTensor::from_values(c.outputs[2].dtype, c.outputs[2].shape, dbeta)};
}

// (self, dim?, correction?, keepdim) -> var or std [, mean]: the mean and the sum of squared
// deviations per output, var = m2 / max(0, n - correction) (NaN for an empty reduction).
std::vector<HostTensor> run_variance(const KernelCase& c, bool take_sqrt) {
  const HostTensor& x = c.inputs[0].tensor;
  std::vector<int64_t> dims;
  if (c.inputs[1].kind == CaseArg::Kind::IntList) dims = c.inputs[1].ints;
  for (int64_t& dim : dims) if (dim < 0) dim += static_cast<int64_t>(x.shape.size());
  const double correction = number_or(c.inputs[2], 1.0);
  const OutputSpec& spec = c.outputs.at(0);
  const size_t outs = static_cast<size_t>(shape_numel(spec.shape));
  // Each element's output slot: its kept dims, row-major.
  auto slot = [&](const Shape& index) {
    int64_t flat = 0;
    for (size_t dim = 0; dim < x.shape.size(); ++dim) {
      const bool reduced = dims.empty() || std::find(dims.begin(), dims.end(), static_cast<int64_t>(dim)) != dims.end();
      if (!reduced) flat = flat * x.shape[dim] + index[dim];
    }
    return static_cast<size_t>(flat);
  };
  std::vector<double> sum(outs, 0.0), m2(outs, 0.0);
  Shape index(x.shape.size(), 0);
  if (x.numel() > 0) do {
      sum[slot(index)] += x.at(index);
    } while (next_index(index, x.shape));
  const double per_output = outs == 0 ? 0.0 : static_cast<double>(x.numel()) / static_cast<double>(outs);
  std::vector<double> mean(outs);
  for (size_t o = 0; o < outs; ++o) mean[o] = sum[o] / per_output;
  std::fill(index.begin(), index.end(), 0);
  if (x.numel() > 0) do {
      m2[slot(index)] += std::pow(x.at(index) - mean[slot(index)], 2);
    } while (next_index(index, x.shape));
  std::vector<double> var(outs);
  for (size_t o = 0; o < outs; ++o) {
    var[o] = m2[o] / std::max(0.0, per_output - correction);
    if (take_sqrt) var[o] = std::sqrt(var[o]);
  }
  std::vector<HostTensor> results{HostTensor::from_values(spec.dtype, spec.shape, var)};
  if (c.outputs.size() > 1) results.push_back(HostTensor::from_values(c.outputs[1].dtype, c.outputs[1].shape, mean));
  return results;
}

}  // namespace

std::optional<std::vector<HostTensor>> naive_run_statistics(const std::string& op, const KernelCase& c) {
  if (op == "aten::native_group_norm_backward" || op == "aten::native_group_norm_backward.out")
    return run_group_norm_backward(c);
  if (op == "aten::var.correction_out" || op == "aten::var_mean.correction_out") return run_variance(c, false);
  if (op == "aten::std.correction_out" || op == "aten::std_mean.correction_out") return run_variance(c, true);
  return std::nullopt;
}

}  // namespace fl::check
