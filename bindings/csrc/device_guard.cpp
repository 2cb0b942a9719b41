// device_guard.cpp — c10::impl::DeviceGuardImplInterface for PrivateUse1 ("fl"): current
// device, streams and events, all delegated to the core's per-device StreamRegistry.
#include "fl_context.h"

#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <memory>

namespace fl::binding {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

// What c10 holds as an fl event: the plugin's handle and the device that created it. c10
// queries, synchronizes and times an event by this pointer alone (CUDA can do with a handle),
// but a plugin's handle means something only to the plugin of its device, and handles of two
// plugins may be equal. Owned by c10's event (created in record, deleted in destroyEvent).
struct FlEvent {
  c10::DeviceIndex device;
  fl_event_t handle;
};

const FlEvent& as_event(void* event) { return *static_cast<const FlEvent*>(event); }

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
    (void)device_index;
    if (event == nullptr) return;
    auto* e = static_cast<FlEvent*>(event);
    try {
      if (e->handle != nullptr) runtime().streams(e->device).destroy_event(e->handle);
    } catch (...) {
    }
    delete e;
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
        // Allocated first: a failed allocation then leaves no plugin event behind (destroying
        // an FlEvent whose handle is still NULL destroys nothing in the plugin).
        auto holder = std::make_unique<FlEvent>(FlEvent{stream.device_index(), nullptr});
        holder->handle = reg.create_event(flag == c10::EventFlag::BACKEND_DEFAULT);
        *event = holder.release();
      }
      const FlEvent& e = as_event(*event);
      TORCH_CHECK(e.device == stream.device_index(), "an event of fl:", static_cast<int>(e.device),
                  " cannot be recorded on a stream of fl:", static_cast<int>(stream.device_index()));
      reg.record(e.handle, stream.id());
    });
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    translate_errors("event wait: ", [&] {
      const FlEvent& e = as_event(event);
      runtime().wait_event(stream.device_index(), stream.id(), e.device, e.handle);
    });
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    return translate_errors("event query: ", [&] {
      const FlEvent& e = as_event(event);
      return runtime().streams(e.device).query_event(e.handle);
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
      const FlEvent& e = as_event(event);
      runtime().streams(e.device).synchronize_event(e.handle);
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
    (void)device_index;
    const FlEvent& s = as_event(start);
    const FlEvent& e = as_event(end);
    TORCH_CHECK(s.device == e.device, "elapsed_time: both events must be recorded on one device, got fl:",
                static_cast<int>(s.device), " and fl:", static_cast<int>(e.device));
    return translate_errors("elapsed_time: ", [&] {
      return static_cast<double>(runtime().streams(s.device).elapsed_ms(s.handle, e.handle));
    });
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, FlGuardImpl);

}  // namespace
}  // namespace fl::binding
