#include "kernel_call.h"

#include "fl_context.h"

namespace fl::binding {
namespace {

void* base_pointer(const at::Tensor& t) {
  const auto& storage = t.storage();
  return storage ? const_cast<void*>(storage.data()) : nullptr;
}

}  // namespace

KernelCallBuilder::KernelCallBuilder(c10::DeviceIndex fl_device, int32_t local_device)
    : fl_device_(fl_device), local_(local_device) {}

bool KernelCallBuilder::describe(const at::Tensor& t, fl_tensor& out) {
  out = fl_tensor{};
  out.struct_size = sizeof(fl_tensor);
  if (!t.defined()) {
    out.ndim = -1;
    out.dtype = FL_DTYPE_FLOAT32;
    return true;
  }
  const fl_dtype_t dtype = to_fl_dtype(t.scalar_type());
  if (dtype < 0) {
    refusal_ = std::string("dtype ") + c10::toString(t.scalar_type()) + " has no ABI equivalent";
    return false;
  }
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    if (t.device().index() != fl_device_) {
      refusal_ = "a tensor on another fl device";
      return false;
    }
    out.device = local_;
  } else if (t.is_cpu() && t.dim() == 0) {
    out.device = FL_DEVICE_HOST;
  } else {
    refusal_ = "a non-scalar tensor on " + t.device().str();
    return false;
  }
  out.data = base_pointer(t);
  out.byte_offset = t.storage_offset() * static_cast<int64_t>(t.element_size());
  out.dtype = dtype;
  out.ndim = static_cast<int32_t>(t.dim());
  out.shape = t.sizes().data();
  out.strides = t.strides().data();
  return true;
}

bool KernelCallBuilder::add_input(const c10::IValue& v) {
  fl_value value{};
  int32_t slot = -1;
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      value.kind = FL_VALUE_NONE;
    } else {
      fl_tensor d;
      if (!describe(t, d)) return false;
      tensors_.push_back(d);
      value.kind = FL_VALUE_TENSOR;
      slot = static_cast<int32_t>(tensors_.size() - 1);
    }
  } else if (v.isNone()) {
    value.kind = FL_VALUE_NONE;
  } else if (v.isInt()) {
    value.kind = FL_VALUE_INT;
    value.u.i = v.toInt();
  } else if (v.isDouble()) {
    value.kind = FL_VALUE_DOUBLE;
    value.u.d = v.toDouble();
  } else if (v.isBool()) {
    value.kind = FL_VALUE_BOOL;
    value.u.b = v.toBool() ? 1 : 0;
  } else if (v.isIntList()) {
    int_lists_.push_back(v.toIntVector());
    value.kind = FL_VALUE_INT_LIST;
    value.u.ints.data = int_lists_.back().data();
    value.u.ints.len = static_cast<int64_t>(int_lists_.back().size());
  } else if (v.isDoubleList()) {
    double_lists_.push_back(v.toDoubleVector());
    value.kind = FL_VALUE_DOUBLE_LIST;
    value.u.doubles.data = double_lists_.back().data();
    value.u.doubles.len = static_cast<int64_t>(double_lists_.back().size());
  } else if (v.isBoolList()) {
    std::vector<int32_t> bools;
    for (bool b : v.toBoolList()) bools.push_back(b ? 1 : 0);
    bool_lists_.push_back(std::move(bools));
    value.kind = FL_VALUE_BOOL_LIST;
    value.u.bools.data = bool_lists_.back().data();
    value.u.bools.len = static_cast<int64_t>(bool_lists_.back().size());
  } else if (v.isList() && !v.isTensorList() && !v.toListRef().empty() &&
             v.toListRef()[0].isScalar()) {
    // Scalar[] (e.g. _foreach_div_.ScalarList) arrives as a generic list of numbers.
    std::vector<double> numbers;
    for (const c10::IValue& e : v.toListRef()) {
      if (!e.isScalar() || e.isComplexDouble()) {
        refusal_ = "a list of non-real scalars";
        return false;
      }
      numbers.push_back(e.toScalar().toDouble());
    }
    double_lists_.push_back(std::move(numbers));
    value.kind = FL_VALUE_DOUBLE_LIST;
    value.u.doubles.data = double_lists_.back().data();
    value.u.doubles.len = static_cast<int64_t>(double_lists_.back().size());
  } else if (v.isTensorList() || v.isList()) {
    std::vector<fl_tensor> list;
    for (const c10::IValue& e : v.toListRef()) {
      fl_tensor d{};
      if (e.isNone()) {
        d.struct_size = sizeof(fl_tensor);
        d.ndim = -1;
      } else if (!e.isTensor() || !describe(e.toTensor(), d)) {
        if (refusal_.empty()) refusal_ = "a list of non-tensors";
        return false;
      }
      list.push_back(d);
    }
    tensor_lists_.push_back(std::move(list));
    value.kind = FL_VALUE_TENSOR_LIST;
    value.u.tensors.data = tensor_lists_.back().data();
    value.u.tensors.len = static_cast<int64_t>(tensor_lists_.back().size());
  } else if (v.isString()) {
    strings_.push_back(std::make_unique<std::string>(v.toStringRef()));
    value.kind = FL_VALUE_STRING;
    value.u.str = strings_.back()->c_str();
  } else if (v.isDevice()) {
    value.kind = FL_VALUE_INT;
    value.u.i = v.toDevice().index();
  } else {
    refusal_ = std::string("an argument of type ") + v.tagKind();
    return false;
  }
  inputs_.push_back(value);
  tensor_slot_.push_back(slot);
  return true;
}

bool KernelCallBuilder::add_output(const at::Tensor& t) {
  fl_tensor d{};
  if (!describe(t, d)) return false;
  outputs_.push_back(d);
  return true;
}

void KernelCallBuilder::set_rng(uint64_t seed, uint64_t offset) {
  rng_ = true;
  call_.rng_seed = seed;
  call_.rng_offset = offset;
}

const fl_kernel_call& KernelCallBuilder::build(fl_stream_t stream, uint32_t flags,
                                               const fl_kernel_entry& entry) {
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (tensor_slot_[i] >= 0) inputs_[i].u.tensor = &tensors_[static_cast<size_t>(tensor_slot_[i])];
  call_.struct_size = sizeof(fl_kernel_call);
  call_.device = local_;
  call_.flags = flags | (rng_ ? static_cast<uint32_t>(FL_CALL_RNG) : 0u);
  call_.stream = stream;
  call_.num_inputs = static_cast<int32_t>(inputs_.size());
  call_.num_outputs = static_cast<int32_t>(outputs_.size());
  call_.inputs = inputs_.data();
  call_.outputs = outputs_.data();
  call_.kernel_data = entry.kernel_data;
  return call_;
}

}  // namespace fl::binding
