// case_catalog_nn.cpp — cases for reductions (vector norms, all/any included), tril/triu, arange,
// matrix products, softmax, nll_loss, mse_loss, fused attention, convolution, max_pool2d,
// layer_norm and batch_norm (inputs in the ATen 2.13 schema order, outputs as the binding allocates them).
#include "case_catalog.h"
#include "naive_reference.h"

#include <cmath>
#include <map>
#include <optional>
#include <tuple>

namespace fl::check {

HostTensor catalog_random(fl_dtype_t dtype, const Shape& shape, double lo, double hi, const std::string& key);
HostTensor catalog_distinct(fl_dtype_t dtype, const Shape& shape, const std::string& key);

namespace {

constexpr fl_dtype_t kI64 = FL_DTYPE_INT64;
using A = CaseArg;

HostTensor rnd(fl_dtype_t dtype, const Shape& shape, const std::string& key, double lo = -2, double hi = 2) {
  return catalog_random(dtype, shape, lo, hi, key);
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool reduced = dims.empty();
    for (int64_t r : dims) reduced |= (r < 0 ? r + static_cast<int64_t>(shape.size()) : r) == static_cast<int64_t>(d);
    if (!reduced) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Optional transposed copy of a matrix-like input (strided case).
HostTensor maybe_transposed(HostTensor t, bool transpose) { return transpose ? t.as_transposed_storage() : t; }

// ---- reductions ---------------------------------------------------------------------------

// Ops shaped (self, dim list, keepdim, [dtype]) -> out.
CatalogEntry dim_reduction(const std::string& op, bool has_dtype_arg, bool int_ok, bool distinct) {
  CatalogEntry e;
  e.tolerance_scale = 4;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!int_ok && !is_floating(dtype)) return cases;
    auto add = [&](const std::string& label, Shape shape, std::vector<int64_t> dims, bool keepdim, bool transpose) {
      KernelCase c;
      c.label = label;
      HostTensor self = distinct ? catalog_distinct(dtype, shape, op + label) : rnd(dtype, shape, op + label);
      c.inputs.push_back(A::of(maybe_transposed(std::move(self), transpose)));
      c.inputs.push_back(A::int_list(dims));
      c.inputs.push_back(A::boolean(keepdim));
      if (has_dtype_arg) c.inputs.push_back(A::none());
      c.outputs.push_back({dtype, reduced_shape(shape, dims, keepdim)});
      cases.push_back(std::move(c));
    };
    add("dim [1] of [4,5,6]", {4, 5, 6}, {1}, false, false);
    add("dims [0,2] keepdim of [4,5,6]", {4, 5, 6}, {0, 2}, true, false);
    add("dim [-1] of [3,7]", {3, 7}, {-1}, false, false);
    if (strided) add("dim [0] of transposed [5,6]", {5, 6}, {0}, false, true);
    add("dim [1] of zero-size [0,3]", {0, 3}, {1}, false, false);
    return cases;
  };
  return e;
}

// linalg_vector_norm.out(self, Scalar ord, int[1]? dim, bool keepdim, ScalarType? dtype): each
// order a plugin may implement natively (0, 1, 2, inf, -inf) and one general p.
CatalogEntry vector_norm() {
  CatalogEntry e;
  e.tolerance_scale = 4;
  e.build = [](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    auto add = [&](const std::string& label, Shape shape, double ord, std::optional<std::vector<int64_t>> dims,
                   bool keepdim, bool transpose) {
      KernelCase c;
      c.label = label;
      c.inputs.push_back(A::of(maybe_transposed(rnd(dtype, shape, "vector_norm" + label), transpose)));
      c.inputs.push_back(A::real(ord));
      c.inputs.push_back(dims ? A::int_list(*dims) : A::none());
      c.inputs.push_back(A::boolean(keepdim));
      c.inputs.push_back(A::none());
      c.outputs.push_back({dtype, reduced_shape(shape, dims.value_or(std::vector<int64_t>{}), keepdim)});
      cases.push_back(std::move(c));
    };
    add("ord 2, all of [4,5,6]", {4, 5, 6}, 2.0, std::nullopt, false, false);
    add("ord 2, dim [1] of [4,5,6]", {4, 5, 6}, 2.0, std::vector<int64_t>{1}, false, false);
    add("ord 1, dims [0,2] keepdim of [4,5,6]", {4, 5, 6}, 1.0, std::vector<int64_t>{0, 2}, true, false);
    add("ord inf, dim [-1] of [3,7]", {3, 7}, INFINITY, std::vector<int64_t>{-1}, false, false);
    add("ord -inf, dim [0] of [3,7]", {3, 7}, -INFINITY, std::vector<int64_t>{0}, false, false);
    add("ord 0, all of [3,7]", {3, 7}, 0.0, std::nullopt, false, false);
    add("ord 3, dim [1] of [3,7]", {3, 7}, 3.0, std::vector<int64_t>{1}, false, false);
    if (strided) add("ord 2, dim [0] of transposed [5,6]", {5, 6}, 2.0, std::vector<int64_t>{0}, false, true);
    add("ord 2, dim [1] of zero-size [0,3]", {0, 3}, 2.0, std::vector<int64_t>{1}, false, false);
    return cases;
  };
  return e;
}

// all / any: .out(self, int dim, keepdim), .dims_out(self, int[]? dim, keepdim) and
// .all_out(self). Rows of all non-zero, all zero, mixed, and with NaN (non-zero) values.
HostTensor logical_input(fl_dtype_t dtype, const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  const int64_t cols = shape.empty() ? 1 : shape.back();
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t row = static_cast<int64_t>(i) / cols % 4, col = static_cast<int64_t>(i) % cols;
    if (row == 0) v[i] = 1.0 + static_cast<double>(col % 3);
    else if (row == 1) v[i] = 0.0;
    else if (row == 2) v[i] = col % 2 == 0 ? 0.0 : -2.0;
    else v[i] = col == 0 && is_floating(dtype) ? NAN : (col % 3 == 1 ? 0.0 : 3.0);
  }
  return HostTensor::from_values(dtype, shape, v);
}

