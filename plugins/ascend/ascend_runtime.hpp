// ascend_runtime.hpp — the Ascend plugin's state between calls: devices found at init, their
// default streams and cached properties, the aclnn workspace kept per stream, and the set of
// pinned host blocks (aclrtMemcpyAsync needs page-locked host memory).
#pragma once

#include "acl_api.hpp"

#include <fl_abi.h>

#include <cstdint>
#include <string>

namespace fl::ascend {

struct AscendProperties {
  std::string soc_name;   // aclrtGetSocName, e.g. "Ascend910B1"
  std::string stable_id;  // "NPU-<uuid>", else "npu-phy<physical id>", else see ascend_runtime.cpp
  uint64_t total_memory = 0;
  int32_t ai_cores = 0;
};

void init_runtime(const fl_host_services* host, const std::string& options);
void shutdown_runtime();
int32_t device_count_or_zero();
const AscendProperties& properties(int32_t device);
void log_message(int32_t level, const std::string& message);

// Validates `device` and makes it the calling thread's current device.
void use_device(int32_t device);
// The stream to enqueue on: `stream`, or the device's default stream for NULL.
aclrtStream resolve_stream(int32_t device, fl_stream_t stream);

// Raises FL_ERR_OUT_OF_MEMORY / FL_ERR_DEVICE with the runtime's message unless err == 0.
void check_acl(aclError err, const char* what);

// Device memory of at least `bytes` for an aclnn call on `stream`, valid until the next call
// for the same stream and slot (the buffer grows after synchronizing the stream). Slot 0 is
// the operator workspace; slot 1 holds intermediate tensors (e.g. int32 pooling indices).
void* stream_scratch(int32_t device, aclrtStream stream, int slot, uint64_t bytes);
void release_stream_scratch(int32_t device, aclrtStream stream);

// Pinned host blocks from fl_host_malloc (the only host memory copied asynchronously).
void remember_pinned(void* ptr, size_t size);
bool forget_pinned(void* ptr);
bool is_pinned(const void* ptr, size_t size);  // [ptr, ptr+size) inside one pinned block

}  // namespace fl::ascend
