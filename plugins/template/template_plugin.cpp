// template_plugin.cpp — the smallest complete Torch-FL plugin: every fl_device_ops entry,
// over host memory, for one device. Copy this directory to start a vendor plugin; each
// "VENDOR:" comment says what your runtime call replaces.
//
// What this template does NOT do (on purpose, to stay short): work runs synchronously at
// enqueue time, so a stream is only a token and an event completes when recorded. A real
// device enqueues on its own queue and lets events complete later; the ABI's rules (see
// abi/fl_abi.h) are written for that case, and this file already obeys them.
#include "template_kernels.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fl::template_plugin {
namespace {

using plugin::guard;
using plugin::raise;

constexpr int32_t kDeviceCount = 1;  // VENDOR: the number of cards your driver reports
constexpr size_t kAlignment = 64;    // VENDOR: what your allocator guarantees (CUDA: 256)

bool g_initialized = false;
// Options: "host_accessible=0" reports the device's memory as not host-accessible (it still
// is host memory), so the core copies to and from it as to a GPU's memory — for testing the
// staging paths. VENDOR: report the truth for your memory and drop this option.
bool g_host_accessible = true;

// A stream handle. VENDOR: your runtime's queue object (cudaStream_t, hipStream_t, aclrtStream).
struct Stream {
  int32_t device;
};

// An event handle: the time it was recorded. VENDOR: your runtime's event object.
struct Event {
  int32_t device;
  bool timing;
  bool recorded = false;
  std::chrono::steady_clock::time_point when{};
};

// Every entry but init/last_error checks the device index this way.
void check_device(int32_t device) {
  if (!g_initialized) raise(FL_ERR_NO_DEVICE, "template plugin is not initialized");
  if (device < 0 || device >= kDeviceCount)
    raise(FL_ERR_INVALID_ARGUMENT, "template plugin: no device " + std::to_string(device));
}

void copy_text(char* dst, size_t cap, const std::string& src) {
  const size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

uint64_t host_memory(int name) {
  const long pages = sysconf(name), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// ---- lifecycle --------------------------------------------------------------------------

fl_status_t plugin_init(const fl_host_services* host, const char* options) {
  return guard([&] {
    if (host != nullptr && host->host_abi_major != FL_ABI_MAJOR)
      raise(FL_ERR_VERSION, "template plugin built for ABI major " + std::to_string(FL_ABI_MAJOR));
    // VENDOR: parse your "key=value;..." options here.
    g_host_accessible = true;
    if (options != nullptr) {
      const std::string text = options;
      for (size_t start = 0; start <= text.size();) {
        const size_t end = std::min(text.find(';', start), text.size());
        std::string pair = text.substr(start, end - start);
        pair.erase(0, pair.find_first_not_of(" \t"));
        pair.erase(pair.find_last_not_of(" \t") + 1);
        if (pair == "host_accessible=0") g_host_accessible = false;
        else if (!pair.empty() && pair != "host_accessible=1")
          raise(FL_ERR_INVALID_ARGUMENT, "template plugin: unknown option '" + pair + "'");
        start = end + 1;
      }
    }
    // VENDOR: probe the driver here (cudaGetDeviceCount, aclInit...). When it is absent,
    // raise(FL_ERR_NO_DEVICE, "<the driver's own error text>"): the core then skips the
    // plugin cleanly and fl-plugin-check reports the device checks as skipped.
    g_initialized = true;
    if (host != nullptr && host->struct_size > offsetof(fl_host_services, log) && host->log != nullptr)
      host->log(host->user_data, FL_LOG_INFO, "template plugin: 1 host-memory device");
  });
}

void plugin_shutdown() { g_initialized = false; }  // VENDOR: release streams, handles, context.

const char* plugin_last_error() { return plugin::last_error(); }

// ---- devices ----------------------------------------------------------------------------

fl_status_t plugin_device_count(int32_t* count) {
  return guard([&] {
    if (count == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_count: count is NULL");
    *count = g_initialized ? kDeviceCount : 0;
  });
}

// Fills only the fields inside the caller's struct_size (an older core has a shorter struct).
#define FL_HAS(props, field) ((props)->struct_size >= offsetof(fl_device_properties, field) + sizeof((props)->field))

fl_status_t plugin_device_get_properties(int32_t device, fl_device_properties* props) {
  return guard([&] {
    check_device(device);
    if (props == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_get_properties: props is NULL");
    if (FL_HAS(props, vendor)) copy_text(props->vendor, sizeof(props->vendor), "Torch-FL");
    if (FL_HAS(props, name)) copy_text(props->name, sizeof(props->name), "Template host device");
    // VENDOR: a UUID or PCI bus id that survives restarts and re-enumeration.
    if (FL_HAS(props, stable_id)) copy_text(props->stable_id, sizeof(props->stable_id), "template-host-0");
    if (FL_HAS(props, total_memory)) props->total_memory = host_memory(_SC_PHYS_PAGES);
    if (FL_HAS(props, compute_units)) props->compute_units = 1;
    if (FL_HAS(props, alignment)) props->alignment = kAlignment;
    if (FL_HAS(props, dtype_mask)) props->dtype_mask = (uint64_t{1} << FL_DTYPE_COUNT) - 1;
    if (FL_HAS(props, host_accessible)) props->host_accessible = g_host_accessible ? 1 : 0;  // VENDOR: 0 for device memory
    if (FL_HAS(props, supports_pinned_host)) props->supports_pinned_host = 0;
    if (FL_HAS(props, pci_bus_id)) props->pci_bus_id = -1;
    if (FL_HAS(props, reserved0)) props->reserved0 = 0;
    // VENDOR: 1 only if your kernels take any host pointer as device memory (a CPU-like
    // device); the template's kernels could, but it stands for a device with its own memory.
    if (FL_HAS(props, host_pointers_usable)) props->host_pointers_usable = 0;
    if (FL_HAS(props, reserved1)) props->reserved1 = 0;
  });
}

fl_status_t plugin_device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  return guard([&] {
    check_device(device);
    if (free_bytes == nullptr || total_bytes == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_memory_info: NULL output");
    *free_bytes = host_memory(_SC_AVPHYS_PAGES);  // VENDOR: cudaMemGetInfo / aclrtGetMemInfo
    *total_bytes = host_memory(_SC_PHYS_PAGES);
  });
}

fl_status_t plugin_device_synchronize(int32_t device) {
  return guard([&] { check_device(device); });  // VENDOR: wait for every queue of the device
}

fl_status_t plugin_device_can_access_peer(int32_t device, int32_t peer, int32_t* can_access) {
  return guard([&] {
    check_device(device);
    check_device(peer);
    if (can_access == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "device_can_access_peer: NULL output");
    *can_access = 1;  // one host address space
  });
}

// ---- memory -----------------------------------------------------------------------------

fl_status_t plugin_malloc(int32_t device, size_t size, void** ptr) {
  return guard([&] {
    check_device(device);
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_malloc: ptr is NULL");
    *ptr = nullptr;
    if (size == 0) raise(FL_ERR_INVALID_ARGUMENT, "fl_malloc: size is 0");
    // VENDOR: cudaMalloc / hipMalloc / aclrtMalloc. Never return FL_OK with NULL.
    void* p = std::aligned_alloc(kAlignment, (size + kAlignment - 1) / kAlignment * kAlignment);
    if (p == nullptr) raise(FL_ERR_OUT_OF_MEMORY, "fl_malloc: " + std::to_string(size) + " bytes: out of memory");
    *ptr = p;
  });
}

fl_status_t plugin_free(int32_t device, void* ptr) {
  return guard([&] {
    check_device(device);
    std::free(ptr);  // VENDOR: cudaFree / aclrtFree; NULL is a no-op
  });
}

// Optional: pinned host memory. VENDOR: cudaMallocHost / aclrtMallocHost. This template has
// no faster host memory, so it hands out plain aligned memory.
fl_status_t plugin_host_malloc(size_t size, void** ptr) {
  return guard([&] {
    if (ptr == nullptr || size == 0) raise(FL_ERR_INVALID_ARGUMENT, "fl_host_malloc: NULL ptr or size 0");
    *ptr = std::aligned_alloc(kAlignment, (size + kAlignment - 1) / kAlignment * kAlignment);
    if (*ptr == nullptr) raise(FL_ERR_OUT_OF_MEMORY, "fl_host_malloc: out of memory");
  });
}

fl_status_t plugin_host_free(void* ptr) {
  return guard([&] { std::free(ptr); });
}

fl_status_t plugin_memset_async(int32_t device, void* ptr, int32_t value, size_t size, fl_stream_t stream) {
  return guard([&] {
    check_device(device);
    (void)stream;
    if (size == 0) return;
    if (ptr == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_memset_async: ptr is NULL");
    std::memset(ptr, value, size);  // VENDOR: cudaMemsetAsync(ptr, value, size, stream)
  });
}

fl_status_t plugin_memcpy_async(int32_t device, void* dst, const void* src, size_t size, fl_memcpy_kind_t kind,
                                fl_stream_t stream) {
  return guard([&] {
    check_device(device);
    (void)stream;
    if (kind < FL_MEMCPY_HOST_TO_DEVICE || kind > FL_MEMCPY_HOST_TO_HOST)
      raise(FL_ERR_INVALID_ARGUMENT, "fl_memcpy_async: bad kind " + std::to_string(kind));
    if (size == 0) return;
    if (dst == nullptr || src == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl_memcpy_async: NULL pointer");
    std::memmove(dst, src, size);  // VENDOR: cudaMemcpyAsync with the kind mapped to yours
  });
}

// ---- streams ----------------------------------------------------------------------------
// NULL is the device's default stream: it always exists and is never destroyed.

fl_status_t plugin_stream_create(int32_t device, int32_t priority, fl_stream_t* stream) {
  return guard([&] {
    check_device(device);
    if (stream == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_create: stream is NULL");
    (void)priority;  // VENDOR: map to your priority range (cudaDeviceGetStreamPriorityRange)
    *stream = reinterpret_cast<fl_stream_t>(new Stream{device});
  });
}

fl_status_t plugin_stream_destroy(int32_t device, fl_stream_t stream) {
  return guard([&] {
    check_device(device);
    delete reinterpret_cast<Stream*>(stream);  // VENDOR: wait for the stream, then destroy it
  });
}

fl_status_t plugin_stream_synchronize(int32_t device, fl_stream_t stream) {
  return guard([&] {
    check_device(device);
    (void)stream;  // VENDOR: cudaStreamSynchronize
  });
}

fl_status_t plugin_stream_query(int32_t device, fl_stream_t stream, int32_t* done) {
  return guard([&] {
    check_device(device);
    if (done == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_query: done is NULL");
    (void)stream;
    *done = 1;  // VENDOR: cudaStreamQuery; "not ready" is 0, not an error
  });
}

fl_status_t plugin_stream_wait_event(int32_t device, fl_stream_t stream, fl_event_t event) {
  return guard([&] {
    check_device(device);
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stream_wait_event: event is NULL");
    (void)stream;  // VENDOR: cudaStreamWaitEvent; must not block the host
  });
}

// ---- events -----------------------------------------------------------------------------

fl_status_t plugin_event_create(int32_t device, uint32_t flags, fl_event_t* event) {
  return guard([&] {
    check_device(device);
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_create: event is NULL");
    *event = reinterpret_cast<fl_event_t>(new Event{device, (flags & FL_EVENT_TIMING) != 0});
  });
}

fl_status_t plugin_event_destroy(int32_t device, fl_event_t event) {
  return guard([&] {
    check_device(device);
    delete reinterpret_cast<Event*>(event);
  });
}

fl_status_t plugin_event_record(int32_t device, fl_event_t event, fl_stream_t stream) {
  return guard([&] {
    check_device(device);
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_record: event is NULL");
    (void)stream;
    Event* e = reinterpret_cast<Event*>(event);
    e->recorded = true;
    e->when = std::chrono::steady_clock::now();  // VENDOR: cudaEventRecord(event, stream)
  });
}

fl_status_t plugin_event_query(int32_t device, fl_event_t event, int32_t* done) {
  return guard([&] {
    check_device(device);
    if (event == nullptr || done == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    *done = 1;  // work ran at enqueue, so a recorded event is complete
  });
}

fl_status_t plugin_event_synchronize(int32_t device, fl_event_t event) {
  return guard([&] {
    check_device(device);
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_synchronize: event is NULL");
  });
}

fl_status_t plugin_event_elapsed_ms(int32_t device, fl_event_t start, fl_event_t end, float* ms) {
  return guard([&] {
    check_device(device);
    if (start == nullptr || end == nullptr || ms == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "event_elapsed_ms: NULL argument");
    const Event* a = reinterpret_cast<const Event*>(start);
    const Event* b = reinterpret_cast<const Event*>(end);
    if (!a->timing || !b->timing) raise(FL_ERR_INVALID_ARGUMENT, "event_elapsed_ms: events created without FL_EVENT_TIMING");
    if (!a->recorded || !b->recorded) raise(FL_ERR_INVALID_ARGUMENT, "event_elapsed_ms: event never recorded");
    *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  });
}

// ---- extensions -------------------------------------------------------------------------

// VENDOR: hand out extras by name ("acme.queue_handle"); document each pointer's type. If your
// runtime has a collective library, also answer the "fl." names of fl_abi.h (the runtime's
// device ordinal and stream handle), as the CUDA plugin does for NCCL.
void* plugin_get_proc_address(const char* name) {
  (void)name;
  return nullptr;
}

const fl_device_ops kOps = [] {
  fl_device_ops ops{};
  ops.struct_size = sizeof(fl_device_ops);
  ops.abi_major = FL_ABI_MAJOR;
  ops.abi_minor = FL_ABI_MINOR;
  ops.plugin_name = "template";  // VENDOR: your short lowercase name, unique among plugins
  ops.plugin_version = "0.1.0";
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
  ops.get_proc_address = plugin_get_proc_address;
  return ops;
}();

}  // namespace
}  // namespace fl::template_plugin

// The one exported symbol. No side effects: the core reads the table before calling init.
extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops(void) { return &fl::template_plugin::kOps; }
