// case_catalog.cpp — input generators and the op → cases table of fl-plugin-check.
// Inputs are deterministic (a fixed-seed generator per op, dtype and case). Values stay in
// each op's domain (positive for log/sqrt, divisors away from zero, distinct values where an
// index is compared: argmax, max.dim, max_pool2d).
#include "case_catalog.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace fl::check {
namespace {

constexpr fl_dtype_t kF32 = FL_DTYPE_FLOAT32, kI64 = FL_DTYPE_INT64, kBool = FL_DTYPE_BOOL;

struct Random {
  uint64_t state;
  explicit Random(uint64_t seed) : state(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  double uniform(double lo, double hi) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * static_cast<double>(state >> 11) / 9007199254740992.0;
  }
};

uint64_t seed_of(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

HostTensor random_tensor(fl_dtype_t dtype, const Shape& shape, double lo, double hi, uint64_t seed) {
  Random r(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = is_floating(dtype) ? r.uniform(lo, hi) : std::round(r.uniform(lo, hi));
  return HostTensor::from_values(dtype, shape, v);
}

// Values away from zero: sign * [0.5, 2] (integers 1..4 for integer dtypes).
HostTensor nonzero_tensor(fl_dtype_t dtype, const Shape& shape, uint64_t seed) {
  Random r(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) {
    double m = is_floating(dtype) ? r.uniform(0.5, 2.0) : std::round(r.uniform(1, 4));
    x = r.uniform(0, 1) < 0.5 ? -m : m;
  }
  return HostTensor::from_values(dtype, shape, v);
}

// Values from {-1, -0.5, 0, 0.5, 1} (integers -2..2), so comparisons see equal elements.
HostTensor coarse_tensor(fl_dtype_t dtype, const Shape& shape, uint64_t seed) {
  Random r(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = std::round(r.uniform(-2.4, 2.4)) * (is_floating(dtype) ? 0.5 : 1.0);
  return HostTensor::from_values(dtype, shape, v);
}

// Distinct values (a shuffled ramp of step 0.25, exact in bfloat16 for < 512 elements).
HostTensor distinct_tensor(fl_dtype_t dtype, const Shape& shape, uint64_t seed) {
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  Random r(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(r.uniform(0, static_cast<double>(i) + 0.999))]);
  for (double& x : v) x = (x - static_cast<double>(n) / 2) * (is_floating(dtype) ? 0.25 : 1.0);
  return HostTensor::from_values(dtype, shape, v);
}

// Values from {-inf, -1, 0, 1, inf, NaN} (integers -2..2), for predicates such as isnan.
HostTensor special_tensor(fl_dtype_t dtype, const Shape& shape, uint64_t seed) {
  if (!is_floating(dtype)) return coarse_tensor(dtype, shape, seed);
  static const double kSpecial[] = {-INFINITY, -1.0, 0.0, 1.0, INFINITY, NAN};
  Random r(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = kSpecial[static_cast<size_t>(r.uniform(0, 5.999))];
  return HostTensor::from_values(dtype, shape, v);
}

HostTensor bool_tensor(const Shape& shape, uint64_t seed) { return random_tensor(kBool, shape, -0.49, 1.49, seed); }

HostTensor host_scalar(fl_dtype_t dtype, double value) {
  HostTensor t = HostTensor::from_values(is_floating(dtype) ? FL_DTYPE_FLOAT64 : kI64, {}, {value});
  t.host_scalar = true;
  return t;
}

CaseArg scalar_for(fl_dtype_t dtype, double value) {
  return is_floating(dtype) ? CaseArg::real(value) : CaseArg::integer(static_cast<int64_t>(value));
}

Shape broadcast_shapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes)
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& o = out[rank - s.size() + d];
      if (s[d] != 1) o = s[d];
    }
  return out;
}

// ---- elementwise families ---------------------------------------------------------------

enum class Domain { Any, Positive, NonZero, Coarse, Bool, Special };

struct Elementwise {
  std::vector<Domain> tensors;                                      // one per tensor input
  std::function<std::vector<CaseArg>(fl_dtype_t)> extras = nullptr;  // trailing arguments
  std::function<fl_dtype_t(fl_dtype_t)> out_dtype = nullptr;         // default: the input's
  bool int_ok = false;
  bool host_scalar_case = false;  // the second tensor as a wrapped number
};

HostTensor make_input(Domain domain, fl_dtype_t dtype, const Shape& shape, uint64_t seed) {
  switch (domain) {
    case Domain::Positive: return random_tensor(dtype, shape, is_floating(dtype) ? 0.5 : 1, is_floating(dtype) ? 2.0 : 5, seed);
    case Domain::NonZero: return nonzero_tensor(dtype, shape, seed);
    case Domain::Coarse: return coarse_tensor(dtype, shape, seed);
    case Domain::Bool: return bool_tensor(shape, seed);
    case Domain::Special: return special_tensor(dtype, shape, seed);
    case Domain::Any: default: return random_tensor(dtype, shape, -2, 2, seed);
  }
}

CatalogEntry elementwise(const std::string& op, Elementwise spec) {
  CatalogEntry entry;
  entry.build = [op, spec](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!spec.int_ok && !is_floating(dtype)) return cases;
    const fl_dtype_t out_dtype = spec.out_dtype ? spec.out_dtype(dtype) : dtype;
    const size_t n = spec.tensors.size();
    auto make_case = [&](const std::string& label, std::vector<Shape> shapes, bool transpose_first, bool scalar_second) {
      KernelCase c;
      c.label = label;
      uint64_t seed = seed_of(op + label + dtype_label(dtype));
      std::vector<Shape> used;
      for (size_t k = 0; k < n; ++k) {
        if (k == 1 && scalar_second) {
          c.inputs.push_back(CaseArg::of(host_scalar(dtype, is_floating(dtype) ? 1.5 : 2)));
          continue;
        }
        fl_dtype_t in_dtype = spec.tensors[k] == Domain::Bool ? kBool : dtype;
        HostTensor t = make_input(spec.tensors[k], in_dtype, shapes[k], seed + k);
        if (k == 0 && transpose_first) t = t.as_transposed_storage();
        used.push_back(t.shape);
        c.inputs.push_back(CaseArg::of(std::move(t)));
      }
      if (spec.extras)
        for (CaseArg& a : spec.extras(dtype)) c.inputs.push_back(std::move(a));
      c.outputs.push_back({out_dtype, broadcast_shapes(used), true});
      cases.push_back(std::move(c));
    };
    make_case("contiguous [3,5]", std::vector<Shape>(n, Shape{3, 5}), false, false);
    if (n >= 2) {
      std::vector<Shape> shapes = {{4, 1, 3}, {5, 1}, {3}};
      shapes.resize(n);
      make_case("broadcast [4,1,3]x[5,1]", shapes, false, false);
    }
    if (spec.host_scalar_case) make_case("host scalar [3,5]x()", std::vector<Shape>(n, Shape{3, 5}), false, true);
    if (strided) make_case("transposed [3,5]", std::vector<Shape>(n, Shape{3, 5}), true, false);
    make_case("zero-size [0,3]", std::vector<Shape>(n, Shape{0, 3}), false, false);
    return cases;
  };
  return entry;
}

