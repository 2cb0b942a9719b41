// device_allocator.cpp — PyTorch's allocator for fl tensors: a c10::DeviceAllocator over the
// core's per-device CachingAllocator, on the current stream of the current device.
#include "device_allocator.h"

#include "fl_context.h"
#include "pinned_allocator.h"
#include "staging_pool.h"

#include <caching_allocator.h>
#include <plugin_library.h>

#include <array>

namespace fl::binding {
namespace {

constexpr int kMaxDevices = 64;

template <int D>
void free_on_device(void* ptr) {
  try {
    runtime().allocator(D).deallocate(ptr);
  } catch (...) {
    // A deleter must not throw; the block is leaked rather than the process aborted.
  }
}

template <int... Ds>
constexpr std::array<c10::DeleterFnPtr, sizeof...(Ds)> make_deleters(std::integer_sequence<int, Ds...>) {
  return {&free_on_device<Ds>...};
}

constexpr auto kDeleters = make_deleters(std::make_integer_sequence<int, kMaxDevices>{});

}  // namespace

c10::DataPtr FlDeviceAllocator::allocate(size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  c10::Device dev(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, kDeleters[0], dev);
  TORCH_CHECK(device < kMaxDevices, "torch_fl supports at most ", kMaxDevices, " devices");
  note_device_use();
  void* ptr = translate_errors("", [&] {
    auto& reg = runtime().streams(device);
    return runtime().allocator(device).allocate(nbytes, reg.handle(reg.current()));
  });
  return c10::DataPtr(ptr, ptr, kDeleters[device], dev);
}

c10::DeleterFnPtr FlDeviceAllocator::raw_deleter() const { return nullptr; }

void FlDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  auto& rt = runtime();
  const c10::DeviceIndex device = current_device();
  const auto& d = rt.device(device);
  auto& reg = rt.streams(device);
  d.plugin->check(d.plugin->ops().fl_memcpy_async(d.local, dest, src, count,
                                                  FL_MEMCPY_DEVICE_TO_DEVICE, reg.handle(reg.current())),
                  "memcpy (device to device)");
}

bool FlDeviceAllocator::initialized() { return device_count_noexcept() > 0; }

void FlDeviceAllocator::emptyCache(c10::MempoolId_t) {
  translate_errors("empty_cache: ", [&] {
    for (int i = 0; i < runtime().device_count(); ++i) runtime().allocator(i).empty_cache();
    staging_pool_release();
    pinned_cache_release();
  });
}

void FlDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  translate_errors("record_stream: ", [&] {
    runtime().allocator(stream.device_index()).record_stream(ptr.get(), stream_handle(stream));
  });
}

c10::CachingDeviceAllocator::DeviceStats FlDeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  const fl::AllocatorStats s = runtime().allocator(device).stats();
  c10::CachingDeviceAllocator::DeviceStats out;
  auto set = [](c10::CachingDeviceAllocator::StatArray& a, uint64_t current, uint64_t peak,
                uint64_t allocated, uint64_t freed) {
    for (auto& stat : a) {
      stat.current = static_cast<int64_t>(current);
      stat.peak = static_cast<int64_t>(peak);
      stat.allocated = static_cast<int64_t>(allocated);
      stat.freed = static_cast<int64_t>(freed);
    }
  };
  set(out.allocated_bytes, s.allocated_bytes, s.peak_allocated_bytes, 0, 0);
  set(out.active_bytes, s.allocated_bytes, s.peak_allocated_bytes, 0, 0);
  set(out.reserved_bytes, s.reserved_bytes, s.peak_reserved_bytes, 0, 0);
  set(out.requested_bytes, s.requested_bytes, s.peak_allocated_bytes, 0, 0);
  set(out.allocation, s.num_allocs - s.num_frees, s.num_allocs, s.num_allocs, s.num_frees);
  set(out.segment, s.num_segments, s.num_segments, s.num_device_mallocs, s.num_device_frees);
  out.num_alloc_retries = static_cast<int64_t>(s.num_cache_flushes);
  out.num_ooms = static_cast<int64_t>(s.num_ooms);
  return out;
}

void FlDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex) {}

void FlDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  runtime().allocator(device).reset_peak_stats();
}

std::pair<size_t, size_t> FlDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  const auto& d = runtime().device(device);
  uint64_t free_bytes = 0, total = 0;
  d.plugin->check(d.plugin->ops().device_memory_info(d.local, &free_bytes, &total), "device_memory_info");
  return {static_cast<size_t>(free_bytes), static_cast<size_t>(total)};
}

FlDeviceAllocator& device_allocator() {
  static FlDeviceAllocator allocator;
  return allocator;
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &device_allocator());

}  // namespace fl::binding
