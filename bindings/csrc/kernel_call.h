// kernel_call.h — turns ATen arguments into the ABI's fl_kernel_call: fl_value per schema
// argument, fl_tensor descriptors that borrow the tensors' sizes and strides. Owns every array
// the call points to, so it must outlive the kernel call (not the enqueued work: the ABI makes
// plugins copy what they keep).
#pragma once

#include <fl_abi.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <deque>
#include <string>
#include <vector>

namespace fl::binding {

class KernelCallBuilder {
 public:
  // `device` is the plugin-local index; `fl_device` the logical one (tensors on other fl
  // devices make add_input fail).
  KernelCallBuilder(c10::DeviceIndex fl_device, int32_t local_device);

  // Appends one input; false when the value cannot cross the ABI (then the native tier is
  // not taken): a Generator, a complex scalar, a non-scalar CPU tensor, a tensor of another
  // device, a dtype the ABI lacks.
  bool add_input(const c10::IValue& value);
  // Appends one output (undefined → ndim -1, "not requested").
  bool add_output(const at::Tensor& tensor);

  const fl_kernel_call& build(fl_stream_t stream, uint32_t flags, const fl_kernel_entry& entry);
  const std::string& refusal() const { return refusal_; }

 private:
  bool describe(const at::Tensor& t, fl_tensor& out);

  c10::DeviceIndex fl_device_;
  int32_t local_;
  std::deque<fl_tensor> tensors_;                 // stable addresses
  std::deque<std::vector<fl_tensor>> tensor_lists_;
  std::deque<std::vector<int64_t>> int_lists_;
  std::deque<std::vector<double>> double_lists_;
  std::deque<std::vector<int32_t>> bool_lists_;
  std::deque<std::string> strings_;
  std::vector<fl_value> inputs_;
  std::vector<fl_tensor> outputs_;
  fl_kernel_call call_{};
  std::string refusal_;
};

}  // namespace fl::binding
