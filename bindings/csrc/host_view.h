// host_view.h — fl tensors that use host memory in place (zero-copy), on devices whose kernels
// take host pointers as device memory (fl_device_properties.host_pointers_usable: the CPU
// plugin), as PJRT's CPU client does with kImmutableZeroCopy host buffers. HeteroDataParallel
// gives such a device its shard of a host batch this way instead of copying it.
#pragma once

#include <ATen/core/Tensor.h>

namespace fl::binding {

// True when fl:`device`'s plugin takes host pointers as device memory.
bool takes_host_pointers(c10::DeviceIndex device);

// An fl:`device` tensor with `host`'s sizes, strides and dtype whose memory is `host`'s memory.
// The view keeps `host`'s storage alive; when the view's storage dies, it first waits for every
// stream of the device, so no queued kernel reads memory that has been given back. Writes
// through either tensor are seen by the other; the caller must not write `host` while work
// queued on the view may still read it. Throws when `host` is not a CPU tensor or the device
// cannot take host pointers.
at::Tensor device_view_of_host(const at::Tensor& host, c10::DeviceIndex device);

}  // namespace fl::binding