enum class LogicalForm { Dim, Dims, All };

CatalogEntry logical_reduction(LogicalForm form) {
  CatalogEntry e;
  e.build = [form](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    const fl_dtype_t out_dtype = dtype == FL_DTYPE_UINT8 ? FL_DTYPE_UINT8 : FL_DTYPE_BOOL;
    auto add = [&](const std::string& label, Shape shape, std::optional<std::vector<int64_t>> dims, bool keepdim,
                   bool transpose) {
      KernelCase c;
      c.label = label;
      c.inputs.push_back(A::of(maybe_transposed(logical_input(dtype, shape), transpose)));
      if (form == LogicalForm::Dim) c.inputs.push_back(A::integer(dims->at(0)));
      if (form == LogicalForm::Dims) c.inputs.push_back(dims ? A::int_list(*dims) : A::none());
      if (form != LogicalForm::All) c.inputs.push_back(A::boolean(keepdim));
      Shape out = shape;
      if (!dims) out = {};
      else if (!dims->empty()) out = reduced_shape(shape, *dims, keepdim);
      c.outputs.push_back({out_dtype, out});
      cases.push_back(std::move(c));
    };
    using Dims = std::vector<int64_t>;
    if (form == LogicalForm::All) {
      add("all of [8,5]", {8, 5}, std::nullopt, false, false);
      add("all of zero-size [0,3]", {0, 3}, std::nullopt, false, false);
      return cases;
    }
    add("dim [1] of [8,5]", {8, 5}, Dims{1}, false, false);
    add("dim [0] keepdim of [8,5]", {8, 5}, Dims{0}, true, false);
    add("dim [-1] of [2,4,3]", {2, 4, 3}, Dims{-1}, false, false);
    if (strided) add("dim [0] of transposed [5,8]", {5, 8}, Dims{0}, false, true);
    add("dim [1] of zero-size [2,0]", {2, 0}, Dims{1}, false, false);
    if (form == LogicalForm::Dims) {
      add("dims [0,2] of [2,4,3]", {2, 4, 3}, Dims{0, 2}, false, false);
      add("dims None of [8,5]", {8, 5}, std::nullopt, false, false);
      add("dims [] (none reduced) of [8,5]", {8, 5}, Dims{}, false, false);
    }
    return cases;
  };
  return e;
}

// tril.out / triu.out(self, int diagonal).
CatalogEntry triangle() {
  CatalogEntry e;
  e.build = [](fl_dtype_t dtype, bool) {
    std::vector<KernelCase> cases;
    auto add = [&](const std::string& label, Shape shape, int64_t diagonal) {
      KernelCase c;
      c.label = label;
      c.inputs = {A::of(rnd(dtype, shape, "triangle" + label, 1, 4)), A::integer(diagonal)};
      c.outputs.push_back({dtype, shape});
      cases.push_back(std::move(c));
    };
    add("diagonal 0 of [5,4]", {5, 4}, 0);
    add("diagonal -2 of [2,3,5,4]", {2, 3, 5, 4}, -2);
    add("diagonal 1 of [4,6]", {4, 6}, 1);
    add("diagonal 7 of [3,3]", {3, 3}, 7);
    add("diagonal -9 of [3,3]", {3, 3}, -9);
    add("zero-size [0,3]", {0, 3}, 0);
    return cases;
  };
  return e;
}

// arange.start_out(Scalar start, Scalar end, Scalar step).
CatalogEntry arange() {
  CatalogEntry e;
  e.build = [](fl_dtype_t dtype, bool) {
    std::vector<KernelCase> cases;
    if (dtype == FL_DTYPE_BOOL) return cases;
    auto add = [&](const std::string& label, double start, double end, double step) {
      KernelCase c;
      c.label = label;
      const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
      c.inputs = {A::real(start), A::real(end), A::real(step)};
      c.outputs.push_back({dtype, {std::max<int64_t>(n, 0)}});
      cases.push_back(std::move(c));
    };
    add("0..37 step 1", 0, 37, 1);
    add("-6..9 step 3", -6, 9, 3);
    add("20..-5 step -5", 20, -5, -5);
    if (is_floating(dtype)) add("-1..2 step 0.25", -1, 2, 0.25);
    add("empty 4..4", 4, 4, 1);
    return cases;
  };
  return e;
}

