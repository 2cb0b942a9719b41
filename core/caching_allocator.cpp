#include "caching_allocator.h"

#include "error.h"
#include "log.h"

#include <fmt/format.h>

#include <algorithm>

namespace fl {
namespace {

size_t round_size(size_t size) {
  if (size < CachingAllocator::kRound) return CachingAllocator::kRound;
  return (size + CachingAllocator::kRound - 1) / CachingAllocator::kRound * CachingAllocator::kRound;
}

std::string human(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) { v /= 1024.0; ++u; }
  return fmt::format("{:.2f} {}", v, units[u]);
}

// Bytes fl_malloc is asked for when a request of `rounded` bytes needs a new segment.
size_t segment_size(size_t rounded, bool small) {
  return small ? CachingAllocator::kSmallSegment
               : (rounded + CachingAllocator::kLargeRound - 1) / CachingAllocator::kLargeRound *
                     CachingAllocator::kLargeRound;
}

}  // namespace

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<fl_stream_t>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<void*>()(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(std::string device_name, DeviceMemoryBackend backend,
                                   uint64_t total_memory, double memory_fraction)
    : device_name_(std::move(device_name)), backend_(std::move(backend)),
      total_memory_(total_memory), memory_fraction_(memory_fraction) {
  set_memory_fraction(memory_fraction);
}

CachingAllocator::~CachingAllocator() {
  // Cached (fully free) segments go back to the plugin after a device synchronize; segments
  // that still hold live blocks belong to tensors that outlive us (process exit) and are
  // left to the plugin's shutdown. Every bookkeeping Block is deleted.
  std::lock_guard lock(mutex_);
  try {
    release_cached_segments();
  } catch (const std::exception& e) {
    log().warn("allocator {}: returning the cache at destruction failed: {}", device_name_, e.what());
  } catch (...) {
  }
  try {
    for (auto& [event, block] : pending_)
      if (backend_.destroy_event) backend_.destroy_event(event);
  } catch (...) {
  }
  std::set<Block*> blocks;
  for (auto& [event, block] : pending_) blocks.insert(block);
  pending_.clear();
  for (Pool* pool : {&small_pool_, &large_pool_})
    for (Block* b : *pool) blocks.insert(b);
  for (auto& [ptr, block] : live_) blocks.insert(block);
  for (Block* b : blocks) delete b;
}

void CachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    throw ConfigError(fmt::format("memory_fraction must be in (0, 1], got {}", fraction));
  std::lock_guard lock(mutex_);
  memory_fraction_ = fraction;
  stats_.limit_bytes = fraction >= 1.0 ? 0 : static_cast<uint64_t>(fraction * total_memory_);
}

double CachingAllocator::memory_fraction() const {
  std::lock_guard lock(mutex_);
  return memory_fraction_;
}

CachingAllocator::Block* CachingAllocator::find_free(Pool& pool, size_t size, fl_stream_t stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t size, bool small,
                                                       fl_stream_t stream) {
  const size_t seg = segment_size(size, small);
  if (stats_.limit_bytes != 0 && stats_.reserved_bytes + seg > stats_.limit_bytes) return nullptr;
  void* ptr = nullptr;
  fl_status_t st = backend_.malloc(seg, &ptr);
  if (st != FL_OK || ptr == nullptr) {
    log().debug("allocator {}: fl_malloc({}) failed: {}", device_name_, seg,
                backend_.last_error ? backend_.last_error() : std::string());
    return nullptr;
  }
  auto* b = new Block;
  b->ptr = ptr;
  b->size = seg;
  b->stream = stream;
  b->small = small;
  b->segment_head = true;
  stats_.reserved_bytes += seg;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  stats_.num_segments++;
  stats_.num_device_mallocs++;
  return b;
}

CachingAllocator::Block* CachingAllocator::split(Block* block, size_t size) {
  const size_t rest = block->size - size;
  const bool worth = block->small ? rest >= kRound : rest > kSmallRequest;
  if (!worth) return block;
  auto* tail = new Block;
  tail->ptr = static_cast<char*>(block->ptr) + size;
  tail->size = rest;
  tail->stream = block->stream;
  tail->small = block->small;
  tail->prev = block;
  tail->next = block->next;
  if (block->next) block->next->prev = tail;
  block->next = tail;
  block->size = size;
  pool_of(tail).insert(tail);
  return block;
}

