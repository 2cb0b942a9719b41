// staging_pool.h — host buffers for copies between devices of different plugins, pinned by
// the plugin that copies out of its device into them, and reused from copy to copy.
#pragma once

#include <plugin_library.h>

#include <cstddef>

namespace fl::binding {

// One staging buffer, held for the duration of one copy; back to the pool when destroyed.
// Not copyable. Thread-safe: each copy takes its own buffer.
class StagingBuffer {
 public:
  StagingBuffer(const fl::PluginLibrary* pinned_by, size_t bytes);
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  void* data() const { return data_; }
  // Whether the memory is page-locked by the plugin (false: it had no fl_host_malloc, or
  // pinning failed, and the buffer is pageable).
  bool pinned() const { return pinned_; }

 private:
  const fl::PluginLibrary* plugin_;
  int exceptions_at_start_ = 0;
  void* data_ = nullptr;
  size_t capacity_ = 0;
  bool pinned_ = false;
};

// Bytes the pool keeps between copies, summed over plugins (for tests and stats).
size_t staging_pool_cached_bytes();

// Frees every cached buffer (torch.fl.empty_cache()).
void staging_pool_release();

}  // namespace fl::binding
