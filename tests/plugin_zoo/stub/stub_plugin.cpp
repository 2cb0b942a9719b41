// stub_plugin.cpp — the "stub" plugin: a complete plugin on host memory that records every
// call into its table, so loader, registry and dispatch tests can assert exact call order.
//
// Options ("key=value;key=value"):
//   devices=N       number of devices (default 1)
//   ids=a,b,c       stable ids of devices 0..N-1 (default "stub-0", "stub-1", ...)
//   memory_mb=N     bytes per device reported and enforced, in MiB (default 1024)
//   fail_neg=0|1    aten::neg.out fails with FL_ERR_DEVICE "stub kernel failure (call flags:
//                   ...)", naming the FL_CALL_* flags it was called with (default 1)
//   no_device=1     init returns FL_ERR_NO_DEVICE (exercises the "no device" paths)
//   peer_events=1   offers the extra "fl.stream_wait_peer_event" (logged as
//                   "stream_wait_peer_event(D<-E)")
//
// Extensions through get_proc_address:
//   "stub.call_log" -> const char* (*)(void): the calls so far, one per line (the string is
//                      valid until the next call of that function)
//   "stub.reset"    -> void (*)(void): clears the call log
// Log lines are "init", "device_get_properties(0)", "kernel aten::add.out(0)", ...; the
// stub.* lookups themselves are not logged. Streams and events are synchronous: work runs at
// enqueue time. Built twice (libfl_stub.so, libfl_stub_copy.so) for the duplicate case.
// With -DFL_STUB_NO_ENTRY it exports nothing and the zoo's broken_plugin.cpp wraps
// fl::stub::base_ops().
#include <fl_abi.h>
#include <plugin_support.hpp>

#include "stub_plugin.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

struct fl_stream_s {
  int32_t device;
};
struct fl_event_s {
  int32_t device;
  uint32_t flags;
  bool recorded;
  std::chrono::steady_clock::time_point when;
};

