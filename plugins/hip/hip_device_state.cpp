// hip_device_state.cpp — plugin-wide state of the HIP plugin: devices found at init, their
// default streams and cached properties, the RNG seed. Defines the interface that the shared
// kernel sources call (device_state.hpp, namespace fl::cuda: the namespace of the shared GPU
// kernels, whichever runtime runs them). Written only by init and shutdown.
#include "device_state.hpp"
#include "gpu_check.hpp"
#include "hip_state.hpp"
#include "sync_mode.hpp"

#include <plugin_support.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace fl::cuda {
namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default generator seed

struct HipState {
  bool initialized = false;
  const fl_host_services* host = nullptr;
  uint64_t seed = kDefaultSeed;
  SyncMode sync = SyncMode::automatic;
  std::vector<std::unique_ptr<DeviceState>> devices;
  std::vector<hip::HipProperties> properties;
};

HipState& state() {
  static HipState s;
  return s;
}

// Parses "key=value;key=value". Unknown keys are logged and ignored.
//   seed=N     the dropout RNG's seed
//   sync=MODE  how host threads wait for the device: auto (the device's flags as they are),
//              spin, yield or blocking (or FL_HIP_SYNC; the option wins), as the CUDA
//              plugin's sync= option
void apply_options(const std::string& options, HipState& s) {
  std::optional<SyncMode> sync;
  size_t start = 0;
  while (start <= options.size()) {
    size_t end = options.find(';', start);
    if (end == std::string::npos) end = options.size();
    const std::string item = options.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "seed") {
      try {
        s.seed = std::stoull(value, nullptr, 0);
      } catch (const std::exception&) {
        plugin::raise(FL_ERR_INVALID_ARGUMENT, "option seed=" + value + " is not an integer");
      }
    } else if (key == "sync") {
      sync = parse_sync_mode("hip plugin", "option sync=", value);
    } else {
      hip::log_message(FL_LOG_WARN, "hip plugin: ignoring unknown option '" + key + "'");
    }
  }
  // The environment counts only where the options say nothing.
  if (!sync) {
    const char* env = std::getenv("FL_HIP_SYNC");
    sync = env != nullptr && *env != '\0' ? parse_sync_mode("hip plugin", "FL_HIP_SYNC=", env) : SyncMode::automatic;
  }
  s.sync = *sync;
}

// A runtime that refuses the sync option (a context already active that it cannot update)
// gets a warning, not an error: the device still works, with the waits it had.
void apply_sync_mode(int device, SyncMode mode) {
  if (const hipError_t err = apply_schedule_flags(mode); err != hipSuccess)
    hip::log_message(FL_LOG_WARN, "hip plugin: device " + std::to_string(device) +
                                      ": the sync option was not applied (" + hipGetErrorString(err) + ")");
}

// "GPU-<uuid>" when the runtime reports a non-zero UUID, else "pci:<domain:bus:device.fn>".
std::string stable_id_of(int device) {
  hipUUID uuid{};
  if (hipDeviceGetUuid(&uuid, device) == hipSuccess) {
    bool nonzero = false;
    for (char b : uuid.bytes) nonzero = nonzero || b != 0;
    if (nonzero) {
      const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
      char text[64];
      std::snprintf(text, sizeof(text), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                    b[15]);
      return text;
    }
  }
  (void)hipGetLastError();
  char bus[64] = {};
  check_gpu(hipDeviceGetPCIBusId(bus, sizeof(bus), device), "hipDeviceGetPCIBusId");
  return std::string("pci:") + bus;
}

}  // namespace

