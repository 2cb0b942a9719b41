#include "stream_queue.hpp"

#include <plugin_support.hpp>

#include <exception>

namespace fl::cpu {

namespace {
// Iterations a waiter spins on the completion counter before sleeping on the condvar: small
// ops finish within a few microseconds, and a futex sleep/wake round trip costs more.
constexpr int kSpinIterations = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

StreamQueue::StreamQueue(int32_t device) : device_(device) {
  worker_ = std::thread([this] { worker_loop(); });
}

StreamQueue::~StreamQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_one();
  if (worker_.joinable()) worker_.join();
}

uint64_t StreamQueue::enqueue(Work work) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
    ticket = ++submitted_;
  }
  work_ready_.notify_one();
  return ticket;
}

void StreamQueue::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    Work work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::string failure;
    try {
      work();
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "unknown error";
    } catch (...) {
      failure = "unknown exception in asynchronous work";
    }
    work = nullptr;  // release captured state outside the lock
    lock.lock();
    if (!failure.empty() && !has_error_) {
      has_error_ = true;
      error_ = std::move(failure);
    }
    completed_.store(completed_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    if (waiters_ > 0) work_done_.notify_all();
  }
}

void StreamQueue::wait_for(uint64_t ticket) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (completed_.load(std::memory_order_acquire) >= ticket) return;
    cpu_relax();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  ++waiters_;
  work_done_.wait(lock, [&] { return completed_.load(std::memory_order_acquire) >= ticket; });
  --waiters_;
}

void StreamQueue::throw_stored_error() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!has_error_) return;
    message = std::move(error_);
    error_.clear();
    has_error_ = false;
  }
  plugin::raise(FL_ERR_DEVICE, "asynchronous work on an fl cpu stream failed: " + message);
}

void StreamQueue::synchronize() {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = submitted_;
  }
  wait_for(ticket);
  throw_stored_error();
}

bool StreamQueue::query() {
  bool done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done = completed_.load(std::memory_order_acquire) >= submitted_;
  }
  throw_stored_error();
  return done;
}

}  // namespace fl::cpu
