// foreach_kernels.cpp — the _foreach_* entries the optimizers call (SGD, Adam, AdamW), run as
// ATen's CPU backend runs them: for each list index, this plugin's single-tensor kernel
// (add.out, mul.out, lerp.Scalar_out, addcdiv.out, ...) on that index's tensors, enqueued in
// order on the call's stream. Dtypes, strides, broadcasting of wrapped scalars and in-place
// aliasing are therefore those of the single-tensor kernels. _foreach_norm runs
// linalg_vector_norm.out over each index's whole tensor, as ATen's CPU backend does
// (foreach_tensor_norm_slow): clip_grad_norm_'s per-parameter norms.
//
// Everything that could make a single kernel decline (lengths, undefined or host tensors,
// dtypes, sizes) is checked before the first index is enqueued, so a declined call has done
// nothing and the core may run its fallback. A failure after that is reported as
// FL_ERR_DEVICE, never as "not supported": an in-place op must not be run twice.
#include "kernel_table.hpp"
#include "scalar_types.hpp"
#include "tensor_desc.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// How the argument after the lists reaches the single-tensor kernel.
enum class Extra {
  None,            // unary: sqrt(self)
  ListOperand,     // a second Tensor[] is the kernel's `other`: mul.List
  ScalarOperand,   // a Scalar is the kernel's `other`, as a wrapped number: add.Scalar
  ScalarListOperand,  // the i-th of a Scalar[] is the kernel's `other`: div.ScalarList
  TensorOperand,   // one 0-dim Tensor is every index's `other`: mul.Tensor
  ScalarParam,     // a Scalar passed on unchanged: lerp.Scalar's weight, addcmul's value
  ScalarListParam, // the i-th of a Scalar[] passed as a number: addcdiv.ScalarList's value
};

struct ForeachOp {
  const char* name;      // the foreach entry, for messages
  const char* single;    // the per-index kernel entry
  int lists;             // Tensor[] inputs at 0 .. lists-1, all of the output list's length
  Extra extra;
  bool alpha;            // the single kernel takes a trailing alpha (add/sub): the op's own
                         // alpha input when it has one (List overloads), else 1
};

constexpr ForeachOp kOps[] = {
    {"aten::_foreach_add.List_out", "aten::add.out", 2, Extra::None, true},
    {"aten::_foreach_sub.List_out", "aten::sub.out", 2, Extra::None, true},
    {"aten::_foreach_add.Scalar_out", "aten::add.out", 1, Extra::ScalarOperand, true},
    {"aten::_foreach_sub.Scalar_out", "aten::sub.out", 1, Extra::ScalarOperand, true},
    {"aten::_foreach_add.ScalarList_out", "aten::add.out", 1, Extra::ScalarListOperand, true},
    {"aten::_foreach_mul.Scalar_out", "aten::mul.out", 1, Extra::ScalarOperand, false},
    {"aten::_foreach_mul.ScalarList_out", "aten::mul.out", 1, Extra::ScalarListOperand, false},
    {"aten::_foreach_mul.List_out", "aten::mul.out", 1, Extra::ListOperand, false},
    {"aten::_foreach_mul.Tensor_out", "aten::mul.out", 1, Extra::TensorOperand, false},
    {"aten::_foreach_div.Scalar_out", "aten::div.out", 1, Extra::ScalarOperand, false},
    {"aten::_foreach_div.ScalarList_out", "aten::div.out", 1, Extra::ScalarListOperand, false},
    {"aten::_foreach_div.List_out", "aten::div.out", 1, Extra::ListOperand, false},
    {"aten::_foreach_div.Tensor_out", "aten::div.out", 1, Extra::TensorOperand, false},
    {"aten::_foreach_sqrt.out", "aten::sqrt.out", 1, Extra::None, false},
    {"aten::_foreach_neg.out", "aten::neg.out", 1, Extra::None, false},
    {"aten::_foreach_lerp.Scalar_out", "aten::lerp.Scalar_out", 2, Extra::ScalarParam, false},
    {"aten::_foreach_lerp.List_out", "aten::lerp.Tensor_out", 3, Extra::None, false},
    {"aten::_foreach_addcmul.Scalar_out", "aten::addcmul.out", 3, Extra::ScalarParam, false},
    {"aten::_foreach_addcmul.ScalarList_out", "aten::addcmul.out", 3, Extra::ScalarListParam, false},
    {"aten::_foreach_addcdiv.Scalar_out", "aten::addcdiv.out", 3, Extra::ScalarParam, false},
    {"aten::_foreach_addcdiv.ScalarList_out", "aten::addcdiv.out", 3, Extra::ScalarListParam, false},
};

