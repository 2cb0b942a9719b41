// caching_allocator.h — the per-device caching allocator over a plugin's raw fl_malloc.
//
// Policy (after PyTorch's CUDACachingAllocator, reduced to its core):
//   - sizes are rounded up to 512 bytes; requests up to 1 MiB come from 2 MiB segments
//     ("small pool"), larger ones get segments of their own size rounded to 2 MiB
//     ("large pool"); a free block is split when the rest is worth keeping;
//   - freed blocks return to the pool of the stream they were allocated on and are reused
//     only by that stream (work on one stream is ordered, so no sync is needed); a block
//     also used on other streams (record_stream) waits for events on those streams before
//     it is reused;
//   - neighbouring free blocks of one segment are merged;
//   - `memory_fraction` caps reserved bytes at fraction × the device's total memory;
//   - when fl_malloc fails or the cap is hit, the whole cache is released (after a device
//     synchronize) and the allocation retried once; then OutOfMemoryError with the stats.
// Thread-safe (one mutex per device).
#pragma once

#include <fl_abi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace fl {

struct AllocatorStats {
  uint64_t allocated_bytes = 0;       // handed out now (rounded sizes)
  uint64_t requested_bytes = 0;       // handed out now (as requested)
  uint64_t reserved_bytes = 0;        // obtained from the plugin now
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
  uint64_t num_segments = 0;          // live fl_malloc blocks
  uint64_t num_device_mallocs = 0;    // fl_malloc calls so far
  uint64_t num_device_frees = 0;
  uint64_t num_ooms = 0;
  uint64_t num_cache_flushes = 0;     // times the cache was released to satisfy a request
  uint64_t limit_bytes = 0;           // memory_fraction × total (0 = none)
};

// What the allocator needs from a device, so tests can drive it with fakes.
struct DeviceMemoryBackend {
  std::function<fl_status_t(size_t, void**)> malloc;   // fl_malloc on the device
  std::function<void(void*)> free;                     // fl_free
  std::function<void()> synchronize;                   // device_synchronize
  // Event helpers for cross-stream reuse; may be empty (then record_stream syncs the device).
  std::function<fl_event_t(fl_stream_t)> record_event;  // create + record on stream
  std::function<bool(fl_event_t)> event_done;           // query
  std::function<void(fl_event_t)> destroy_event;
  std::function<std::string()> last_error;
};

class CachingAllocator {
 public:
  CachingAllocator(std::string device_name, DeviceMemoryBackend backend, uint64_t total_memory,
                   double memory_fraction);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns nullptr for size 0. Throws OutOfMemoryError (message with stats) when full.
  void* allocate(size_t size, fl_stream_t stream);
  // Returns a block; nullptr is a no-op. Throws fl::Error for a pointer it does not own.
  void deallocate(void* ptr);
  // The block at `ptr` is also used by work on `stream` (record-stream semantics).
  void record_stream(void* ptr, fl_stream_t stream);
  // Releases every fully free segment back to the plugin (synchronizes the device first).
  void empty_cache();

  AllocatorStats stats() const;
  void reset_peak_stats();
  void set_memory_fraction(double fraction);
  double memory_fraction() const;
  size_t block_size(void* ptr) const;  // rounded size of a live allocation (0 if unknown)

  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallRequest = 1 << 20;   // <= 1 MiB → small pool
  static constexpr size_t kSmallSegment = 2 << 20;   // 2 MiB segments for the small pool
  static constexpr size_t kLargeRound = 2 << 20;

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    size_t requested = 0;
    fl_stream_t stream = nullptr;
    bool allocated = false;
    bool small = false;
    bool segment_head = false;   // this block starts an fl_malloc'ed segment
    Block* prev = nullptr;       // neighbours inside the segment
    Block* next = nullptr;
    std::set<fl_stream_t> used_on;   // other streams (record_stream)
    int pending_events = 0;
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  Block* find_free(Pool& pool, size_t size, fl_stream_t stream);
  Block* new_segment(size_t size, bool small, fl_stream_t stream);
  Block* split(Block* block, size_t size);
  void release_block(Block* block);          // to its pool, merging neighbours
  void release_cached_segments();           // lock held
  void process_pending_events();            // lock held
  std::string oom_message(size_t size, const std::string& why) const;
  Pool& pool_of(const Block* b) { return b->small ? small_pool_ : large_pool_; }

  std::string device_name_;
  DeviceMemoryBackend backend_;
  uint64_t total_memory_;
  double memory_fraction_;
  mutable std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  std::unordered_map<void*, Block*> live_;
  std::vector<std::pair<fl_event_t, Block*>> pending_;
  AllocatorStats stats_;
};

}  // namespace fl
