// parallel_copy.hpp — large host memory copies split over a few threads, for plugins. One
// thread's memmove moves about 5 GB/s: a training shard copied into a CPU-plugin device (tens
// of MB) took as long as its forward pass, and a GPU driver stages pageable uploads at that
// rate. The CPU plugin copies into its devices with it, the CUDA plugin fills its pinned
// upload buffers with it. The helper threads sleep between copies (no spinning beside BLAS
// threads).
#pragma once

#include "parallel_for.hpp"

#include <cstddef>
#include <cstdint>

namespace fl::plugin {

class ParallelCopy {
 public:
  // `threads` includes the caller's: threads - 1 helpers are started. Throws when one cannot
  // start (the ones already started are stopped first).
  explicit ParallelCopy(int32_t threads) : team_(threads) {}
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;

  // memmove(dst, src, size); copies of at least kMinParallelBytes between regions that do not
  // overlap are split into near-equal chunks of at least kMinChunkBytes (ParallelFor: up to
  // kChunksPerThread per thread, the caller taking its share). Thread-safe: concurrent callers
  // (two streams) take turns.
  void copy(void* dst, const void* src, size_t size);

  static constexpr size_t kMinParallelBytes = size_t{4} << 20;
  static constexpr size_t kMinChunkBytes = size_t{1} << 20;

 private:
  ParallelFor team_;
};

}  // namespace fl::plugin
