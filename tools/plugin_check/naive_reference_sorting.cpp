// naive_reference_sorting.cpp — sort and topk for the cases of case_catalog_sorting.cpp: each
// line along dim stable-sorted by ATen's order (NaN above every number, -0.0 equal to 0.0,
// equal elements in index order; descending for sort's `descending` and topk's `largest`),
// topk keeping the first k. A 0-dim tensor is one line of one element.
#include "naive_reference.h"

#include <algorithm>
#include <cmath>

namespace fl::check {
namespace {

bool ordered_less(double a, double b) { return (!std::isnan(a) && std::isnan(b)) || a < b; }

std::vector<HostTensor> run_sort(const HostTensor& self, int64_t dim_arg, int64_t keep, bool descending,
                                 const std::vector<OutputSpec>& specs) {
  const size_t ndim = self.shape.size();
  const size_t dim = static_cast<size_t>(dim_arg < 0 ? dim_arg + static_cast<int64_t>(std::max<size_t>(ndim, 1)) : dim_arg);
  const Shape& out_shape = specs.at(0).shape;
  std::vector<double> values(static_cast<size_t>(shape_numel(out_shape))), indices(values.size());
  const Shape out_strides = contiguous_strides(out_shape);
  const int64_t length = ndim == 0 ? 1 : self.shape[dim];
  if (ndim == 0) keep = 1;
  if (self.numel() > 0 && keep > 0) {
    Shape lines = self.shape;
    if (ndim > 0) lines[dim] = 1;
    Shape p(ndim, 0);
    do {
      std::vector<std::pair<double, int64_t>> line;
      for (int64_t i = 0; i < length; ++i) {
        Shape q = p;
        if (ndim > 0) q[dim] = i;
        line.emplace_back(self.at(q), i);
      }
      std::stable_sort(line.begin(), line.end(), [&](const auto& a, const auto& b) {
        return descending ? ordered_less(b.first, a.first) : ordered_less(a.first, b.first);
      });
      for (int64_t j = 0; j < keep; ++j) {
        int64_t offset = 0;
        for (size_t d = 0; d < ndim; ++d) offset += (d == dim ? j : p[d]) * out_strides[d];
        values[static_cast<size_t>(offset)] = line[static_cast<size_t>(j)].first;
        indices[static_cast<size_t>(offset)] = static_cast<double>(line[static_cast<size_t>(j)].second);
      }
    } while (next_index(p, lines));
  }
  return {HostTensor::from_values(specs[0].dtype, out_shape, values),
          HostTensor::from_values(specs[1].dtype, specs[1].shape, indices)};
}

}  // namespace

std::optional<std::vector<HostTensor>> naive_run_sorting(const std::string& op, const KernelCase& c) {
  const HostTensor& self = c.inputs.at(0).tensor;
  if (op == "aten::sort.values_stable") {  // (self, stable, dim, descending)
    const int64_t dim = c.inputs[2].i;
    const size_t wrapped = static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(std::max<size_t>(self.shape.size(), 1)) : dim);
    return run_sort(self, dim, self.shape.empty() ? 1 : self.shape[wrapped], c.inputs[3].b, c.outputs);
  }
  if (op == "aten::topk.values")  // (self, k, dim, largest, sorted)
    return run_sort(self, c.inputs[2].i, c.inputs[1].i, c.inputs[3].b, c.outputs);
  return std::nullopt;
}

}  // namespace fl::check
