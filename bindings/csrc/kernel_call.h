// kernel_call.h — turns ATen arguments into the ABI's fl_kernel_call: fl_value per schema
// argument, fl_tensor descriptors that borrow the tensors' sizes and strides. Owns every array
// the call points to, so it must outlive the kernel call (not the enqueued work: the ABI makes
// plugins copy what they keep).
#pragma once

#include <fl_abi.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <c10/util/SmallVector.h>

#include <memory>
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
  // Sets FL_CALL_RNG with this pair on the next build().
  void set_rng(uint64_t seed, uint64_t offset);
  const std::string& refusal() const { return refusal_; }

 private:
  bool describe(const at::Tensor& t, fl_tensor& out);

  c10::DeviceIndex fl_device_;
  int32_t local_;
  // Inline storage: the common call (a handful of tensors and scalars) allocates nothing.
  // fl_value.u.tensor is filled in by build(), since `tensors_` may move while growing.
  c10::SmallVector<fl_tensor, 8> tensors_;
  c10::SmallVector<int32_t, 8> tensor_slot_;             // input index → tensors_ index, or -1
  std::vector<std::vector<fl_tensor>> tensor_lists_;     // inner buffers never move
  std::vector<std::vector<int64_t>> int_lists_;
  std::vector<std::vector<double>> double_lists_;
  std::vector<std::vector<int32_t>> bool_lists_;
  std::vector<std::unique_ptr<std::string>> strings_;
  c10::SmallVector<fl_value, 8> inputs_;
  c10::SmallVector<fl_tensor, 4> outputs_;
  fl_kernel_call call_{};
  bool rng_ = false;
  std::string refusal_;
};

}  // namespace fl::binding