void init_runtime_devices(const fl_host_services* host, const std::string& options) {
  HipState& s = state();
  if (s.initialized) plugin::raise(FL_ERR_INVALID_ARGUMENT, "hip plugin: init called twice");
  s.host = host;
  s.seed = kDefaultSeed;
  apply_options(options, s);

  int count = 0;
  const hipError_t err = hipGetDeviceCount(&count);
  if (err != hipSuccess) {
    (void)hipGetLastError();
    const std::string name = hipGetErrorName(err), text = hipGetErrorString(err);
    std::string why = "hipGetDeviceCount: " + name + (text != name ? " (" + text + ")" : "");
    if (access("/dev/kfd", F_OK) != 0) why += "; /dev/kfd is absent: no amdgpu kernel driver";
    plugin::raise(FL_ERR_NO_DEVICE, "no HIP device: " + why);
  }
  if (count <= 0) plugin::raise(FL_ERR_NO_DEVICE, "no HIP device visible (hipGetDeviceCount = 0)");

  std::vector<std::unique_ptr<DeviceState>> devices;
  std::vector<hip::HipProperties> properties;
  try {
    for (int i = 0; i < count; ++i) {
      check_gpu(hipSetDevice(i), "hipSetDevice");
      apply_sync_mode(i, s.sync);
      hipDeviceProp_t prop{};
      check_gpu(hipGetDeviceProperties(&prop, i), "hipGetDeviceProperties");
      auto dev = std::make_unique<DeviceState>();
      dev->index = i;
      dev->sm_count = prop.multiProcessorCount;
      check_gpu(hipStreamCreateWithPriority(&dev->default_stream, hipStreamNonBlocking, 0),
                "hipStreamCreateWithPriority (default stream)");
      devices.push_back(std::move(dev));
      create_device_error_channel(devices.back()->errors);  // freed by the catch below if it fails
      hip::HipProperties p;
      p.arch = prop.gcnArchName;
      p.name = prop.name[0] != '\0' ? std::string(prop.name) : "AMD " + p.arch;
      p.stable_id = stable_id_of(i);
      p.total_memory = prop.totalGlobalMem;
      p.compute_units = prop.multiProcessorCount;
      p.pci_bus_id = prop.pciBusID;
      properties.push_back(p);
      hip::log_message(FL_LOG_INFO, "hip plugin: device " + std::to_string(i) + " " + p.name + " " + p.arch + " " +
                                        p.stable_id);
    }
  } catch (...) {
    for (auto& d : devices) {
      destroy_device_error_channel(d->errors);
      if (d->default_stream != nullptr) (void)hipStreamDestroy(d->default_stream);
    }
    throw;
  }
  s.devices = std::move(devices);
  s.properties = std::move(properties);
  s.initialized = true;
}

void shutdown_runtime_devices() {
  HipState& s = state();
  for (auto& d : s.devices) {
    (void)hipSetDevice(d->index);
    (void)hipDeviceSynchronize();
    destroy_device_error_channel(d->errors);
    if (d->default_stream != nullptr) (void)hipStreamDestroy(d->default_stream);
  }
  s.devices.clear();
  s.properties.clear();
  s.initialized = false;
  s.host = nullptr;
}

int32_t device_count_or_zero() { return state().initialized ? static_cast<int32_t>(state().devices.size()) : 0; }

DeviceState& device_state(int32_t device) {
  HipState& s = state();
  if (!s.initialized) plugin::raise(FL_ERR_NO_DEVICE, "hip plugin is not initialized");
  if (device < 0 || device >= static_cast<int32_t>(s.devices.size()))
    plugin::raise(FL_ERR_INVALID_ARGUMENT,
                  "hip plugin: no device " + std::to_string(device) + " (have " + std::to_string(s.devices.size()) + ")");
  return *s.devices[static_cast<size_t>(device)];
}

void activate_device(int32_t device) {
  (void)device_state(device);
  check_gpu(hipSetDevice(device), "hipSetDevice");
}

gpuStream_t resolve_stream(int32_t device, fl_stream_t stream) {
  if (stream != nullptr) return reinterpret_cast<gpuStream_t>(stream);
  return device_state(device).default_stream;
}

uint64_t rng_seed() { return state().seed; }

LaunchContext begin_kernel(const fl_kernel_call* call) {
  if (call == nullptr) plugin::raise(FL_ERR_INVALID_ARGUMENT, "kernel called with a NULL call");
  DeviceState& d = device_state(call->device);
  check_gpu(hipSetDevice(call->device), "hipSetDevice");
  LaunchContext ctx;
  ctx.stream = call->stream != nullptr ? reinterpret_cast<gpuStream_t>(call->stream) : d.default_stream;
  ctx.sm_count = d.sm_count;
  ctx.device = call->device;
  ctx.errors = d.errors.sink;
  ctx.errors.stream = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx.stream));
  return ctx;
}

}  // namespace fl::cuda

namespace fl::hip {

void log_message(int32_t level, const std::string& message) {
  const fl_host_services* host = cuda::state().host;
  if (host != nullptr && host->struct_size > offsetof(fl_host_services, log) && host->log != nullptr)
    host->log(host->user_data, level, message.c_str());
}

void init_hip_state(const fl_host_services* host, const std::string& options) { cuda::init_runtime_devices(host, options); }
void shutdown_hip_state() { cuda::shutdown_runtime_devices(); }

const HipProperties& hip_properties(int32_t device) {
  (void)cuda::device_state(device);
  return cuda::state().properties[static_cast<size_t>(device)];
}

}  // namespace fl::hip
