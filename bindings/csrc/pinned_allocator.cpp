// pinned_allocator.cpp — the pinned host allocator and its cache (see pinned_allocator.h).
// Thread-safe: one mutex guards the live and free blocks; the plugin's event queries run
// under it (they never block), its waits and frees outside it.
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
// A use whose query fails stays: the block is then never reused, only released by
// pinned_cache_release, which waits for it.
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

void wait_and_destroy(const std::vector<PendingUse>& uses) {
  for (const PendingUse& u : uses) {
    try {
      auto& streams = runtime().streams(u.device);
      streams.synchronize_event(u.event);
      streams.destroy_event(u.event);
    } catch (...) {
      // Called from empty_cache's release; a failed wait leaves the event, not the process.
    }
  }
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

Block fresh_block(size_t size) {
  Block b;
  b.size = size;
  b.ops = pinning_plugin_ops();
  if (b.ops != nullptr) {
    if (b.ops->fl_host_malloc(size, &b.ptr) != FL_OK) b.ptr = nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, b.ptr != nullptr, "pinned host allocation of ", size, " bytes failed");
  } else {
    b.ptr = std::aligned_alloc(64, size);  // size is a power of two >= 512
    TORCH_CHECK_WITH(OutOfMemoryError, b.ptr != nullptr, "host allocation of ", size, " bytes failed");
  }
  return b;
}

}  // namespace

c10::DataPtr FlPinnedAllocator::allocate(size_t nbytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &free_pinned, cpu);
  const size_t size = std::bit_ceil(std::max(nbytes, kMinBlock));
  auto& c = cache();
  Block b;
  {
    std::lock_guard lock(c.mutex);
    auto [lo, hi] = c.free.equal_range(size);
    for (auto it = lo; it != hi; ++it) {
      if (prune_finished(it->second.uses)) {
        b = std::move(it->second);
        c.free.erase(it);
        c.free_bytes -= size;
        break;
      }
    }
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
  std::lock_guard lock(c.mutex);
  // The caller holds a tensor of the block, so it is still live; a long-lived buffer used by
  // every step keeps only the uses not yet finished.
  Block& b = c.live.at(start);
  prune_finished(b.uses);
  b.uses.push_back({device, event});
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
    wait_and_destroy(b.uses);
    give_back(b);
  }
}

size_t pinned_cached_bytes() {
  auto& c = cache();
  std::lock_guard lock(c.mutex);
  return c.free_bytes;
}

}  // namespace fl::binding
