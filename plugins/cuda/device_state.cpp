// device_state.cpp — plugin-wide state: devices found at init, their default streams, cached
// properties, and the RNG seed. Written only by init and shutdown (which the ABI calls with
// no other entry running); read concurrently by everything else.
#include "device_state.hpp"

#include "gpu_check.hpp"
#include "pageable_upload.hpp"
#include "plugin_state.hpp"
#include "sync_mode.hpp"

#include <plugin_support.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fl::cuda {
namespace {

// PyTorch's default generator seed, so an unseeded run is reproducible from run to run.
constexpr uint64_t kDefaultSeed = 67280421310721ull;
constexpr uint64_t kScratchPoolKeepBytes = 256ull << 20;

struct PluginState {
  bool initialized = false;
  const fl_host_services* host = nullptr;
  uint64_t seed = kDefaultSeed;
  SyncMode sync = SyncMode::automatic;
  std::vector<std::unique_ptr<DeviceState>> devices;
  std::vector<CachedProperties> properties;
};

PluginState& state() {
  static PluginState s;
  return s;
}

std::string format_uuid(const unsigned char* b) {
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                b[13], b[14], b[15]);
  return text;
}

// A copy thread count, 0..64, from the option or the environment variable named in `where`.
int parse_copy_threads(const std::string& value, const std::string& where) {
  const bool digits = !value.empty() && value.size() <= 3 &&
                      value.find_first_not_of("0123456789") == std::string::npos;
  const int n = digits ? std::stoi(value) : -1;
  if (n < 0 || n > 64)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "cuda plugin: " + where + value + " is not a thread count in 0..64");
  return n;
}

// Parses "key=value;key=value". Unknown keys are logged and ignored.
//   seed=N          the dropout RNG's seed
//   copy_threads=N  host threads that stage large copies from pageable memory (or
//                   FL_CUDA_COPY_THREADS; default 4, fewer on a process allowed fewer than 8
//                   CPUs, none with 2 or fewer; 0: the driver stages them, with one thread)
//   sync=MODE       how host threads wait for the device: auto (the context's flags as they
//                   are: the driver's default unless set before), spin, yield or blocking (or
//                   FL_CUDA_SYNC; the option wins)
void apply_options(const std::string& options, PluginState& s) {
  std::optional<int> copy_threads;
  std::optional<SyncMode> sync;
  size_t start = 0;
  while (start <= options.size()) {
    size_t end = options.find(';', start);
    if (end == std::string::npos) end = options.size();
    const std::string item = options.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "seed") {
      try {
        s.seed = std::stoull(value, nullptr, 0);
      } catch (const std::exception&) {
        plugin::raise(FL_ERR_INVALID_ARGUMENT, "option seed=" + value + " is not an integer");
      }
    } else if (key == "copy_threads") {
      copy_threads = parse_copy_threads(value, "option copy_threads=");
    } else if (key == "sync") {
      sync = parse_sync_mode("cuda plugin", "option sync=", value);
    } else {
      log_message(FL_LOG_WARN, "cuda plugin: ignoring unknown option '" + key + "'");
    }
  }
  // The environment counts only where the options say nothing (an option wins, and a bad
  // variable beside a good option is not read).
  if (!copy_threads) {
    const char* env = std::getenv("FL_CUDA_COPY_THREADS");
    copy_threads = env != nullptr && *env != '\0' ? parse_copy_threads(env, "FL_CUDA_COPY_THREADS=")
                                                   : default_pageable_upload_threads();
  }
  if (!sync) {
    const char* env = std::getenv("FL_CUDA_SYNC");
    sync = env != nullptr && *env != '\0' ? parse_sync_mode("cuda plugin", "FL_CUDA_SYNC=", env) : SyncMode::automatic;
  }
  s.sync = *sync;
  configure_pageable_uploads(*copy_threads);
}

}  // namespace

void log_message(int32_t level, const std::string& message) {
  const fl_host_services* host = state().host;
  if (host != nullptr && host->struct_size > offsetof(fl_host_services, log) && host->log != nullptr)
    host->log(host->user_data, level, message.c_str());
}