namespace fl::stub {
namespace {

using plugin::guard;
using plugin::raise;

constexpr uint32_t kAlignment = 64;

struct State {
  std::mutex mutex;
  std::vector<std::string> calls;
  std::string call_log_text;
  bool initialized = false;
  bool fail_neg = true;
  bool peer_events = false;
  std::vector<std::string> ids;
  uint64_t memory_bytes = 1024ull << 20;
  std::vector<uint64_t> used;                  // bytes allocated per device
  std::map<void*, std::pair<int32_t, size_t>> blocks;  // pointer -> device, size
  std::set<fl_stream_t> streams;
  std::set<fl_event_t> events;
  const fl_host_services* host = nullptr;
};

State& state() {
  static State s;
  return s;
}

void record(const std::string& call) {
  std::lock_guard lock(state().mutex);
  state().calls.push_back(call);
}

std::string with_device(const char* name, int32_t device) {
  return std::string(name) + "(" + std::to_string(device) + ")";
}

void require_initialized() {
  if (!state().initialized) raise(FL_ERR_INVALID_ARGUMENT, "stub: not initialized");
}

void require_device(int32_t device) {
  require_initialized();
  if (device < 0 || device >= static_cast<int32_t>(state().ids.size()))
    raise(FL_ERR_INVALID_ARGUMENT, "stub: bad device index " + std::to_string(device) + " (have " +
                                       std::to_string(state().ids.size()) + ")");
}

template <class T>
void require_out(T* out, const char* what) {
  if (out == nullptr) raise(FL_ERR_INVALID_ARGUMENT, std::string("stub: ") + what + " is NULL");
}

void require_stream(int32_t device, fl_stream_t stream) {
  require_device(device);
  if (stream == nullptr) return;
  std::lock_guard lock(state().mutex);
  if (!state().streams.count(stream) || stream->device != device)
    raise(FL_ERR_INVALID_ARGUMENT, "stub: unknown stream for device " + std::to_string(device));
}

fl_event_t require_event(int32_t device, fl_event_t event) {
  require_device(device);
  std::lock_guard lock(state().mutex);
  if (event == nullptr || !state().events.count(event) || event->device != device)
    raise(FL_ERR_INVALID_ARGUMENT, "stub: unknown event for device " + std::to_string(device));
  return event;
}

void host_log(int32_t level, const std::string& message) {
  const fl_host_services* host = state().host;
  if (host != nullptr && host->struct_size >= offsetof(fl_host_services, user_data) + sizeof(void*) &&
      host->log != nullptr)
    host->log(host->user_data, level, message.c_str());
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// ---- lifecycle ------------------------------------------------------------------------

fl_status_t stub_init(const fl_host_services* host, const char* options) {
  return guard([&]() -> fl_status_t {
    record("init");
    if (host == nullptr || options == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "stub: init: NULL argument");
    State& s = state();
    s.host = host;
    int devices = 1;
    std::vector<std::string> ids;
    s.fail_neg = true;
    s.memory_bytes = 1024ull << 20;
    for (const std::string& pair : split(options, ';')) {
      auto eq = pair.find('=');
      std::string key = pair.substr(0, eq);
      std::string value = eq == std::string::npos ? "" : pair.substr(eq + 1);
      if (key == "devices") devices = std::atoi(value.c_str());
      else if (key == "ids") ids = split(value, ',');
      else if (key == "memory_mb") s.memory_bytes = std::strtoull(value.c_str(), nullptr, 10) << 20;
      else if (key == "fail_neg") s.fail_neg = value != "0";
      else if (key == "peer_events") s.peer_events = value == "1";
      else if (key == "no_device" && value == "1") raise(FL_ERR_NO_DEVICE, "stub: no_device=1 in options");
      else host_log(FL_LOG_WARN, "stub: unknown option '" + key + "'");
    }
    if (devices < 0) raise(FL_ERR_INVALID_ARGUMENT, "stub: devices must be >= 0");
    if (!ids.empty() && static_cast<int>(ids.size()) != devices)
      raise(FL_ERR_INVALID_ARGUMENT, "stub: ids has " + std::to_string(ids.size()) + " entries for " +
                                         std::to_string(devices) + " devices");
    for (int d = static_cast<int>(ids.size()); d < devices; ++d) ids.push_back("stub-" + std::to_string(d));
    s.ids = ids;
    s.used.assign(ids.size(), 0);
    s.initialized = true;
    host_log(FL_LOG_DEBUG, "stub: " + std::to_string(devices) + " device(s)");
    return FL_OK;
  });
}

void stub_shutdown() {
  record("shutdown");
  State& s = state();
  std::lock_guard lock(s.mutex);
  for (auto& [ptr, owner] : s.blocks) std::free(ptr);
  s.blocks.clear();
  for (fl_stream_t st : s.streams) delete st;
  s.streams.clear();
  for (fl_event_t ev : s.events) delete ev;
  s.events.clear();
  s.initialized = false;
  s.host = nullptr;
}

const char* stub_last_error() {
  record("last_error");
  return plugin::last_error();
}

// ---- devices --------------------------------------------------------------------------

fl_status_t stub_device_count(int32_t* count) {
  return guard([&] {
    record("device_count");
    require_initialized();
    require_out(count, "count");
    *count = static_cast<int32_t>(state().ids.size());
  });
}

fl_status_t stub_device_get_properties(int32_t device, fl_device_properties* props) {
  return guard([&] {
    record(with_device("device_get_properties", device));
    require_device(device);
    require_out(props, "props");
    if (props->struct_size < sizeof(fl_device_properties))
      raise(FL_ERR_INVALID_ARGUMENT, "stub: props struct_size too small");
    std::snprintf(props->vendor, sizeof(props->vendor), "Torch-FL");
    std::snprintf(props->name, sizeof(props->name), "Stub device %d", device);
    std::snprintf(props->stable_id, sizeof(props->stable_id), "%s", state().ids[device].c_str());
    props->total_memory = state().memory_bytes;
    props->compute_units = 1;
    props->alignment = kAlignment;
    props->dtype_mask = (uint64_t{1} << FL_DTYPE_COUNT) - 1;
    props->host_accessible = 1;
    props->supports_pinned_host = 0;
    props->pci_bus_id = -1;
    props->reserved0 = 0;
    props->host_pointers_usable = 1;  // its memory is host memory, its kernels host loops
    props->reserved1 = 0;
  });
}

fl_status_t stub_device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  return guard([&] {
    record(with_device("device_memory_info", device));
    require_device(device);
    require_out(free_bytes, "free_bytes");
    require_out(total_bytes, "total_bytes");
    std::lock_guard lock(state().mutex);
    *total_bytes = state().memory_bytes;
    *free_bytes = state().memory_bytes - state().used[device];
  });
}

fl_status_t stub_device_synchronize(int32_t device) {
  return guard([&] {
    record(with_device("device_synchronize", device));
    require_device(device);
  });
}

fl_status_t stub_device_can_access_peer(int32_t device, int32_t peer, int32_t* can_access) {
  return guard([&] {
    record(with_device("device_can_access_peer", device));
    require_device(device);
    require_device(peer);
    require_out(can_access, "can_access");
    *can_access = 1;  // all stub devices are host memory
  });
}

// ---- memory ---------------------------------------------------------------------------

fl_status_t stub_malloc(int32_t device, size_t size, void** ptr) {
  return guard([&] {
    record(with_device("fl_malloc", device));
    require_device(device);
    require_out(ptr, "ptr");
    *ptr = nullptr;
    if (size == 0) raise(FL_ERR_INVALID_ARGUMENT, "stub: fl_malloc of size 0");
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (size > s.memory_bytes - s.used[device])
      raise(FL_ERR_OUT_OF_MEMORY, "stub: out of memory: asked " + std::to_string(size) + " bytes, " +
                                      std::to_string(s.memory_bytes - s.used[device]) + " free");
    size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) raise(FL_ERR_OUT_OF_MEMORY, "stub: host aligned_alloc failed");
    s.blocks[p] = {device, size};
    s.used[device] += size;
    *ptr = p;
  });
}

fl_status_t stub_free(int32_t device, void* ptr) {
  return guard([&] {
    record(with_device("fl_free", device));
    require_device(device);
    if (ptr == nullptr) return;
    State& s = state();
    std::lock_guard lock(s.mutex);
    auto it = s.blocks.find(ptr);
    if (it == s.blocks.end() || it->second.first != device)
      raise(FL_ERR_INVALID_ARGUMENT, "stub: fl_free of a pointer not from fl_malloc on this device");
    s.used[device] -= it->second.second;
    std::free(ptr);
    s.blocks.erase(it);
  });
}

fl_status_t stub_memset_async(int32_t device, void* ptr, int32_t value, size_t size, fl_stream_t stream) {
  return guard([&] {
    record(with_device("fl_memset_async", device));
    require_stream(device, stream);
    if (ptr == nullptr && size > 0) raise(FL_ERR_INVALID_ARGUMENT, "stub: memset of NULL");
    if (size > 0) std::memset(ptr, value, size);
  });
}

fl_status_t stub_memcpy_async(int32_t device, void* dst, const void* src, size_t size,
                              fl_memcpy_kind_t kind, fl_stream_t stream) {
  return guard([&] {
    record(with_device("fl_memcpy_async", device));
    require_stream(device, stream);
    if (kind < FL_MEMCPY_HOST_TO_DEVICE || kind > FL_MEMCPY_HOST_TO_HOST)
      raise(FL_ERR_INVALID_ARGUMENT, "stub: bad memcpy kind " + std::to_string(kind));
    if ((dst == nullptr || src == nullptr) && size > 0) raise(FL_ERR_INVALID_ARGUMENT, "stub: memcpy with NULL");
    if (size > 0) std::memmove(dst, src, size);
  });
}

// ---- streams and events (synchronous) -------------------------------------------------

fl_status_t stub_stream_create(int32_t device, int32_t priority, fl_stream_t* stream) {
  return guard([&] {
    record(with_device("stream_create", device));
    (void)priority;
    require_device(device);
    require_out(stream, "stream");
    *stream = new fl_stream_s{device};
    std::lock_guard lock(state().mutex);
    state().streams.insert(*stream);
  });
}

fl_status_t stub_stream_destroy(int32_t device, fl_stream_t stream) {
  return guard([&] {
    record(with_device("stream_destroy", device));
    require_stream(device, stream);
    if (stream == nullptr) return;
    std::lock_guard lock(state().mutex);
    state().streams.erase(stream);
    delete stream;
  });
}

fl_status_t stub_stream_synchronize(int32_t device, fl_stream_t stream) {
  return guard([&] {
    record(with_device("stream_synchronize", device));
    require_stream(device, stream);
  });
}

fl_status_t stub_stream_query(int32_t device, fl_stream_t stream, int32_t* done) {
  return guard([&] {
    record(with_device("stream_query", device));
    require_stream(device, stream);
    require_out(done, "done");
    *done = 1;
  });
}

fl_status_t stub_stream_wait_event(int32_t device, fl_stream_t stream, fl_event_t event) {
  return guard([&] {
    record(with_device("stream_wait_event", device));
    require_stream(device, stream);
    require_event(device, event);
  });
}

fl_status_t stub_stream_wait_peer_event(int32_t device, fl_stream_t stream, int32_t event_device, fl_event_t event) {
  return guard([&] {
    record("stream_wait_peer_event(" + std::to_string(device) + "<-" + std::to_string(event_device) + ")");
    require_stream(device, stream);
    require_event(event_device, event);
  });
}

fl_status_t stub_event_create(int32_t device, uint32_t flags, fl_event_t* event) {
  return guard([&] {
    record(with_device("event_create", device));
    require_device(device);
    require_out(event, "event");
    *event = new fl_event_s{device, flags, false, {}};
    std::lock_guard lock(state().mutex);
    state().events.insert(*event);
  });
}

fl_status_t stub_event_destroy(int32_t device, fl_event_t event) {
  return guard([&] {
    record(with_device("event_destroy", device));
    require_device(device);
    if (event == nullptr) return;
    require_event(device, event);
    std::lock_guard lock(state().mutex);
    state().events.erase(event);
    delete event;
  });
}

fl_status_t stub_event_record(int32_t device, fl_event_t event, fl_stream_t stream) {
  return guard([&] {
    record(with_device("event_record", device));
    require_stream(device, stream);
    require_event(device, event)->recorded = true;
    event->when = std::chrono::steady_clock::now();
  });
}

fl_status_t stub_event_query(int32_t device, fl_event_t event, int32_t* done) {
  return guard([&] {
    record(with_device("event_query", device));
    require_event(device, event);
    require_out(done, "done");
    *done = 1;
  });
}

fl_status_t stub_event_synchronize(int32_t device, fl_event_t event) {
  return guard([&] {
    record(with_device("event_synchronize", device));
    require_event(device, event);
  });
}

fl_status_t stub_event_elapsed_ms(int32_t device, fl_event_t start, fl_event_t end, float* ms) {
  return guard([&] {
    record(with_device("event_elapsed_ms", device));
    require_event(device, start);
    require_event(device, end);
    require_out(ms, "ms");
    if (!(start->flags & FL_EVENT_TIMING) || !(end->flags & FL_EVENT_TIMING))
      raise(FL_ERR_INVALID_ARGUMENT, "stub: event_elapsed_ms needs FL_EVENT_TIMING events");
    if (!start->recorded || !end->recorded) raise(FL_ERR_INVALID_ARGUMENT, "stub: event not recorded");
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  });
}

// ---- kernels: float32, contiguous, same shape only ------------------------------------

const fl_tensor& float32_same_shape(const fl_tensor& t, const fl_tensor& out) {
  if (t.dtype != FL_DTYPE_FLOAT32 || out.dtype != FL_DTYPE_FLOAT32)
    raise(FL_ERR_NOT_SUPPORTED, "stub: float32 only");
  if (t.device == FL_DEVICE_HOST || t.ndim != out.ndim)
    raise(FL_ERR_NOT_SUPPORTED, "stub: same shape only");
  for (int32_t d = 0; d < t.ndim; ++d)
    if (t.shape[d] != out.shape[d]) raise(FL_ERR_NOT_SUPPORTED, "stub: same shape only (no broadcast)");
  if (!plugin::is_contiguous(t) || !plugin::is_contiguous(out))
    raise(FL_ERR_NOT_SUPPORTED, "stub: contiguous only");
  return t;
}

void record_kernel(const fl_kernel_call* call, const char* op) {
  record(std::string("kernel ") + op + "(" + std::to_string(call != nullptr ? call->device : -1) + ")");
}

fl_status_t stub_add_out(const fl_kernel_call* call) {  // add.out(self, other, *, alpha, out)
  return guard([&] {
    record_kernel(call, "aten::add.out");
    plugin::Args args(call);
    require_stream(call->device, call->stream);
    const fl_tensor& out = args.output(0);
    const fl_tensor& a = float32_same_shape(args.tensor(0), out);
    const fl_tensor& b = float32_same_shape(args.tensor(1), out);
    const float alpha = static_cast<float>(args.number(2));
    const float* pa = plugin::data_ptr<const float>(a);
    const float* pb = plugin::data_ptr<const float>(b);
    float* po = plugin::data_ptr<float>(out);
    for (int64_t i = 0, n = plugin::numel(out); i < n; ++i) po[i] = pa[i] + alpha * pb[i];
  });
}

fl_status_t stub_mul_out(const fl_kernel_call* call) {  // mul.out(self, other, *, out)
  return guard([&] {
    record_kernel(call, "aten::mul.out");
    plugin::Args args(call);
    require_stream(call->device, call->stream);
    const fl_tensor& out = args.output(0);
    const fl_tensor& a = float32_same_shape(args.tensor(0), out);
    const fl_tensor& b = float32_same_shape(args.tensor(1), out);
    const float* pa = plugin::data_ptr<const float>(a);
    const float* pb = plugin::data_ptr<const float>(b);
    float* po = plugin::data_ptr<float>(out);
    for (int64_t i = 0, n = plugin::numel(out); i < n; ++i) po[i] = pa[i] * pb[i];
  });
}

fl_status_t stub_neg_out(const fl_kernel_call* call) {  // neg.out(self, *, out)
  return guard([&] {
    record_kernel(call, "aten::neg.out");
    if (state().fail_neg) {
      std::string flags;
      if (call->flags & FL_CALL_PRECISE) flags += " precise";
      if (call->flags & FL_CALL_DETERMINISTIC) flags += " deterministic";
      raise(FL_ERR_DEVICE, "stub kernel failure (call flags:" + (flags.empty() ? std::string(" none") : flags) + ")");
    }
    plugin::Args args(call);
    require_stream(call->device, call->stream);
    const fl_tensor& out = args.output(0);
    const fl_tensor& a = float32_same_shape(args.tensor(0), out);
    const float* pa = plugin::data_ptr<const float>(a);
    float* po = plugin::data_ptr<float>(out);
    for (int64_t i = 0, n = plugin::numel(out); i < n; ++i) po[i] = -pa[i];
  });
}

constexpr uint32_t kElementwiseFlags = FL_KERNEL_ALIASING_OK | FL_KERNEL_PRECISE | FL_KERNEL_DETERMINISTIC;

const fl_kernel_entry kKernels[] = {
    {sizeof(fl_kernel_entry), "aten::add.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), kElementwiseFlags, 0, stub_add_out, nullptr},
    {sizeof(fl_kernel_entry), "aten::mul.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), kElementwiseFlags, 0, stub_mul_out, nullptr},
    {sizeof(fl_kernel_entry), "aten::neg.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), kElementwiseFlags, 0, stub_neg_out, nullptr},
};

fl_status_t stub_kernels_get(const fl_kernel_entry** entries, size_t* count) {
  return guard([&] {
    record("kernels_get");
    require_initialized();
    require_out(entries, "entries");
    require_out(count, "count");
    *entries = kKernels;
    *count = sizeof(kKernels) / sizeof(kKernels[0]);
  });
}

// ---- extensions -----------------------------------------------------------------------

const char* call_log() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.call_log_text.clear();
  for (const std::string& c : s.calls) s.call_log_text += c + "\n";
  return s.call_log_text.c_str();
}

void reset_call_log() {
  std::lock_guard lock(state().mutex);
  state().calls.clear();
}

void* stub_get_proc_address(const char* name) {
  if (name != nullptr && std::strcmp(name, "stub.call_log") == 0) return reinterpret_cast<void*>(&call_log);
  if (name != nullptr && std::strcmp(name, "stub.reset") == 0) return reinterpret_cast<void*>(&reset_call_log);
  if (name != nullptr && std::strcmp(name, FL_EXTRA_STREAM_WAIT_PEER_EVENT) == 0 && state().peer_events) {
    record(std::string("get_proc_address ") + name);
    return reinterpret_cast<void*>(static_cast<fl_stream_wait_peer_event_fn>(stub_stream_wait_peer_event));
  }
  record(std::string("get_proc_address ") + (name != nullptr ? name : "NULL"));
  return nullptr;
}

fl_device_ops make_ops() {
  fl_device_ops ops{};
  ops.struct_size = sizeof(fl_device_ops);
  ops.abi_major = FL_ABI_MAJOR;
  ops.abi_minor = FL_ABI_MINOR;
  ops.plugin_name = "stub";
  ops.plugin_version = "1.0.0-stub";
  ops.init = stub_init;
  ops.shutdown = stub_shutdown;
  ops.last_error = stub_last_error;
  ops.device_count = stub_device_count;
  ops.device_get_properties = stub_device_get_properties;
  ops.device_memory_info = stub_device_memory_info;
  ops.device_synchronize = stub_device_synchronize;
  ops.device_can_access_peer = stub_device_can_access_peer;
  ops.fl_malloc = stub_malloc;
  ops.fl_free = stub_free;
  ops.fl_host_malloc = nullptr;  // the core's default (plain host memory) applies
  ops.fl_host_free = nullptr;
  ops.fl_memset_async = stub_memset_async;
  ops.fl_memcpy_async = stub_memcpy_async;
  ops.stream_create = stub_stream_create;
  ops.stream_destroy = stub_stream_destroy;
  ops.stream_synchronize = stub_stream_synchronize;
  ops.stream_query = stub_stream_query;
  ops.stream_wait_event = stub_stream_wait_event;
  ops.event_create = stub_event_create;
  ops.event_destroy = stub_event_destroy;
  ops.event_record = stub_event_record;
  ops.event_query = stub_event_query;
  ops.event_synchronize = stub_event_synchronize;
  ops.event_elapsed_ms = stub_event_elapsed_ms;
  ops.kernels_get = stub_kernels_get;
  ops.get_proc_address = stub_get_proc_address;
  return ops;
}

}  // namespace

// The stub's table; the broken-plugin zoo builds on it (compiled with FL_STUB_NO_ENTRY).
const fl_device_ops& base_ops() {
  static const fl_device_ops ops = make_ops();
  return ops;
}

}  // namespace fl::stub

#ifndef FL_STUB_NO_ENTRY
extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops(void) { return &fl::stub::base_ops(); }
#endif
