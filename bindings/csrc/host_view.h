// host_view.h — fl tensors that use host memory in place (zero-copy), on devices whose kernels
// take host pointers as device memory (fl_device_properties.host_pointers_usable: the CPU
// plugin), as PJRT's CPU client does with kImmutableZeroCopy host buffers. HeteroDataParallel
// gives such a device its shard of a host batch this way instead of copying it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace fl::binding {

// True when fl:`device`'s plugin takes host pointers as device memory.
bool takes_host_pointers(c10::DeviceIndex device);

// An fl:`device` tensor with `host`'s sizes, strides and dtype whose memory is `host`'s memory.
// Refused (c10::Error) for a tensor not on the CPU, one that requires grad (the view would not
// carry its graph), and one with a lazy negation or conjugation bit or a ZeroTensor (the view
// would lose them), and when the device cannot take host pointers.
//
// Lifetime: the view keeps `host`'s storage alive. When the view's storage dies, nothing
// waits: an event is recorded on every stream of the device, and the host storage is released
// once they have all completed (checked whenever a view is made or dropped, and by
// release_finished_host_views), so that no queued kernel reads memory given back, and no
// device error is consumed by the release. Writes through either tensor are seen by the
// other; the caller must not write `host` while work queued on the view may still read it.
at::Tensor device_view_of_host(const at::Tensor& host, c10::DeviceIndex device);

// Releases the host storages of dropped views whose device work has completed; returns how
// many dropped views still hold theirs.
size_t release_finished_host_views();

}  // namespace fl::binding
