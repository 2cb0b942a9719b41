// plugin_entry.cpp — the fl_device_ops table of the CUDA plugin: lifecycle, devices, memory,
// streams and events. Kernels are listed in kernel_table.cpp. Every entry validates the
// device, makes it current (cudaSetDevice is cheap) and maps runtime errors to FL_ERR_*.
// Managed memory is never used.
#include "attention_cudnn.hpp"
#include "blas_handles.hpp"
#include "conv_cudnn.hpp"
#include "device_error.hpp"
#include "device_state.hpp"
#include "gpu_check.hpp"
#include "kernels.hpp"
#include "native_extras.hpp"
#include "pageable_upload.hpp"
#include "plugin_state.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <algorithm>
#include <cstring>
#include <string>

namespace fl::cuda {
namespace {

using plugin::guard;
using plugin::raise;

void copy_text(char* dst, size_t cap, const std::string& src) {
  const size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

// Writes a field only when it lies inside the caller's struct_size.
#define FL_PROPS_HAS(props, field) \
  ((props)->struct_size >= offsetof(fl_device_properties, field) + sizeof((props)->field))

fl_status_t plugin_init(const fl_host_services* host, const char* options) {
  return guard([&] {
    if (host != nullptr && host->host_abi_major != FL_ABI_MAJOR)
      raise(FL_ERR_VERSION, "cuda plugin built for ABI major " + std::to_string(FL_ABI_MAJOR) +
                                ", host has " + std::to_string(host->host_abi_major));
    init_plugin_state(host, options != nullptr ? options : "");
  });
}

void plugin_shutdown() {
  (void)guard([&] {
    shutdown_pageable_uploads();
    shutdown_conv();
    shutdown_attention();
    shutdown_blas();
    shutdown_plugin_state();
  });
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
    const CachedProperties& p = device_properties(device);
    if (FL_PROPS_HAS(props, vendor)) copy_text(props->vendor, sizeof(props->vendor), "NVIDIA");
    if (FL_PROPS_HAS(props, name)) copy_text(props->name, sizeof(props->name), p.name);
    if (FL_PROPS_HAS(props, stable_id))
      copy_text(props->stable_id, sizeof(props->stable_id), p.stable_id);
    if (FL_PROPS_HAS(props, total_memory)) props->total_memory = p.total_memory;
    if (FL_PROPS_HAS(props, compute_units)) props->compute_units = p.sm_count;
    if (FL_PROPS_HAS(props, alignment)) props->alignment = 256;
    if (FL_PROPS_HAS(props, dtype_mask))
      props->dtype_mask = (static_cast<uint64_t>(1) << FL_DTYPE_COUNT) - 1;
    if (FL_PROPS_HAS(props, host_accessible)) props->host_accessible = 0;
    if (FL_PROPS_HAS(props, supports_pinned_host)) props->supports_pinned_host = 1;
    if (FL_PROPS_HAS(props, pci_bus_id)) props->pci_bus_id = p.pci_bus_id;
    if (FL_PROPS_HAS(props, reserved0)) props->reserved0 = 0;
  });
}

fl_status_t plugin_device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  return guard([&] {
    if (free_bytes == nullptr || total_bytes == nullptr)
      raise(FL_ERR_INVALID_ARGUMENT, "device_memory_info: NULL output");
    activate_device(device);
    size_t free_b = 0, total_b = 0;
    check_gpu(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    *free_bytes = free_b;
    *total_bytes = total_b;
  });
}

fl_status_t plugin_device_synchronize(int32_t device) {
  return guard([&] {
    activate_device(device);
    check_gpu(gpuDeviceSynchronize(), "cudaDeviceSynchronize");
    raise_pending_device_error(device, nullptr);
  });
}

// Peer access is enabled the first time the core asks and the answer is yes.
fl_status_t plugin_device_can_access_peer(int32_t device, int32_t peer, int32_t* can_access) {
  return guard([&] {
    if (can_access == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_can_access_peer: NULL output");
    DeviceState& d = device_state(device);
    (void)device_state(peer);
    *can_access = 0;
    if (device == peer) {
      *can_access = 1;
      return;
    }
    int can = 0;
    check_gpu(gpuDeviceCanAccessPeer(&can, device, peer), "cudaDeviceCanAccessPeer");
    if (can == 0) return;
    std::lock_guard<std::mutex> lock(d.peer_mutex);
    const uint64_t bit = peer < 64 ? (static_cast<uint64_t>(1) << peer) : 0;
    if (bit == 0 || (d.peer_enabled_mask & bit) == 0) {
      check_gpu(gpuSetDevice(device), "cudaSetDevice");
      const gpuError_t err = gpuDeviceEnablePeerAccess(peer, 0);
      if (err == gpuErrorPeerAccessAlreadyEnabled) (void)gpuGetLastError();
      else check_gpu(err, "cudaDeviceEnablePeerAccess");
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
    const gpuError_t err = gpuMalloc(&p, size);
    if (err == gpuErrorMemoryAllocation) {
      (void)gpuGetLastError();
      raise(FL_ERR_OUT_OF_MEMORY, "cudaMalloc of " + std::to_string(size) + " bytes on device " +
                                      std::to_string(device) + ": out of memory");
    }
    check_gpu(err, "cudaMalloc");
    *ptr = p;
  });
}

fl_status_t plugin_free(int32_t device, void* ptr) {
  return guard([&] {
    if (ptr == nullptr) return;
    activate_device(device);
    check_gpu(gpuFree(ptr), "cudaFree");
  });
}

fl_status_t plugin_host_malloc(size_t size, void** ptr) {
  return guard([&] {
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_host_malloc: ptr is NULL");
    *ptr = nullptr;
    if (size == 0) raise(FL_ERR_INVALID_ARGUMENT, "fl_host_malloc: size is 0");
    void* p = nullptr;
    const gpuError_t err = gpuMallocHost(&p, size);
    if (err == gpuErrorMemoryAllocation) {
      (void)gpuGetLastError();
      raise(FL_ERR_OUT_OF_MEMORY, "cudaMallocHost of " + std::to_string(size) + " bytes: out of memory");
    }
    check_gpu(err, "cudaMallocHost");
    *ptr = p;
  });
}

fl_status_t plugin_host_free(void* ptr) {
  return guard([&] {
    if (ptr == nullptr) return;
    check_gpu(gpuFreeHost(ptr), "cudaFreeHost");
  });
}

fl_status_t plugin_memset_async(int32_t device, void* ptr, int32_t value, size_t size,
                                fl_stream_t stream) {
  return guard([&] {
    if (size == 0) return;
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_memset_async: ptr is NULL");
    activate_device(device);
    check_gpu(gpuMemsetAsync(ptr, value, size, resolve_stream(device, stream)), "cudaMemsetAsync");
  });
}

// cudaMemcpyDefault lets the runtime read the direction off the pointers (unified addressing),
// which also covers copies between peers. Copies from pageable host memory return only when
// the source has been read: large ones into this device are staged by the plugin's own
// threads (pageable_upload.hpp), the rest by the runtime.
fl_status_t plugin_memcpy_async(int32_t device, void* dst, const void* src, size_t size,
                                fl_memcpy_kind_t kind, fl_stream_t stream) {
  return guard([&] {
    if (size == 0) return;
    if (dst == nullptr || src == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_memcpy_async: NULL pointer");
    if (kind < FL_MEMCPY_HOST_TO_DEVICE || kind > FL_MEMCPY_HOST_TO_HOST)
      raise(FL_ERR_INVALID_ARGUMENT, "fl_memcpy_async: bad kind " + std::to_string(kind));
    activate_device(device);
    const gpuStream_t s = resolve_stream(device, stream);
    size_t staged = 0;
    if (kind == FL_MEMCPY_HOST_TO_DEVICE && stages_upload(device, dst, src, size))
      staged = upload_pageable(device, dst, src, size, s);
    if (staged < size)
      check_gpu(gpuMemcpyAsync(static_cast<char*>(dst) + staged, static_cast<const char*>(src) + staged,
                               size - staged, gpuMemcpyDefault, s),
                "cudaMemcpyAsync");
  });
}

fl_status_t plugin_stream_create(int32_t device, int32_t priority, fl_stream_t* stream) {
  return guard([&] {
    if (stream == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_create: stream is NULL");
    *stream = nullptr;
    activate_device(device);
    int least = 0, greatest = 0;
    check_gpu(gpuDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    // CUDA: lower numbers are higher priority; greatest <= least.
    const int p = std::clamp(static_cast<int>(priority), greatest, least);
    gpuStream_t s = nullptr;
    check_gpu(gpuStreamCreateWithPriority(&s, gpuStreamNonBlocking, p), "cudaStreamCreateWithPriority");
    *stream = reinterpret_cast<fl_stream_t>(s);
  });
}

fl_status_t plugin_stream_destroy(int32_t device, fl_stream_t stream) {
  return guard([&] {
    if (stream == nullptr) return;
    activate_device(device);
    gpuStream_t s = reinterpret_cast<gpuStream_t>(stream);
    check_gpu(gpuStreamSynchronize(s), "cudaStreamSynchronize (stream_destroy)");
    release_stream_blas_workspace(device, s);
    check_gpu(gpuStreamDestroy(s), "cudaStreamDestroy");
  });
}

fl_status_t plugin_stream_synchronize(int32_t device, fl_stream_t stream) {
  return guard([&] {
    activate_device(device);
    const auto waited = resolve_stream(device, stream);
    check_gpu(gpuStreamSynchronize(waited), "cudaStreamSynchronize");
    raise_pending_device_error(device, &waited);
  });
}

fl_status_t plugin_stream_query(int32_t device, fl_stream_t stream, int32_t* done) {
  return guard([&] {
    if (done == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_query: done is NULL");
    activate_device(device);
    const gpuError_t err = gpuStreamQuery(resolve_stream(device, stream));
    if (err == gpuErrorNotReady) {
      (void)gpuGetLastError();
      *done = 0;
      return;
    }
    check_gpu(err, "cudaStreamQuery");
    *done = 1;
  });
}

fl_status_t plugin_stream_wait_event(int32_t device, fl_stream_t stream, fl_event_t event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_wait_event: event is NULL");
    activate_device(device);
    check_gpu(gpuStreamWaitEvent(resolve_stream(device, stream), reinterpret_cast<gpuEvent_t>(event), 0),
              "cudaStreamWaitEvent");
  });
}

fl_status_t plugin_event_create(int32_t device, uint32_t flags, fl_event_t* event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_create: event is NULL");
    *event = nullptr;
    activate_device(device);
    gpuEvent_t e = nullptr;
    const unsigned int cuda_flags =
        ((flags & FL_EVENT_TIMING) ? gpuEventDefault : gpuEventDisableTiming) | event_wait_flags();
    check_gpu(gpuEventCreateWithFlags(&e, cuda_flags), "cudaEventCreateWithFlags");
    *event = reinterpret_cast<fl_event_t>(e);
  });
}

fl_status_t plugin_event_destroy(int32_t device, fl_event_t event) {
  return guard([&] {
    if (event == nullptr) return;
    activate_device(device);
    check_gpu(gpuEventDestroy(reinterpret_cast<gpuEvent_t>(event)), "cudaEventDestroy");
  });
}

fl_status_t plugin_event_record(int32_t device, fl_event_t event, fl_stream_t stream) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_record: event is NULL");
    activate_device(device);
    check_gpu(gpuEventRecord(reinterpret_cast<gpuEvent_t>(event), resolve_stream(device, stream)),
              "cudaEventRecord");
  });
}