// Ops shaped (self, [dtype]) -> 0-dim out: sum.out.// Ops shaped (self, [dtype]) -> 0-dim out: sum.out.
CatalogEntry full_reduction(bool int_ok) {
  CatalogEntry e;
  e.tolerance_scale = 4;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!int_ok && !is_floating(dtype)) return cases;
    for (auto [label, shape] : {std::pair<std::string, Shape>{"all of [4,5,6]", {4, 5, 6}}, {"all of zero-size [0,3]", {0, 3}}}) {
      KernelCase c;
      c.label = label;
      c.inputs = {A::of(rnd(dtype, shape, "sum.out" + label)), A::none()};
      c.outputs.push_back({dtype, {}});
      cases.push_back(std::move(c));
    }
    if (strided) {
      KernelCase c;
      c.label = "all of transposed [5,6]";
      c.inputs = {A::of(rnd(dtype, {5, 6}, "sum.out.t").as_transposed_storage()), A::none()};
      c.outputs.push_back({dtype, {}});
      cases.push_back(std::move(c));
    }
    return cases;
  };
  return e;
}

// (self, int? dim, keepdim) -> int64 index; (self, int dim, keepdim) -> values, indices.
CatalogEntry index_reduction(const std::string& op, bool with_values) {
  CatalogEntry e;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    auto add = [&](const std::string& label, Shape shape, int64_t dim, bool keepdim, bool transpose) {
      KernelCase c;
      c.label = label;
      c.inputs = {A::of(maybe_transposed(catalog_distinct(dtype, shape, op + label), transpose)),
                  A::integer(dim), A::boolean(keepdim)};
      Shape out = reduced_shape(shape, {dim}, keepdim);
      if (with_values) c.outputs.push_back({dtype, out});
      c.outputs.push_back({kI64, out});
      cases.push_back(std::move(c));
    };
    add("dim 1 of [4,5,6]", {4, 5, 6}, 1, false, false);
    add("dim -1 keepdim of [3,7]", {3, 7}, -1, true, false);
    if (strided) add("dim 0 of transposed [5,6]", {5, 6}, 0, false, true);
    return cases;
  };
  return e;
}

// ---- matrix products ------------------------------------------------------------------------

CatalogEntry matmul(const std::string& kind) {
  CatalogEntry e;
  e.tolerance_scale = 10;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    const bool batched = kind == "bmm" || kind == "baddbmm";
    const bool with_bias = kind == "addmm" || kind == "baddbmm";
    auto add = [&](const std::string& label, int64_t b, int64_t m, int64_t k, int64_t n, bool transpose, bool broadcast_bias) {
      KernelCase c;
      c.label = label;
      std::string key = kind + label;
      Shape s1 = batched ? Shape{b, m, k} : Shape{m, k};
      Shape s2 = batched ? Shape{b, k, n} : Shape{k, n};
      Shape so = batched ? Shape{b, m, n} : Shape{m, n};
      if (with_bias) c.inputs.push_back(A::of(rnd(dtype, broadcast_bias ? Shape{n} : so, key + "bias")));
      c.inputs.push_back(A::of(rnd(dtype, s1, key + "a")));
      c.inputs.push_back(A::of(maybe_transposed(rnd(dtype, s2, key + "b"), transpose)));
      if (with_bias) {
        c.inputs.push_back(A::real(0.5));  // beta
        c.inputs.push_back(A::real(2.0));  // alpha
      }
      c.outputs.push_back({dtype, so});
      cases.push_back(std::move(c));
    };
    add("[7,9]x[9,5]", 3, 7, 9, 5, false, false);
    if (with_bias) add("[7,9]x[9,5] + bias [5]", 3, 7, 9, 5, false, true);
    if (strided) add("[7,9]x transposed [9,5]", 3, 7, 9, 5, true, false);
    add("k = 0", 2, 4, 0, 3, false, false);
    add("m = 0", 2, 0, 4, 3, false, false);
    return cases;
  };
  return e;
}

// ---- softmax ------------------------------------------------------------------------------

CatalogEntry softmax(bool backward) {
  CatalogEntry e;
  e.tolerance_scale = 4;
  e.build = [=](fl_dtype_t dtype, bool) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    for (auto [label, shape, dim] : {std::tuple<std::string, Shape, int64_t>{"dim 1 of [4,7]", {4, 7}, 1},
                                     {"dim 0 of [5,3,2]", {5, 3, 2}, 0},
                                     {"dim -1 of zero-size [0,4]", {0, 4}, -1}}) {
      KernelCase c;
      c.label = label;
      if (!backward) {
        c.inputs = {A::of(rnd(dtype, shape, label, -3, 3)), A::integer(dim), A::boolean(false)};
      } else {
        // grad_output, output (a valid softmax output is not needed: the formula is checked).
        c.inputs = {A::of(rnd(dtype, shape, label + "g")), A::of(rnd(dtype, shape, label + "o", 0.05, 0.9)),
                    A::integer(dim), A::integer(c10_scalar_type(dtype))};
      }
      c.outputs.push_back({dtype, shape});
      cases.push_back(std::move(c));
    }
    return cases;
  };
  return e;
}

// ---- nll_loss -----------------------------------------------------------------------------

HostTensor targets(int64_t n, int64_t classes, const std::string& key) {
  HostTensor t = catalog_random(kI64, {n}, 0, static_cast<double>(classes - 1), key);
  return t;
}

