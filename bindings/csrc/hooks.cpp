// hooks.cpp — at::PrivateUse1HooksInterface for fl: availability, current device, pinned
// memory, generators, storage resize.
#include "device_allocator.h"
#include "pinned_allocator.h"
#include "fl_context.h"
#include "generator.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>

namespace fl::binding {
namespace {

class FlHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_noexcept() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override { (void)runtime(); }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count_noexcept());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex old = current_device();
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= device_count_noexcept()) return current_device();
    return exchangeDevice(device);
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator(); }
  bool isPinnedPtr(const void* data) const override { return pinned_allocator().is_pinned(data); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    (void)data;
    return at::Device(c10::DeviceType::PrivateUse1, current_device());
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    // A view of host memory (host_view.h) is not resizable: a new block would stop aliasing.
    TORCH_CHECK(storage.resizable(), "fl: trying to resize a storage that is not resizable");
    const c10::Device device = storage.device();
    const c10::DeviceGuard guard(device);
    c10::DataPtr fresh = device_allocator().allocate(newsize);
    const size_t keep = std::min(storage.nbytes(), newsize);
    if (keep > 0 && storage.data() != nullptr) {
      device_allocator().copy_data(fresh.get(), storage.data(), keep);
      // The copy is queued on the current stream; the old block returns to the pool of the
      // stream that allocated it, which must not reuse it before the copy has read it.
      const c10::Stream current = c10::impl::VirtualGuardImpl(c10::DeviceType::PrivateUse1).getStream(device);
      device_allocator().recordStream(storage.data_ptr(), current);
    }
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
    storage.unsafeGetStorageImpl()->set_nbytes(newsize);
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new FlHooks()); }
};
RegisterHooks register_hooks;

}  // namespace
}  // namespace fl::binding
