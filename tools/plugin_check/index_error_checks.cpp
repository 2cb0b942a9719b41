// index_error_checks.cpp — see index_error_checks.h.
#include "index_error_checks.h"

#include "case_runner.h"
#include "error.h"
#include "kernel_checks.h"
#include "naive_reference.h"

#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace fl::check {
namespace {

using A = CaseArg;

// One indexing kernel: the same call with one bad index and with good ones, and the values the
// good one must give.
struct IndexErrorCase {
  std::string op;
  KernelCase bad;
  KernelCase good;
  std::function<std::vector<HostTensor>(const KernelCase&)> expected;
};

HostTensor counting(fl_dtype_t dtype, const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  return HostTensor::from_values(dtype, shape, v);
}

HostTensor indices(const Shape& shape, std::vector<double> v) {
  return HostTensor::from_values(FL_DTYPE_INT64, shape, v);
}

KernelCase make_case(std::string label, std::vector<CaseArg> inputs, std::vector<OutputSpec> outputs) {
  KernelCase c;
  c.label = std::move(label);
  c.inputs = std::move(inputs);
  c.outputs = std::move(outputs);
  return c;
}

std::vector<HostTensor> by_naive(const std::string& op, const KernelCase& c) { return *naive_run_indexing(op, c); }

std::vector<IndexErrorCase> index_error_cases() {
  constexpr fl_dtype_t f32 = FL_DTYPE_FLOAT32;
  std::vector<IndexErrorCase> cases;
  auto gather = [&](std::vector<double> idx) {
    return make_case("gather dim 1 of [2,3]", {A::of(counting(f32, {2, 3})), A::integer(1), A::of(indices({2, 2}, idx)),
                                              A::boolean(false)},
                     {{f32, {2, 2}}});
  };
  cases.push_back({"aten::gather.out", gather({0, 3, 1, 0}), gather({0, 2, 1, 0}),
                   [](const KernelCase& c) { return by_naive("aten::gather.out", c); }});
  auto select = [&](std::vector<double> idx) {
    return make_case("index_select dim 0 of [4,2]", {A::of(counting(f32, {4, 2})), A::integer(0), A::of(indices({3}, idx))},
                     {{f32, {3, 2}}});
  };
  cases.push_back({"aten::index_select.out", select({3, 4, 1}), select({3, 0, 1}), [](const KernelCase&) {
                     return std::vector<HostTensor>{HostTensor::from_values(f32, {3, 2}, {6, 7, 0, 1, 2, 3})};
                   }});
  auto scatter = [&](std::vector<double> idx) {
    return make_case("scatter dim 1 into [2,3]", {A::of(counting(f32, {2, 3})), A::integer(1), A::of(indices({2, 1}, idx)),
                                                 A::of(HostTensor::from_values(f32, {2, 1}, {10, 20}))},
                     {{f32, {2, 3}}});
  };
  for (const char* op : {"aten::scatter.src_out", "aten::scatter_add.out"})
    cases.push_back({op, scatter({2, -4}), scatter({2, 0}), [op](const KernelCase& c) { return by_naive(op, c); }});
  auto nll = [&](std::vector<double> target) {
    return make_case("nll_loss_forward [3,4], sum", {A::of(counting(f32, {3, 4})), A::of(indices({3}, target)), A::none(),
                                                    A::integer(2), A::integer(-100)},
                     {{f32, {}}, {f32, {}}});
  };
  // sum over rows of -x[i, t_i] for t = (1, 3, 0): -(1 + 7 + 8); total weight 3.
  cases.push_back({"aten::nll_loss_forward.output", nll({1, 4, 0}), nll({1, 3, 0}), [](const KernelCase&) {
                     return std::vector<HostTensor>{HostTensor::from_values(f32, {}, {-16}),
                                                    HostTensor::from_values(f32, {}, {3})};
                   }});
  return cases;
}

Status check_index_error(const PluginLibrary& plugin, const fl_kernel_entry& entry, const IndexErrorCase& c,
                         std::string& message) {
  if ((entry.dtype_mask & FL_DTYPE_BIT(FL_DTYPE_FLOAT32)) == 0) {
    message = "no float32 in its mask";
    return Status::Skip;
  }
  const CaseRun bad = run_case(plugin, entry, c.bad, 0);
  if (bad.status == FL_OK) {
    message = c.bad.label + " with an index out of range: the kernel and the stream_synchronize after it both returned "
              "FL_OK (the bad index went unreported)";
    return Status::Fail;
  }
  if (bad.status == FL_ERR_NOT_SUPPORTED) {
    message = "declined the float32 case (" + bad.error + ")";
    return Status::Skip;
  }
  if (bad.status != FL_ERR_DEVICE && bad.status != FL_ERR_INVALID_ARGUMENT) {
    message = c.bad.label + " with an index out of range: " + bad.error +
              " (expected FL_ERR_INVALID_ARGUMENT from the kernel or FL_ERR_DEVICE from the synchronize after it)";
    return Status::Fail;
  }
  const size_t colon = bad.error.find(": ");
  if (colon == std::string::npos || colon + 2 >= bad.error.size()) {
    message = "the index out of range was reported (" + std::string(status_name(bad.status)) + ") without a message";
    return Status::Fail;
  }
  const fl_status_t again = plugin.ops().stream_synchronize(0, nullptr);
  if (again != FL_OK) {
    message = "after the report, a second stream_synchronize still failed: " + std::string(status_name(again)) + ": " +
              plugin.last_error();
    return Status::Fail;
  }
  const CaseRun good = run_case(plugin, entry, c.good, 0);
  if (good.status != FL_OK) {
    message = "after the report, the same kernel with good indices failed: " + good.error;
    return Status::Fail;
  }
  if (auto mismatch = compare_outputs(good.outputs, c.expected(c.good), c.good.outputs, 1.0)) {
    message = "after the report, the same kernel with good indices gave wrong values: " + *mismatch;
    return Status::Fail;
  }
  message = std::string(bad.reported_by_synchronize ? "reported at the next stream_synchronize" : "refused by the kernel") +
            " (" + bad.error + "); cleared; good indices then give the right values";
  return Status::Pass;
}

}  // namespace

void run_index_error_checks(const PluginLibrary& plugin, Report& report) {
  for (const IndexErrorCase& c : index_error_cases()) {
    const fl_kernel_entry* entry = find_entry(plugin, c.op);
    if (entry == nullptr) continue;
    report.run("index out of range " + c.op,
               [&](std::string& message) { return check_index_error(plugin, *entry, c, message); });
  }
}

}  // namespace fl::check