CatalogEntry nll_loss(bool backward) {
  CatalogEntry e;
  e.tolerance_scale = 4;
  e.build = [=](fl_dtype_t dtype, bool) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    const int64_t n = 6, classes = 4;
    for (int64_t reduction : {0, 1, 2}) {
      for (bool weighted : {false, true}) {
        KernelCase c;
        c.label = std::string("reduction ") + std::to_string(reduction) + (weighted ? " weighted" : "") + " ignore_index 2";
        HostTensor self = rnd(dtype, {n, classes}, c.label + "x", -3, -0.1);
        HostTensor target = targets(n, classes, c.label + "t");
        HostTensor weight = rnd(dtype, {classes}, c.label + "w", 0.5, 1.5);
        double total_weight = 0;
        for (int64_t i = 0; i < n; ++i) {
          int64_t t = static_cast<int64_t>(target.get_storage(i));
          if (t != 2) total_weight += weighted ? weight.get_storage(t) : 1.0;
        }
        A weight_arg = weighted ? A::of(weight) : A::none();
        Shape loss_shape = reduction == 0 ? Shape{n} : Shape{};
        if (!backward) {
          c.inputs = {A::of(self), A::of(target), weight_arg, A::integer(reduction), A::integer(2)};
          c.outputs = {{dtype, loss_shape}, {dtype, {}}};
        } else {
          c.inputs = {A::of(rnd(dtype, loss_shape, c.label + "g")), A::of(self), A::of(target), weight_arg,
                      A::integer(reduction), A::integer(2),
                      A::of(HostTensor::from_values(dtype, {}, {total_weight}))};
          c.outputs = {{dtype, {n, classes}}};
        }
        cases.push_back(std::move(c));
      }
    }
    return cases;
  };
  return e;
}

// mse_loss.out(self, target, reduction) and mse_loss_backward.grad_input(grad_output, self,
// target, reduction): each reduction (0 none, 1 mean, 2 sum), a zero-size batch with none.
CatalogEntry mse_loss(bool backward) {
  CatalogEntry e;
  e.tolerance_scale = 4;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    auto add = [&](const std::string& label, Shape shape, int64_t reduction, bool transpose) {
      KernelCase c;
      c.label = label;
      HostTensor self = maybe_transposed(rnd(dtype, shape, "mse" + label + "x"), transpose);
      HostTensor target = rnd(dtype, shape, "mse" + label + "t");
      Shape loss_shape = reduction == 0 ? shape : Shape{};
      if (!backward) {
        c.inputs = {A::of(self), A::of(target), A::integer(reduction)};
        c.outputs = {{dtype, loss_shape}};
      } else {
        c.inputs = {A::of(rnd(dtype, loss_shape, "mse" + label + "g")), A::of(self), A::of(target),
                    A::integer(reduction)};
        c.outputs = {{dtype, shape}};
      }
      cases.push_back(std::move(c));
    };
    add("reduction none of [4,5]", {4, 5}, 0, false);
    add("reduction mean of [4,5]", {4, 5}, 1, false);
    add("reduction sum of [3,7]", {3, 7}, 2, false);
    add("reduction none of zero-size [0,5]", {0, 5}, 0, false);
    if (strided) add("reduction mean of transposed [5,6]", {5, 6}, 1, true);
    return cases;
  };
  return e;
}

// ---- convolution ----------------------------------------------------------------------------

struct ConvShape {
  std::string label;
  int64_t n, cin, h, w, cout, k, stride, pad, dilation, groups;
  bool bias;
};

const ConvShape kConvShapes[] = {
    {"3x3 pad 1 with bias", 2, 3, 6, 6, 4, 3, 1, 1, 1, 1, true},
    {"3x3 stride 2 dilation 2 no bias", 1, 2, 9, 8, 3, 3, 2, 0, 2, 1, false},
    {"groups 2", 2, 4, 5, 5, 6, 3, 1, 1, 1, 2, true},
    {"zero-size batch", 0, 3, 6, 6, 4, 3, 1, 1, 1, 1, true},
};

int64_t conv_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
}

CatalogEntry convolution(bool backward) {
  CatalogEntry e;
  e.tolerance_scale = 10;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    // Layouts of (input, weight, grad_output) a strided kernel must also take: channels_last
    // throughout, channels_last input beside a contiguous weight, and a transposed input.
    enum class Layout { Contiguous, ChannelsLast, MixedInput, TransposedInput };
    std::vector<Layout> layouts = {Layout::Contiguous};
    if (strided) layouts.insert(layouts.end(), {Layout::ChannelsLast, Layout::MixedInput, Layout::TransposedInput});
    auto laid_out = [](HostTensor t, Layout layout, bool is_weight) {
      if (layout == Layout::ChannelsLast || (layout == Layout::MixedInput && !is_weight)) return t.as_channels_last_storage();
      if (layout == Layout::TransposedInput && !is_weight) return t.as_transposed_storage();
      return t;
    };
    const char* layout_label[] = {"", ", channels_last", ", channels_last input only", ", transposed input"};
    for (Layout layout : layouts)
    for (const ConvShape& s : kConvShapes) {
      for (bool all_grads : {true, false}) {
        if (!backward && !all_grads) continue;
        if (layout != Layout::Contiguous && s.n == 0) continue;
        KernelCase c;
        c.label = s.label + (backward && !all_grads ? " grad_input only" : "") + layout_label[static_cast<int>(layout)];
        Shape in_shape = {s.n, s.cin, s.h, s.w};
        Shape w_shape = {s.cout, s.cin / s.groups, s.k, s.k};
        Shape out_shape = {s.n, s.cout, conv_out(s.h, s.k, s.stride, s.pad, s.dilation),
                           conv_out(s.w, s.k, s.stride, s.pad, s.dilation)};
        std::vector<A> params = {A::int_list({s.stride, s.stride}), A::int_list({s.pad, s.pad}),
                                 A::int_list({s.dilation, s.dilation}), A::boolean(false), A::int_list({0, 0}),
                                 A::integer(s.groups)};
        if (!backward) {
          c.inputs = {A::of(laid_out(rnd(dtype, in_shape, c.label + "x"), layout, false)),
                      A::of(laid_out(rnd(dtype, w_shape, c.label + "w"), layout, true)),
                      s.bias ? A::of(rnd(dtype, {s.cout}, c.label + "b")) : A::none()};
          c.inputs.insert(c.inputs.end(), params.begin(), params.end());
          c.outputs = {{dtype, out_shape}};
        } else {
          c.inputs = {A::of(laid_out(rnd(dtype, out_shape, c.label + "g"), layout, false)),
                      A::of(laid_out(rnd(dtype, in_shape, c.label + "x"), layout, false)),
                      A::of(laid_out(rnd(dtype, w_shape, c.label + "w"), layout, true))};
          c.inputs.insert(c.inputs.end(), params.begin(), params.end());
          c.inputs.push_back(A::bool_list({1, all_grads ? 1 : 0, all_grads ? 1 : 0}));
          c.outputs = {{dtype, in_shape}, {dtype, w_shape, all_grads}, {dtype, {s.cout}, all_grads}};
        }
        cases.push_back(std::move(c));
      }
    }
    return cases;
  };
  return e;
}