fl_dtype_t to_bool(fl_dtype_t) { return kBool; }
fl_dtype_t to_float(fl_dtype_t d) { return is_floating(d) ? d : kF32; }

void add_elementwise(std::map<std::string, CatalogEntry>& table) {
  using D = Domain;
  auto unary = [&](const std::string& op, D domain, bool int_ok) {
    table[op] = elementwise(op, {{domain}, nullptr, nullptr, int_ok, false});
  };
  unary("aten::abs.out", D::Any, true);
  unary("aten::neg.out", D::Any, true);
  unary("aten::exp.out", D::Any, false);
  unary("aten::log.out", D::Positive, false);
  unary("aten::sqrt.out", D::Positive, false);
  unary("aten::rsqrt.out", D::Positive, false);
  unary("aten::relu.out", D::Any, true);
  unary("aten::sigmoid.out", D::Any, false);
  unary("aten::tanh.out", D::Any, false);
  unary("aten::silu.out", D::Any, false);
  unary("aten::sign.out", D::Coarse, true);
  unary("aten::sgn.out", D::Coarse, true);
  unary("aten::reciprocal.out", D::NonZero, false);
  unary("aten::zero.out", D::Any, true);
  table["aten::gelu.out"] = elementwise("aten::gelu.out", {{D::Any}, [](fl_dtype_t) {
    return std::vector<CaseArg>{CaseArg::string("tanh")}; }, nullptr, false, false});

  auto alpha = [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, is_floating(d) ? 1.5 : 2)}; };
  table["aten::add.out"] = elementwise("aten::add.out", {{D::Any, D::Any}, alpha, nullptr, true, true});
  table["aten::sub.out"] = elementwise("aten::sub.out", {{D::Any, D::Any}, alpha, nullptr, true, true});
  table["aten::mul.out"] = elementwise("aten::mul.out", {{D::Any, D::Any}, nullptr, nullptr, true, true});
  table["aten::div.out"] = elementwise("aten::div.out", {{D::Any, D::NonZero}, nullptr, to_float, true, true});
  table["aten::div.out_mode"] = elementwise("aten::div.out_mode", {{D::Any, D::NonZero}, [](fl_dtype_t) {
    return std::vector<CaseArg>{CaseArg::string("floor")}; }, nullptr, true, false});
  for (const char* op : {"aten::maximum.out", "aten::minimum.out", "aten::max.out", "aten::min.out"})
    table[op] = elementwise(op, {{D::Any, D::Any}, nullptr, nullptr, true, false});
  table["aten::pow.Tensor_Tensor_out"] = elementwise("aten::pow.Tensor_Tensor_out", {{D::Positive, D::Any}, nullptr, nullptr, false, false});
  for (const char* cmp : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    std::string t = std::string("aten::") + cmp + ".Tensor_out";
    table[t] = elementwise(t, {{D::Coarse, D::Coarse}, nullptr, to_bool, true, false});
    std::string s = std::string("aten::") + cmp + ".Scalar_out";
    table[s] = elementwise(s, {{D::Coarse}, [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, is_floating(d) ? 0.5 : 1)}; },
                               to_bool, true, false});
  }
  for (const char* op : {"aten::isnan.out", "aten::isposinf.out", "aten::isneginf.out"})
    table[op] = elementwise(op, {{D::Special}, nullptr, to_bool, true, false});
  for (const char* op : {"aten::logical_and.out", "aten::logical_or.out", "aten::logical_xor.out"})
    table[op] = elementwise(op, {{D::Coarse, D::Coarse}, nullptr, to_bool, true, false});
  table["aten::bitwise_not.out"] = elementwise("aten::bitwise_not.out", {{D::Coarse}, nullptr, nullptr, true, false});
  table["aten::threshold_backward.grad_input"] = elementwise("aten::threshold_backward.grad_input", {{D::Any, D::Coarse},
      [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, 0)}; }, nullptr, true, false});
  for (const char* op : {"aten::tanh_backward.grad_input", "aten::sigmoid_backward.grad_input", "aten::silu_backward.grad_input"})
    table[op] = elementwise(op, {{D::Any, D::Any}, nullptr, nullptr, false, false});
  table["aten::gelu_backward.grad_input"] = elementwise("aten::gelu_backward.grad_input", {{D::Any, D::Any},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::string("none")}; }, nullptr, false, false});
  table["aten::native_dropout_backward.out"] = elementwise("aten::native_dropout_backward.out", {{D::Any, D::Bool},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::real(2.0)}; }, nullptr, false, false});
  table["aten::pow.Tensor_Scalar_out"] = elementwise("aten::pow.Tensor_Scalar_out", {{D::Positive},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::real(2.5)}; }, nullptr, false, false});
  table["aten::clamp.out"] = elementwise("aten::clamp.out", {{D::Any},
      [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, -1), scalar_for(d, 1)}; }, nullptr, true, false});
  table["aten::clamp.Tensor_out"] = elementwise("aten::clamp.Tensor_out", {{D::Any, D::Coarse, D::Positive}, nullptr, nullptr, true, false});
  table["aten::fill.Scalar_out"] = elementwise("aten::fill.Scalar_out", {{D::Any},
      [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, 3)}; }, nullptr, true, false});
  table["aten::masked_fill.Scalar_out"] = elementwise("aten::masked_fill.Scalar_out", {{D::Any, D::Bool},
      [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, -7)}; }, nullptr, true, false});
  table["aten::lerp.Scalar_out"] = elementwise("aten::lerp.Scalar_out", {{D::Any, D::Any},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::real(0.3)}; }, nullptr, false, false});
  table["aten::lerp.Tensor_out"] = elementwise("aten::lerp.Tensor_out", {{D::Any, D::Any, D::Any}, nullptr, nullptr, false, false});
  auto value = [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, is_floating(d) ? 0.5 : 2)}; };
  table["aten::addcmul.out"] = elementwise("aten::addcmul.out", {{D::Any, D::Any, D::Any}, value, nullptr, true, false});
  table["aten::addcdiv.out"] = elementwise("aten::addcdiv.out", {{D::Any, D::Any, D::NonZero}, value, nullptr, false, false});
  // elementwise math, rounding (the identity on integers), bitwise ops
  unary("aten::sin.out", D::Any, false);
  unary("aten::cos.out", D::Any, false);
  unary("aten::erf.out", D::Any, false);
  unary("aten::expm1.out", D::Any, false);
  unary("aten::log1p.out", D::Positive, false);
  for (const char* op : {"aten::floor.out", "aten::ceil.out", "aten::round.out", "aten::trunc.out"})
    unary(op, D::Any, true);
  for (const char* op : {"aten::bitwise_and.Tensor_out", "aten::bitwise_or.Tensor_out", "aten::bitwise_xor.Tensor_out"})
    table[op] = elementwise(op, {{D::Any, D::Any}, nullptr, nullptr, true, false});
  // activations and their backward ops: the scalars put either branch in the inputs' range
  table["aten::leaky_relu.out"] = elementwise("aten::leaky_relu.out", {{D::Any},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::real(0.2)}; }, nullptr, false, false});
  table["aten::leaky_relu_backward.grad_input"] = elementwise("aten::leaky_relu_backward.grad_input", {{D::Any, D::Coarse},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::real(0.2), CaseArg::boolean(false)}; }, nullptr, false, false});
  table["aten::hardtanh.out"] = elementwise("aten::hardtanh.out", {{D::Any},
      [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, -1), scalar_for(d, 1)}; }, nullptr, true, false});
  table["aten::hardtanh_backward.grad_input"] = elementwise("aten::hardtanh_backward.grad_input", {{D::Any, D::Coarse},
      [](fl_dtype_t d) { return std::vector<CaseArg>{scalar_for(d, -1), scalar_for(d, 1)}; }, nullptr, true, false});
  table["aten::elu.out"] = elementwise("aten::elu.out", {{D::Any},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::real(1.3), CaseArg::real(1.05), CaseArg::real(0.9)}; },
      nullptr, false, false});
  table["aten::softplus.out"] = elementwise("aten::softplus.out", {{D::Any},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::real(2.0), CaseArg::real(3.0)}; }, nullptr, false, false});
  // (grad, self, buffer): the buffer is the forward's exp(-|x|); kernels may recompute it
  table["aten::log_sigmoid_backward.grad_input"] = elementwise("aten::log_sigmoid_backward.grad_input",
      {{D::Any, D::Any, D::Any}, nullptr, nullptr, false, false});
  table["aten::softplus_backward.grad_input"] = elementwise("aten::softplus_backward.grad_input", {{D::Any, D::Any},
      [](fl_dtype_t) { return std::vector<CaseArg>{CaseArg::real(2.0), CaseArg::real(3.0)}; }, nullptr, false, false});
  // where(condition, self, other): the condition is bool, the primary dtype is self's.
  table["aten::where.self_out"] = elementwise("aten::where.self_out", {{D::Bool, D::Any, D::Any}, nullptr, nullptr, true, false});
}

}  // namespace

