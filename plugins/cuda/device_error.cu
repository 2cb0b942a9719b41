// device_error.cu — the host side of device_error.hpp: creating each device's error channel
// and turning a report left by a kernel into FL_ERR_DEVICE at the next host wait.
#include "device_error.hpp"

#include "device_state.hpp"
#include "gpu_check.hpp"

#include <plugin_support.hpp>

#include <mutex>
#include <string>

namespace fl::cuda {
namespace {

const char* checked_op_name(int32_t op) {
  switch (static_cast<CheckedOp>(op)) {
    case CheckedOp::index_select: return "aten::index_select";
    case CheckedOp::gather: return "aten::gather";
    case CheckedOp::scatter: return "aten::scatter (src)";
    case CheckedOp::scatter_value: return "aten::scatter (value)";
    case CheckedOp::scatter_add: return "aten::scatter_add";
    case CheckedOp::nll_loss_forward: return "aten::nll_loss_forward";
    case CheckedOp::nll_loss_backward: return "aten::nll_loss_backward";
    case CheckedOp::none: break;
  }
  return "a kernel";
}

// In ATen's words where it has them ("index 5 is out of bounds for dimension 1 with size 3",
// "target 7 is out of bounds [0, 4)"), then where it was found.
std::string describe(const DeviceErrorRecord& r, int32_t device) {
  const std::string what =
      r.dim < 0 ? "target " + std::to_string(r.value) + " is out of bounds [0, " + std::to_string(r.bound) + ")"
                : "index " + std::to_string(r.value) + " is out of bounds for dimension " + std::to_string(r.dim) +
                      " with size " + std::to_string(r.bound);
  return std::string(checked_op_name(r.op)) + ": " + what + " (found on CUDA device " + std::to_string(device) +
         " by a kernel that ran before this synchronize; that op's output is not valid)";
}

std::mutex& report_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void create_device_error_channel(DeviceErrorChannel& channel) {
  void* host = nullptr;
  check_gpu(gpuHostAllocMapped(&host, sizeof(DeviceErrorRecord)), "cudaHostAlloc (device error record)");
  channel.host_record = static_cast<DeviceErrorRecord*>(host);
  *channel.host_record = DeviceErrorRecord{};
  void* device_view = nullptr;
  check_gpu(gpuHostGetDevicePointer(&device_view, host, 0), "cudaHostGetDevicePointer (device error record)");
  channel.sink.record = static_cast<DeviceErrorRecord*>(device_view);
  void* claim = nullptr;
  check_gpu(gpuMalloc(&claim, sizeof(unsigned int)), "cudaMalloc (device error claim)");
  channel.sink.claim = static_cast<unsigned int*>(claim);
  check_gpu(gpuStreamCreateWithPriority(&channel.clear_stream, gpuStreamNonBlocking, 0),
            "cudaStreamCreateWithPriority (device error stream)");
  check_gpu(gpuMemsetAsync(claim, 0, sizeof(unsigned int), channel.clear_stream), "cudaMemsetAsync (device error claim)");
  check_gpu(gpuStreamSynchronize(channel.clear_stream), "cudaStreamSynchronize (device error stream)");
}

void destroy_device_error_channel(DeviceErrorChannel& channel) {
  if (channel.clear_stream != nullptr) (void)gpuStreamDestroy(channel.clear_stream);
  if (channel.sink.claim != nullptr) (void)gpuFree(channel.sink.claim);
  if (channel.host_record != nullptr) (void)gpuFreeHost(channel.host_record);
  channel = DeviceErrorChannel{};
}

// The host reads `ready` with acquire order: on a host with a weak memory model (an ARM
// Grace), the fields written before it by a kernel on another stream are then visible too.
int32_t ready_of(const DeviceErrorRecord* r) { return __atomic_load_n(&r->ready, __ATOMIC_ACQUIRE); }

void raise_pending_device_error(int32_t device, const gpuStream_t* stream) {
  DeviceErrorChannel& channel = device_state(device).errors;
  DeviceErrorRecord* shared = channel.host_record;
  if (shared == nullptr || ready_of(shared) == 0) return;
  DeviceErrorRecord found{};
  {
    // Two threads that wait at once: one reports, the other finds the record cleared.
    std::lock_guard<std::mutex> lock(report_mutex());
    if (ready_of(shared) == 0) return;
    if (stream != nullptr && shared->stream != static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*stream))) return;
    found = *shared;
    // The record first, then the claim word: a kernel that reports in between finds the
    // claim still taken and is dropped, never half-written over a cleared record. Should the
    // reset fail (the context is broken then), the record is kept: every later wait fails with
    // it, rather than the claim staying taken and later reports being dropped unseen.
    __atomic_store_n(&shared->ready, 0, __ATOMIC_RELEASE);
    const gpuError_t reset = gpuMemsetAsync(channel.sink.claim, 0, sizeof(unsigned int), channel.clear_stream);
    const gpuError_t waited = reset == gpuSuccess ? gpuStreamSynchronize(channel.clear_stream) : reset;
    if (waited != gpuSuccess) {
      (void)gpuGetLastError();
      __atomic_store_n(&shared->ready, 1, __ATOMIC_RELEASE);
    }
  }
  plugin::raise(FL_ERR_DEVICE, describe(found, device));
}

}  // namespace fl::cuda