// ---- max_pool2d ---------------------------------------------------------------------------

int64_t pool_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Flat (h * W + w) argmax of each window, as ATen's indices.
HostTensor pool_indices(const HostTensor& x, const Shape& out, int64_t k, int64_t stride, int64_t pad) {
  HostTensor idx = HostTensor::zeros(kI64, out);
  const int64_t H = x.shape[2], W = x.shape[3];
  int64_t flat = 0;
  for (int64_t nc = 0; nc < out[0] * out[1]; ++nc)
    for (int64_t oh = 0; oh < out[2]; ++oh)
      for (int64_t ow = 0; ow < out[3]; ++ow, ++flat) {
        double best = -INFINITY;
        int64_t best_at = -1;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            int64_t h = oh * stride - pad + i, w = ow * stride - pad + j;
            if (h < 0 || w < 0 || h >= H || w >= W) continue;
            double v = x.at({nc / x.shape[1], nc % x.shape[1], h, w});
            if (v > best) best = v, best_at = h * W + w;
          }
        idx.set_storage(flat, static_cast<double>(best_at));
      }
  return idx;
}

CatalogEntry max_pool(bool backward) {
  CatalogEntry e;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    // A strided kernel also gets channels_last inputs (and, backward, a channels_last gradient).
    for (bool channels_last : {false, true})
    for (auto [base_label, shape, k, stride, pad, ceil_mode] :
         {std::tuple<std::string, Shape, int64_t, int64_t, int64_t, bool>{"3x3 stride 2 pad 1", {2, 3, 7, 7}, 3, 2, 1, false},
          {"2x2 stride 2 ceil_mode", {1, 2, 5, 5}, 2, 2, 0, true},
          {"zero-size batch", {0, 2, 4, 4}, 2, 2, 0, false}}) {
      if (channels_last && (!strided || shape[0] == 0)) continue;
      const std::string label = base_label + (channels_last ? ", channels_last" : "");
      KernelCase c;
      c.label = label;
      HostTensor x = catalog_distinct(dtype, shape, "pool" + base_label);
      if (channels_last) x = x.as_channels_last_storage();
      Shape out = {shape[0], shape[1], pool_out(shape[2], k, stride, pad, 1, ceil_mode), pool_out(shape[3], k, stride, pad, 1, ceil_mode)};
      std::vector<A> params = {A::int_list({k, k}), A::int_list({stride, stride}), A::int_list({pad, pad}),
                               A::int_list({1, 1}), A::boolean(ceil_mode)};
      if (!backward) {
        c.inputs = {A::of(x)};
        c.inputs.insert(c.inputs.end(), params.begin(), params.end());
        c.outputs = {{dtype, out}, {kI64, out}};
      } else {
        HostTensor g = rnd(dtype, out, label + "g");
        HostTensor idx = pool_indices(x, out, k, stride, pad);
        if (channels_last) {
          g = g.as_channels_last_storage();
          idx = idx.as_channels_last_storage();
        }
        c.inputs = {A::of(g), A::of(x)};
        c.inputs.insert(c.inputs.end(), params.begin(), params.end());
        c.inputs.push_back(A::of(idx));
        c.outputs = {{dtype, shape}};
      }
      cases.push_back(std::move(c));
    }
    return cases;
  };
  return e;
}

