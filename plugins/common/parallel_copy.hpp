// parallel_copy.hpp — large host memory copies split over a few threads, for plugins. One
// thread's memmove moves about 5 GB/s: a training shard copied into a CPU-plugin device (tens
// of MB) took as long as its forward pass, and a GPU driver stages pageable uploads at that
// rate. The CPU plugin copies into its devices with it, the CUDA plugin fills its pinned
// upload buffers with it. The helper threads sleep between copies (no spinning beside BLAS
// threads).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace fl::plugin {

class ParallelCopy {
 public:
  // `threads` includes the caller's: threads - 1 helpers are started. Throws when one cannot
  // start (the ones already started are stopped first).
  explicit ParallelCopy(int32_t threads);
  ~ParallelCopy();  // joins the helpers
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;

  // memmove(dst, src, size); copies of at least kMinParallelBytes between regions that do not
  // overlap are split into equal chunks, one per thread (the caller takes one). Thread-safe:
  // concurrent callers (two streams) take turns.
  void copy(void* dst, const void* src, size_t size);

  static constexpr size_t kMinParallelBytes = size_t{4} << 20;
  static constexpr size_t kMinChunkBytes = size_t{1} << 20;

 private:
  struct Job {
    char* dst = nullptr;
    const char* src = nullptr;
    size_t chunk = 0;
    size_t size = 0;
    uint64_t generation = 0;
  };
  void helper_loop(size_t slot);
  void stop();  // stops and joins the helpers
  static void copy_chunk(const Job& job, size_t slot);

  std::mutex turn_;  // one parallel copy at a time
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  Job job_;
  size_t pending_ = 0;  // helpers still copying the current job
  bool stopping_ = false;
  std::vector<std::thread> helpers_;
};

}  // namespace fl::plugin
