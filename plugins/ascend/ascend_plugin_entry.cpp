// ascend_plugin_entry.cpp — the fl_device_ops table of the Ascend plugin: lifecycle, devices,
// memory, streams and events through AscendCL (resolved at init by acl_loader.cpp). Kernels
// are in aclnn_kernels.cpp. Copies involving host memory that did not come from
// fl_host_malloc (aclrtMallocHost) are done synchronously: aclrtMemcpyAsync requires
// page-locked host memory.
#include "aclnn_kernels.hpp"
#include "ascend_runtime.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <cstring>
#include <string>

namespace fl::ascend {
namespace {

using plugin::guard;
using plugin::raise;

// An fl_event_t: the ACL event and whether it was ever recorded (the ABI calls a
// never-recorded event complete; ACL reports it not ready).
struct Event {
  aclrtEvent event = nullptr;
  std::atomic<bool> recorded{false};
};

void copy_text(char* dst, size_t cap, const std::string& src) {
  const size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

#define FL_PROPS_HAS(props, field) \
  ((props)->struct_size >= offsetof(fl_device_properties, field) + sizeof((props)->field))

fl_status_t plugin_init(const fl_host_services* host, const char* options) {
  return guard([&] {
    if (host != nullptr && host->host_abi_major != FL_ABI_MAJOR)
      raise(FL_ERR_VERSION, "ascend plugin built for ABI major " + std::to_string(FL_ABI_MAJOR));
    init_runtime(host, options != nullptr ? options : "");
  });
}

void plugin_shutdown() {
  (void)guard([&] { shutdown_runtime(); });
}

const char* plugin_last_error() { return plugin::last_error(); }

fl_status_t plugin_device_count(int32_t* count) {
  return guard([&] {
    if (count == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_count: count is NULL");
    *count = device_count_or_zero();
  });
}

fl_status_t plugin_device_get_properties(int32_t device, fl_device_properties* props) {
  return guard([&] {
    if (props == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_get_properties: props is NULL");
    const AscendProperties& p = properties(device);
    if (FL_PROPS_HAS(props, vendor)) copy_text(props->vendor, sizeof(props->vendor), "Huawei");
    if (FL_PROPS_HAS(props, name)) copy_text(props->name, sizeof(props->name), p.soc_name);
    if (FL_PROPS_HAS(props, stable_id)) copy_text(props->stable_id, sizeof(props->stable_id), p.stable_id);
    if (FL_PROPS_HAS(props, total_memory)) props->total_memory = p.total_memory;
    if (FL_PROPS_HAS(props, compute_units)) props->compute_units = p.ai_cores;
    if (FL_PROPS_HAS(props, alignment)) props->alignment = 32;  // aclrtMalloc: at least 32-byte aligned
    if (FL_PROPS_HAS(props, dtype_mask)) props->dtype_mask = (static_cast<uint64_t>(1) << FL_DTYPE_COUNT) - 1;
    if (FL_PROPS_HAS(props, host_accessible)) props->host_accessible = 0;
    if (FL_PROPS_HAS(props, supports_pinned_host)) props->supports_pinned_host = 1;
    if (FL_PROPS_HAS(props, pci_bus_id)) props->pci_bus_id = -1;  // AscendCL exposes no PCI bus id
    if (FL_PROPS_HAS(props, reserved0)) props->reserved0 = 0;
  });
}

fl_status_t plugin_device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  return guard([&] {
    if (free_bytes == nullptr || total_bytes == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_memory_info: NULL output");
    use_device(device);
    size_t free_b = 0, total_b = 0;
    check_acl(acl().aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total_b), "aclrtGetMemInfo");
    *free_bytes = free_b;
    *total_bytes = total_b;
  });
}

fl_status_t plugin_device_synchronize(int32_t device) {
  return guard([&] {
    use_device(device);
    check_acl(acl().aclrtSynchronizeDevice(), "aclrtSynchronizeDevice");
  });
}

fl_status_t plugin_device_can_access_peer(int32_t device, int32_t peer, int32_t* can_access) {
  return guard([&] {
    if (can_access == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_can_access_peer: NULL output");
    (void)properties(device);
    (void)properties(peer);
    *can_access = device == peer ? 1 : 0;
    if (device == peer || acl().aclrtDeviceCanAccessPeer == nullptr || acl().aclrtDeviceEnablePeerAccess == nullptr)
      return;
    int32_t can = 0;
    check_acl(acl().aclrtDeviceCanAccessPeer(&can, device, peer), "aclrtDeviceCanAccessPeer");
    if (can == 0) return;
    use_device(device);
    check_acl(acl().aclrtDeviceEnablePeerAccess(peer, 0), "aclrtDeviceEnablePeerAccess");
    *can_access = 1;
  });
}

fl_status_t plugin_malloc(int32_t device, size_t size, void** ptr) {
  return guard([&] {
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_malloc: ptr is NULL");
    *ptr = nullptr;
    if (size == 0) raise(FL_ERR_INVALID_ARGUMENT, "fl_malloc: size is 0");
    use_device(device);
    void* p = nullptr;
    check_acl(acl().aclrtMalloc(&p, size, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
    if (p == nullptr) raise(FL_ERR_OUT_OF_MEMORY, "aclrtMalloc returned NULL");
    *ptr = p;
  });
}

fl_status_t plugin_free(int32_t device, void* ptr) {
  return guard([&] {
    use_device(device);
    if (ptr != nullptr) check_acl(acl().aclrtFree(ptr), "aclrtFree");
  });
}

fl_status_t plugin_host_malloc(size_t size, void** ptr) {
  return guard([&] {
    if (ptr == nullptr || size == 0) raise(FL_ERR_INVALID_ARGUMENT, "fl_host_malloc: NULL ptr or size 0");
    *ptr = nullptr;
    void* p = nullptr;
    check_acl(acl().aclrtMallocHost(&p, size), "aclrtMallocHost");
    remember_pinned(p, size);
    *ptr = p;
  });
}

fl_status_t plugin_host_free(void* ptr) {
  return guard([&] {
    if (ptr == nullptr) return;
    if (!forget_pinned(ptr)) raise(FL_ERR_INVALID_ARGUMENT, "fl_host_free: not a block from fl_host_malloc");
    check_acl(acl().aclrtFreeHost(ptr), "aclrtFreeHost");
  });
}

fl_status_t plugin_memset_async(int32_t device, void* ptr, int32_t value, size_t size, fl_stream_t stream) {
  return guard([&] {
    use_device(device);
    if (size == 0) return;
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_memset_async: ptr is NULL");
    check_acl(acl().aclrtMemsetAsync(ptr, size, value, size, resolve_stream(device, stream)), "aclrtMemsetAsync");
  });
}

fl_status_t plugin_memcpy_async(int32_t device, void* dst, const void* src, size_t size, fl_memcpy_kind_t kind,
                                fl_stream_t stream) {
  return guard([&] {
    if (kind < FL_MEMCPY_HOST_TO_DEVICE || kind > FL_MEMCPY_HOST_TO_HOST)
      raise(FL_ERR_INVALID_ARGUMENT, "fl_memcpy_async: bad kind " + std::to_string(kind));
    use_device(device);
    if (size == 0) return;
    if (dst == nullptr || src == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_memcpy_async: NULL pointer");
    const aclrtStream s = resolve_stream(device, stream);
    const AclApi& a = acl();
    aclrtMemcpyKind acl_kind = ACL_MEMCPY_DEVICE_TO_DEVICE;
    const void* host_side = nullptr;
    switch (kind) {
      case FL_MEMCPY_HOST_TO_DEVICE: acl_kind = ACL_MEMCPY_HOST_TO_DEVICE; host_side = src; break;
      case FL_MEMCPY_DEVICE_TO_HOST: acl_kind = ACL_MEMCPY_DEVICE_TO_HOST; host_side = dst; break;
      case FL_MEMCPY_DEVICE_TO_DEVICE: acl_kind = ACL_MEMCPY_DEVICE_TO_DEVICE; break;
      default: acl_kind = ACL_MEMCPY_HOST_TO_HOST; host_side = src; break;
    }
    if (host_side == nullptr || (is_pinned(host_side, size) && kind != FL_MEMCPY_HOST_TO_HOST)) {
      check_acl(a.aclrtMemcpyAsync(dst, size, src, size, acl_kind, s), "aclrtMemcpyAsync");
      return;
    }
    // Pageable host memory (or host-to-host): ordered after the stream's work, synchronously.
    check_acl(a.aclrtSynchronizeStream(s), "aclrtSynchronizeStream (before a synchronous copy)");
    if (kind == FL_MEMCPY_HOST_TO_HOST) std::memmove(dst, src, size);
    else check_acl(a.aclrtMemcpy(dst, size, src, size, acl_kind), "aclrtMemcpy");
  });
}

fl_status_t plugin_stream_create(int32_t device, int32_t priority, fl_stream_t* stream) {
  return guard([&] {
    if (stream == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_create: stream is NULL");
    *stream = nullptr;
    use_device(device);
    (void)priority;  // aclrtCreateStream has one priority; aclrtCreateStreamWithConfig is not used
    aclrtStream s = nullptr;
    check_acl(acl().aclrtCreateStream(&s), "aclrtCreateStream");
    *stream = reinterpret_cast<fl_stream_t>(s);
  });
}

fl_status_t plugin_stream_destroy(int32_t device, fl_stream_t stream) {
  return guard([&] {
    use_device(device);
    if (stream == nullptr) return;
    aclrtStream s = reinterpret_cast<aclrtStream>(stream);
    check_acl(acl().aclrtSynchronizeStream(s), "aclrtSynchronizeStream (stream_destroy)");
    release_stream_scratch(device, s);
    check_acl(acl().aclrtDestroyStream(s), "aclrtDestroyStream");
  });
}

fl_status_t plugin_stream_synchronize(int32_t device, fl_stream_t stream) {
  return guard([&] {
    use_device(device);
    check_acl(acl().aclrtSynchronizeStream(resolve_stream(device, stream)), "aclrtSynchronizeStream");
  });
}

fl_status_t plugin_stream_query(int32_t device, fl_stream_t stream, int32_t* done) {
  return guard([&] {
    if (done == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_query: done is NULL");
    use_device(device);
    const aclrtStream s = resolve_stream(device, stream);
    const AclApi& a = acl();
    if (a.aclrtStreamQuery != nullptr) {
      aclrtStreamStatus status = ACL_STREAM_STATUS_NOT_READY;
      check_acl(a.aclrtStreamQuery(s, &status), "aclrtStreamQuery");
      *done = status == ACL_STREAM_STATUS_COMPLETE ? 1 : 0;
      return;
    }
    // Older CANN: record a marker event and ask whether it has completed.
    aclrtEvent marker = nullptr;
    check_acl(a.aclrtCreateEvent(&marker), "aclrtCreateEvent");
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    aclError err = a.aclrtRecordEvent(marker, s);
    if (err == ACL_SUCCESS) err = a.aclrtQueryEventStatus(marker, &status);
    (void)a.aclrtDestroyEvent(marker);
    check_acl(err, "aclrtQueryEventStatus (stream_query)");
    *done = status == ACL_EVENT_RECORDED_STATUS_COMPLETE ? 1 : 0;
  });
}

fl_status_t plugin_stream_wait_event(int32_t device, fl_stream_t stream, fl_event_t event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_wait_event: event is NULL");
    use_device(device);
    Event* e = reinterpret_cast<Event*>(event);
    if (!e->recorded.load()) return;  // a never-recorded event is complete
    check_acl(acl().aclrtStreamWaitEvent(resolve_stream(device, stream), e->event), "aclrtStreamWaitEvent");
  });
}

fl_status_t plugin_event_create(int32_t device, uint32_t flags, fl_event_t* event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_create: event is NULL");
    *event = nullptr;
    use_device(device);
    auto e = std::make_unique<Event>();
    const AclApi& a = acl();
    if ((flags & FL_EVENT_TIMING) && a.aclrtCreateEventWithFlag != nullptr)
      check_acl(a.aclrtCreateEventWithFlag(&e->event, ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE), "aclrtCreateEventWithFlag");
    else
      check_acl(a.aclrtCreateEvent(&e->event), "aclrtCreateEvent");
    *event = reinterpret_cast<fl_event_t>(e.release());
  });
}

fl_status_t plugin_event_destroy(int32_t device, fl_event_t event) {
  return guard([&] {
    use_device(device);
    if (event == nullptr) return;
    std::unique_ptr<Event> e(reinterpret_cast<Event*>(event));
    check_acl(acl().aclrtDestroyEvent(e->event), "aclrtDestroyEvent");
  });
}

fl_status_t plugin_event_record(int32_t device, fl_event_t event, fl_stream_t stream) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_record: event is NULL");
    use_device(device);
    Event* e = reinterpret_cast<Event*>(event);
    check_acl(acl().aclrtRecordEvent(e->event, resolve_stream(device, stream)), "aclrtRecordEvent");
    e->recorded.store(true);
  });
}

fl_status_t plugin_event_query(int32_t device, fl_event_t event, int32_t* done) {
  return guard([&] {
    if (event == nullptr || done == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    use_device(device);
    Event* e = reinterpret_cast<Event*>(event);
    if (!e->recorded.load()) {
      *done = 1;
      return;
    }
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    check_acl(acl().aclrtQueryEventStatus(e->event, &status), "aclrtQueryEventStatus");
    *done = status == ACL_EVENT_RECORDED_STATUS_COMPLETE ? 1 : 0;
  });
}

fl_status_t plugin_event_synchronize(int32_t device, fl_event_t event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_synchronize: event is NULL");
    use_device(device);
    Event* e = reinterpret_cast<Event*>(event);
    if (e->recorded.load()) check_acl(acl().aclrtSynchronizeEvent(e->event), "aclrtSynchronizeEvent");
  });
}

fl_status_t plugin_event_elapsed_ms(int32_t device, fl_event_t start, fl_event_t end, float* ms) {
  return guard([&] {
    if (start == nullptr || end == nullptr || ms == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_elapsed_ms: NULL argument");
    use_device(device);
    check_acl(acl().aclrtEventElapsedTime(ms, reinterpret_cast<Event*>(start)->event, reinterpret_cast<Event*>(end)->event),
              "aclrtEventElapsedTime");
  });
}

const fl_device_ops kOps = [] {
  fl_device_ops ops{};
  ops.struct_size = sizeof(fl_device_ops);
  ops.abi_major = FL_ABI_MAJOR;
  ops.abi_minor = FL_ABI_MINOR;
  ops.plugin_name = "ascend";
  ops.plugin_version = "0.1.0+acl";
  ops.init = plugin_init;
  ops.shutdown = plugin_shutdown;
  ops.last_error = plugin_last_error;
  ops.device_count = plugin_device_count;
  ops.device_get_properties = plugin_device_get_properties;
  ops.device_memory_info = plugin_device_memory_info;
  ops.device_synchronize = plugin_device_synchronize;
  ops.device_can_access_peer = plugin_device_can_access_peer;
  ops.fl_malloc = plugin_malloc;
  ops.fl_free = plugin_free;
  ops.fl_host_malloc = plugin_host_malloc;
  ops.fl_host_free = plugin_host_free;
  ops.fl_memset_async = plugin_memset_async;
  ops.fl_memcpy_async = plugin_memcpy_async;
  ops.stream_create = plugin_stream_create;
  ops.stream_destroy = plugin_stream_destroy;
  ops.stream_synchronize = plugin_stream_synchronize;
  ops.stream_query = plugin_stream_query;
  ops.stream_wait_event = plugin_stream_wait_event;
  ops.event_create = plugin_event_create;
  ops.event_destroy = plugin_event_destroy;
  ops.event_record = plugin_event_record;
  ops.event_query = plugin_event_query;
  ops.event_synchronize = plugin_event_synchronize;
  ops.event_elapsed_ms = plugin_event_elapsed_ms;
  ops.kernels_get = kernels_get;
  ops.get_proc_address = nullptr;
  return ops;
}();

}  // namespace
}  // namespace fl::ascend

extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops(void) { return &fl::ascend::kOps; }
