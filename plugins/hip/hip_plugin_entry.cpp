// hip_plugin_entry.cpp — the fl_device_ops table of the HIP plugin: lifecycle, devices,
// memory, streams and events against the HIP runtime (libamdhip64). Kernels are the shared
// GPU kernel sources (plugins/cuda/*.cu built by hipcc) plus gemm_tiled.hip and
// conv_direct.hip, listed by the shared kernel_table.cpp. Every entry validates the device,
// makes it current (hipSetDevice) and maps runtime errors to FL_ERR_*.
#include "device_error.hpp"
#include "device_state.hpp"
#include "gpu_check.hpp"
#include "hip_state.hpp"
#include "kernels.hpp"
#include "native_extras.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

namespace fl::hip {
namespace {

using cuda::activate_device;
using cuda::check_gpu;
using cuda::device_state;
using cuda::raise_pending_device_error;
using cuda::resolve_stream;
using plugin::guard;
using plugin::raise;

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
      raise(FL_ERR_VERSION, "hip plugin built for ABI major " + std::to_string(FL_ABI_MAJOR) + ", host has " +
                                std::to_string(host->host_abi_major));
    init_hip_state(host, options != nullptr ? options : "");
  });
}

void plugin_shutdown() {
  (void)guard([&] { shutdown_hip_state(); });
}

const char* plugin_last_error() { return plugin::last_error(); }

