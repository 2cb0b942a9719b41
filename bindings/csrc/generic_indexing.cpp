#include "generic_indexing.h"

#include <ATen/ATen.h>

#include <numeric>

namespace fl::binding {

bool index_tensor(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor& self = in[0].toTensor();
  const c10::List<std::optional<at::Tensor>> listed = in[1].toOptionalTensorList();
  std::vector<int64_t> dims;
  std::vector<at::Tensor> indices;
  for (size_t d = 0; d < listed.size(); ++d) {
    const std::optional<at::Tensor> index = listed.get(d);
    if (!index.has_value() || !index->defined()) continue;
    if (index->scalar_type() != at::kLong && index->scalar_type() != at::kInt) return false;
    dims.push_back(static_cast<int64_t>(d));
    indices.push_back(*index);
  }
  if (indices.empty() || static_cast<int64_t>(listed.size()) > self.dim()) return false;
  const std::vector<at::Tensor> broadcast = at::broadcast_tensors(indices);
  const std::vector<int64_t> index_shape = broadcast[0].sizes().vec();

  // One index tensor: index_select along its dimension (an index out of range is reported for
  // that dimension, in ATen's words).
  if (dims.size() == 1) {
    const int64_t dim = dims[0], size = self.size(dim);
    const at::Tensor k = broadcast[0].to(self.device(), at::kLong);
    const at::Tensor wrapped = at::where(at::logical_and(at::lt(k, 0), at::ge(k, -size)), at::add(k, size), k);
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().begin() + dim);
    shape.insert(shape.end(), index_shape.begin(), index_shape.end());
    shape.insert(shape.end(), self.sizes().begin() + dim + 1, self.sizes().end());
    out[0].copy_(at::index_select(self, dim, wrapped.reshape({-1})).view(shape));
    return true;
  }

  // self with the indexed dimensions first (in order), flattened into one.
  std::vector<int64_t> order(dims);
  std::vector<int64_t> rest_shape;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) continue;
    order.push_back(d);
    rest_shape.push_back(self.size(d));
  }
  int64_t flat_size = 1;
  for (int64_t d : dims) flat_size *= self.size(d);
  std::vector<int64_t> flat_shape{flat_size};
  flat_shape.insert(flat_shape.end(), rest_shape.begin(), rest_shape.end());
  const at::Tensor flat = self.permute(order).reshape(flat_shape);

  // Each element's row in `flat`: the indices wrapped, combined last dimension fastest; -1 where
  // one is out of range.
  at::Tensor position, valid;
  int64_t stride = 1;
  for (size_t j = dims.size(); j-- > 0;) {
    const int64_t size = self.size(dims[j]);
    const at::Tensor k = broadcast[j].to(self.device(), at::kLong);
    const at::Tensor wrapped = at::where(at::lt(k, 0), at::add(k, size), k);
    const at::Tensor in_range = at::logical_and(at::ge(wrapped, 0), at::lt(wrapped, size));
    const at::Tensor term = at::mul(wrapped, stride);
    position = position.defined() ? at::add(position, term) : term;
    valid = valid.defined() ? at::logical_and(valid, in_range) : in_range;
    stride *= size;
  }
  position = at::where(valid, position, at::full({}, -1, position.options()));
  at::Tensor picked = at::index_select(flat, 0, position.reshape({-1}));
  std::vector<int64_t> picked_shape(index_shape);
  picked_shape.insert(picked_shape.end(), rest_shape.begin(), rest_shape.end());
  picked = picked.view(picked_shape);

  // Adjacent indexed dimensions: the index shape goes where they were.
  const bool adjacent = dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
  if (adjacent && dims.front() > 0) {
    std::vector<int64_t> from(index_shape.size()), to(index_shape.size());
    std::iota(from.begin(), from.end(), 0);
    std::iota(to.begin(), to.end(), dims.front());
    picked = picked.movedim(from, to);
  }
  out[0].copy_(picked);
  return true;
}

}  // namespace fl::binding
