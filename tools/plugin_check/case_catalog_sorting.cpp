// case_catalog_sorting.cpp — cases for sort (sort.values_stable) and topk (topk.values), inputs
// in the ATen 2.13 schema order, outputs (values, int64 indices) as the binding allocates them.
// What ATen leaves open is put in one canonical order before comparing (canonical_order):
// equal elements of an unstable sort and of topk may come in any index order (their indices are
// sorted within each run of equal values), and topk with sorted=False in any order at all (its
// pairs are sorted by index). Which of several equal values topk keeps at the k-th place is
// open too, so topk's inputs have distinct values per line (NaNs aside, which are all kept or
// all left out).
#include "case_catalog.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace fl::check {

HostTensor catalog_random(fl_dtype_t dtype, const Shape& shape, double lo, double hi, const std::string& key);
HostTensor catalog_distinct(fl_dtype_t dtype, const Shape& shape, const std::string& key);

namespace {

constexpr fl_dtype_t kI64 = FL_DTYPE_INT64;
using A = CaseArg;

size_t wrap(int64_t dim, size_t ndim) {
  const auto n = static_cast<int64_t>(ndim == 0 ? 1 : ndim);
  return static_cast<size_t>(dim < 0 ? dim + n : dim);
}

// Values with many repeats: for floating dtypes NaN, +-inf, -0.0, 0.0 and a few numbers; for
// integers -2..2. Order-sensitive ops then see ties, NaNs and both zeros.
HostTensor special_values(fl_dtype_t dtype, const Shape& shape, const std::string& key) {
  static const double kFloats[] = {NAN, -INFINITY, INFINITY, -0.0, 0.0, 1.5, -1.5, 0.0, NAN, 3.0};
  const HostTensor pick = catalog_random(FL_DTYPE_FLOAT64, shape, 0, 9.999, key);
  std::vector<double> v = pick.values();
  for (double& x : v) x = is_floating(dtype) ? kFloats[static_cast<size_t>(x)] : std::floor(x / 2) - 2;
  return HostTensor::from_values(dtype, shape, v);
}

// Distinct values per tensor, with NaN put at each line's positions 1 and 4 (lines along dim,
// of at least 5 elements) for floating dtypes.
HostTensor distinct_with_nans(fl_dtype_t dtype, const Shape& shape, size_t dim, const std::string& key) {
  HostTensor t = catalog_distinct(dtype, shape, key);
  if (!is_floating(dtype) || t.numel() == 0 || shape.empty()) return t;
  const Shape strides = contiguous_strides(shape);
  for (int64_t e = 0; e < t.numel(); ++e) {
    const int64_t along = (e / strides[dim]) % shape[dim];
    if (along == 1 || along == 4) t.set_storage(e, NAN);
  }
  return t;
}

// Walks each line along `dim` of the outputs (contiguous, all of one shape) and hands `fix` the
// flat offsets of its elements in order.
template <class Fix>
void for_each_line(const Shape& shape, size_t dim, Fix&& fix) {
  if (shape_numel(shape) == 0) return;
  const Shape strides = contiguous_strides(shape);
  const int64_t length = shape.empty() ? 1 : shape[dim];
  const int64_t step = shape.empty() ? 1 : strides[dim];
  Shape start(shape.size(), 0);
  Shape lines = shape;
  if (!shape.empty()) lines[dim] = 1;
  do {
    int64_t base = 0;
    for (size_t d = 0; d < shape.size(); ++d) base += start[d] * strides[d];
    std::vector<int64_t> offsets;
    for (int64_t j = 0; j < length; ++j) offsets.push_back(base + j * step);
    fix(offsets);
  } while (next_index(start, lines));
}

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// outputs = (values, indices): within each line, the indices of each run of equal values in
// ascending order; with `by_index`, the (value, index) pairs of each line sorted by index.
void canonical_lines(std::vector<HostTensor>& outputs, size_t dim, bool by_index) {
  if (outputs.size() < 2) return;
  HostTensor& values = outputs[0];
  HostTensor& indices = outputs[1];
  for_each_line(values.shape, dim, [&](const std::vector<int64_t>& offsets) {
    std::vector<std::pair<double, double>> pairs;  // (index, value)
    for (int64_t o : offsets) pairs.emplace_back(indices.get_storage(o), values.get_storage(o));
    if (by_index) {
      std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    } else {
      for (size_t run = 0; run < pairs.size();) {
        size_t end = run + 1;
        while (end < pairs.size() && same_value(pairs[end].second, pairs[run].second)) ++end;
        std::vector<double> ix;
        for (size_t j = run; j < end; ++j) ix.push_back(pairs[j].first);
        std::sort(ix.begin(), ix.end());
        for (size_t j = run; j < end; ++j) pairs[j].first = ix[j - run];
        run = end;
      }
    }
    for (size_t j = 0; j < offsets.size(); ++j) {
      indices.set_storage(offsets[j], pairs[j].first);
      values.set_storage(offsets[j], pairs[j].second);
    }
  });
}

// sort.values_stable(self, *, stable, dim, descending) -> (values, indices)
CatalogEntry sort() {
  CatalogEntry e;
  e.build = [](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    auto add = [&](const std::string& label, HostTensor self, std::optional<bool> stable, int64_t dim, bool descending) {
      KernelCase c;
      c.label = label;
      const Shape shape = self.shape;
      c.inputs = {A::of(std::move(self)), stable ? A::boolean(*stable) : A::none(), A::integer(dim), A::boolean(descending)};
      c.outputs = {{dtype, shape}, {kI64, shape}};
      cases.push_back(std::move(c));
    };
    auto random = [&](const Shape& shape, const std::string& key) { return catalog_random(dtype, shape, -3, 3, "sort" + key); };
    add("dim -1 of [4,7], stable", random({4, 7}, "a"), true, -1, false);
    add("dim 0 of [5,3,4], descending, stable", random({5, 3, 4}, "b"), true, 0, true);
    add("ties, NaN, +-inf, +-0 along dim 1 of [3,40], stable", special_values(dtype, {3, 40}, "sort.c"), true, 1, false);
    add("ties, NaN, +-inf, +-0 along dim 1 of [3,40], descending, stable", special_values(dtype, {3, 40}, "sort.d"), true,
        1, true);
    add("ties along dim 0 of [30,3], stable None", special_values(dtype, {30, 3}, "sort.e"), std::nullopt, 0, false);
    add("ties along dim -1 of [2,3,50], descending, stable false", special_values(dtype, {2, 3, 50}, "sort.f"), false, -1,
        true);
    add("long lines: dim 1 of [3,3000], stable", special_values(dtype, {3, 3000}, "sort.g"), true, 1, false);
    add("long lines: dim 0 of [5000,2], descending, stable", random({5000, 2}, "h"), true, 0, true);
    add("0-dim", random({}, "i"), true, 0, false);
    if (strided) add("dim 0 of transposed [5,6], stable", random({5, 6}, "j").as_transposed_storage(), true, 0, false);
    add("zero-size [0,3], dim 1", random({0, 3}, "k"), true, 1, false);
    add("zero-size [3,0], dim 1", random({3, 0}, "l"), true, 1, true);
    return cases;
  };
  e.canonical_order = [](const KernelCase& c, std::vector<HostTensor>& outputs) {
    const bool stable = c.inputs[1].kind == CaseArg::Kind::Bool && c.inputs[1].b;
    if (!stable) canonical_lines(outputs, wrap(c.inputs[2].i, c.inputs[0].tensor.shape.size()), false);
  };
  return e;
}

// topk.values(self, k, dim, largest, sorted) -> (values, indices)
CatalogEntry topk() {
  CatalogEntry e;
  e.build = [](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    auto add = [&](const std::string& label, HostTensor self, int64_t k, int64_t dim, bool largest, bool sorted) {
      KernelCase c;
      c.label = label;
      Shape shape = self.shape;
      if (!shape.empty()) shape[wrap(dim, shape.size())] = k;
      c.inputs = {A::of(std::move(self)), A::integer(k), A::integer(dim), A::boolean(largest), A::boolean(sorted)};
      c.outputs = {{dtype, shape}, {kI64, shape}};
      cases.push_back(std::move(c));
    };
    auto distinct = [&](const Shape& shape, size_t dim, const std::string& key) {
      return distinct_with_nans(dtype, shape, dim, "topk" + key);
    };
    add("k 3 along dim -1 of [4,9]", distinct({4, 9}, 1, "a"), 3, -1, true, true);
    add("k 4 smallest along dim 0 of [7,3,2]", distinct({7, 3, 2}, 0, "b"), 4, 0, false, true);
    add("k 5 along dim 1 of [3,8,2], unsorted", distinct({3, 8, 2}, 1, "c"), 5, 1, true, false);
    add("k 2 smallest of [6], unsorted", distinct({6}, 0, "d"), 2, 0, false, false);
    add("k = size along dim 1 of [2,6]", distinct({2, 6}, 1, "e"), 6, 1, true, true);
    add("k 0 along dim 1 of [3,5]", distinct({3, 5}, 1, "f"), 0, 1, true, true);
    add("k 7 of a line of 480 (dim 1 of [1,480])", distinct({1, 480}, 1, "g"), 7, 1, true, true);
    // Larger lines hold distinct values only where the dtype has the bits for them.
    if (dtype != FL_DTYPE_BFLOAT16) {
      add("k 100 smallest along dim 1 of [2,1500]", distinct({2, 1500}, 1, "h"), 100, 1, false, true);
      add("k 1000 along dim 0 of [1500,2]", distinct({1500, 2}, 0, "i"), 1000, 0, true, true);
    }
    add("0-dim, k 1", distinct({}, 0, "j"), 1, 0, true, true);
    if (strided) add("k 2 along dim 0 of transposed [5,6]", distinct({5, 6}, 0, "k").as_transposed_storage(), 2, 0, true, true);
    add("zero-size [0,4], k 2 along dim 1", distinct({0, 4}, 1, "l"), 2, 1, true, true);
    return cases;
  };
  e.canonical_order = [](const KernelCase& c, std::vector<HostTensor>& outputs) {
    canonical_lines(outputs, wrap(c.inputs[2].i, c.inputs[0].tensor.shape.size()), !c.inputs[4].b);
  };
  return e;
}

}  // namespace

void add_sorting_ops(std::map<std::string, CatalogEntry>& table) {
  table["aten::sort.values_stable"] = sort();
  table["aten::topk.values"] = topk();
}

}  // namespace fl::check
