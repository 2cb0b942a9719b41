#include "generic_indexing.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <optional>

namespace fl::binding {
namespace {

bool is_mask(const at::Tensor& t) { return t.scalar_type() == at::kBool || t.scalar_type() == at::kByte; }

// self's dimensions with the indexed ones first, flattened into one: the order, the sizes of
// the others, and each broadcast index element's row in the flattened tensor (-1 where one
// of its indices is out of range; negative indices wrap).
struct FlatIndex {
  std::vector<int64_t> dims;         // the indexed dimensions, ascending
  std::vector<int64_t> order;        // permutation of self's dims: indexed first
  std::vector<int64_t> rest_shape;   // sizes of the other dims, in order
  std::vector<int64_t> index_shape;  // the broadcast shape of the index tensors
  at::Tensor position;               // int64, index_shape
  bool adjacent = false;             // indexed dims consecutive: ATen keeps the index shape in place
};

// The indexed dimensions and their index tensors, broadcast to one shape; false when an index is
// not an integer tensor (a mask, another dtype), when there is none, or too many.
bool integer_indices(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& listed,
                     std::vector<int64_t>& dims, std::vector<at::Tensor>& broadcast) {
  std::vector<at::Tensor> indices;
  for (size_t d = 0; d < listed.size(); ++d) {
    const std::optional<at::Tensor> index = listed.get(d);
    if (!index.has_value() || !index->defined()) continue;
    if (index->scalar_type() != at::kLong && index->scalar_type() != at::kInt) return false;
    dims.push_back(static_cast<int64_t>(d));
    indices.push_back(*index);
  }
  if (indices.empty() || static_cast<int64_t>(listed.size()) > self.dim()) return false;
  broadcast = at::broadcast_tensors(indices);
  return true;
}

FlatIndex flat_index(const at::Tensor& self, std::vector<int64_t> dims, const std::vector<at::Tensor>& broadcast) {
  FlatIndex f;
  f.dims = std::move(dims);
  f.index_shape = broadcast[0].sizes().vec();
  f.order = f.dims;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (std::find(f.dims.begin(), f.dims.end(), d) != f.dims.end()) continue;
    f.order.push_back(d);
    f.rest_shape.push_back(self.size(d));
  }
  at::Tensor valid;
  int64_t stride = 1;
  for (size_t j = f.dims.size(); j-- > 0;) {
    const int64_t size = self.size(f.dims[j]);
    const at::Tensor k = broadcast[j].to(self.device(), at::kLong);
    const at::Tensor wrapped = at::where(at::lt(k, 0), at::add(k, size), k);
    const at::Tensor in_range = at::logical_and(at::ge(wrapped, 0), at::lt(wrapped, size));
    const at::Tensor term = at::mul(wrapped, stride);
    f.position = f.position.defined() ? at::add(f.position, term) : term;
    valid = valid.defined() ? at::logical_and(valid, in_range) : in_range;
    stride *= size;
  }
  f.position = at::where(valid, f.position, at::full({}, -1, f.position.options()));
  f.adjacent = f.dims.back() - f.dims.front() + 1 == static_cast<int64_t>(f.dims.size());
  return f;
}

// self as [rows of the indexed dims, other dims...].
at::Tensor flattened(const at::Tensor& self, const FlatIndex& f) {
  int64_t rows = 1;
  for (int64_t d : f.dims) rows *= self.size(d);
  std::vector<int64_t> shape{rows};
  shape.insert(shape.end(), f.rest_shape.begin(), f.rest_shape.end());
  return self.permute(f.order).reshape(shape);
}

// Moves the index shape's dims between where ATen's result has them (in place of adjacent
// indexed dims) and the front (the flattened layout).
at::Tensor index_dims_to_front(const at::Tensor& t, const FlatIndex& f, bool to_front) {
  if (!f.adjacent || f.dims.front() == 0) return t;
  std::vector<int64_t> front(f.index_shape.size()), in_place(f.index_shape.size());
  std::iota(front.begin(), front.end(), 0);
  std::iota(in_place.begin(), in_place.end(), f.dims.front());
  return to_front ? t.movedim(in_place, front) : t.movedim(front, in_place);
}

}  // namespace

