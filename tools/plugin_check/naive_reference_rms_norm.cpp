// naive_reference_rms_norm.cpp — double-precision loops for _fused_rms_norm and
// _fused_rms_norm_backward, straight from their definitions (rows of N = prod(normalized_shape)
// trailing elements): rstd = 1/sqrt(mean(x^2) + eps), out = x * rstd * w;
// dx = rstd * (dy*w - x*rstd * sum(dy*w*x*rstd)/N), dw = sum over rows of dy*x*rstd.
#include "naive_reference.h"

#include <cmath>
#include <limits>

namespace fl::check {

double rms_norm_default_eps(fl_dtype_t input_dtype) {
  return input_dtype == FL_DTYPE_FLOAT64 ? std::numeric_limits<double>::epsilon()
                                         : static_cast<double>(std::numeric_limits<float>::epsilon());
}

std::vector<double> rms_norm_rstd(const HostTensor& x, int64_t cols, double eps) {
  const std::vector<double> v = x.values();
  const int64_t rows = cols > 0 ? x.numel() / cols : 0;
  std::vector<double> rstd(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (int64_t c = 0; c < cols; ++c) sum_sq += v[static_cast<size_t>(r * cols + c)] * v[static_cast<size_t>(r * cols + c)];
    rstd[static_cast<size_t>(r)] = 1.0 / std::sqrt(sum_sq / static_cast<double>(cols) + eps);
  }
  return rstd;
}

namespace {

int64_t prod(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// (input, normalized_shape, weight?, eps?) -> (out, rstd)
std::vector<HostTensor> run_forward(const KernelCase& c) {
  const HostTensor& x = c.inputs[0].tensor;
  const int64_t cols = prod(c.inputs[1].ints);
  const bool has_weight = c.inputs[2].kind == CaseArg::Kind::Tensor;
  const double eps = c.inputs[3].kind == CaseArg::Kind::Double ? c.inputs[3].d : rms_norm_default_eps(x.dtype);
  const std::vector<double> rstd = rms_norm_rstd(x, cols, eps);
  const std::vector<double> v = x.values();
  const std::vector<double> w = has_weight ? c.inputs[2].tensor.values() : std::vector<double>{};
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t col = static_cast<size_t>(static_cast<int64_t>(i) % cols);
    out[i] = v[i] * rstd[i / static_cast<size_t>(cols)] * (has_weight ? w[col] : 1.0);
  }
  return {HostTensor::from_values(c.outputs[0].dtype, c.outputs[0].shape, out),
          HostTensor::from_values(c.outputs[1].dtype, c.outputs[1].shape, rstd)};
}

// (grad_out, input, normalized_shape, rstd, weight?, output_mask) -> (grad_input, grad_weight)
std::vector<HostTensor> run_backward(const KernelCase& c) {
  const std::vector<double> dy = c.inputs[0].tensor.values(), x = c.inputs[1].tensor.values();
  const int64_t cols = prod(c.inputs[2].ints);
  const std::vector<double> rstd = c.inputs[3].tensor.values();
  const bool has_weight = c.inputs[4].kind == CaseArg::Kind::Tensor;
  const std::vector<double> w = has_weight ? c.inputs[4].tensor.values() : std::vector<double>(static_cast<size_t>(cols), 1.0);
  const int64_t rows = static_cast<int64_t>(rstd.size());
  std::vector<double> dx(x.size()), dw(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double rs = rstd[static_cast<size_t>(r)];
    double sum_gx = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = static_cast<size_t>(r * cols + k);
      sum_gx += dy[i] * w[static_cast<size_t>(k)] * x[i] * rs;
      dw[static_cast<size_t>(k)] += dy[i] * x[i] * rs;
    }
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = static_cast<size_t>(r * cols + k);
      dx[i] = rs * (dy[i] * w[static_cast<size_t>(k)] - x[i] * rs * sum_gx / static_cast<double>(cols));
    }
  }
  return {HostTensor::from_values(c.outputs[0].dtype, c.outputs[0].shape, dx),
          HostTensor::from_values(c.outputs[1].dtype, c.outputs[1].shape, dw)};
}

}  // namespace

std::optional<std::vector<HostTensor>> naive_run_rms_norm(const std::string& op, const KernelCase& c) {
  if (op == "aten::_fused_rms_norm") return run_forward(c);
  if (op == "aten::_fused_rms_norm_backward") return run_backward(c);
  return std::nullopt;
}

}  // namespace fl::check
