// device_guard.cpp — c10::impl::DeviceGuardImplInterface for PrivateUse1 ("fl"): current
// device, streams and events, all delegated to the core's per-device StreamRegistry.
#include "fl_context.h"

#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <mutex>
#include <unordered_map>

namespace fl::binding {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

// Which device each live event handle was created on. c10 queries and synchronizes an event
// by its handle alone (as CUDA can), but an fl event handle means something only to the
// plugin of the device that created it: handing it to another device's plugin (the current
// device when the query runs elsewhere) would make that plugin read a foreign pointer.
class EventOwners {
 public:
  void add(void* event, c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex_);
    owners_[event] = device;
  }
  void remove(void* event) {
    std::lock_guard<std::mutex> lock(mutex_);
    owners_.erase(event);
  }
  // The creating device; `fallback` for a handle not created here (none should be).
  c10::DeviceIndex owner(void* event, c10::DeviceIndex fallback) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = owners_.find(event);
    return it == owners_.end() ? fallback : it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, c10::DeviceIndex> owners_;
};

EventOwners& event_owners() {
  static EventOwners* owners = new EventOwners();  // leaked: events may outlive static destruction
  return *owners;
}

c10::Stream make_stream(c10::DeviceIndex index, int64_t id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kFl, index), id);
}

class FlGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kFl; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old(kFl, current_device());
    if (d.index() != old.index()) set_current_device(d.index());
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kFl, current_device()); }
  void setDevice(c10::Device d) const override { set_current_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      set_current_device(d.index());
    } catch (...) {
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    return make_stream(d.index(), runtime().streams(d.index()).current());
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return make_stream(d.index(), 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return make_stream(d.index(), runtime().streams(d.index()).from_pool());
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return make_stream(d.index(), runtime().streams(d.index()).create(priority));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    int64_t previous = runtime().streams(s.device_index()).exchange_current(s.id());
    return make_stream(s.device_index(), previous);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_noexcept());
  }

  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    if (event == nullptr) return;
    try {
      c10::DeviceIndex owner = event_owners().owner(event, device_index);
      event_owners().remove(event);
      runtime().streams(owner).destroy_event(static_cast<fl_event_t>(event));
    } catch (...) {
    }
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "event device index ", static_cast<int>(device_index),
                " does not match the recording stream's device ",
                static_cast<int>(stream.device_index()));
    translate_errors("event record: ", [&] {
      auto& reg = runtime().streams(stream.device_index());
      if (*event == nullptr) {
        *event = reg.create_event(flag == c10::EventFlag::BACKEND_DEFAULT);
        event_owners().add(*event, stream.device_index());
      }
      reg.record(static_cast<fl_event_t>(*event), stream.id());
    });
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    translate_errors("event wait: ", [&] {
      const c10::DeviceIndex owner = event_owners().owner(event, stream.device_index());
      auto& rt = runtime();
      if (owner != stream.device_index() && rt.device(owner).plugin != rt.device(stream.device_index()).plugin) {
        // An event of another plugin's device: the waiting stream's plugin cannot read it, so
        // the host waits for it; work queued on the stream afterwards then follows it.
        rt.streams(owner).synchronize_event(static_cast<fl_event_t>(event));
        return;
      }
      rt.streams(stream.device_index()).wait(stream.id(), static_cast<fl_event_t>(event));
    });
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    return translate_errors("event query: ", [&] {
      return runtime().streams(event_owners().owner(event, current_device())).query_event(static_cast<fl_event_t>(event));
    });
  }

  bool queryStream(const c10::Stream& stream) const override {
    return translate_errors("stream query: ",
                            [&] { return runtime().streams(stream.device_index()).query(stream.id()); });
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    translate_errors("stream synchronize: ",
                     [&] { runtime().streams(stream.device_index()).synchronize(stream.id()); });
  }

  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    translate_errors("event synchronize: ", [&] {
      runtime().streams(event_owners().owner(event, current_device())).synchronize_event(
          static_cast<fl_event_t>(event));
    });
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    translate_errors("device synchronize: ",
                     [&] { runtime().streams(device_index).synchronize_all(); });
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    translate_errors("record_stream: ", [&] {
      runtime().allocator(stream.device_index()).record_stream(data_ptr.get(), stream_handle(stream));
    });
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "elapsed_time needs both events recorded (with enable_timing=True)");
    return translate_errors("elapsed_time: ", [&] {
      return static_cast<double>(runtime().streams(event_owners().owner(start, device_index)).elapsed_ms(
          static_cast<fl_event_t>(start), static_cast<fl_event_t>(end)));
    });
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, FlGuardImpl);

}  // namespace
}  // namespace fl::binding
