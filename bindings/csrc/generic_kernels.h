// generic_kernels.h — tier 2 of the router: kernels written once, in terms of other ATen ops,
// for kernel-table entries a plugin lacks (e.g. `aten::addcmul.out` as mul + add). Each takes
// the op's non-out arguments and the outputs the native kernel would get (allocated, sized)
// and writes them; it returns false to pass the call on to the CPU fallback.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <string>
#include <vector>

namespace fl::binding {

using GenericKernel =
    std::function<bool(const std::vector<c10::IValue>& inputs, std::vector<at::Tensor>& outputs)>;

// nullptr when there is none for this kernel-table name.
const GenericKernel* find_generic_kernel(const std::string& kernel_name);

std::vector<std::string> generic_kernel_names();

// For the kernels themselves (generic_kernels.cpp, generic_losses.cpp, generic_rms_norm.cpp):
// `t` in its op-math type (float for the 16-bit floats, else `t` itself), which they compute in
// as ATen's kernels do; and input `i` when it is a defined tensor, nullptr for a None.
at::Tensor in_acc(const at::Tensor& t);
const at::Tensor* optional_tensor(const std::vector<c10::IValue>& in, size_t i);

}  // namespace fl::binding
