#include "parallel_for.hpp"

#include <algorithm>

namespace fl::plugin {

namespace {
// Set on a thread while it runs a chunk, so that a nested loop runs inline instead of waiting
// for the turn its own caller holds.
thread_local bool in_chunk = false;

struct ChunkScope {
  ChunkScope() { in_chunk = true; }
  ~ChunkScope() { in_chunk = false; }
};
}  // namespace

ParallelFor::ParallelFor(int32_t threads) {
  try {
    for (int32_t slot = 1; slot < threads; ++slot) helpers_.emplace_back([this] { helper_loop(); });
  } catch (...) {
    stop();  // joinable threads destroyed unjoined would terminate the process
    throw;
  }
}

ParallelFor::~ParallelFor() { stop(); }

void ParallelFor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& t : helpers_) t.join();
  helpers_.clear();
}

void ParallelFor::run_chunks(const Job& job) {
  // Near-equal chunks; the first n % chunks hold one more.
  const int64_t base = job.n / job.chunks, extra = job.n % job.chunks;
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.chunks) return;
    const int64_t begin = c * base + std::min(c, extra);
    const int64_t end = begin + base + (c < extra ? 1 : 0);
    try {
      ChunkScope scope;
      (*job.body)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ParallelFor::for_range(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t chunks = std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, kChunksPerThread * threads());
  if (chunks == 1 || helpers_.empty() || in_chunk) {
    body(0, n);
    return;
  }
  std::lock_guard<std::mutex> turn(turn_);
  Job job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_.body = &body;
    job_.n = n;
    job_.chunks = chunks;
    ++job_.generation;
    job_.open = true;
    next_chunk_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    job = job_;
  }
  // Wake as many helpers as there are chunks besides the caller's first.
  if (chunks - 1 >= static_cast<int64_t>(helpers_.size())) {
    start_.notify_all();
  } else {
    for (int64_t k = 1; k < chunks; ++k) start_.notify_one();
  }
  run_chunks(job);
  // Every chunk is claimed: close the job to helpers that wake now, and wait for those that
  // joined it to finish theirs.
  std::unique_lock<std::mutex> lock(mutex_);
  job_.open = false;
  done_.wait(lock, [this] { return joined_ == 0; });
  std::exception_ptr error = error_;
  error_ = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

void ParallelFor::helper_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return stopping_ || (job_.open && job_.generation != seen); });
    if (!(job_.open && job_.generation != seen)) return;  // stopping, and no open job left
    seen = job_.generation;
    ++joined_;
    Job job = job_;
    lock.unlock();
    run_chunks(job);
    lock.lock();
    if (--joined_ == 0) done_.notify_one();
  }
}

}  // namespace fl::plugin
