#include "parallel_copy.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

namespace fl::plugin {

ParallelCopy::ParallelCopy(int32_t threads) {
  try {
    for (int32_t slot = 1; slot < threads; ++slot)
      helpers_.emplace_back([this, slot] { helper_loop(static_cast<size_t>(slot)); });
  } catch (...) {
    stop();  // joinable threads destroyed unjoined would terminate the process
    throw;
  }
}

ParallelCopy::~ParallelCopy() { stop(); }

void ParallelCopy::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& t : helpers_) t.join();
  helpers_.clear();
}

void ParallelCopy::copy_chunk(const Job& job, size_t slot) {
  size_t begin = slot * job.chunk;
  if (begin >= job.size) return;
  std::memcpy(job.dst + begin, job.src + begin, std::min(job.chunk, job.size - begin));
}

void ParallelCopy::copy(void* dst, const void* src, size_t size) {
  if (size == 0) return;  // dst and src may be NULL then (memmove's are declared non-null)
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // std::less gives a total order over unrelated pointers.
  bool overlap = std::less<const char*>()(s, d + size) && std::less<const char*>()(d, s + size);
  size_t threads = helpers_.size() + 1;
  if (helpers_.empty() || overlap || size < kMinParallelBytes) {
    std::memmove(dst, src, size);
    return;
  }
  size_t chunk = std::max(kMinChunkBytes, (size + threads - 1) / threads);
  std::lock_guard<std::mutex> turn(turn_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_.dst = d;
    job_.src = s;
    job_.chunk = chunk;
    job_.size = size;
    ++job_.generation;
    pending_ = helpers_.size();
  }
  start_.notify_all();
  copy_chunk(job_, 0);  // the caller's share; job_ is not changed until every helper is done
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
}

void ParallelCopy::helper_loop(size_t slot) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return stopping_ || job_.generation != seen; });
    // A job posted before the stop is still done: its caller waits for every helper's part.
    if (job_.generation == seen) return;
    seen = job_.generation;
    Job job = job_;
    lock.unlock();
    copy_chunk(job, slot);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace fl::plugin