const fl_kernel_entry& single_entry(const char* op, const char* name) {
  for (const fl_kernel_entry& e : kernel_table())
    if (std::strcmp(e.op, op) == 0) return e;
  plugin::raise(FL_ERR_INTERNAL, std::string(name) + ": no entry " + op);
}

// The i-th number of a Scalar[] argument.
double list_number(const fl_value& v, int64_t i) {
  switch (v.kind) {
    case FL_VALUE_DOUBLE_LIST: return v.u.doubles.data[i];
    case FL_VALUE_INT_LIST: return static_cast<double>(v.u.ints.data[i]);
    case FL_VALUE_BOOL_LIST: return v.u.bools.data[i] ? 1.0 : 0.0;
    case FL_VALUE_TENSOR_LIST: return plugin::read_host_scalar(v.u.tensors.data[i]);
    default: return 0.0;
  }
}

int64_t list_length(const fl_value& v) {
  switch (v.kind) {
    case FL_VALUE_DOUBLE_LIST: return v.u.doubles.len;
    case FL_VALUE_INT_LIST: return v.u.ints.len;
    case FL_VALUE_BOOL_LIST: return v.u.bools.len;
    case FL_VALUE_TENSOR_LIST: return v.u.tensors.len;
    default: return -1;
  }
}

bool integral_list(const fl_value& v) { return v.kind == FL_VALUE_INT_LIST || v.kind == FL_VALUE_BOOL_LIST; }

// A number as a wrapped 0-dim host tensor (as ATen passes Python numbers): int64 for integral
// values, float64 otherwise, so that type promotion treats it as ATen would.
struct WrappedNumber {
  double d = 0.0;
  int64_t i = 0;
  fl_tensor t{};
  void set(double value, bool integral) {
    t.struct_size = sizeof(fl_tensor);
    t.ndim = 0;
    t.device = FL_DEVICE_HOST;
    if (integral) {
      i = static_cast<int64_t>(value);
      t.data = &i;
      t.dtype = FL_DTYPE_INT64;
    } else {
      d = value;
      t.data = &d;
      t.dtype = FL_DTYPE_FLOAT64;
    }
  }
};

fl_value tensor_value(const fl_tensor* t) {
  fl_value v{};
  v.kind = FL_VALUE_TENSOR;
  v.u.tensor = t;
  return v;
}

fl_value double_value(double d) {
  fl_value v{};
  v.kind = FL_VALUE_DOUBLE;
  v.u.d = d;
  return v;
}

fl_value int_value(int64_t i) {
  fl_value v{};
  v.kind = FL_VALUE_INT;
  v.u.i = i;
  return v;
}

