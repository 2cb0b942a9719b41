// host_view.cpp — see host_view.h.
#include "host_view.h"

#include "fl_context.h"

#include <plugin_library.h>

#include <ATen/ATen.h>

#include <mutex>
#include <utility>
#include <vector>

namespace fl::binding {
namespace {

// What a view's storage owns: a reference to the host storage, and the device whose streams
// may still read it.
struct HostKeepAlive {
  c10::Storage host;
  c10::DeviceIndex device;
};

// A dropped view's host storage, held until an event on each stream of its device completed.
struct PendingRelease {
  c10::Storage host;
  c10::DeviceIndex device;
  std::vector<fl_event_t> events;
};

struct Pending {
  std::mutex mutex;
  std::vector<PendingRelease> entries;
};

Pending& pending() {
  static auto* p = new Pending();  // outlives views dropped at interpreter exit
  return *p;
}

// True once every event completed (they are then destroyed). A query that fails (a device
// error) leaves the entry held for good: the device may still be reading the memory, and the
// error stays for the caller's next synchronize to report.
bool finished(PendingRelease& r) {
  try {
    auto& streams = runtime().streams(r.device);
    for (fl_event_t e : r.events)
      if (!streams.query_event(e)) return false;
    for (fl_event_t e : r.events) streams.destroy_event(e);
    r.events.clear();
    return true;
  } catch (...) {
    return false;
  }
}

size_t release_finished() {
  std::vector<PendingRelease> done;  // their storages are released outside the mutex
  size_t held = 0;
  {
    std::lock_guard lock(pending().mutex);
    auto& entries = pending().entries;
    for (size_t k = 0; k < entries.size();) {
      if (finished(entries[k])) {
        done.push_back(std::move(entries[k]));
        entries[k] = std::move(entries.back());
        entries.pop_back();
      } else {
        ++k;
      }
    }
    held = entries.size();
  }
  return held;
}

void release_host(void* context) {
  auto* keep = static_cast<HostKeepAlive*>(context);
  PendingRelease r{std::move(keep->host), keep->device, {}};
  delete keep;
  try {
    auto& streams = runtime().streams(r.device);
    for (int64_t id : streams.ids()) {
      fl_event_t e = streams.create_event(false);
      r.events.push_back(e);
      streams.record(e, id);
    }
  } catch (...) {
    // No event could be recorded (the device failed, or the runtime is gone at interpreter
    // exit): when the queued work ends is unknown, so the host memory is never given back.
    new c10::Storage(std::move(r.host));  // leaked on purpose
    return;
  }
  {
    std::lock_guard lock(pending().mutex);
    pending().entries.push_back(std::move(r));
  }
  release_finished();
}

}  // namespace

bool takes_host_pointers(c10::DeviceIndex device) {
  return runtime().device(device).props.host_pointers_usable != 0;
}

size_t release_finished_host_views() { return release_finished(); }

at::Tensor device_view_of_host(const at::Tensor& host, c10::DeviceIndex device) {
  TORCH_CHECK(host.device().is_cpu(), "device_view_of_host: the tensor is on ", host.device(), ", not cpu");
  TORCH_CHECK(!host.requires_grad(), "device_view_of_host: the tensor requires grad; a view would not carry its graph");
  TORCH_CHECK(!host.is_neg() && !host.is_conj() && !host._is_zerotensor(),
              "device_view_of_host: the tensor has a lazy negation or conjugation, or is a ZeroTensor; "
              "resolve it first (resolve_neg(), resolve_conj())");
  const c10::Device target(c10::DeviceType::PrivateUse1, device);
  TORCH_CHECK(takes_host_pointers(device), "fl:", static_cast<int>(device), " (plugin '",
              runtime().device(device).plugin->name(), "') cannot use host memory in place");
  release_finished();
  if (host.numel() == 0 || host.storage().data() == nullptr)
    return at::empty_strided(host.sizes(), host.strides(), host.options().device(target));
  // The maker owns `keep` from .context() on: it is released through release_host.
  return at::for_blob(host.data_ptr(), host.sizes())
      .strides(host.strides())
      .context(new HostKeepAlive{host.storage(), device}, &release_host)
      .target_device(target)
      .options(host.options().device(target))
      .make_tensor();
}

}  // namespace fl::binding
