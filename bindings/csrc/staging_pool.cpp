// staging_pool.cpp — a small cache of pinned host buffers per plugin. Pinning is slow
// (cudaHostAlloc of tens of MB takes milliseconds), so buffers are kept after a copy: sizes are
// rounded up to a power of two (at least 1 MiB), and at most kMaxCachedBytes stay cached in
// all; a buffer beyond that is freed when its copy ends. A copy larger than the cap gets
// pageable memory (pinning and unpinning that much for one copy costs more than it saves).
#include "staging_pool.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

namespace fl::binding {
namespace {

constexpr size_t kMinBytes = size_t{1} << 20;
constexpr size_t kMaxCachedBytes = size_t{256} << 20;

struct Block {
  void* data;
  size_t capacity;
  bool pinned;
};

struct Pool {
  std::mutex mutex;
  std::map<const fl::PluginLibrary*, std::vector<Block>> free;
  size_t cached = 0;
};

// Never destroyed: buffers may be returned while static destructors run at exit, and the
// plugins that pinned them are not unloaded before then.
Pool& pool() {
  static auto* p = new Pool();
  return *p;
}

size_t round_up(size_t bytes) {
  size_t capacity = kMinBytes;
  while (capacity < bytes) capacity <<= 1;
  return capacity;
}

Block allocate(const fl::PluginLibrary* plugin, size_t capacity) {
  const bool pin = plugin != nullptr && capacity <= kMaxCachedBytes;
  auto host_malloc = pin ? plugin->entry(&fl_device_ops::fl_host_malloc) : nullptr;
  auto host_free = plugin != nullptr ? plugin->entry(&fl_device_ops::fl_host_free) : nullptr;
  void* data = nullptr;
  if (host_malloc != nullptr && host_free != nullptr && host_malloc(capacity, &data) == FL_OK && data != nullptr)
    return {data, capacity, true};
  data = std::aligned_alloc(64, capacity);
  TORCH_CHECK_WITH(OutOfMemoryError, data != nullptr, "copy: no host memory for a staging buffer of ", capacity,
                   " bytes");
  return {data, capacity, false};
}

void release(const fl::PluginLibrary* plugin, const Block& b) {
  if (b.pinned) {
    plugin->entry(&fl_device_ops::fl_host_free)(b.data);
  } else {
    std::free(b.data);
  }
}

// The smallest cached buffer of `plugin` that holds `capacity` bytes, else a new one.
Block acquire(const fl::PluginLibrary* plugin, size_t capacity) {
  {
    auto& p = pool();
    std::lock_guard lock(p.mutex);
    auto& blocks = p.free[plugin];
    auto best = blocks.end();
    for (auto it = blocks.begin(); it != blocks.end(); ++it)
      if (it->capacity >= capacity && (best == blocks.end() || it->capacity < best->capacity)) best = it;
    if (best != blocks.end()) {
      const Block b = *best;
      p.cached -= b.capacity;
      blocks.erase(best);
      return b;
    }
  }
  return allocate(plugin, capacity);
}

}  // namespace

StagingBuffer::StagingBuffer(const fl::PluginLibrary* pinned_by, size_t bytes)
    : plugin_(pinned_by), exceptions_at_start_(std::uncaught_exceptions()) {
  const Block b = acquire(plugin_, round_up(bytes));
  data_ = b.data;
  capacity_ = b.capacity;
  pinned_ = b.pinned;
}

StagingBuffer::~StagingBuffer() {
  const Block b{data_, capacity_, pinned_};
  // Unwinding from a failed copy: an asynchronous copy may still write the buffer, so it is
  // not handed to the next copy (freeing it is the plugin's business: its host_free waits).
  if (std::uncaught_exceptions() > exceptions_at_start_) {
    release(plugin_, b);
    return;
  }
  {
    auto& p = pool();
    std::lock_guard lock(p.mutex);
    if (p.cached + capacity_ <= kMaxCachedBytes) {
      p.free[plugin_].push_back(b);
      p.cached += capacity_;
      return;
    }
  }
  release(plugin_, b);
}

void staging_pool_release() {
  std::map<const fl::PluginLibrary*, std::vector<Block>> blocks;
  {
    auto& p = pool();
    std::lock_guard lock(p.mutex);
    blocks.swap(p.free);
    p.cached = 0;
  }
  for (const auto& [plugin, list] : blocks)
    for (const Block& b : list) release(plugin, b);
}

size_t staging_pool_cached_bytes() {
  auto& p = pool();
  std::lock_guard lock(p.mutex);
  return p.cached;
}

}  // namespace fl::binding