// ---- nearest upsampling -----------------------------------------------------------------
// upsample_nearest2d / _upsample_nearest_exact2d (self, output_size, scales_h?, scales_w?) and
// their backward (grad_output, output_size, input_size, scales_h?, scales_w?): 2x, an odd
// factor given as a scale, a downsampling size; channels_last where the kernel takes strides.
CatalogEntry upsample_nearest(bool backward) {
  CatalogEntry e;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (backward && !is_floating(dtype)) return cases;
    for (bool channels_last : {false, true})
    for (auto [base_label, shape, oh, ow, scale] :
         {std::tuple<std::string, Shape, int64_t, int64_t, double>{"2x", {2, 3, 4, 5}, 8, 10, 0.0},
          {"scale 1.7", {1, 2, 5, 3}, 8, 5, 1.7},
          {"to 3x2", {1, 3, 7, 5}, 3, 2, 0.0},
          {"zero-size batch", {0, 2, 4, 4}, 8, 8, 0.0}}) {
      if (channels_last && (!strided || shape[0] == 0)) continue;
      const std::string label = base_label + (channels_last ? ", channels_last" : "");
      KernelCase c;
      c.label = label;
      const Shape out = {shape[0], shape[1], oh, ow};
      std::vector<A> scales = {scale > 0 ? A::real(scale) : A::none(), scale > 0 ? A::real(scale) : A::none()};
      if (!backward) {
        HostTensor x = rnd(dtype, shape, "upsample" + base_label);
        if (channels_last) x = x.as_channels_last_storage();
        c.inputs = {A::of(x), A::int_list({oh, ow})};
        c.outputs = {{dtype, out}};
      } else {
        HostTensor g = rnd(dtype, out, "upsample g" + base_label);
        if (channels_last) g = g.as_channels_last_storage();
        c.inputs = {A::of(g), A::int_list({oh, ow}), A::int_list(shape)};
        c.outputs = {{dtype, shape}};
      }
      c.inputs.insert(c.inputs.end(), scales.begin(), scales.end());
      cases.push_back(std::move(c));
    }
    return cases;
  };
  return e;
}

// ---- layer_norm ---------------------------------------------------------------------------

CatalogEntry layer_norm(bool backward) {
  CatalogEntry e;
  e.tolerance_scale = 10;
  e.build = [=](fl_dtype_t dtype, bool) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    for (auto [label, shape, normalized, affine] :
         {std::tuple<std::string, Shape, Shape, bool>{"[3,4,5] over [5] affine", {3, 4, 5}, {5}, true},
          {"[3,4,5] over [4,5] no affine", {3, 4, 5}, {4, 5}, false},
          {"zero-size [0,6] over [6] affine", {0, 6}, {6}, true}}) {
      KernelCase c;
      c.label = label;
      HostTensor x = rnd(dtype, shape, label + "x");
      Shape stat_shape = shape;
      for (size_t d = shape.size() - normalized.size(); d < shape.size(); ++d) stat_shape[d] = 1;
      A weight = affine ? A::of(rnd(dtype, normalized, label + "w", 0.5, 1.5)) : A::none();
      A bias = affine ? A::of(rnd(dtype, normalized, label + "b")) : A::none();
      const double eps = 1e-5;
      if (!backward) {
        c.inputs = {A::of(x), A::int_list(normalized), weight, bias, A::real(eps)};
        c.outputs = {{dtype, shape}, {dtype, stat_shape}, {dtype, stat_shape}};
      } else {
        // mean and rstd as the forward computes them.
        const int64_t inner = shape_numel(normalized), rows = shape_numel(stat_shape);
        std::vector<double> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          double s = 0, s2 = 0;
          for (int64_t i = 0; i < inner; ++i) s += x.get_storage(r * inner + i);
          double m = s / static_cast<double>(inner);
          for (int64_t i = 0; i < inner; ++i) s2 += std::pow(x.get_storage(r * inner + i) - m, 2);
          mean[static_cast<size_t>(r)] = m;
          rstd[static_cast<size_t>(r)] = 1.0 / std::sqrt(s2 / static_cast<double>(inner) + eps);
        }
        c.inputs = {A::of(rnd(dtype, shape, label + "g")), A::of(x), A::int_list(normalized),
                    A::of(HostTensor::from_values(dtype, stat_shape, mean)),
                    A::of(HostTensor::from_values(dtype, stat_shape, rstd)), weight, bias,
                    A::bool_list({1, affine ? 1 : 0, affine ? 1 : 0})};
        c.outputs = {{dtype, shape}, {dtype, normalized, affine}, {dtype, normalized, affine}};
      }
      cases.push_back(std::move(c));
    }
    return cases;
  };
  return e;
}

// ---- batch_norm ---------------------------------------------------------------------------

