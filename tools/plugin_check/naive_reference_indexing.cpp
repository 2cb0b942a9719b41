// naive_reference_indexing.cpp — double-precision loops for gather, scatter (src and value),
// scatter_add, flip and cumsum, the cases of case_catalog_indexing.cpp. A 0-dim tensor counts
// as one element along dim 0, as in ATen.
#include "naive_reference.h"

#include <algorithm>
#include <cmath>

namespace fl::check {
namespace {

double scalar(const CaseArg& a) {
  switch (a.kind) {
    case CaseArg::Kind::Int: return static_cast<double>(a.i);
    case CaseArg::Kind::Double: return a.d;
    case CaseArg::Kind::Bool: return a.b ? 1 : 0;
    default: return 0;
  }
}

size_t wrap(int64_t dim, size_t ndim) {
  const auto n = static_cast<int64_t>(ndim == 0 ? 1 : ndim);
  return static_cast<size_t>(dim < 0 ? dim + n : dim);
}

// `position` with its coordinate along dim replaced by k (a 0-dim position stays empty).
Shape moved(Shape position, size_t dim, int64_t k) {
  if (!position.empty()) position[dim] = k;
  return position;
}

// Row-major flat offset of `position` in a contiguous tensor of `shape`.
int64_t flat(const Shape& shape, const Shape& position) {
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) offset = offset * shape[d] + position[d];
  return offset;
}

std::vector<HostTensor> run_gather(const KernelCase& c) {
  const HostTensor& self = c.inputs[0].tensor;
  const size_t dim = wrap(c.inputs[1].i, self.shape.size());
  const HostTensor& index = c.inputs[2].tensor;
  const OutputSpec& spec = c.outputs.at(0);
  std::vector<double> out;
  Shape p(index.shape.size(), 0);
  if (index.numel() > 0) do {
      out.push_back(self.at(moved(p, dim, static_cast<int64_t>(index.at(p)))));
    } while (next_index(p, index.shape));
  return {HostTensor::from_values(spec.dtype, spec.shape, out)};
}

// scatter (add: false) and scatter_add (add: true); src nullptr: the scalar input 3.
std::vector<HostTensor> run_scatter(const KernelCase& c, bool add) {
  const HostTensor& self = c.inputs[0].tensor;
  const size_t dim = wrap(c.inputs[1].i, self.shape.size());
  const HostTensor& index = c.inputs[2].tensor;
  const CaseArg& source = c.inputs[3];
  const OutputSpec& spec = c.outputs.at(0);
  std::vector<double> out = self.values();
  Shape p(index.shape.size(), 0);
  if (index.numel() > 0) do {
      const double v = source.kind == CaseArg::Kind::Tensor ? source.tensor.at(p) : scalar(source);
      double& target = out[static_cast<size_t>(flat(self.shape, moved(p, dim, static_cast<int64_t>(index.at(p)))))];
      target = add ? target + v : v;
    } while (next_index(p, index.shape));
  return {HostTensor::from_values(spec.dtype, spec.shape, out)};
}

std::vector<HostTensor> run_flip(const KernelCase& c) {
  const HostTensor& self = c.inputs[0].tensor;
  std::vector<bool> flipped(std::max<size_t>(self.shape.size(), 1), false);
  for (int64_t d : c.inputs[1].ints) flipped[wrap(d, self.shape.size())] = true;
  std::vector<double> out;
  Shape p(self.shape.size(), 0);
  if (self.numel() > 0) do {
      Shape q = p;
      for (size_t d = 0; d < q.size(); ++d)
        if (flipped[d]) q[d] = self.shape[d] - 1 - p[d];
      out.push_back(self.at(q));
    } while (next_index(p, self.shape));
  return {HostTensor::from_values(c.outputs.at(0).dtype, c.outputs.at(0).shape, out)};
}

// Each element converted to out's dtype first, as ATen's cumsum; partial sums in double.
std::vector<HostTensor> run_cumsum(const KernelCase& c) {
  const HostTensor& self = c.inputs[0].tensor;
  const size_t dim = wrap(c.inputs[1].i, self.shape.size());
  const OutputSpec& spec = c.outputs.at(0);
  std::vector<double> out;
  Shape p(self.shape.size(), 0);
  if (self.numel() > 0) do {
      double sum = 0;
      const int64_t upto = p.empty() ? 0 : p[dim];
      for (int64_t i = 0; i <= upto; ++i) sum += round_to_dtype(self.at(moved(p, dim, i)), spec.dtype);
      out.push_back(sum);
    } while (next_index(p, self.shape));
  return {HostTensor::from_values(spec.dtype, spec.shape, out)};
}

}  // namespace

std::optional<std::vector<HostTensor>> naive_run_indexing(const std::string& op, const KernelCase& c) {
  if (op == "aten::gather.out") return run_gather(c);
  if (op == "aten::scatter.src_out" || op == "aten::scatter.value_out") return run_scatter(c, false);
  if (op == "aten::scatter_add.out") return run_scatter(c, true);
  if (op == "aten::flip.out") return run_flip(c);
  if (op == "aten::cumsum.out") return run_cumsum(c);
  return std::nullopt;
}

}  // namespace fl::check