void init_plugin_state(const fl_host_services* host, const std::string& options) {
  PluginState& s = state();
  if (s.initialized) plugin::raise(FL_ERR_INVALID_ARGUMENT, "cuda plugin: init called twice");
  s.host = host;
  s.seed = kDefaultSeed;
  apply_options(options, s);

  int count = 0;
  const gpuError_t err = gpuGetDeviceCount(&count);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();
    plugin::raise(FL_ERR_NO_DEVICE, std::string("no CUDA driver or device: ") + gpuGetErrorString(err) +
                                        " (" + gpuGetErrorName(err) + ")");
  }
  if (count <= 0) plugin::raise(FL_ERR_NO_DEVICE, "no CUDA device visible (cudaGetDeviceCount = 0)");

  std::vector<std::unique_ptr<DeviceState>> devices;
  std::vector<CachedProperties> properties;
  try {
    for (int i = 0; i < count; ++i) {
      check_gpu(gpuSetDevice(i), "cudaSetDevice");
      // With a context already active (torch's own CUDA in this process) the runtime updates
      // its flags, and an older one refuses: then say so.
      if (const gpuError_t flags_err = apply_schedule_flags(s.sync); flags_err != gpuSuccess)
        log_message(FL_LOG_WARN, "cuda plugin: device " + std::to_string(i) + ": the sync option was not applied (" +
                                     gpuGetErrorString(flags_err) + ")");
      gpuDeviceProp_t prop{};
      check_gpu(gpuGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
      auto dev = std::make_unique<DeviceState>();
      dev->index = i;
      dev->sm_count = prop.multiProcessorCount;
      check_gpu(gpuStreamCreateWithPriority(&dev->default_stream, gpuStreamNonBlocking, 0),
                "cudaStreamCreateWithPriority (default stream)");
      // Scratch memory (cudaMallocAsync: cuDNN workspaces, reduction partials) stays cached
      // in the device's default pool up to this size instead of going back at every sync.
      // Not fatal: without it scratch memory is simply returned to the driver more often.
      gpuMemPool_t pool = nullptr;
      uint64_t threshold = kScratchPoolKeepBytes;
      if (gpuDeviceGetDefaultMemPool(&pool, i) != gpuSuccess ||
          gpuMemPoolSetAttribute(pool, gpuMemPoolAttrReleaseThreshold, &threshold) != gpuSuccess) {
        (void)gpuGetLastError();
        log_message(FL_LOG_WARN, "cuda plugin: could not set the memory pool release threshold on device " +
                                     std::to_string(i));
      }
      CachedProperties p;
      p.name = prop.name;
      p.stable_id = format_uuid(reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
      p.total_memory = prop.totalGlobalMem;
      p.sm_count = prop.multiProcessorCount;
      p.pci_bus_id = prop.pciBusID;
      p.compute_capability = prop.major * 10 + prop.minor;
      properties.push_back(p);
      devices.push_back(std::move(dev));
      create_device_error_channel(devices.back()->errors);  // freed by the catch below if it fails
      log_message(FL_LOG_INFO, "cuda plugin: device " + std::to_string(i) + " " + p.name + " " +
                                   p.stable_id + " sm_" + std::to_string(p.compute_capability));
    }
  } catch (...) {
    for (auto& d : devices) {
      destroy_device_error_channel(d->errors);
      if (d->default_stream != nullptr) (void)gpuStreamDestroy(d->default_stream);
    }
    throw;
  }
  s.devices = std::move(devices);
  s.properties = std::move(properties);
  s.initialized = true;
}

void shutdown_plugin_state() {
  PluginState& s = state();
  for (auto& d : s.devices) {
    (void)gpuSetDevice(d->index);
    (void)gpuDeviceSynchronize();
    destroy_device_error_channel(d->errors);
    if (d->default_stream != nullptr) (void)gpuStreamDestroy(d->default_stream);
  }
  s.devices.clear();
  s.properties.clear();
  s.initialized = false;
  s.host = nullptr;
}

int32_t device_count_or_zero() {
  return state().initialized ? static_cast<int32_t>(state().devices.size()) : 0;
}

DeviceState& device_state(int32_t device) {
  PluginState& s = state();
  if (!s.initialized) plugin::raise(FL_ERR_NO_DEVICE, "cuda plugin is not initialized");
  if (device < 0 || device >= static_cast<int32_t>(s.devices.size()))
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "cuda plugin: no device " + std::to_string(device) +
                                               " (have " + std::to_string(s.devices.size()) + ")");
  return *s.devices[static_cast<size_t>(device)];
}

const CachedProperties& device_properties(int32_t device) {
  (void)device_state(device);
  return state().properties[static_cast<size_t>(device)];
}

namespace {
// Makes `device` current unless it already is. cudaGetDevice reads the runtime's thread-local
// current device (no driver call), so the common case costs no cudaSetDevice, and a device
// switched by other code on this thread (torch's own CUDA, say) is still noticed.
void make_current(int32_t device) {
  int current = -1;
  if (gpuGetDevice(&current) == gpuSuccess && current == device) return;
  check_gpu(gpuSetDevice(device), "cudaSetDevice");
}
}  // namespace

void activate_device(int32_t device) {
  (void)device_state(device);
  make_current(device);
}

gpuStream_t resolve_stream(int32_t device, fl_stream_t stream) {
  if (stream != nullptr) return reinterpret_cast<gpuStream_t>(stream);
  return device_state(device).default_stream;
}

uint64_t rng_seed() { return state().seed; }

SyncMode sync_mode() { return state().sync; }

unsigned int event_wait_flags() { return state().sync == SyncMode::blocking ? gpuEventBlockingSync : 0u; }

LaunchContext begin_kernel(const fl_kernel_call* call) {
  if (call == nullptr) plugin::raise(FL_ERR_INVALID_ARGUMENT, "kernel called with a NULL call");
  DeviceState& d = device_state(call->device);
  make_current(call->device);
  LaunchContext ctx;
  ctx.stream = call->stream != nullptr ? reinterpret_cast<gpuStream_t>(call->stream) : d.default_stream;
  ctx.sm_count = d.sm_count;
  ctx.device = call->device;
  ctx.errors = d.errors.sink;
  ctx.errors.stream = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx.stream));
  return ctx;
}

}  // namespace fl::cuda
