// sync_mode.hpp — the GPU plugins' sync= option: how a host thread waits for its device, set
// through the scheduling bits of the device's flags. Shared by the CUDA plugin and the HIP
// plugin (plugins/hip stages this header next to its own gpu_runtime.h), so it is written
// against gpu_runtime.h's gpu* names. Called by init only (no other entry runs then).
#pragma once

#include "device_state.hpp"  // SyncMode
#include "gpu_runtime.h"

#include <plugin_support.hpp>

#include <string>

namespace fl::cuda {

// A wait mode from `value`, read from the option or environment variable that `where` names
// ("option sync=", "FL_CUDA_SYNC="); `plugin` ("cuda plugin") opens the error message.
inline SyncMode parse_sync_mode(const std::string& plugin, const std::string& where, const std::string& value) {
  if (value == "auto") return SyncMode::automatic;
  if (value == "spin") return SyncMode::spin;
  if (value == "yield") return SyncMode::yield;
  if (value == "blocking") return SyncMode::blocking;
  plugin::raise(FL_ERR_INVALID_ARGUMENT,
                plugin + ": " + where + value + " is not one of auto, spin, yield, blocking");
}

// The device flag bit of a mode (0 for automatic, which sets none).
inline unsigned int schedule_flag(SyncMode mode) {
  switch (mode) {
    case SyncMode::spin: return gpuDeviceScheduleSpin;
    case SyncMode::yield: return gpuDeviceScheduleYield;
    case SyncMode::blocking: return gpuDeviceScheduleBlockingSync;
    case SyncMode::automatic: break;
  }
  return 0;
}

// Sets the scheduling bits of the current device's flags to `mode` and keeps its other bits;
// automatic leaves the flags as they are. Returns gpuSuccess, or the runtime's error with the
// sticky error cleared: a runtime may refuse once a context is active that it cannot update,
// and the device then still works, with the waits it had (the caller warns).
inline gpuError_t apply_schedule_flags(SyncMode mode) {
  if (mode == SyncMode::automatic) return gpuSuccess;
  unsigned int flags = 0;
  gpuError_t err = gpuGetDeviceFlags(&flags);
  if (err == gpuSuccess)
    err = gpuSetDeviceFlags((flags & ~static_cast<unsigned int>(gpuDeviceScheduleMask)) | schedule_flag(mode));
  if (err != gpuSuccess) (void)gpuGetLastError();
  return err;
}

}  // namespace fl::cuda
