// copy_engine.h — moving tensor data between host and fl devices and between fl devices
// (the body of aten::_copy_from). Contiguous same-dtype copies are one plugin memcpy on the
// current stream; everything else goes through a contiguous staging tensor, the plugin's
// `aten::copy.out` kernel when it has one, or the device's memory viewed from the host.
#pragma once

#include <ATen/core/Tensor.h>

namespace fl::binding {

// dst.copy_(src) where at least one side is an fl tensor. Sizes must match (broadcast is
// handled by ATen before _copy_from); dtypes may differ. Returns once the copy is done, except
// with non_blocking between pinned host memory (pinned_allocator.h) and an fl device, dense
// and of one dtype: then it stays queued on the device's current stream, as in CUDA.
void copy_between(const at::Tensor& dst, const at::Tensor& src, bool non_blocking);

// A CPU tensor with the same sizes/strides/dtype whose memory is the fl tensor's memory
// (host-accessible devices), after waiting for the device's current stream. Throws when the
// device memory is not host-accessible.
at::Tensor host_alias(const at::Tensor& fl_tensor);

// True when the fl tensor's device memory can be read by the host directly.
bool is_host_accessible(const at::Tensor& fl_tensor);

// Waits for the work enqueued so far on the current stream of the tensor's device.
void sync_current_stream(c10::DeviceIndex device);

}  // namespace fl::binding
