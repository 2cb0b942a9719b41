// device_allocator.cpp — PyTorch's allocator for fl tensors: a c10::DeviceAllocator over the
// core's per-device CachingAllocator, on the current stream of the current device. Also the
// pinned host allocator (see pinning_plugin_ops).
#include "device_allocator.h"

#include "fl_context.h"
#include "staging_pool.h"

#include <caching_allocator.h>
#include <plugin_library.h>

#include <array>
#include <cstdlib>
#include <map>
#include <mutex>

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

// ---- pinned host memory ---------------------------------------------------------------

namespace {

// Live pinned blocks (start -> size), so is_pinned() can answer for any pointer inside one.
struct PinnedBlocks {
  std::mutex mutex;
  std::map<uintptr_t, size_t> blocks;
};

PinnedBlocks& pinned_blocks() {
  static auto* blocks = new PinnedBlocks();  // outlives tensors freed at interpreter exit
  return *blocks;
}

void free_pinned(void* ctx) {
  auto* p = static_cast<std::pair<void*, const fl_device_ops*>*>(ctx);
  {
    auto& reg = pinned_blocks();
    std::lock_guard lock(reg.mutex);
    reg.blocks.erase(reinterpret_cast<uintptr_t>(p->first));
  }
  if (p->second != nullptr) {
    p->second->fl_host_free(p->first);
  } else {
    std::free(p->first);
  }
  delete p;
}

// The plugin whose host_malloc pins memory for tensor.pin_memory(): the first device whose
// memory the host cannot dereference (an accelerator, which needs page-locked memory to copy
// by DMA: cudaMallocHost, hipHostMalloc), else the first device at all; NULL when no plugin
// offers host_malloc. With the CPU plugin listed first beside the CUDA plugin, pinning must
// still come from CUDA, or "pinned" batches would be pageable to it.
const fl_device_ops* pinning_plugin_ops() {
  const int n = device_count_noexcept();
  const fl_device_ops* fallback = nullptr;
  for (int i = 0; i < n; ++i) {
    const auto& d = runtime().device(i);
    if (!d.plugin->entry(&fl_device_ops::fl_host_malloc) || !d.plugin->entry(&fl_device_ops::fl_host_free))
      continue;
    if (!d.props.host_accessible) return &d.plugin->ops();
    if (fallback == nullptr) fallback = &d.plugin->ops();
  }
  return fallback;
}

}  // namespace

c10::DataPtr FlPinnedAllocator::allocate(size_t nbytes) {
  c10::Device cpu(c10::DeviceType::CPU);
  if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &free_pinned, cpu);
  const fl_device_ops* ops = pinning_plugin_ops();
  void* ptr = nullptr;
  if (ops != nullptr) {
    if (ops->fl_host_malloc(nbytes, &ptr) != FL_OK) ptr = nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "pinned host allocation of ", nbytes, " bytes failed");
  } else {
    ptr = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "host allocation of ", nbytes, " bytes failed");
  }
  {
    auto& reg = pinned_blocks();
    std::lock_guard lock(reg.mutex);
    reg.blocks[reinterpret_cast<uintptr_t>(ptr)] = nbytes;
  }
  return c10::DataPtr(ptr, new std::pair<void*, const fl_device_ops*>(ptr, ops), &free_pinned, cpu);
}

c10::DeleterFnPtr FlPinnedAllocator::raw_deleter() const { return nullptr; }

void FlPinnedAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool FlPinnedAllocator::is_pinned(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto& reg = pinned_blocks();
  std::lock_guard lock(reg.mutex);
  auto it = reg.blocks.upper_bound(p);
  if (it == reg.blocks.begin()) return false;
  --it;
  return p < it->first + it->second;
}

FlPinnedAllocator& pinned_allocator() {
  static FlPinnedAllocator allocator;
  return allocator;
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &device_allocator());

}  // namespace fl::binding
