// parallel_copy.hpp — large host memory copies split over a few threads. One thread's memmove
// moves about 5 GB/s; a training shard copied into a CPU-plugin device (tens of MB) then took
// as long as its forward pass. The helper threads sleep between copies (no spinning beside
// the BLAS threads), and a stream runs one copy at a time, so they never share cores with
// that stream's kernels.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace fl::cpu {

class ParallelCopy {
 public:
  // `threads` includes the caller's: threads - 1 helpers are started.
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

}  // namespace fl::cpu