bool index_tensor(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor& self = in[0].toTensor();
  std::vector<int64_t> dims;
  std::vector<at::Tensor> broadcast;
  if (!integer_indices(self, in[1].toOptionalTensorList(), dims, broadcast)) return false;

  // One index tensor: index_select along its dimension (an index out of range is reported for
  // that dimension, in ATen's words).
  if (dims.size() == 1) {
    const int64_t dim = dims[0], size = self.size(dim);
    const at::Tensor k = broadcast[0].to(self.device(), at::kLong);
    const at::Tensor wrapped = at::where(at::logical_and(at::lt(k, 0), at::ge(k, -size)), at::add(k, size), k);
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().begin() + dim);
    shape.insert(shape.end(), k.sizes().begin(), k.sizes().end());
    shape.insert(shape.end(), self.sizes().begin() + dim + 1, self.sizes().end());
    out[0].copy_(at::index_select(self, dim, wrapped.reshape({-1})).view(shape));
    return true;
  }

  const FlatIndex f = flat_index(self, std::move(dims), broadcast);
  at::Tensor picked = at::index_select(flattened(self, f), 0, f.position.reshape({-1}));
  std::vector<int64_t> picked_shape(f.index_shape);
  picked_shape.insert(picked_shape.end(), f.rest_shape.begin(), f.rest_shape.end());
  out[0].copy_(index_dims_to_front(picked.view(picked_shape), f, /*to_front=*/false));
  return true;
}

// x[mask] = v for one boolean mask over some of self's dims and a single value: a where().
bool index_put_with_mask(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& listed,
                         const at::Tensor& values, bool accumulate, at::Tensor& out) {
  int64_t first = -1;
  at::Tensor mask;
  for (size_t d = 0; d < listed.size(); ++d) {
    const std::optional<at::Tensor> index = listed.get(d);
    if (!index.has_value() || !index->defined()) continue;
    if (mask.defined() || !is_mask(*index)) return false;
    first = static_cast<int64_t>(d);
    mask = *index;
  }
  if (!mask.defined() || values.numel() != 1 || first + mask.dim() > self.dim()) return false;
  for (int64_t j = 0; j < mask.dim(); ++j)
    if (mask.size(j) != self.size(first + j)) return false;  // ATen raises its shape error
  std::vector<int64_t> shape(static_cast<size_t>(first), 1);
  shape.insert(shape.end(), mask.sizes().begin(), mask.sizes().end());
  shape.resize(static_cast<size_t>(self.dim()), 1);
  const at::Tensor where = mask.to(self.device(), at::kBool).view(shape);
  const at::Tensor value = values.to(self.device(), self.scalar_type()).reshape({});
  const at::Tensor result = accumulate ? at::add(self, at::where(where, value, at::zeros_like(value)))
                                       : at::where(where, value, self);
  out.copy_(result);
  return true;
}

bool index_put(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out) {
  const at::Tensor& self = in[0].toTensor();
  const c10::List<std::optional<at::Tensor>> listed = in[1].toOptionalTensorList();
  const at::Tensor& values = in[2].toTensor();
  const bool accumulate = in[3].toBool();
  std::vector<int64_t> dims;
  std::vector<at::Tensor> broadcast;
  if (!integer_indices(self, listed, dims, broadcast)) return index_put_with_mask(self, listed, values, accumulate, out[0]);
  const FlatIndex f = flat_index(self, std::move(dims), broadcast);
  // values in ATen's result layout, then as [rows, other dims...] like the flattened self.
  std::vector<int64_t> result_shape(self.sizes().begin(), self.sizes().begin() + f.dims.front());
  if (!(f.adjacent && f.dims.front() > 0)) result_shape.clear();
  result_shape.insert(result_shape.end(), f.index_shape.begin(), f.index_shape.end());
  if (f.adjacent && f.dims.front() > 0)
    result_shape.insert(result_shape.end(), self.sizes().begin() + f.dims.back() + 1, self.sizes().end());
  else
    result_shape.insert(result_shape.end(), f.rest_shape.begin(), f.rest_shape.end());
  const int64_t n = f.position.numel();
  std::vector<int64_t> rows_shape{n};
  rows_shape.insert(rows_shape.end(), f.rest_shape.begin(), f.rest_shape.end());
  const at::Tensor rows =
      index_dims_to_front(values.to(self.device(), self.scalar_type()).expand(result_shape), f, /*to_front=*/true)
          .reshape(rows_shape);
  std::vector<int64_t> position_shape(rows_shape.size(), 1);
  position_shape[0] = n;
  const at::Tensor where = f.position.reshape(position_shape).expand(rows_shape);
  const at::Tensor flat = flattened(self, f);
  const at::Tensor written = accumulate ? at::scatter_add(flat, 0, where, rows) : at::scatter(flat, 0, where, rows);
  // back to self's layout: unflatten the rows, undo the permutation
  std::vector<int64_t> permuted_shape;
  for (int64_t d : f.order) permuted_shape.push_back(self.size(d));
  std::vector<int64_t> inverse(f.order.size());
  for (size_t j = 0; j < f.order.size(); ++j) inverse[static_cast<size_t>(f.order[j])] = static_cast<int64_t>(j);
  out[0].copy_(written.view(permuted_shape).permute(inverse));
  return true;
}

}  // namespace fl::binding