fl_status_t plugin_event_query(int32_t device, fl_event_t event, int32_t* done) {
  return guard([&] {
    if (event == nullptr || done == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    activate_device(device);
    const gpuError_t err = gpuEventQuery(reinterpret_cast<gpuEvent_t>(event));
    if (err == gpuErrorNotReady) {
      (void)gpuGetLastError();
      *done = 0;
      return;
    }
    check_gpu(err, "cudaEventQuery");
    *done = 1;
  });
}

fl_status_t plugin_event_synchronize(int32_t device, fl_event_t event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_synchronize: event is NULL");
    activate_device(device);
    check_gpu(gpuEventSynchronize(reinterpret_cast<gpuEvent_t>(event)), "cudaEventSynchronize");
  });
}

fl_status_t plugin_event_elapsed_ms(int32_t device, fl_event_t start, fl_event_t end, float* ms) {
  return guard([&] {
    if (start == nullptr || end == nullptr || ms == nullptr)
      raise(FL_ERR_INVALID_ARGUMENT, "event_elapsed_ms: NULL argument");
    activate_device(device);
    check_gpu(gpuEventElapsedTime(ms, reinterpret_cast<gpuEvent_t>(start), reinterpret_cast<gpuEvent_t>(end)),
              "cudaEventElapsedTime");
  });
}

#define FL_STR2(x) #x
#define FL_STR(x) FL_STR2(x)

const fl_device_ops kOps = [] {
  fl_device_ops ops{};
  ops.struct_size = sizeof(fl_device_ops);
  ops.abi_major = FL_ABI_MAJOR;
  ops.abi_minor = FL_ABI_MINOR;
  ops.plugin_name = "cuda";
  ops.plugin_version = "0.1.0+cudart" FL_STR(CUDART_VERSION);
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
  ops.get_proc_address = native_extra;
  return ops;
}();

}  // namespace
}  // namespace fl::cuda

extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops(void) { return &fl::cuda::kOps; }
