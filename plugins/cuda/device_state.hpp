// device_state.hpp — what the plugin keeps per device between calls: the per-device default
// stream (created non-blocking, so NULL never means the legacy stream), the multiprocessor
// count for launch sizing, the dropout RNG's seed and offset counter, and the channel kernels
// report device-side errors through (device_error.hpp).
#pragma once

#include "device_error.hpp"
#include "gpu_runtime.h"

#include <fl_abi.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace fl::cuda {

struct DeviceState {
  int32_t index = 0;
  gpuStream_t default_stream = nullptr;
  int32_t sm_count = 0;
  std::atomic<uint64_t> rng_offset{0};
  std::mutex peer_mutex;
  uint64_t peer_enabled_mask = 0;  // bit p: peer access to device p enabled (devices < 64)
  DeviceErrorChannel errors;
};

// Where a kernel runs: the stream it enqueues on and what launch sizing needs.
struct LaunchContext {
  gpuStream_t stream = nullptr;
  int32_t sm_count = 1;
  int32_t device = 0;
  DeviceErrorSink errors;  // where the call's kernels report an index out of range
};

// Plugin-wide state. Created by init, destroyed by shutdown.
int32_t device_count_or_zero();
DeviceState& device_state(int32_t device);   // raises FL_ERR_INVALID_ARGUMENT for a bad index
void activate_device(int32_t device);         // validates and makes `device` current
gpuStream_t resolve_stream(int32_t device, fl_stream_t stream);
uint64_t rng_seed();

// How a host thread waits for the device (option sync=, or FL_CUDA_SYNC): the driver's choice
// (auto: spin while the process has fewer CUDA contexts than CPUs), spin, yield, or blocking
// (the thread sleeps until the device signals it, freeing its CPU for other work at the cost
// of a wake-up latency of some microseconds per wait).
enum class SyncMode { automatic, spin, yield, blocking };
SyncMode sync_mode();
// The flags every event the plugin creates carries for its waits (cudaEventBlockingSync when
// sync=blocking; an event's own flag, not the device's, decides how cudaEventSynchronize waits).
unsigned int event_wait_flags();

// Validates the call's device, makes it current and returns its stream and sizing.
LaunchContext begin_kernel(const fl_kernel_call* call);

// Grid size for a grid-stride loop over `work_items` with `threads` per block.
inline unsigned int grid_for(int64_t work_items, int threads, const LaunchContext& ctx,
                             int blocks_per_sm = 32) {
  int64_t blocks = (work_items + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 1) * blocks_per_sm;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned int>(blocks);
}

}  // namespace fl::cuda