// native_batch_norm / _native_batch_norm_legit (input, weight?, bias?, running_mean?, running_var?,
// training, momentum, eps) -> (out, save_mean, save_invstd); with `no_training`,
// _native_batch_norm_legit_no_training (no training argument: eval); with `backward`,
// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
// save_invstd?, train, eps, output_mask) -> (grad_input, grad_weight, grad_bias). The running
// statistics a training forward updates in place are inputs, so they are not compared; the
// saved statistics and gradients are. Statistics have the input's dtype, float32 for half types
// (ATen's CUDA kernels keep them in the accumulation type).
CatalogEntry batch_norm(bool backward, bool no_training = false) {
  CatalogEntry e;
  e.tolerance_scale = 10;
  e.build = [=](fl_dtype_t dtype, bool) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    const fl_dtype_t stat = dtype == FL_DTYPE_FLOAT64 ? dtype : FL_DTYPE_FLOAT32;
    const double eps = 1e-5, momentum = 0.1;
    for (auto [label, shape, training, affine] :
         {std::tuple<std::string, Shape, bool, bool>{"training [4,3,5,5] affine", {4, 3, 5, 5}, true, true},
          {"training [6,4] no affine", {6, 4}, true, false},
          {"eval [2,3,4,4,2] affine", {2, 3, 4, 4, 2}, false, true}}) {
      if (no_training && training) continue;
      KernelCase c;
      c.label = label;
      const int64_t channels = shape[1];
      HostTensor x = rnd(dtype, shape, label + "x");
      A weight = affine ? A::of(rnd(stat, {channels}, label + "w", 0.5, 1.5)) : A::none();
      A bias = affine ? A::of(rnd(stat, {channels}, label + "b")) : A::none();
      A running_mean = A::of(rnd(stat, {channels}, label + "rm", -0.5, 0.5));
      A running_var = A::of(rnd(stat, {channels}, label + "rv", 0.5, 2.0));
      if (!backward) {
        if (no_training)
          c.inputs = {A::of(x), weight, bias, running_mean, running_var, A::real(momentum), A::real(eps)};
        else
          c.inputs = {A::of(x), weight, bias, running_mean, running_var, A::boolean(training), A::real(momentum),
                      A::real(eps)};
        const Shape stat_shape = training ? Shape{channels} : Shape{0};
        c.outputs = {{dtype, shape}, {stat, stat_shape}, {stat, stat_shape}};
      } else {
        std::vector<double> mean, invstd;
        batch_norm_stats(x, eps, mean, invstd);
        A save_mean = training ? A::of(HostTensor::from_values(stat, {channels}, mean)) : A::none();
        A save_invstd = training ? A::of(HostTensor::from_values(stat, {channels}, invstd)) : A::none();
        c.inputs = {A::of(rnd(dtype, shape, label + "g")), A::of(x), weight, running_mean, running_var, save_mean,
                    save_invstd, A::boolean(training), A::real(eps), A::bool_list({1, affine ? 1 : 0, affine ? 1 : 0})};
        c.outputs = {{dtype, shape}, {stat, {channels}, affine}, {stat, {channels}, affine}};
      }
      cases.push_back(std::move(c));
    }
    return cases;
  };
  return e;
}

// ---- fused attention -------------------------------------------------------------------------

// A [B,H,L,E] tensor stored as [B,L,H,E] (a GPT block's q.view(B, L, H, E).transpose(1, 2)),
// holding the same logical values.
HostTensor as_heads_interleaved_storage(const HostTensor& t) {
  const Shape& s = t.shape;
  HostTensor out = HostTensor::zeros(t.dtype, {s[0], s[2], s[1], s[3]});
  out.shape = s;
  out.strides = {s[2] * s[1] * s[3], s[3], s[1] * s[3], 1};
  if (t.numel() == 0) return out;
  Shape index(4, 0);
  do {
    int64_t offset = 0;
    for (size_t d = 0; d < 4; ++d) offset += index[d] * out.strides[d];
    out.set_storage(offset, t.at(index));
  } while (next_index(index, s));
  return out;
}

// _scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias?, dropout_p,
// is_causal, return_debug_mask, scale?) -> output, logsumexp (abi/fl_abi.h), and its backward,
// whose `out` and `logsumexp` inputs come from the naive forward of the same case. Head sizes
// 16 and 64 (cuDNN takes multiples of 8); a bias row that masks every key.
CatalogEntry fused_attention(bool backward) {
  CatalogEntry e;
  e.tolerance_scale = 8;
  e.build = [=](fl_dtype_t dtype, bool strided) {
    std::vector<KernelCase> cases;
    if (!is_floating(dtype)) return cases;
    struct Spec {
      std::string label;
      int64_t b, h, lq, lk, e, ev;
      bool causal, bias, fully_masked_row, interleaved;
      std::optional<double> scale;
    };
    std::vector<Spec> specs = {
        {"causal [2,3,7,16]", 2, 3, 7, 7, 16, 16, true, false, false, false, std::nullopt},
        {"cross attention Lq 5 Lk 9, scale 0.2", 1, 2, 5, 9, 16, 16, false, false, false, false, 0.2},
        {"causal, bias [1,2,6,6] with a fully masked row", 1, 2, 6, 6, 64, 64, true, true, true, false, std::nullopt},
    };
    if (strided) specs.push_back({"causal, [B,L,H,E] storage", 2, 2, 8, 8, 16, 16, true, false, false, true, std::nullopt});
    for (const Spec& sp : specs) {
      const std::string key = "sdpa" + sp.label;
      auto make = [&](const std::string& name, int64_t length, int64_t size) {
        HostTensor t = rnd(dtype, {sp.b, sp.h, length, size}, key + name);
        return sp.interleaved ? as_heads_interleaved_storage(t) : t;
      };
      HostTensor q = make("q", sp.lq, sp.e), k = make("k", sp.lk, sp.e), v = make("v", sp.lk, sp.ev);
      CaseArg bias = A::none();
      if (sp.bias) {
        HostTensor b = rnd(dtype, {sp.b, sp.h, sp.lq, sp.lk}, key + "bias");
        if (sp.fully_masked_row)
          for (int64_t bh = 0; bh < sp.b * sp.h; ++bh)
            for (int64_t j = 0; j < sp.lk; ++j) b.set_storage((bh * sp.lq + 2) * sp.lk + j, -INFINITY);
        bias = A::of(b);
      }
      const CaseArg scale = sp.scale ? A::real(*sp.scale) : A::none();
      KernelCase forward;
      forward.label = sp.label;
      forward.inputs = {A::of(q), A::of(k), A::of(v), bias, A::real(0.0), A::boolean(sp.causal), A::boolean(false), scale};
      forward.outputs = {{dtype, {sp.b, sp.h, sp.lq, sp.ev}}, {FL_DTYPE_FLOAT32, {sp.b, sp.h, sp.lq}}};
      if (!backward) {
        cases.push_back(std::move(forward));
        continue;
      }
      const auto out_lse = naive_run("aten::_scaled_dot_product_fused_attention_overrideable", forward);
      KernelCase c;
      c.label = sp.label;
      c.inputs = {A::of(rnd(dtype, {sp.b, sp.h, sp.lq, sp.ev}, key + "grad")), A::of(q), A::of(k), A::of(v), bias,
                  A::bool_list({1, 1, 1, sp.bias ? 1 : 0}), A::of(out_lse->at(0)), A::of(out_lse->at(1)), A::none(),
                  A::none(), A::integer(sp.lq), A::integer(sp.lk), A::real(0.0), A::boolean(sp.causal),
                  A::of(HostTensor::zeros(FL_DTYPE_INT64, {})), A::of(HostTensor::zeros(FL_DTYPE_INT64, {})), scale};
      c.outputs = {{dtype, {sp.b, sp.h, sp.lq, sp.e}}, {dtype, {sp.b, sp.h, sp.lk, sp.e}},
                   {dtype, {sp.b, sp.h, sp.lk, sp.ev}}, {dtype, {sp.b, sp.h, sp.lq, sp.lk}, sp.bias}};
      cases.push_back(std::move(c));
    }
    return cases;
  };
  return e;
}

}  // namespace

