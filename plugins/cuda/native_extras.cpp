// native_extras.cpp — see native_extras.hpp. Written against the gpu* names of gpu_runtime.h,
// so the HIP plugin compiles the same file.
#include "native_extras.hpp"

#include "device_state.hpp"
#include "gpu_check.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <cstring>

namespace fl::cuda {
namespace {

using plugin::guard;
using plugin::raise;

fl_status_t plugin_native_device(int32_t device, int32_t* ordinal) {
  return guard([&] {
    if (ordinal == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl.native_device: ordinal is NULL");
    (void)device_state(device);  // validates the index
    *ordinal = device;           // the plugin's device N is the runtime's ordinal N
  });
}

fl_status_t plugin_native_stream(int32_t device, fl_stream_t stream, void** native) {
  return guard([&] {
    if (native == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl.native_stream: native is NULL");
    *native = reinterpret_cast<void*>(resolve_stream(device, stream));
  });
}

fl_status_t plugin_stream_wait_peer_event(int32_t device, fl_stream_t stream, int32_t event_device,
                                          fl_event_t event) {
  return guard([&] {
    if (event == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "fl.stream_wait_peer_event: event is NULL");
    (void)device_state(event_device);  // validates the index
    activate_device(device);
    check_gpu(gpuStreamWaitEvent(resolve_stream(device, stream), reinterpret_cast<gpuEvent_t>(event), 0),
              "stream wait on a peer event");
  });
}

}  // namespace

void* native_extra(const char* name) {
  if (name == nullptr) return nullptr;
  if (std::strcmp(name, FL_EXTRA_NATIVE_DEVICE) == 0)
    return reinterpret_cast<void*>(static_cast<fl_native_device_fn>(plugin_native_device));
  if (std::strcmp(name, FL_EXTRA_NATIVE_STREAM) == 0)
    return reinterpret_cast<void*>(static_cast<fl_native_stream_fn>(plugin_native_stream));
  if (std::strcmp(name, FL_EXTRA_STREAM_WAIT_PEER_EVENT) == 0)
    return reinterpret_cast<void*>(static_cast<fl_stream_wait_peer_event_fn>(plugin_stream_wait_peer_event));
  return nullptr;
}

}  // namespace fl::cuda