fl_status_t plugin_device_count(int32_t* count) {
  return guard([&] {
    if (count == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_count: count is NULL");
    *count = cuda::device_count_or_zero();
  });
}

fl_status_t plugin_device_get_properties(int32_t device, fl_device_properties* props) {
  return guard([&] {
    if (props == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_get_properties: props is NULL");
    const HipProperties& p = hip_properties(device);
    if (FL_PROPS_HAS(props, vendor)) copy_text(props->vendor, sizeof(props->vendor), "AMD");
    if (FL_PROPS_HAS(props, name)) copy_text(props->name, sizeof(props->name), p.name);
    if (FL_PROPS_HAS(props, stable_id)) copy_text(props->stable_id, sizeof(props->stable_id), p.stable_id);
    if (FL_PROPS_HAS(props, total_memory)) props->total_memory = p.total_memory;
    if (FL_PROPS_HAS(props, compute_units)) props->compute_units = p.compute_units;
    if (FL_PROPS_HAS(props, alignment)) props->alignment = 256;  // hipMalloc aligns to at least 256 bytes
    if (FL_PROPS_HAS(props, dtype_mask)) props->dtype_mask = (static_cast<uint64_t>(1) << FL_DTYPE_COUNT) - 1;
    if (FL_PROPS_HAS(props, host_accessible)) props->host_accessible = 0;
    if (FL_PROPS_HAS(props, supports_pinned_host)) props->supports_pinned_host = 1;
    if (FL_PROPS_HAS(props, pci_bus_id)) props->pci_bus_id = p.pci_bus_id;
    if (FL_PROPS_HAS(props, reserved0)) props->reserved0 = 0;
  });
}

fl_status_t plugin_device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  return guard([&] {
    if (free_bytes == nullptr || total_bytes == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_memory_info: NULL output");
    activate_device(device);
    size_t free_b = 0, total_b = 0;
    check_gpu(hipMemGetInfo(&free_b, &total_b), "hipMemGetInfo");
    *free_bytes = free_b;
    *total_bytes = total_b;
  });
}

fl_status_t plugin_device_synchronize(int32_t device) {
  return guard([&] {
    activate_device(device);
    check_gpu(hipDeviceSynchronize(), "hipDeviceSynchronize");
    raise_pending_device_error(device, nullptr);
  });
}

// Peer access is enabled the first time the core asks and the answer is yes.
fl_status_t plugin_device_can_access_peer(int32_t device, int32_t peer, int32_t* can_access) {
  return guard([&] {
    if (can_access == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_can_access_peer: NULL output");
    cuda::DeviceState& d = device_state(device);
    (void)device_state(peer);
    *can_access = 0;
    if (device == peer) {
      *can_access = 1;
      return;
    }
    int can = 0;
    check_gpu(hipDeviceCanAccessPeer(&can, device, peer), "hipDeviceCanAccessPeer");
    if (can == 0) return;
    std::lock_guard<std::mutex> lock(d.peer_mutex);
    const uint64_t bit = peer < 64 ? (static_cast<uint64_t>(1) << peer) : 0;
    if (bit == 0 || (d.peer_enabled_mask & bit) == 0) {
      check_gpu(hipSetDevice(device), "hipSetDevice");
      const hipError_t err = hipDeviceEnablePeerAccess(peer, 0);
      if (err == hipErrorPeerAccessAlreadyEnabled) (void)hipGetLastError();
      else check_gpu(err, "hipDeviceEnablePeerAccess");
      d.peer_enabled_mask |= bit;
    }
    *can_access = 1;
  });
}

fl_status_t plugin_malloc(int32_t device, size_t size, void** ptr) {
  return guard([&] {
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_malloc: ptr is NULL");
    *ptr = nullptr;
    if (size == 0) raise(FL_ERR_INVALID_ARGUMENT, "fl_malloc: size is 0");
    activate_device(device);
    void* p = nullptr;
    check_gpu(hipMalloc(&p, size), "hipMalloc");  // out of memory -> FL_ERR_OUT_OF_MEMORY
    if (p == nullptr) raise(FL_ERR_OUT_OF_MEMORY, "hipMalloc returned NULL");
    *ptr = p;
  });
}

fl_status_t plugin_free(int32_t device, void* ptr) {
  return guard([&] {
    if (ptr == nullptr) return;
    activate_device(device);
    check_gpu(hipFree(ptr), "hipFree");
  });
}

fl_status_t plugin_host_malloc(size_t size, void** ptr) {
  return guard([&] {
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_host_malloc: ptr is NULL");
    *ptr = nullptr;
    if (size == 0) raise(FL_ERR_INVALID_ARGUMENT, "fl_host_malloc: size is 0");
    void* p = nullptr;
    check_gpu(hipHostMalloc(&p, size, hipHostMallocDefault), "hipHostMalloc");
    *ptr = p;
  });
}

fl_status_t plugin_host_free(void* ptr) {
  return guard([&] {
    if (ptr == nullptr) return;
    check_gpu(hipHostFree(ptr), "hipHostFree");
  });
}

fl_status_t plugin_memset_async(int32_t device, void* ptr, int32_t value, size_t size, fl_stream_t stream) {
  return guard([&] {
    activate_device(device);
    if (size == 0) return;
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_memset_async: ptr is NULL");
    check_gpu(hipMemsetAsync(ptr, value, size, resolve_stream(device, stream)), "hipMemsetAsync");
  });
}

// hipMemcpyDefault: the runtime reads the direction off the pointers (unified addressing),
// which also covers copies between peers. From pageable host memory the runtime stages the
// copy and may return only once the source has been read.
fl_status_t plugin_memcpy_async(int32_t device, void* dst, const void* src, size_t size, fl_memcpy_kind_t kind,
                                fl_stream_t stream) {
  return guard([&] {
    if (kind < FL_MEMCPY_HOST_TO_DEVICE || kind > FL_MEMCPY_HOST_TO_HOST)
      raise(FL_ERR_INVALID_ARGUMENT, "fl_memcpy_async: bad kind " + std::to_string(kind));
    activate_device(device);
    if (size == 0) return;
    if (dst == nullptr || src == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_memcpy_async: NULL pointer");
    check_gpu(hipMemcpyAsync(dst, src, size, hipMemcpyDefault, resolve_stream(device, stream)), "hipMemcpyAsync");
  });
}

fl_status_t plugin_stream_create(int32_t device, int32_t priority, fl_stream_t* stream) {
  return guard([&] {
    if (stream == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_create: stream is NULL");
    *stream = nullptr;
    activate_device(device);
    int least = 0, greatest = 0;
    check_gpu(hipDeviceGetStreamPriorityRange(&least, &greatest), "hipDeviceGetStreamPriorityRange");
    const int p = std::clamp(static_cast<int>(priority), std::min(least, greatest), std::max(least, greatest));
    hipStream_t s = nullptr;
    check_gpu(hipStreamCreateWithPriority(&s, hipStreamNonBlocking, p), "hipStreamCreateWithPriority");
    *stream = reinterpret_cast<fl_stream_t>(s);
  });
}

fl_status_t plugin_stream_destroy(int32_t device, fl_stream_t stream) {
  return guard([&] {
    activate_device(device);
    if (stream == nullptr) return;
    hipStream_t s = reinterpret_cast<hipStream_t>(stream);
    check_gpu(hipStreamSynchronize(s), "hipStreamSynchronize (stream_destroy)");
    check_gpu(hipStreamDestroy(s), "hipStreamDestroy");
  });
}

fl_status_t plugin_stream_synchronize(int32_t device, fl_stream_t stream) {
  return guard([&] {
    activate_device(device);
    const auto waited = resolve_stream(device, stream);
    check_gpu(hipStreamSynchronize(waited), "hipStreamSynchronize");
    raise_pending_device_error(device, &waited);
  });
}

fl_status_t plugin_stream_query(int32_t device, fl_stream_t stream, int32_t* done) {
  return guard([&] {
    if (done == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_query: done is NULL");
    activate_device(device);
    const hipError_t err = hipStreamQuery(resolve_stream(device, stream));
    if (err == hipErrorNotReady) {
      (void)hipGetLastError();
      *done = 0;
      return;
    }
    check_gpu(err, "hipStreamQuery");
    *done = 1;
  });
}

fl_status_t plugin_stream_wait_event(int32_t device, fl_stream_t stream, fl_event_t event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_wait_event: event is NULL");
    activate_device(device);
    check_gpu(hipStreamWaitEvent(resolve_stream(device, stream), reinterpret_cast<hipEvent_t>(event), 0),
              "hipStreamWaitEvent");
  });
}

fl_status_t plugin_event_create(int32_t device, uint32_t flags, fl_event_t* event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_create: event is NULL");
    *event = nullptr;
    activate_device(device);
    hipEvent_t e = nullptr;
    check_gpu(hipEventCreateWithFlags(&e, (flags & FL_EVENT_TIMING) ? hipEventDefault : hipEventDisableTiming),
              "hipEventCreateWithFlags");
    *event = reinterpret_cast<fl_event_t>(e);
  });
}

fl_status_t plugin_event_destroy(int32_t device, fl_event_t event) {
  return guard([&] {
    activate_device(device);
    if (event == nullptr) return;
    check_gpu(hipEventDestroy(reinterpret_cast<hipEvent_t>(event)), "hipEventDestroy");
  });
}

fl_status_t plugin_event_record(int32_t device, fl_event_t event, fl_stream_t stream) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_record: event is NULL");
    activate_device(device);
    check_gpu(hipEventRecord(reinterpret_cast<hipEvent_t>(event), resolve_stream(device, stream)), "hipEventRecord");
  });
}

