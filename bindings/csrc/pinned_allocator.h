// pinned_allocator.h — host memory for fast copies (`tensor.pin_memory()`, DataLoader's
// pin_memory): page-locked by a plugin when one offers it, cached like PyTorch's CUDA host
// allocator, and kept alive for the asynchronous copies queued from or into it.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>

namespace fl::binding {

// Blocks are rounded up to a power of two and kept after free, so a loader that pins a batch
// per step pins host memory once, not per step. A freed block is reused only when the device
// work recorded on it (keep_pinned_until_done) has finished; until then a new one is taken.
class FlPinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  // True for a pointer inside a block handed out and not yet freed.
  bool is_pinned(const void* ptr) const;
};

FlPinnedAllocator& pinned_allocator();

// Records that the work queued so far on the current stream of fl device `device` reads or
// writes the pinned block holding `ptr` (an asynchronous copy): the block is not reused, nor
// given back to its plugin, before that work has finished. Call it after queueing the copy.
// Returns false, recording nothing, when `ptr` is not inside a live pinned block.
bool keep_pinned_until_done(const void* ptr, int device);

// Gives the cached free blocks back to their plugin (waiting for the device work recorded on
// them first); part of torch.fl.empty_cache().
void pinned_cache_release();

// Bytes of pinned blocks held in the cache, free for reuse (not counting live ones).
size_t pinned_cached_bytes();

}  // namespace fl::binding
