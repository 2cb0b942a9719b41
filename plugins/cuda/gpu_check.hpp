// gpu_check.hpp — turns runtime status codes into Torch-FL status codes (host side only).
// A failed allocation becomes FL_ERR_OUT_OF_MEMORY (its error state is cleared so the next
// call on this thread starts clean); every other failure becomes FL_ERR_DEVICE with the
// runtime's own name and description of the error.
#pragma once

#include "gpu_runtime.h"

#include <plugin_support.hpp>

#include <string>

namespace fl::cuda {

inline std::string gpu_error_text(gpuError_t err) {
  return std::string(gpuGetErrorName(err)) + " (" + gpuGetErrorString(err) + ")";
}

inline void check_gpu(gpuError_t err, const char* what) {
  if (err == gpuSuccess) return;
  if (err == gpuErrorMemoryAllocation) {
    (void)gpuGetLastError();
    plugin::raise(FL_ERR_OUT_OF_MEMORY, std::string(what) + ": out of device memory");
  }
  plugin::raise(FL_ERR_DEVICE, std::string(what) + ": " + gpu_error_text(err));
}

// After a <<<...>>> launch: reports a bad launch configuration at once. Faults inside the
// kernel surface later, at the next synchronizing call, as the runtime defines.
inline void check_launch(const char* kernel) { check_gpu(gpuGetLastError(), kernel); }

}  // namespace fl::cuda
