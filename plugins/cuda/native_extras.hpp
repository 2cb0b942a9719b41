// native_extras.hpp — the "fl." extras of get_proc_address (fl_abi.h) for the CUDA and HIP
// plugins: the runtime's ordinal and stream handle behind an fl device and stream (so that
// the host can run NCCL/RCCL on the plugin's memory), and stream waits on another device's
// events (so that the core orders cross-GPU copies on the GPUs).
#pragma once

namespace fl::cuda {

// get_proc_address: the extra called `name`, or NULL.
void* native_extra(const char* name);

}  // namespace fl::cuda
