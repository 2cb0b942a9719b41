// pinned_allocator.cpp — the pinned host allocator and its cache (see pinned_allocator.h).
// Thread-safe: one mutex guards the live and free blocks; every plugin call (event queries,
// waits, allocations, frees) runs outside it.
#include "pinned_allocator.h"

#include "fl_context.h"

#include <plugin_library.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace fl::binding {
namespace {

constexpr size_t kMinBlock = 512;

// Work queued on a device that reads or writes a block: done when `event` completes.
struct PendingUse {
  int device;
  fl_event_t event;
};

struct Block {
  void* ptr = nullptr;
  size_t size = 0;                        // the rounded size the block was allocated with
  const fl_device_ops* ops = nullptr;     // the plugin that pinned it; NULL: std::aligned_alloc
  std::vector<PendingUse> uses;
};

struct PinnedCache {
  std::mutex mutex;
  std::map<uintptr_t, Block> live;        // start → block handed out
  std::multimap<size_t, Block> free;      // size → block freed by its tensor, kept for reuse
  size_t free_bytes = 0;
};

PinnedCache& cache() {
  static auto* c = new PinnedCache();  // outlives tensors freed at interpreter exit
  return *c;
}

// Drops the uses whose work has finished (destroying their events); true when none is left.
// A use whose query fails stays: the block is then never reused, and pinned_cache_release
// keeps it unless its wait succeeds. Called without the cache's mutex (it calls the plugin).
bool prune_finished(std::vector<PendingUse>& uses) {
  std::vector<PendingUse> left;
  for (const PendingUse& u : uses) {
    try {
      auto& streams = runtime().streams(u.device);
      if (streams.query_event(u.event)) {
        streams.destroy_event(u.event);
        continue;
      }
    } catch (...) {
    }
    left.push_back(u);
  }
  uses = std::move(left);
  return uses.empty();
}

// Waits for every use and destroys its event; false when a wait failed (the device may still
// be using the block, which must then not be freed).
bool wait_and_destroy(const std::vector<PendingUse>& uses) {
  bool all = true;
  for (const PendingUse& u : uses) {
    try {
      auto& streams = runtime().streams(u.device);
      streams.synchronize_event(u.event);
      streams.destroy_event(u.event);
    } catch (...) {
      all = false;
    }
  }
  return all;
}

void give_back(const Block& b) {
  if (b.ops != nullptr) {
    b.ops->fl_host_free(b.ptr);
  } else {
    std::free(b.ptr);
  }
}

void free_pinned(void* ctx) {
  if (ctx == nullptr) return;
  auto& c = cache();
  std::lock_guard lock(c.mutex);
  auto it = c.live.find(reinterpret_cast<uintptr_t>(ctx));
  if (it == c.live.end()) return;
  Block b = std::move(it->second);
  c.live.erase(it);
  c.free_bytes += b.size;
  c.free.emplace(b.size, std::move(b));
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

void* host_alloc(const fl_device_ops* ops, size_t size) {
  void* ptr = nullptr;
  if (ops != nullptr) {
    if (ops->fl_host_malloc(size, &ptr) != FL_OK) ptr = nullptr;
  } else {
    ptr = std::aligned_alloc(64, size);  // size is a power of two >= 512
  }
  return ptr;
}

// A new block; when the plugin has no memory left, the cached free blocks are given back
// first (after the device work recorded on them) and the allocation is tried once more.
Block fresh_block(size_t size) {
  Block b;
  b.size = size;
  b.ops = pinning_plugin_ops();
  b.ptr = host_alloc(b.ops, size);
  if (b.ptr == nullptr) {
    pinned_cache_release();
    b.ptr = host_alloc(b.ops, size);
  }
  TORCH_CHECK_WITH(OutOfMemoryError, b.ptr != nullptr, b.ops != nullptr ? "pinned host" : "host",
                   " allocation of ", size, " bytes failed (", pinned_cached_bytes(), " bytes still cached, in use by a device)");
  return b;
}

}  // namespace

c10::DataPtr FlPinnedAllocator::allocate(size_t nbytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &free_pinned, cpu);
  const size_t size = std::bit_ceil(std::max(nbytes, kMinBlock));
  auto& c = cache();
  // The oldest free block of the size (blocks of one size are freed and queued in order, so a
  // newer one is rarely done when the oldest is not): taken out, its uses checked outside the
  // mutex, and put back if the device still uses it.
  Block b;
  {
    std::lock_guard lock(c.mutex);
    auto it = c.free.find(size);
    if (it != c.free.end()) {
      b = std::move(it->second);
      c.free.erase(it);
      c.free_bytes -= size;
    }
  }
  if (b.ptr != nullptr && !prune_finished(b.uses)) {
    std::lock_guard lock(c.mutex);
    c.free_bytes += size;
    c.free.emplace(size, std::move(b));
    b = Block{};
  }
  if (b.ptr == nullptr) b = fresh_block(size);
  void* ptr = b.ptr;
  {
    std::lock_guard lock(c.mutex);
    c.live.emplace(reinterpret_cast<uintptr_t>(ptr), std::move(b));
  }
  return c10::DataPtr(ptr, ptr, &free_pinned, cpu);
}

c10::DeleterFnPtr FlPinnedAllocator::raw_deleter() const { return nullptr; }

void FlPinnedAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool FlPinnedAllocator::is_pinned(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto& c = cache();
  std::lock_guard lock(c.mutex);
  auto it = c.live.upper_bound(p);
  if (it == c.live.begin()) return false;
  --it;
  return p < it->first + it->second.size;
}

FlPinnedAllocator& pinned_allocator() {
  static FlPinnedAllocator allocator;
  return allocator;
}

bool keep_pinned_until_done(const void* ptr, int device) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto& c = cache();
  uintptr_t start = 0;
  {
    std::lock_guard lock(c.mutex);
    auto it = c.live.upper_bound(p);
    if (it == c.live.begin()) return false;
    --it;
    if (p >= it->first + it->second.size) return false;
    start = it->first;
  }
  auto& streams = runtime().streams(device);
  fl_event_t event = streams.create_event(false);
  try {
    streams.record(event, streams.current());
  } catch (...) {
    streams.destroy_event(event);
    throw;
  }
  // The caller holds a tensor of the block, so it stays live. A long-lived buffer used by every
  // step keeps only the uses not yet finished (checked outside the mutex).
  std::vector<PendingUse> uses;
  {
    std::lock_guard lock(c.mutex);
    uses.swap(c.live.at(start).uses);
  }
  prune_finished(uses);
  uses.push_back({device, event});
  std::lock_guard lock(c.mutex);
  auto& kept = c.live.at(start).uses;
  kept.insert(kept.end(), uses.begin(), uses.end());
  return true;
}

void pinned_cache_release() {
  auto& c = cache();
  std::vector<Block> blocks;
  {
    std::lock_guard lock(c.mutex);
    for (auto& [size, b] : c.free) blocks.push_back(std::move(b));
    c.free.clear();
    c.free_bytes = 0;
  }
  for (const Block& b : blocks) {
    // A block whose wait failed is kept out of reach (leaked), not freed under the device.
    if (wait_and_destroy(b.uses)) give_back(b);
  }
}

size_t pinned_cached_bytes() {
  auto& c = cache();
  std::lock_guard lock(c.mutex);
  return c.free_bytes;
}

}  // namespace fl::binding