void add_reductions_and_linear_algebra(std::map<std::string, CatalogEntry>& table) {
  table["aten::sum.IntList_out"] = dim_reduction("sum", true, true, false);
  table["aten::sum.out"] = full_reduction(true);
  table["aten::mean.out"] = dim_reduction("mean", true, false, false);
  table["aten::amax.out"] = dim_reduction("amax", false, true, true);
  table["aten::argmax.out"] = index_reduction("argmax", false);
  table["aten::linalg_vector_norm.out"] = vector_norm();
  for (const char* op : {"all", "any"}) {
    table[std::string("aten::") + op + ".out"] = logical_reduction(LogicalForm::Dim);
    table[std::string("aten::") + op + ".dims_out"] = logical_reduction(LogicalForm::Dims);
    table[std::string("aten::") + op + ".all_out"] = logical_reduction(LogicalForm::All);
  }
  table["aten::tril.out"] = triangle();
  table["aten::arange.start_out"] = arange();
  table["aten::triu.out"] = triangle();
  table["aten::argmin.out"] = index_reduction("argmin", false);
  table["aten::max.dim_max"] = index_reduction("max.dim", true);
  table["aten::min.dim_min"] = index_reduction("min.dim", true);
  table["aten::mm.out"] = matmul("mm");
  table["aten::addmm.out"] = matmul("addmm");
  table["aten::bmm.out"] = matmul("bmm");
  table["aten::baddbmm.out"] = matmul("baddbmm");
}

void add_nn_ops(std::map<std::string, CatalogEntry>& table) {
  table["aten::_softmax.out"] = softmax(false);
  table["aten::_log_softmax.out"] = softmax(false);
  table["aten::_softmax_backward_data.out"] = softmax(true);
  table["aten::_log_softmax_backward_data.out"] = softmax(true);
  table["aten::nll_loss_forward.output"] = nll_loss(false);
  table["aten::nll_loss_backward.grad_input"] = nll_loss(true);
  table["aten::mse_loss.out"] = mse_loss(false);
  table["aten::mse_loss_backward.grad_input"] = mse_loss(true);
  // Operators with no out= overload in the binding's sense are named bare; accept both.
  for (const char* suffix : {"", ".out"}) {
    table[std::string("aten::convolution_overrideable") + suffix] = convolution(false);
    table[std::string("aten::convolution_backward_overrideable") + suffix] = convolution(true);
    table[std::string("aten::native_layer_norm") + suffix] = layer_norm(false);
    table[std::string("aten::native_layer_norm_backward") + suffix] = layer_norm(true);
    table[std::string("aten::native_batch_norm") + suffix] = batch_norm(false);
    table[std::string("aten::_native_batch_norm_legit") + suffix] = batch_norm(false);
    table[std::string("aten::_native_batch_norm_legit_no_training") + suffix] = batch_norm(false, true);
    table[std::string("aten::native_batch_norm_backward") + suffix] = batch_norm(true);
  }
  table["aten::_scaled_dot_product_fused_attention_overrideable"] = fused_attention(false);
  table["aten::_scaled_dot_product_fused_attention_overrideable_backward"] = fused_attention(true);
  table["aten::upsample_nearest2d.out"] = upsample_nearest(false);
  table["aten::_upsample_nearest_exact2d.out"] = upsample_nearest(false);
  table["aten::upsample_nearest2d_backward.grad_input"] = upsample_nearest(true);
  table["aten::_upsample_nearest_exact2d_backward.grad_input"] = upsample_nearest(true);
  table["aten::max_pool2d_with_indices.out"] = max_pool(false);
  table["aten::max_pool2d_with_indices_backward.grad_input"] = max_pool(true);
}

}  // namespace fl::check
