// case_catalog_rms_norm.cpp — cases for _fused_rms_norm and _fused_rms_norm_backward (ATen 2.13
// schema order; no out= overloads, so the entries are the functional names and the outputs
// their returns): rows short and long (a warp or a block per row on a GPU), one and two
// normalized dims, with and without weight, eps given and None, gradients masked off, and zero
// rows. rstd is float32 for the 16-bit types and float32, float64 for float64, shaped
// input.shape[:-k] + [1]*k (ATen's CUDA kernel); the backward's rstd is the exact one, rounded
// to that dtype.
#include "case_catalog.h"
#include "naive_reference.h"

#include <map>
#include <optional>

namespace fl::check {

HostTensor catalog_random(fl_dtype_t dtype, const Shape& shape, double lo, double hi, const std::string& key);

namespace {

using A = CaseArg;

struct Spec {
  std::string label;
  Shape shape;
  Shape normalized;
  bool weight;
  std::optional<double> eps;
  std::vector<int32_t> mask;  // backward only
};

const std::vector<Spec>& specs() {
  static const std::vector<Spec> s = {
      {"[3,4,32] over [32], weight, eps 1e-5", {3, 4, 32}, {32}, true, 1e-5, {1, 1}},
      {"[2,3,4,5] over [4,5], no weight, eps None", {2, 3, 4, 5}, {4, 5}, false, std::nullopt, {1, 1}},
      {"[70,40] over [40], weight, eps None, grad_weight only", {70, 40}, {40}, true, std::nullopt, {0, 1}},
      {"[4,1500] over [1500], weight, eps 1e-6", {4, 1500}, {1500}, true, 1e-6, {1, 1}},
      {"[6,3] over [3], weight, grad_input only", {6, 3}, {3}, true, 1e-5, {1, 0}},
      {"zero-size [0,6] over [6], weight", {0, 6}, {6}, true, 1e-5, {1, 1}},
  };
  return s;
}

Shape stat_shape_of(const Spec& sp) {
  Shape s = sp.shape;
  for (size_t d = sp.shape.size() - sp.normalized.size(); d < sp.shape.size(); ++d) s[d] = 1;
  return s;
}

CatalogEntry rms_norm(bool backward) {
  CatalogEntry e;
  e.tolerance_scale = 10;
  e.build = [=](fl_dtype_t dtype, bool) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    const fl_dtype_t stat = dtype == FL_DTYPE_FLOAT64 ? dtype : FL_DTYPE_FLOAT32;
    for (const Spec& sp : specs()) {
      const std::string key = "rms_norm" + sp.label;
      const HostTensor x = catalog_random(dtype, sp.shape, -2, 2, key + "x");
      const A weight = sp.weight ? A::of(catalog_random(dtype, sp.normalized, 0.5, 1.5, key + "w")) : A::none();
      const A eps = sp.eps ? A::real(*sp.eps) : A::none();
      KernelCase c;
      c.label = sp.label;
      if (!backward) {
        c.inputs = {A::of(x), A::int_list(sp.normalized), weight, eps};
        c.outputs = {{dtype, sp.shape}, {stat, stat_shape_of(sp)}};
      } else {
        const std::vector<double> rstd =
            rms_norm_rstd(x, shape_numel(sp.normalized), sp.eps ? *sp.eps : rms_norm_default_eps(dtype));
        c.inputs = {A::of(catalog_random(dtype, sp.shape, -2, 2, key + "g")), A::of(x), A::int_list(sp.normalized),
                    A::of(HostTensor::from_values(stat, stat_shape_of(sp), rstd)), weight, A::bool_list(sp.mask)};
        // ATen returns no grad_weight without a weight: the binding passes it as not requested.
        c.outputs = {{dtype, sp.shape, sp.mask[0] != 0}, {dtype, sp.normalized, sp.mask[1] != 0 && sp.weight}};
      }
      cases.push_back(std::move(c));
    }
    return cases;
  };
  return e;
}

}  // namespace

void add_rms_norm_ops(std::map<std::string, CatalogEntry>& table) {
  table["aten::_fused_rms_norm"] = rms_norm(false);
  table["aten::_fused_rms_norm_backward"] = rms_norm(true);
}

}  // namespace fl::check
