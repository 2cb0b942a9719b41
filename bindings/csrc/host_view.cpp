// host_view.cpp — see host_view.h.
#include "host_view.h"

#include "fl_context.h"

#include <plugin_library.h>

#include <ATen/ATen.h>

namespace fl::binding {
namespace {

// What a view's storage owns: a reference to the host storage, and the device whose streams
// may still read it.
struct HostKeepAlive {
  c10::Storage host;
  c10::DeviceIndex device;
};

void release_host(void* context) {
  auto* keep = static_cast<HostKeepAlive*>(context);
  try {
    runtime().streams(keep->device).synchronize_all();
  } catch (...) {
    // A deleter must not throw. The wait fails only when the device failed or the runtime has
    // shut down (interpreter exit); then no queued work can run any more, so the reference is
    // released all the same.
  }
  delete keep;
}

}  // namespace

bool takes_host_pointers(c10::DeviceIndex device) {
  return runtime().device(device).props.host_pointers_usable != 0;
}

at::Tensor device_view_of_host(const at::Tensor& host, c10::DeviceIndex device) {
  TORCH_CHECK(host.device().is_cpu(), "device_view_of_host: the tensor is on ", host.device(), ", not cpu");
  const c10::Device target(c10::DeviceType::PrivateUse1, device);
  TORCH_CHECK(takes_host_pointers(device), "fl:", static_cast<int>(device), " (plugin '",
              runtime().device(device).plugin->name(), "') cannot use host memory in place");
  if (host.numel() == 0 || host.storage().data() == nullptr)
    return at::empty_strided(host.sizes(), host.strides(), host.options().device(target));
  auto* keep = new HostKeepAlive{host.storage(), device};
  try {
    return at::for_blob(host.data_ptr(), host.sizes())
        .strides(host.strides())
        .context(keep, &release_host)
        .target_device(target)
        .options(host.options().device(target))
        .make_tensor();
  } catch (...) {
    delete keep;
    throw;
  }
}

}  // namespace fl::binding
