// device_timer.h — device time per routed op, for torch_fl.profile(device_time=True).
// While on, each routed call on an fl device is bracketed by two timing events of the plugin
// (fl_event_record on the call's current stream, before the call's own copies and kernels and
// after them); flush() waits for the recorded pairs and adds each pair's elapsed time to the
// op's OpInfo::device_nanoseconds. Nested routed calls (a composite's parts) are timed too and
// also count in their parent, as the host times do. Events are pooled per device.
// Thread-safe. Costs two event records per call while on; nothing while off.
#pragma once

#include "op_info.h"

#include <c10/core/Device.h>

namespace fl::binding {

void set_device_timing(bool on);
bool device_timing();

// Brackets one routed call: records the start event at construction and the end event at
// destruction (also when the call throws). Does nothing when timing is off or device < 0.
class DeviceTimedScope {
 public:
  DeviceTimedScope(OpInfo& info, c10::DeviceIndex device);
  ~DeviceTimedScope();
  DeviceTimedScope(const DeviceTimedScope&) = delete;
  DeviceTimedScope& operator=(const DeviceTimedScope&) = delete;

 private:
  OpInfo* info_ = nullptr;
  c10::DeviceIndex device_ = -1;
  void* start_ = nullptr;   // fl_event_t
};

// Waits for every bracketed call so far and accumulates their device times.
void flush_device_times();

}  // namespace fl::binding
