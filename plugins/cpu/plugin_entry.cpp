// plugin_entry.cpp — the fl_device_ops table of the CPU plugin ("cpu"): logical devices over
// host memory, streams run by worker threads, events as stream markers, and the kernel table.
#include "blas_library.hpp"
#include "cpu_runtime.hpp"
#include "device_address.hpp"
#include "kernels/kernel_table.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>

namespace fl::cpu {
namespace {

using plugin::guard;
using plugin::raise;

constexpr const char* kPluginName = "cpu";
constexpr const char* kPluginVersion = "0.1.0";

void require(bool condition, const char* message) {
  if (!condition) raise(FL_ERR_INVALID_ARGUMENT, message);
}

Event& event_of(fl_event_t handle) {
  require(handle != nullptr, "cpu plugin: NULL event");
  return *reinterpret_cast<Event*>(handle);
}

void copy_string(char* dst, size_t capacity, const char* src) {
  std::snprintf(dst, capacity, "%s", src);
}

// ---- lifecycle -------------------------------------------------------------------------

// Which OpenBLAS the kernels use and its kernel set, through the core's logger: at info level
// when the plugin replaced OpenBLAS's own choice (blas_library.hpp), else at debug level.
void log_blas(const fl_host_services* host) {
  if (host == nullptr || host->struct_size <= offsetof(fl_host_services, log) || host->log == nullptr) return;
  const blas::LoadReport& blas = blas::load();
  std::string message = "cpu plugin: " + blas.config + " from " + blas.library + ", " + blas.core +
                        " kernels, OPENBLAS_THREAD_TIMEOUT: " + blas.thread_timeout;
  int32_t level = FL_LOG_DEBUG;
  if (blas.replaced) {
    message += " (OpenBLAS chose " + blas.detected + " for this CPU, without the AVX2 it has: loaded again with "
               "OPENBLAS_CORETYPE=" + blas.best + ", as a user would set it)";
    level = FL_LOG_INFO;
  } else if (!blas.detected.empty()) {
    message += " (without the AVX2 this CPU has, and the plugin could not load other kernels: another component "
               "of the process holds this OpenBLAS, or it is built for one target only. Set OPENBLAS_CORETYPE=" +
               blas.best + " before starting, or install a DYNAMIC_ARCH OpenBLAS: GEMMs run several times faster)";
    level = FL_LOG_WARN;
  }
  host->log(host->user_data, level, message.c_str());
}

fl_status_t plugin_init(const fl_host_services* host, const char* options) {
  return guard([&] {
    if (host != nullptr && host->host_abi_major != FL_ABI_MAJOR)
      raise(FL_ERR_VERSION, "cpu plugin: host ABI major " + std::to_string(host->host_abi_major) +
                                " differs from the plugin's " + std::to_string(FL_ABI_MAJOR));
    Runtime::init(options);
    log_blas(host);
  });
}

void plugin_shutdown() {
  guard([] { Runtime::shutdown(); });
}

const char* plugin_last_error() { return plugin::last_error(); }

// ---- devices ---------------------------------------------------------------------------

fl_status_t device_count(int32_t* count) {
  return guard([&] {
    require(count != nullptr, "cpu plugin: NULL count");
    *count = Runtime::get().device_count();
  });
}

fl_status_t device_get_properties(int32_t device, fl_device_properties* props) {
  return guard([&] {
    require(props != nullptr, "cpu plugin: NULL properties");
    Runtime& runtime = Runtime::get();
    runtime.device(device);
    fl_device_properties full{};
    full.struct_size = sizeof(full);
    copy_string(full.vendor, sizeof(full.vendor), "Torch-FL");
    copy_string(full.name, sizeof(full.name), "CPU (host memory)");
    std::snprintf(full.stable_id, sizeof(full.stable_id), "cpu:%d", device);
    full.total_memory = runtime.total_memory();
    full.compute_units = runtime.host_threads();
    full.alignment = 64;
    full.dtype_mask = kernels::storable_dtype_mask();
    full.host_accessible = runtime.host_accessible() ? 1 : 0;
    full.supports_pinned_host = 1;
    full.pci_bus_id = -1;
    full.reserved0 = 0;
    // Kernels and copies take plain host pointers: host memory is this device's memory.
    full.host_pointers_usable = full.host_accessible;
    full.reserved1 = 0;
    // Fill only the fields within both sizes; keep the caller's struct_size.
    size_t caller_size = props->struct_size;
    size_t n = caller_size < sizeof(full) ? caller_size : sizeof(full);
    if (n > sizeof(size_t))
      std::memcpy(reinterpret_cast<char*>(props) + sizeof(size_t),
                  reinterpret_cast<const char*>(&full) + sizeof(size_t), n - sizeof(size_t));
  });
}

fl_status_t device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  return guard([&] {
    require(free_bytes != nullptr && total_bytes != nullptr,
            "cpu plugin: device_memory_info needs both output pointers");
    Runtime& runtime = Runtime::get();
    Device& dev = runtime.device(device);
    uint64_t total = runtime.total_memory();
    uint64_t used = dev.bytes_in_use.load(std::memory_order_relaxed);
    *free_bytes = used < total ? total - used : 0;
    *total_bytes = total;
  });
}

fl_status_t device_synchronize(int32_t device) {
  return guard([&] { Runtime::get().synchronize_device(device); });
}

fl_status_t device_can_access_peer(int32_t device, int32_t peer, int32_t* can_access) {
  return guard([&] {
    require(can_access != nullptr, "cpu plugin: NULL can_access");
    Runtime& runtime = Runtime::get();
    runtime.device(device);
    runtime.device(peer);
    *can_access = 1;  // all logical devices share host memory
  });
}

// ---- memory ----------------------------------------------------------------------------

fl_status_t mem_malloc(int32_t device, size_t size, void** ptr) {
  return guard([&] {
    require(ptr != nullptr, "cpu plugin: NULL ptr");
    *ptr = nullptr;
    Runtime& runtime = Runtime::get();
    *ptr = device_address(runtime.allocate(device, size), !runtime.host_accessible());
  });
}

fl_status_t mem_free(int32_t device, void* ptr) {
  return guard([&] { Runtime::get().release(device, host_address(ptr)); });
}

fl_status_t host_malloc(size_t size, void** ptr) {
  return guard([&] {
    require(ptr != nullptr, "cpu plugin: NULL ptr");
    *ptr = nullptr;
    *ptr = Runtime::get().allocate_pinned(size);
  });
}

fl_status_t host_free(void* ptr) {
  return guard([&] { Runtime::get().release_pinned(ptr); });
}

fl_status_t memset_async(int32_t device, void* ptr, int32_t value, size_t size, fl_stream_t stream) {
  return guard([&] {
    StreamQueue& queue = Runtime::get().stream(device, stream);
    if (size == 0) return;
    require(ptr != nullptr, "cpu plugin: memset of a NULL pointer");
    void* block = host_address(ptr);
    queue.enqueue([block, value, size] { std::memset(block, value, size); });
  });
}

fl_status_t memcpy_async(int32_t device, void* dst, const void* src, size_t size,
                         fl_memcpy_kind_t kind, fl_stream_t stream) {
  return guard([&] {
    require(kind >= FL_MEMCPY_HOST_TO_DEVICE && kind <= FL_MEMCPY_HOST_TO_HOST,
            "cpu plugin: bad memcpy kind");
    Runtime& runtime = Runtime::get();
    StreamQueue& queue = runtime.stream(device, stream);
    if (size == 0) return;
    require(dst != nullptr && src != nullptr, "cpu plugin: memcpy with a NULL pointer");
    bool host_src = kind == FL_MEMCPY_HOST_TO_DEVICE || kind == FL_MEMCPY_HOST_TO_HOST;
    bool host_dst = kind == FL_MEMCPY_DEVICE_TO_HOST || kind == FL_MEMCPY_HOST_TO_HOST;
    // Device sides carry the fence bit when the devices are not host-accessible.
    void* to = host_dst ? dst : host_address(dst);
    const void* from = host_src ? src : host_address(src);
    plugin::ParallelCopy* copier = &runtime.copier();
    uint64_t ticket = queue.enqueue([copier, to, from, size] { copier->copy(to, from, size); });
    // Host memory not from fl_host_malloc may be reused as soon as we return: wait for the
    // stream to reach the copy (still ordered after earlier work on the stream).
    bool pageable = (host_src && !runtime.is_pinned(src, size)) ||
                    (host_dst && !runtime.is_pinned(dst, size));
    if (pageable) queue.wait_for(ticket);
  });
}

// ---- streams ---------------------------------------------------------------------------

fl_status_t stream_create(int32_t device, int32_t /*priority: not used*/, fl_stream_t* stream) {
  return guard([&] {
    require(stream != nullptr, "cpu plugin: NULL stream out-pointer");
    *stream = reinterpret_cast<fl_stream_t>(Runtime::get().create_stream(device));
  });
}

fl_status_t stream_destroy(int32_t device, fl_stream_t stream) {
  return guard([&] { Runtime::get().destroy_stream(device, stream); });
}

fl_status_t stream_synchronize(int32_t device, fl_stream_t stream) {
  return guard([&] { Runtime::get().stream(device, stream).synchronize(); });
}

fl_status_t stream_query(int32_t device, fl_stream_t stream, int32_t* done) {
  return guard([&] {
    require(done != nullptr, "cpu plugin: NULL done");
    *done = 0;
    *done = Runtime::get().stream(device, stream).query() ? 1 : 0;
  });
}

// Work enqueued on `stream` from now on waits for the capture `event` holds (of any device).
void enqueue_wait(int32_t device, fl_stream_t stream, fl_event_t event) {
  StreamQueue& queue = Runtime::get().stream(device, stream);
  Event& ev = event_of(event);
  std::shared_ptr<EventCapture> capture;
  {
    std::lock_guard<std::mutex> lock(ev.mutex);
    capture = ev.capture;
  }
  if (!capture || capture->done.load(std::memory_order_acquire)) return;
  queue.enqueue([capture] {
    while (!capture->done.load(std::memory_order_acquire)) capture->done.wait(0);
  });
}

fl_status_t stream_wait_event(int32_t device, fl_stream_t stream, fl_event_t event) {
  return guard([&] { enqueue_wait(device, stream, event); });
}

// ---- events ----------------------------------------------------------------------------

fl_status_t event_create(int32_t device, uint32_t flags, fl_event_t* event) {
  return guard([&] {
    require(event != nullptr, "cpu plugin: NULL event out-pointer");
    Runtime::get().device(device);
    require((flags & ~static_cast<uint32_t>(FL_EVENT_TIMING)) == 0, "cpu plugin: bad event flags");
    auto* ev = new Event();
    ev->device = device;
    ev->flags = flags;
    *event = reinterpret_cast<fl_event_t>(ev);
  });
}

fl_status_t event_destroy(int32_t /*device*/, fl_event_t event) {
  return guard([&] { delete reinterpret_cast<Event*>(event); });
}

fl_status_t event_record(int32_t device, fl_event_t event, fl_stream_t stream) {
  return guard([&] {
    StreamQueue& queue = Runtime::get().stream(device, stream);
    Event& ev = event_of(event);
    auto capture = std::make_shared<EventCapture>();
    bool timing = (ev.flags & FL_EVENT_TIMING) != 0;
    {
      std::lock_guard<std::mutex> lock(ev.mutex);
      ev.capture = capture;
    }
    queue.enqueue([capture, timing] {
      if (timing) capture->when = std::chrono::steady_clock::now();
      capture->done.store(1, std::memory_order_release);
      capture->done.notify_all();
    });
  });
}

std::shared_ptr<EventCapture> capture_of(Event& ev) {
  std::lock_guard<std::mutex> lock(ev.mutex);
  return ev.capture;
}

fl_status_t event_query(int32_t /*device*/, fl_event_t event, int32_t* done) {
  return guard([&] {
    require(done != nullptr, "cpu plugin: NULL done");
    auto capture = capture_of(event_of(event));
    *done = (!capture || capture->done.load(std::memory_order_acquire)) ? 1 : 0;
  });
}

fl_status_t event_synchronize(int32_t /*device*/, fl_event_t event) {
  return guard([&] {
    auto capture = capture_of(event_of(event));
    if (!capture) return;
    for (int spin = 0; spin < 4000 && !capture->done.load(std::memory_order_acquire); ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    while (!capture->done.load(std::memory_order_acquire)) capture->done.wait(0);
  });
}

fl_status_t event_elapsed_ms(int32_t /*device*/, fl_event_t start, fl_event_t end, float* ms) {
  return guard([&] {
    require(ms != nullptr, "cpu plugin: NULL ms");
    Event& a = event_of(start);
    Event& b = event_of(end);
    if (!(a.flags & FL_EVENT_TIMING) || !(b.flags & FL_EVENT_TIMING))
      raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: event_elapsed_ms needs events created with FL_EVENT_TIMING");
    auto ca = capture_of(a);
    auto cb = capture_of(b);
    if (!ca || !cb) raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: event_elapsed_ms on an event never recorded");
    if (!ca->done.load(std::memory_order_acquire) || !cb->done.load(std::memory_order_acquire))
      raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: event_elapsed_ms on an event not yet complete");
    *ms = std::chrono::duration<float, std::milli>(cb->when - ca->when).count();
  });
}

// ---- kernels ---------------------------------------------------------------------------

fl_status_t kernels_get(const fl_kernel_entry** entries, size_t* count) {
  return guard([&] {
    require(entries != nullptr && count != nullptr, "cpu plugin: NULL out-pointer");
    const auto& table = kernels::kernel_table();
    *entries = table.data();
    *count = table.size();
  });
}

// "fl.stream_wait_peer_event" (fl_abi.h): events are host objects, so a stream of one device
// waits for an event of another exactly as for its own.
fl_status_t stream_wait_peer_event(int32_t device, fl_stream_t stream, int32_t event_device, fl_event_t event) {
  return guard([&] {
    Runtime::get().device(event_device);
    require(event_of(event).device == event_device, "cpu plugin: event was not created on event_device");
    enqueue_wait(device, stream, event);
  });
}

void* get_proc_address(const char* name) {
  if (name != nullptr && std::strcmp(name, FL_EXTRA_STREAM_WAIT_PEER_EVENT) == 0)
    return reinterpret_cast<void*>(static_cast<fl_stream_wait_peer_event_fn>(stream_wait_peer_event));
  return nullptr;
}

fl_device_ops make_ops() {
  fl_device_ops ops{};
  ops.struct_size = sizeof(fl_device_ops);
  ops.abi_major = FL_ABI_MAJOR;
  ops.abi_minor = FL_ABI_MINOR;
  ops.plugin_name = kPluginName;
  ops.plugin_version = kPluginVersion;
  ops.init = plugin_init;
  ops.shutdown = plugin_shutdown;
  ops.last_error = plugin_last_error;
  ops.device_count = device_count;
  ops.device_get_properties = device_get_properties;
  ops.device_memory_info = device_memory_info;
  ops.device_synchronize = device_synchronize;
  ops.device_can_access_peer = device_can_access_peer;
  ops.fl_malloc = mem_malloc;
  ops.fl_free = mem_free;
  ops.fl_host_malloc = host_malloc;
  ops.fl_host_free = host_free;
  ops.fl_memset_async = memset_async;
  ops.fl_memcpy_async = memcpy_async;
  ops.stream_create = stream_create;
  ops.stream_destroy = stream_destroy;
  ops.stream_synchronize = stream_synchronize;
  ops.stream_query = stream_query;
  ops.stream_wait_event = stream_wait_event;
  ops.event_create = event_create;
  ops.event_destroy = event_destroy;
  ops.event_record = event_record;
  ops.event_query = event_query;
  ops.event_synchronize = event_synchronize;
  ops.event_elapsed_ms = event_elapsed_ms;
  ops.kernels_get = kernels_get;
  ops.get_proc_address = get_proc_address;
  return ops;
}

const fl_device_ops kOps = make_ops();

}  // namespace
}  // namespace fl::cpu

extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops(void) { return &fl::cpu::kOps; }