void run_foreach(const fl_kernel_call* call, const ForeachOp& op, const fl_kernel_entry& single) {
  Args args(call);
  const int64_t n = call->num_outputs;
  std::vector<const fl_tensor*> lists(static_cast<size_t>(op.lists));
  for (int k = 0; k < op.lists; ++k) {
    const fl_value& v = args.at(k);
    if (v.kind != FL_VALUE_TENSOR_LIST || v.u.tensors.len != n)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op.name) + ": tensor list " + std::to_string(k) +
                                                 " is missing or of another length than the output list");
    lists[static_cast<size_t>(k)] = v.u.tensors.data;
  }
  const int extra_at = op.lists;
  const fl_value* extra = op.extra == Extra::None ? nullptr : &args.at(extra_at);
  if (op.extra == Extra::ListOperand &&
      (extra->kind != FL_VALUE_TENSOR_LIST || extra->u.tensors.len != n))
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op.name) + ": the second list has another length");
  if ((op.extra == Extra::ScalarListOperand || op.extra == Extra::ScalarListParam) && list_length(*extra) != n)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op.name) + ": the scalar list has another length");
  if (op.extra == Extra::TensorOperand && (extra->kind != FL_VALUE_TENSOR || extra->u.tensor == nullptr))
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op.name) + ": the scalar tensor is missing");

  // Checked before anything is enqueued: what the single kernel could decline.
  auto check_tensor = [&](const fl_tensor& t, const fl_tensor& ref, int64_t i) {
    if (t.ndim < 0 || t.device == FL_DEVICE_HOST)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op.name) + ": undefined or host tensor at index " + std::to_string(i));
    if (!(single.dtype_mask & FL_DTYPE_BIT(t.dtype)))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op.name) + ": dtype " + plugin::dtype_name(t.dtype));
    if (plugin::numel(t) != plugin::numel(ref))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op.name) + ": tensors of different sizes at index " +
                                                 std::to_string(i));
  };
  for (int64_t i = 0; i < n; ++i) {
    const fl_tensor& self = lists[0][i];
    for (int k = 0; k < op.lists; ++k) check_tensor(lists[static_cast<size_t>(k)][i], self, i);
    if (op.extra == Extra::ListOperand) check_tensor(extra->u.tensors.data[i], self, i);
    check_tensor(call->outputs[i], self, i);
  }

  for (int64_t i = 0; i < n; ++i) {
    std::vector<fl_value> inputs;
    WrappedNumber number;
    for (int k = 0; k < op.lists; ++k) inputs.push_back(tensor_value(&lists[static_cast<size_t>(k)][i]));
    switch (op.extra) {
      case Extra::None: break;
      case Extra::ListOperand: inputs.push_back(tensor_value(&extra->u.tensors.data[i])); break;
      case Extra::TensorOperand: inputs.push_back(tensor_value(extra->u.tensor)); break;
      case Extra::ScalarOperand:
        number.set(args.number(extra_at), extra->kind == FL_VALUE_INT || extra->kind == FL_VALUE_BOOL);
        inputs.push_back(tensor_value(&number.t));
        break;
      case Extra::ScalarListOperand:
        number.set(list_number(*extra, i), integral_list(*extra));
        inputs.push_back(tensor_value(&number.t));
        break;
      case Extra::ScalarParam: inputs.push_back(*extra); break;
      case Extra::ScalarListParam:
        inputs.push_back(integral_list(*extra) ? int_value(static_cast<int64_t>(list_number(*extra, i)))
                                               : double_value(list_number(*extra, i)));
        break;
    }
    if (op.alpha) {
      const bool has_alpha = op.extra == Extra::None && call->num_inputs > op.lists;
      inputs.push_back(has_alpha ? args.at(op.lists) : int_value(1));
    }
    fl_kernel_call one = plugin::copy_call(call);
    one.inputs = inputs.data();
    one.num_inputs = static_cast<int32_t>(inputs.size());
    one.outputs = &call->outputs[i];
    one.num_outputs = 1;
    one.kernel_data = single.kernel_data;
    const fl_status_t status = single.fn(&one);
    if (status != FL_OK)
      plugin::raise(FL_ERR_DEVICE, std::string(op.name) + ": index " + std::to_string(i) + " of " +
                                       std::to_string(n) + " failed after earlier indices ran (status " +
                                       std::to_string(status) + "): " + plugin::last_error());
  }
}

fl_value none_value() { return fl_value{}; }

fl_value bool_value(bool b) {
  fl_value v{};
  v.kind = FL_VALUE_BOOL;
  v.u.b = b ? 1 : 0;
  return v;
}