void* CachingAllocator::allocate(size_t size, fl_stream_t stream) {
  if (size == 0) return nullptr;
  const size_t rounded = round_size(size);
  const bool small = rounded <= kSmallRequest;
  std::lock_guard lock(mutex_);
  process_pending_events();
  Pool& pool = small ? small_pool_ : large_pool_;
  Block* b = find_free(pool, rounded, stream);
  if (b == nullptr) b = new_segment(rounded, small, stream);
  if (b == nullptr) {
    // Free the cache and retry once, as PyTorch does.
    stats_.num_cache_flushes++;
    release_cached_segments();
    b = new_segment(rounded, small, stream);
  }
  if (b == nullptr) {
    stats_.num_ooms++;
    // The cap applies to the segment that would be reserved, not to the request alone.
    const bool capped = stats_.limit_bytes != 0 &&
                        stats_.reserved_bytes + segment_size(rounded, small) > stats_.limit_bytes;
    throw OutOfMemoryError(oom_message(size, capped ? "the memory_fraction cap is reached"
                                                    : "the device has no room"));
  }
  b = split(b, rounded);
  b->allocated = true;
  b->requested = size;
  b->used_on.clear();
  live_[b->ptr] = b;
  stats_.allocated_bytes += b->size;
  stats_.requested_bytes += size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.num_allocs++;
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end())
    throw Error(fmt::format("allocator {}: free of a pointer it does not own ({})", device_name_, ptr));
  Block* b = it->second;
  live_.erase(it);
  b->allocated = false;
  stats_.allocated_bytes -= b->size;
  stats_.requested_bytes -= b->requested;
  stats_.num_frees++;
  if (!b->used_on.empty()) {
    if (backend_.record_event) {
      for (fl_stream_t s : b->used_on) {
        pending_.emplace_back(backend_.record_event(s), b);
        b->pending_events++;
      }
      b->used_on.clear();
      return;
    }
    backend_.synchronize();
    b->used_on.clear();
  }
  release_block(b);
}

void CachingAllocator::record_stream(void* ptr, fl_stream_t stream) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours (e.g. a view's offset); nothing to track
  if (stream != it->second->stream) it->second->used_on.insert(stream);
}

void CachingAllocator::process_pending_events() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (backend_.event_done(it->first)) {
      backend_.destroy_event(it->first);
      Block* b = it->second;
      it = pending_.erase(it);
      if (--b->pending_events == 0) release_block(b);
    } else {
      ++it;
    }
  }
}

void CachingAllocator::release_block(Block* b) {
  Pool& pool = pool_of(b);
  for (Block* n : {b->prev, b->next}) {
    if (n == nullptr || n->allocated || n->pending_events > 0) continue;
    pool.erase(n);
    if (n == b->prev) {
      n->size += b->size;
      n->next = b->next;
      if (b->next) b->next->prev = n;
      delete b;
      b = n;
    } else {
      b->size += n->size;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      delete n;
    }
  }
  pool.insert(b);
}

void CachingAllocator::release_cached_segments() {
  // Wait for deferred blocks first so they can be released too.
  if (!pending_.empty() || !small_pool_.empty() || !large_pool_.empty()) backend_.synchronize();
  process_pending_events();
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->segment_head && b->next == nullptr) {
        it = pool->erase(it);
        backend_.free(b->ptr);
        stats_.reserved_bytes -= b->size;
        stats_.num_segments--;
        stats_.num_device_frees++;
        delete b;
      } else {
        ++it;
      }
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

size_t CachingAllocator::block_size(void* ptr) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second->size;
}

std::string CachingAllocator::oom_message(size_t size, const std::string& why) const {
  const uint64_t limit = stats_.limit_bytes != 0 ? stats_.limit_bytes : total_memory_;
  return fmt::format(
      "{}: out of memory trying to allocate {} ({}). Allocated {}, reserved {} by the caching "
      "allocator, requested {}; limit {} (memory_fraction {} of {}). Free tensors or call "
      "torch.fl.empty_cache(); lower the batch size; or raise memory_fraction in the config.",
      device_name_, human(size), why, human(stats_.allocated_bytes), human(stats_.reserved_bytes),
      human(stats_.requested_bytes), human(limit), memory_fraction_, human(total_memory_));
}

}  // namespace fl