fl_status_t plugin_event_query(int32_t device, fl_event_t event, int32_t* done) {
  return guard([&] {
    if (event == nullptr || done == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    activate_device(device);
    const hipError_t err = hipEventQuery(reinterpret_cast<hipEvent_t>(event));
    if (err == hipErrorNotReady) {
      (void)hipGetLastError();
      *done = 0;
      return;
    }
    check_gpu(err, "hipEventQuery");
    *done = 1;
  });
}

fl_status_t plugin_event_synchronize(int32_t device, fl_event_t event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_synchronize: event is NULL");
    activate_device(device);
    check_gpu(hipEventSynchronize(reinterpret_cast<hipEvent_t>(event)), "hipEventSynchronize");
  });
}

fl_status_t plugin_event_elapsed_ms(int32_t device, fl_event_t start, fl_event_t end, float* ms) {
  return guard([&] {
    if (start == nullptr || end == nullptr || ms == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_elapsed_ms: NULL argument");
    activate_device(device);
    check_gpu(hipEventElapsedTime(ms, reinterpret_cast<hipEvent_t>(start), reinterpret_cast<hipEvent_t>(end)),
              "hipEventElapsedTime");
  });
}

#define FL_STR2(x) #x
#define FL_STR(x) FL_STR2(x)

const fl_device_ops kOps = [] {
  fl_device_ops ops{};
  ops.struct_size = sizeof(fl_device_ops);
  ops.abi_major = FL_ABI_MAJOR;
  ops.abi_minor = FL_ABI_MINOR;
  ops.plugin_name = "hip";
  ops.plugin_version = "0.1.0+hip" FL_STR(HIP_VERSION_MAJOR) "." FL_STR(HIP_VERSION_MINOR);
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
  ops.kernels_get = cuda::kernels_get;
  ops.get_proc_address = cuda::native_extra;
  return ops;
}();

}  // namespace
}  // namespace fl::hip

extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops(void) { return &fl::hip::kOps; }
