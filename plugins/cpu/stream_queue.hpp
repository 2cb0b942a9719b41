// stream_queue.hpp — one FIFO of host closures run in order by its own worker thread: the CPU
// plugin's stream. Errors thrown by a closure are stored (first one wins) and reported by the
// next synchronize/query; later closures still run.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fl::cpu {

using Work = std::function<void()>;

class StreamQueue {
 public:
  explicit StreamQueue(int32_t device);
  ~StreamQueue();  // drains the queue, then joins the worker
  StreamQueue(const StreamQueue&) = delete;
  StreamQueue& operator=(const StreamQueue&) = delete;

  int32_t device() const { return device_; }

  // Appends work; returns its ticket (1, 2, ...). Cheap: one lock, one notify.
  uint64_t enqueue(Work work);
  // Blocks until every closure with ticket <= `ticket` has run. Does not report errors.
  void wait_for(uint64_t ticket);
  // Blocks until all work enqueued so far has run; then throws (PluginError, FL_ERR_DEVICE)
  // with the stored async error, if any, and clears it.
  void synchronize();
  // True when all work enqueued so far has run; throws a stored error like synchronize().
  bool query();

 private:
  void worker_loop();
  void throw_stored_error();  // takes the mutex itself

  const int32_t device_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<Work> queue_;
  uint64_t submitted_ = 0;
  std::atomic<uint64_t> completed_{0};
  int waiters_ = 0;
  bool stopping_ = false;
  bool has_error_ = false;
  std::string error_;
  std::thread worker_;
};

}  // namespace fl::cpu
