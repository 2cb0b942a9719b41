// case_catalog_statistics.cpp — cases for native_group_norm_backward and the variance
// reductions var/std/var_mean/std_mean (.correction_out), inputs in the ATen 2.13 schema order,
// outputs as the binding allocates them.
#include "case_catalog.h"
#include "naive_reference.h"

#include <cmath>
#include <map>
#include <optional>

namespace fl::check {

HostTensor catalog_random(fl_dtype_t dtype, const Shape& shape, double lo, double hi, const std::string& key);

namespace {

using A = CaseArg;

// ---- group_norm backward ----------------------------------------------------------------------

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
// -> (grad_input, grad_weight, grad_bias). mean/rstd [N, group] as the forward computes them
// (float32 for the 16-bit types, ATen's), the weight in the input's dtype.
CatalogEntry group_norm_backward() {
  CatalogEntry e;
  e.tolerance_scale = 10;
  e.build = [](fl_dtype_t dtype, bool) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    const fl_dtype_t stat = dtype == FL_DTYPE_FLOAT64 ? dtype : FL_DTYPE_FLOAT32;
    struct Spec {
      std::string label;
      Shape shape;
      int64_t group;
      bool weight;
      std::vector<int32_t> mask;
    };
    const std::vector<Spec> specs = {
        {"[2,6,5,4] group 3, weight", {2, 6, 5, 4}, 3, true, {1, 1, 1}},
        {"[3,4] (HxW 1) group 2, no weight, input gradient only", {3, 4}, 2, false, {1, 0, 0}},
        {"[2,8,3,3] group 8, weight gradients only", {2, 8, 3, 3}, 8, true, {0, 1, 1}},
        {"[2,4,7] group 1, weight, bias gradient only", {2, 4, 7}, 1, true, {0, 0, 1}},
        {"zero-size [0,6,3] group 2, weight", {0, 6, 3}, 2, true, {1, 1, 1}},
    };
    for (const Spec& sp : specs) {
      const int64_t n = sp.shape[0], c = sp.shape[1];
      int64_t hw = 1;
      for (size_t d = 2; d < sp.shape.size(); ++d) hw *= sp.shape[d];
      const int64_t m = c / sp.group * hw;
      // An offset mean, as activations have.
      const HostTensor x = catalog_random(dtype, sp.shape, 1.0, 4.0, "group_norm" + sp.label + "x");
      std::vector<double> mean(static_cast<size_t>(n * sp.group)), rstd(mean.size());
      for (int64_t ng = 0; ng < n * sp.group; ++ng) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < m; ++i) s += x.get_storage(ng * m + i);
        const double mu = s / static_cast<double>(m);
        for (int64_t i = 0; i < m; ++i) s2 += std::pow(x.get_storage(ng * m + i) - mu, 2);
        mean[static_cast<size_t>(ng)] = mu;
        rstd[static_cast<size_t>(ng)] = 1.0 / std::sqrt(s2 / static_cast<double>(m) + 1e-5);
      }
      KernelCase k;
      k.label = sp.label;
      k.inputs = {A::of(catalog_random(dtype, sp.shape, -2, 2, "group_norm" + sp.label + "g")), A::of(x),
                  A::of(HostTensor::from_values(stat, {n, sp.group}, mean)),
                  A::of(HostTensor::from_values(stat, {n, sp.group}, rstd)),
                  sp.weight ? A::of(catalog_random(dtype, {c}, 0.5, 1.5, "group_norm" + sp.label + "w")) : A::none(),
                  A::integer(n), A::integer(c), A::integer(hw), A::integer(sp.group), A::bool_list(sp.mask)};
      k.outputs = {{dtype, sp.shape, sp.mask[0] != 0}, {dtype, {c}, sp.mask[1] != 0}, {dtype, {c}, sp.mask[2] != 0}};
      cases.push_back(std::move(k));
    }
    return cases;
  };
  return e;
}

// ---- variance ----------------------------------------------------------------------------------

Shape reduced(const Shape& shape, const std::optional<std::vector<int64_t>>& dims, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool r = !dims || dims->empty();
    if (dims)
      for (int64_t x : *dims) r |= (x < 0 ? x + static_cast<int64_t>(shape.size()) : x) == static_cast<int64_t>(d);
    if (!r) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// var/std/var_mean/std_mean.correction_out(self, int[1]? dim, *, Scalar? correction, bool keepdim)
// -> out (and the mean for the _mean forms). Inputs with an offset mean (5 +- 2).
CatalogEntry variance(bool with_mean) {
  CatalogEntry e;
  e.tolerance_scale = 4;
  e.build = [with_mean](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    auto add = [&](const std::string& label, Shape shape, std::optional<std::vector<int64_t>> dims,
                   std::optional<double> correction, bool keepdim, bool transpose) {
      KernelCase c;
      c.label = label;
      HostTensor x = catalog_random(dtype, shape, 3, 7, "variance" + label);
      c.inputs = {A::of(transpose ? x.as_transposed_storage() : x), dims ? A::int_list(*dims) : A::none(),
                  correction ? A::real(*correction) : A::none(), A::boolean(keepdim)};
      const Shape out = reduced(shape, dims, keepdim);
      c.outputs.push_back({dtype, out});
      if (with_mean) c.outputs.push_back({dtype, out});
      cases.push_back(std::move(c));
    };
    using Dims = std::vector<int64_t>;
    add("dim [1] of [4,5,6], correction 1", {4, 5, 6}, Dims{1}, 1.0, false, false);
    add("all of [4,5,6], correction None", {4, 5, 6}, std::nullopt, std::nullopt, false, false);
    add("dims [0,2] keepdim of [4,5,6], correction 0", {4, 5, 6}, Dims{0, 2}, 0.0, true, false);
    add("dim [-1] of [3,300], correction 2.5", {3, 300}, Dims{-1}, 2.5, false, false);
    add("dim [0] of [700,3], correction 1", {700, 3}, Dims{0}, 1.0, false, false);
    add("dim [1] of [3,1]: one element, correction 1 (NaN)", {3, 1}, Dims{1}, 1.0, false, false);
    if (strided) add("dim [0] of transposed [5,6]", {5, 6}, Dims{0}, 1.0, false, true);
    add("dim [1] of zero-size [0,3]", {0, 3}, Dims{1}, 1.0, false, false);
    return cases;
  };
  return e;
}

}  // namespace

void add_statistics_ops(std::map<std::string, CatalogEntry>& table) {
  // No out= overload in the binding's sense for group norm's backward: both names, as layer norm.
  table["aten::native_group_norm_backward"] = group_norm_backward();
  table["aten::native_group_norm_backward.out"] = group_norm_backward();
  table["aten::var.correction_out"] = variance(false);
  table["aten::std.correction_out"] = variance(false);
  table["aten::var_mean.correction_out"] = variance(true);
  table["aten::std_mean.correction_out"] = variance(true);
}

}  // namespace fl::check
