// case_catalog_indexing.cpp — cases for gather, scatter (src and value), scatter_add, flip and
// cumsum (inputs in the ATen 2.13 schema order, outputs as the binding allocates them).
// Scatter's indices are distinct along dim within each line: with a repeated index the winning
// write is unspecified on a GPU (ATen's CUDA kernel too), so two plugins could both be right
// and differ. scatter_add repeats indices on purpose (the sums then depend on the order only
// within the dtype's rounding).
#include "case_catalog.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace fl::check {

HostTensor catalog_random(fl_dtype_t dtype, const Shape& shape, double lo, double hi, const std::string& key);
HostTensor catalog_distinct(fl_dtype_t dtype, const Shape& shape, const std::string& key);

namespace {

constexpr fl_dtype_t kI64 = FL_DTYPE_INT64, kI32 = FL_DTYPE_INT32;
using A = CaseArg;

HostTensor rnd(fl_dtype_t dtype, const Shape& shape, const std::string& key) {
  return catalog_random(dtype, shape, -2, 2, key);
}

// Indices in [0, bound), repeats allowed.
HostTensor any_index(fl_dtype_t dtype, const Shape& shape, int64_t bound, const std::string& key) {
  return catalog_random(dtype, shape, -0.49, static_cast<double>(bound) - 0.51, key);
}

// Indices in [0, bound), distinct along `dim` within each line (shape[dim] <= bound): each line
// takes the first shape[dim] values of its own shuffle of [0, bound).
HostTensor distinct_index(fl_dtype_t dtype, const Shape& shape, int64_t dim, int64_t bound, const std::string& key) {
  HostTensor t = HostTensor::zeros(dtype, shape);
  if (t.numel() == 0) return t;
  const HostTensor noise = catalog_random(FL_DTYPE_FLOAT64, {t.numel() * bound}, 0, 1, key);
  const Shape strides = contiguous_strides(shape);
  Shape line(shape.size(), 0);
  Shape line_shape = shape;
  if (!shape.empty()) line_shape[static_cast<size_t>(dim)] = 1;
  int64_t n = 0;
  do {
    std::vector<int64_t> order(static_cast<size_t>(bound));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return noise.get_storage(n * bound + a) < noise.get_storage(n * bound + b);
    });
    const int64_t length = shape.empty() ? 1 : shape[static_cast<size_t>(dim)];
    for (int64_t j = 0; j < length; ++j) {
      int64_t offset = 0;
      for (size_t d = 0; d < shape.size(); ++d) offset += (d == static_cast<size_t>(dim) ? j : line[d]) * strides[d];
      t.set_storage(offset, static_cast<double>(order[static_cast<size_t>(j)]));
    }
    ++n;
  } while (next_index(line, line_shape));
  return t;
}

HostTensor maybe_transposed(HostTensor t, bool transpose) { return transpose ? t.as_transposed_storage() : t; }

// gather.out(self, dim, index, sparse_grad) -> out of index's shape.
CatalogEntry gather() {
  CatalogEntry e;
  e.build = [](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    auto add = [&](const std::string& label, Shape self_shape, int64_t dim, Shape index_shape, fl_dtype_t index_dtype,
                   bool transpose) {
      const int64_t wrapped = dim < 0 ? dim + static_cast<int64_t>(std::max<size_t>(self_shape.size(), 1)) : dim;
      const int64_t bound = self_shape.empty() ? 1 : self_shape[static_cast<size_t>(wrapped)];
      KernelCase c;
      c.label = label;
      c.inputs = {A::of(maybe_transposed(rnd(dtype, self_shape, "gather" + label), transpose)), A::integer(dim),
                  A::of(maybe_transposed(any_index(index_dtype, index_shape, bound, "gather.index" + label), transpose)),
                  A::boolean(false)};
      c.outputs.push_back({dtype, index_shape});
      cases.push_back(std::move(c));
    };
    add("dim 1 of [4,5,6] by [4,3,6]", {4, 5, 6}, 1, {4, 3, 6}, kI64, false);
    add("dim 0 of [5,4] by a smaller [7,3]", {5, 4}, 0, {7, 3}, kI64, false);
    add("dim -1 of [3,7] by int32 [2,9]", {3, 7}, -1, {2, 9}, kI32, false);
    add("0-dim", {}, 0, {}, kI64, false);
    if (strided) add("dim 0 of transposed [5,6] by transposed [3,6]", {5, 6}, 0, {3, 6}, kI64, true);
    add("zero-size index [0,3] of [4,3]", {4, 3}, 0, {0, 3}, kI64, false);
    return cases;
  };
  return e;
}

enum class ScatterForm { Src, Value, Add };

