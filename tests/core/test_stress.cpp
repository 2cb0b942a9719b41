// A multi-threaded stress test of the runtime on the CPU plugin (real asynchronous streams):
// threads × streams × allocate / memset / event record / stream wait / copy / record_stream /
// free, checking every byte that comes back. Bounded to a few seconds; also run under the
// sanitizers (tests/sanitizers/run_sanitizers.sh).
#include "plugin_library.h"
#include "runtime.h"
#include "scoped_env.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using fl::Runtime;
using fl::test::ScopedEnv;

constexpr int kThreads = 6;
constexpr int kDevices = 2;
constexpr auto kDuration = std::chrono::seconds(4);
constexpr int kMaxIterationsPerThread = 4000;

// Errors from worker threads (Catch2 v2 assertions are not thread-safe): collected, then
// asserted on the main thread.
class Failures {
 public:
  void add(std::string what) {
    std::lock_guard lock(mutex_);
    if (messages_.size() < 20) messages_.push_back(std::move(what));
    ++count_;
  }
  int count() const { return count_; }
  std::vector<std::string> messages() const {
    std::lock_guard lock(mutex_);
    return messages_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
  std::atomic<int> count_{0};
};

struct Work {
  Runtime& rt;
  Failures& failures;
  std::atomic<long>& iterations;
  std::chrono::steady_clock::time_point deadline;
};

// One round on device `d`: fill A on stream s1 with `value`, order s2 after s1 with an event,
// copy A → B on s2, mark A used on s2 and free it (deferred reuse), copy B back to the host on
// s2, synchronize s2, check every byte, free B.
void one_round(Work& w, int d, int64_t s1, int64_t s2, size_t size, unsigned char value) {
  Runtime& rt = w.rt;
  const auto& dev = rt.device(d);
  const fl::PluginLibrary& plugin = *dev.plugin;
  const fl_device_ops& ops = plugin.ops();
  auto& streams = rt.streams(d);
  auto& alloc = rt.allocator(d);
  const fl_stream_t h1 = streams.handle(s1);
  const fl_stream_t h2 = streams.handle(s2);

  void* a = alloc.allocate(size, h1);
  plugin.check(ops.fl_memset_async(dev.local, a, value, size, h1), "memset");
  fl_event_t e = streams.create_event(false);
  streams.record(e, s1);
  streams.wait(s2, e);
  streams.destroy_event(e);
  void* b = alloc.allocate(size, h2);
  plugin.check(ops.fl_memcpy_async(dev.local, b, a, size, FL_MEMCPY_DEVICE_TO_DEVICE, h2), "memcpy d2d");
  alloc.record_stream(a, h2);
  alloc.deallocate(a);  // reused by s1 only after s2 passes the copy
  std::vector<unsigned char> host(size, static_cast<unsigned char>(~value));
  plugin.check(ops.fl_memcpy_async(dev.local, host.data(), b, size, FL_MEMCPY_DEVICE_TO_HOST, h2), "memcpy d2h");
  streams.synchronize(s2);
  alloc.deallocate(b);
  for (size_t i = 0; i < size; ++i)
    if (host[i] != value) {
      w.failures.add("fl:" + std::to_string(d) + " byte " + std::to_string(i) + " of " + std::to_string(size) +
                     " is " + std::to_string(host[i]) + ", expected " + std::to_string(value));
      return;
    }
}

void worker(Work& w, int thread_index) {
  std::mt19937 rng(1234 + thread_index);
  try {
    // Each thread also owns a stream per device, besides the shared pool streams.
    std::vector<int64_t> own;
    for (int d = 0; d < kDevices; ++d) own.push_back(w.rt.streams(d).create(0));
    for (int i = 0; i < kMaxIterationsPerThread && std::chrono::steady_clock::now() < w.deadline; ++i) {
      const int d = static_cast<int>(rng() % kDevices);
      auto& streams = w.rt.streams(d);
      const int64_t s1 = (rng() % 2) ? streams.from_pool() : own[d];
      int64_t s2 = streams.from_pool();
      if (s2 == s1) s2 = 0;  // the default stream
      // Mostly small-pool sizes, sometimes large ones.
      const size_t size = (rng() % 8 == 0) ? (1u << 20) + rng() % (3u << 20) : 1 + rng() % 65536;
      const auto value = static_cast<unsigned char>(1 + (thread_index * 37 + i) % 250);
      one_round(w, d, s1, s2, size, value);
      if (i % 16 == 0) w.rt.order_after(1 - d, 0, d, s1);  // across devices: a host wait
      if (i % 64 == 0) {
        int64_t previous = streams.exchange_current(own[d]);
        if (streams.current() != own[d]) w.failures.add("current stream not kept for this thread");
        streams.exchange_current(previous);
      }
      if (thread_index == 0 && i % 97 == 0) w.rt.allocator(d).empty_cache();
      ++w.iterations;
    }
  } catch (const std::exception& e) {
    w.failures.add(std::string("thread ") + std::to_string(thread_index) + ": " + e.what());
  }
}

}  // namespace

TEST_CASE("stress: threads x streams x alloc/free/copy/record/wait on the CPU plugin") {
  ScopedEnv env;
  env.clean_runtime();
  fl::RuntimeOptions options;
  options.plugin_files = {FL_CPU_PLUGIN};
  options.use_config_file = false;
  options.config.logging.level = "error";
  fl::DeviceSelection cpu;
  cpu.type = "cpu";
  cpu.options = "devices=" + std::to_string(kDevices);
  options.config.devices = {cpu};
  Runtime rt(options);
  REQUIRE(rt.device_count() == kDevices);

  Failures failures;
  std::atomic<long> iterations{0};
  Work work{rt, failures, iterations, std::chrono::steady_clock::now() + kDuration};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, std::ref(work), t);
  for (auto& t : threads) t.join();

  INFO("iterations: " << iterations.load());
  for (const auto& m : failures.messages()) UNSCOPED_INFO(m);
  CHECK(failures.count() == 0);
  CHECK(iterations.load() >= kThreads);  // every thread got through at least one round

  for (int d = 0; d < kDevices; ++d) {
    rt.streams(d).synchronize_all();
    auto stats = rt.allocator(d).stats();
    CHECK(stats.allocated_bytes == 0);
    CHECK(stats.requested_bytes == 0);
    CHECK(stats.num_allocs == stats.num_frees);
    rt.allocator(d).empty_cache();
    CHECK(rt.allocator(d).stats().reserved_bytes == 0);
    uint64_t free_bytes = 0, total = 0;
    const auto& dev = rt.device(d);
    dev.plugin->check(dev.plugin->ops().device_memory_info(dev.local, &free_bytes, &total), "memory info");
    CHECK(free_bytes == total);  // nothing leaked in the plugin either
  }
}
