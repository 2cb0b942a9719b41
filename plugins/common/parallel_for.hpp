// parallel_for.hpp — a small team of host threads that runs one loop at a time split into
// contiguous parts, for plugins. The CPU plugin runs its elementwise, softmax and reduction
// loops on it (before, only OpenBLAS and large copies used more than one core: on a 16-core
// host a log_softmax of 4096x10 took 0.5 ms and relu's backward 0.3 ms on the stream's one
// thread); ParallelCopy splits large copies on it. The helpers sleep between loops (no
// spinning beside BLAS threads).
//
// Each chunk is a contiguous range of the loop: a kernel that computes each output element from
// its own inputs gives the same bits whatever the split and whichever thread runs a chunk
// (reductions split over their outputs, never inside one output's sum).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fl::plugin {

class ParallelFor {
 public:
  // `threads` includes the caller's: threads - 1 helpers are started (none for 1). Throws when
  // one cannot start (the ones already started are stopped first).
  explicit ParallelFor(int32_t threads);
  ~ParallelFor();  // joins the helpers
  ParallelFor(const ParallelFor&) = delete;
  ParallelFor& operator=(const ParallelFor&) = delete;

  int32_t threads() const { return static_cast<int32_t>(helpers_.size()) + 1; }

  // Calls body(begin, end) over [0, n) cut into contiguous chunks: as many as n / grain allows
  // (at least one), at most kChunksPerThread per thread, of near-equal sizes. The caller and
  // the helpers that wake in time claim the chunks one at a time, so a helper the OS has not
  // scheduled yet (a host with fewer free cores than threads) delays nothing: the others take
  // its chunks. Returns when every chunk is done; rethrows the first exception a chunk threw
  // (the chunks not yet claimed then still run). Thread-safe: concurrent callers (two
  // streams) take turns; a call from inside a body (a nested loop) runs its whole range on
  // the calling thread.
  void for_range(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

  static constexpr int64_t kChunksPerThread = 4;

 private:
  struct Job {
    const std::function<void(int64_t, int64_t)>* body = nullptr;
    int64_t n = 0;
    int64_t chunks = 0;
    uint64_t generation = 0;
    bool open = false;  // helpers may still join (false once the caller has claimed the last chunk)
  };
  void helper_loop();
  void stop();  // stops and joins the helpers
  // Claims and runs chunks of `job` until none is left; records the first exception.
  void run_chunks(const Job& job);

  std::mutex turn_;  // one loop at a time
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  Job job_;
  std::atomic<int64_t> next_chunk_{0};  // of the current job; helpers use it only while joined
  int64_t joined_ = 0;        // helpers running chunks of the current job
  std::exception_ptr error_;  // the first a chunk threw in the current job
  bool stopping_ = false;
  std::vector<std::thread> helpers_;
};

}  // namespace fl::plugin