void add_reductions_and_linear_algebra(std::map<std::string, CatalogEntry>& table);
void add_nn_ops(std::map<std::string, CatalogEntry>& table);
void add_statistics_ops(std::map<std::string, CatalogEntry>& table);
void add_rms_norm_ops(std::map<std::string, CatalogEntry>& table);
void add_indexing_ops(std::map<std::string, CatalogEntry>& table);
void add_sorting_ops(std::map<std::string, CatalogEntry>& table);

// Shared with case_catalog_nn.cpp.
HostTensor catalog_random(fl_dtype_t dtype, const Shape& shape, double lo, double hi, const std::string& key) {
  return random_tensor(dtype, shape, lo, hi, seed_of(key));
}
HostTensor catalog_distinct(fl_dtype_t dtype, const Shape& shape, const std::string& key) {
  return distinct_tensor(dtype, shape, seed_of(key));
}

const CatalogEntry* find_catalog_entry(const std::string& op) {
  static const std::map<std::string, CatalogEntry> table = [] {
    std::map<std::string, CatalogEntry> t;
    add_elementwise(t);
    add_reductions_and_linear_algebra(t);
    add_nn_ops(t);
    add_statistics_ops(t);
    add_rms_norm_ops(t);
    add_indexing_ops(t);
    add_sorting_ops(t);
    return t;
  }();
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

int64_t c10_scalar_type(fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_FLOAT32: return 6;
    case FL_DTYPE_FLOAT64: return 7;
    case FL_DTYPE_FLOAT16: return 5;
    case FL_DTYPE_BFLOAT16: return 15;
    case FL_DTYPE_INT64: return 4;
    case FL_DTYPE_INT32: return 3;
    case FL_DTYPE_BOOL: return 11;
    default: return -1;
  }
}

}  // namespace fl::check