// _foreach_norm.Scalar_out(Tensor[] self, Scalar ord=2, ScalarType? dtype=None, *,
// Tensor(a!)[] out): out[i] (0-dim) = linalg_vector_norm(self[i], ord) in out[i]'s dtype.
void run_foreach_norm(const fl_kernel_call* call, const fl_kernel_entry& single) {
  const char* name = "aten::_foreach_norm.Scalar_out";
  Args args(call);
  const int64_t n = call->num_outputs;
  const fl_value& self = args.at(0);
  if (self.kind != FL_VALUE_TENSOR_LIST || self.u.tensors.len != n)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": the tensor list is missing or of another length "
                                                               "than the output list");
  const fl_value ord = args.is_none(1) ? double_value(2.0) : args.at(1);
  const double order = args.is_none(1) ? 2.0 : args.number(1);
  // Checked before anything is enqueued: what linalg_vector_norm.out could decline or refuse.
  for (int64_t i = 0; i < n; ++i) {
    const fl_tensor& t = self.u.tensors.data[i];
    const fl_tensor& out = call->outputs[i];
    const std::string at = " at index " + std::to_string(i);
    if (t.ndim < 0 || t.device == FL_DEVICE_HOST || out.ndim < 0)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": undefined or host tensor" + at);
    if (!(single.dtype_mask & FL_DTYPE_BIT(t.dtype)))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": dtype " + plugin::dtype_name(t.dtype) + at);
    if (out.dtype != t.dtype && out.dtype != FL_DTYPE_FLOAT64)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtype " + plugin::dtype_name(out.dtype) + at);
    if (t.ndim > kMaxDims)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": " + std::to_string(t.ndim) + " dims" + at);
    if (plugin::numel(out) != 1)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output" + at + " is not one element");
    if (plugin::numel(t) == 0 && (order < 0 || (std::isinf(order) && order > 0)))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": the norm of order " + std::to_string(order) +
                                                 " of the empty tensor" + at + " has no identity");
  }
  for (int64_t i = 0; i < n; ++i) {
    fl_value inputs[] = {tensor_value(&self.u.tensors.data[i]), ord, none_value(), bool_value(false), none_value()};
    fl_kernel_call one = plugin::copy_call(call);
    one.inputs = inputs;
    one.num_inputs = 5;
    one.outputs = &call->outputs[i];
    one.num_outputs = 1;
    one.kernel_data = single.kernel_data;
    const fl_status_t status = single.fn(&one);
    if (status != FL_OK)
      plugin::raise(FL_ERR_DEVICE, std::string(name) + ": index " + std::to_string(i) + " of " + std::to_string(n) +
                                       " failed after earlier indices ran (status " + std::to_string(status) +
                                       "): " + plugin::last_error());
  }
}

fl_status_t foreach_norm_entry(const fl_kernel_call* call) {
  return plugin::guard([&] {
    static const fl_kernel_entry& single = single_entry("aten::linalg_vector_norm.out", "aten::_foreach_norm");
    run_foreach_norm(call, single);
  });
}

template <int Index>
fl_status_t foreach_entry(const fl_kernel_call* call) {
  return plugin::guard([&] {
    // Looked up once: the table is complete by the time any kernel runs.
    static const fl_kernel_entry& single = single_entry(kOps[Index].single, kOps[Index].name);
    run_foreach(call, kOps[Index], single);
  });
}

template <int... I>
void register_all(KernelRegistry& r, std::integer_sequence<int, I...>) {
  // Float dtypes only (the optimizers' use); strided inputs are the single kernels' business,
  // outputs come contiguous from the core (in place: the core copies back when they are not).
  const uint32_t flags = FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_ALIASING_OK | FL_KERNEL_DETERMINISTIC;
  (r.add(kOps[I].name, kFloatingMask, flags, &foreach_entry<I>), ...);
}

}  // namespace

void register_foreach_kernels(KernelRegistry& registry) {
  register_all(registry, std::make_integer_sequence<int, static_cast<int>(sizeof(kOps) / sizeof(kOps[0]))>{});
  // The outputs are new 0-dim tensors: no aliasing.
  registry.add("aten::_foreach_norm.Scalar_out", kFloatingMask, FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_DETERMINISTIC,
               &foreach_norm_entry);
}

}  // namespace fl::cpu::kernels
