// cpu_runtime.hpp — the CPU plugin's process-wide state: logical devices over host memory,
// their streams (one worker thread each) and events, and memory accounting.
#pragma once

#include <parallel_copy.hpp>
#include <parallel_for.hpp>
#include "stream_queue.hpp"

#include <fl_abi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace fl::cpu {

// One recording of an event: completes when its stream's worker reaches the marker.
struct EventCapture {
  std::atomic<int> done{0};
  std::chrono::steady_clock::time_point when{};
};

struct Event {
  int32_t device = 0;
  uint32_t flags = 0;
  std::mutex mutex;
  std::shared_ptr<EventCapture> capture;  // null: never recorded (counts as complete)
};

struct Device {
  int32_t index = 0;
  std::atomic<uint64_t> bytes_in_use{0};
  std::mutex mutex;
  std::unique_ptr<StreamQueue> default_stream;  // created on first use
  std::set<StreamQueue*> streams;                // user-created, alive
  std::mt19937_64 rng;                           // for dropout; seeded from options `seed=`
  std::mutex rng_mutex;
};

class Runtime {
 public:
  // Parses "devices=N;seed=S;host_accessible=0|1" (else env FL_CPU_DEVICES and
  // FL_CPU_HOST_ACCESSIBLE; default 1 device, seed 0, host-accessible).
  static void init(const char* options);
  static void shutdown();
  static Runtime& get();  // throws FL_ERR_INVALID_ARGUMENT before init
  ~Runtime();             // drains and destroys every stream still alive

  int32_t device_count() const { return static_cast<int32_t>(devices_.size()); }
  Device& device(int32_t index);  // throws FL_ERR_INVALID_ARGUMENT for a bad index
  uint64_t total_memory() const { return total_memory_; }
  int32_t host_threads() const { return host_threads_; }
  bool host_accessible() const { return host_accessible_; }
  // Splits large memcpys over a few threads (min(threads, kCopyThreads)).
  plugin::ParallelCopy& copier() { return *copier_; }
  static constexpr int32_t kCopyThreads = 8;
  // Splits the kernels' own loops (elementwise, softmax, reductions) over `host_threads()`.
  plugin::ParallelFor& kernel_team() { return *kernel_team_; }

  // Resolves a stream handle (NULL = the device's default stream, created lazily).
  StreamQueue& stream(int32_t device, fl_stream_t handle);
  StreamQueue* create_stream(int32_t device);
  void destroy_stream(int32_t device, fl_stream_t handle);
  // Waits for every stream of the device; throws the first stored async error.
  void synchronize_device(int32_t device);

  void* allocate(int32_t device, size_t size);
  void release(int32_t device, void* ptr);
  void* allocate_pinned(size_t size);
  void release_pinned(void* ptr);
  // True when [ptr, ptr+size) lies inside one block from allocate_pinned.
  bool is_pinned(const void* ptr, size_t size);

 private:
  Runtime(int32_t devices, uint64_t seed);

  std::unique_ptr<plugin::ParallelCopy> copier_;  // declared before devices_: outlives their streams
  std::unique_ptr<plugin::ParallelFor> kernel_team_;  // likewise
  std::vector<std::unique_ptr<Device>> devices_;
  uint64_t total_memory_ = 0;
  int32_t host_threads_ = 1;
  bool host_accessible_ = true;
  std::mutex pinned_mutex_;
  std::map<uintptr_t, size_t> pinned_blocks_;
};

}  // namespace fl::cpu