// scatter.src_out(self, dim, index, src), scatter.value_out(self, dim, index, value),
// scatter_add.out(self, dim, index, src) -> out of self's shape.
CatalogEntry scatter(ScatterForm form) {
  CatalogEntry e;
  if (form == ScatterForm::Add) e.tolerance_scale = 4;
  e.build = [form](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    const std::string op = form == ScatterForm::Src ? "scatter" : form == ScatterForm::Value ? "scatter.value" : "scatter_add";
    auto add = [&](const std::string& label, Shape self_shape, int64_t dim, Shape index_shape, Shape src_shape,
                   fl_dtype_t index_dtype, bool transpose) {
      const int64_t wrapped = dim < 0 ? dim + static_cast<int64_t>(std::max<size_t>(self_shape.size(), 1)) : dim;
      const int64_t bound = self_shape.empty() ? 1 : self_shape[static_cast<size_t>(wrapped)];
      const std::string key = op + label;
      HostTensor index = form == ScatterForm::Add ? any_index(index_dtype, index_shape, bound, key + ".index")
                                                  : distinct_index(index_dtype, index_shape, wrapped, bound, key + ".index");
      KernelCase c;
      c.label = label;
      c.inputs = {A::of(maybe_transposed(rnd(dtype, self_shape, key), transpose)), A::integer(dim),
                  A::of(maybe_transposed(std::move(index), transpose))};
      if (form == ScatterForm::Value) c.inputs.push_back(is_floating(dtype) ? A::real(-1.25) : A::integer(7));
      else c.inputs.push_back(A::of(maybe_transposed(rnd(dtype, src_shape, key + ".src"), transpose)));
      c.outputs.push_back({dtype, self_shape});
      cases.push_back(std::move(c));
    };
    add("dim 1 of [4,5,6] by [4,3,6]", {4, 5, 6}, 1, {4, 3, 6}, {4, 3, 6}, kI64, false);
    if (form == ScatterForm::Add) add("dim 0 of [3,4], repeats, by [8,4]", {3, 4}, 0, {8, 4}, {8, 5}, kI64, false);
    add("dim 0 of [5,4] by a smaller [3,2] from [4,3]", {5, 4}, 0, {3, 2}, {4, 3}, kI64, false);
    add("dim -1 of [3,7] by int32 [2,4]", {3, 7}, -1, {2, 4}, {2, 5}, kI32, false);
    add("0-dim", {}, 0, {}, {}, kI64, false);
    if (strided) add("dim 0 of transposed [5,6] by transposed [4,6]", {5, 6}, 0, {4, 6}, {4, 6}, kI64, true);
    add("zero-size index [0,3] of [4,3]", {4, 3}, 0, {0, 3}, {0, 3}, kI64, false);
    return cases;
  };
  return e;
}

// flip.out(self, dims).
CatalogEntry flip() {
  CatalogEntry e;
  e.build = [](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    auto add = [&](const std::string& label, Shape shape, std::vector<int64_t> dims, bool transpose) {
      KernelCase c;
      c.label = label;
      c.inputs = {A::of(maybe_transposed(rnd(dtype, shape, "flip" + label), transpose)), A::int_list(std::move(dims))};
      c.outputs.push_back({dtype, shape});
      cases.push_back(std::move(c));
    };
    add("dims [0] of [4,5]", {4, 5}, {0}, false);
    add("dims [0,2] of [3,4,5]", {3, 4, 5}, {0, 2}, false);
    add("dims [-1,1] of [2,3,4,2]", {2, 3, 4, 2}, {-1, 1}, false);
    add("no dims of [3,4]", {3, 4}, {}, false);
    add("0-dim", {}, {0}, false);
    if (strided) add("dims [1] of transposed [5,6]", {5, 6}, {1}, true);
    add("zero-size [0,3]", {0, 3}, {1}, false);
    return cases;
  };
  return e;
}

// cumsum.out(self, dim, dtype?).
CatalogEntry cumsum() {
  CatalogEntry e;
  e.tolerance_scale = 4;
  e.build = [](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    auto add = [&](const std::string& label, Shape shape, int64_t dim, fl_dtype_t out_dtype, bool dtype_arg,
                   bool transpose) {
      KernelCase c;
      c.label = label;
      c.inputs = {A::of(maybe_transposed(rnd(dtype, shape, "cumsum" + label), transpose)), A::integer(dim),
                  dtype_arg ? A::integer(c10_scalar_type(out_dtype)) : A::none()};
      c.outputs.push_back({out_dtype, shape});
      cases.push_back(std::move(c));
    };
    add("dim 1 of [4,5,6]", {4, 5, 6}, 1, dtype, false, false);
    add("dim -1 of [3,40]", {3, 40}, -1, dtype, false, false);
    add("dim 1 of [2,600] (long lines)", {2, 600}, 1, dtype, false, false);
    add("dim 0 of [300,3] (long lines, strided along dim)", {300, 3}, 0, dtype, false, false);
    add("dim 0 of [7], dtype float64", {7}, 0, FL_DTYPE_FLOAT64, true, false);
    add("0-dim", {}, 0, dtype, false, false);
    if (strided) add("dim 0 of transposed [5,6]", {5, 6}, 0, dtype, false, true);
    add("zero-size [0,3]", {0, 3}, 1, dtype, false, false);
    return cases;
  };
  return e;
}

}  // namespace

void add_indexing_ops(std::map<std::string, CatalogEntry>& table) {
  table["aten::gather.out"] = gather();
  table["aten::scatter.src_out"] = scatter(ScatterForm::Src);
  table["aten::scatter.value_out"] = scatter(ScatterForm::Value);
  table["aten::scatter_add.out"] = scatter(ScatterForm::Add);
  table["aten::flip.out"] = flip();
  table["aten::cumsum.out"] = cumsum();
}

}  // namespace fl::check
