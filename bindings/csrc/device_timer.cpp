#include "device_timer.h"

#include "fl_context.h"

#include <runtime.h>
#include <stream_registry.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace fl::binding {
namespace {

std::atomic<bool> g_on{false};

struct Pending {
  OpInfo* info;
  c10::DeviceIndex device;
  fl_event_t start;
  fl_event_t end;
};

std::mutex g_mutex;
std::vector<Pending> g_pending;
std::vector<std::vector<fl_event_t>> g_free;   // per device: timing events to reuse

fl_event_t take_event(c10::DeviceIndex device) {
  {
    std::lock_guard lock(g_mutex);
    if (g_free.size() > static_cast<size_t>(device) && !g_free[device].empty()) {
      fl_event_t e = g_free[device].back();
      g_free[device].pop_back();
      return e;
    }
  }
  return runtime().streams(device).create_event(/*timing=*/true);
}

void give_back(c10::DeviceIndex device, fl_event_t e) {
  // Caller holds g_mutex.
  if (g_free.size() <= static_cast<size_t>(device)) g_free.resize(static_cast<size_t>(device) + 1);
  g_free[device].push_back(e);
}

}  // namespace

void set_device_timing(bool on) { g_on = on; }
bool device_timing() { return g_on.load(std::memory_order_relaxed); }

DeviceTimedScope::DeviceTimedScope(OpInfo& info, c10::DeviceIndex device) {
  if (!g_on.load(std::memory_order_relaxed) || device < 0) return;
  auto& reg = runtime().streams(device);
  fl_event_t start = take_event(device);
  reg.record(start, reg.current());
  info_ = &info;
  device_ = device;
  start_ = start;
}

DeviceTimedScope::~DeviceTimedScope() {
  if (info_ == nullptr) return;
  try {
    auto& reg = runtime().streams(device_);
    fl_event_t end = take_event(device_);
    reg.record(end, reg.current());
    std::lock_guard lock(g_mutex);
    g_pending.push_back({info_, device_, static_cast<fl_event_t>(start_), end});
  } catch (...) {
    // A failed record loses this one measurement; the call's own error is what matters.
  }
}

void flush_device_times() {
  std::vector<Pending> pending;
  {
    std::lock_guard lock(g_mutex);
    pending.swap(g_pending);
  }
  for (const Pending& p : pending) {
    auto& reg = runtime().streams(p.device);
    reg.synchronize_event(p.end);
    const float ms = reg.elapsed_ms(p.start, p.end);
    if (ms > 0) p.info->device_nanoseconds.fetch_add(static_cast<uint64_t>(ms * 1e6), std::memory_order_relaxed);
  }
  std::lock_guard lock(g_mutex);
  for (const Pending& p : pending) {
    give_back(p.device, p.start);
    give_back(p.device, p.end);
  }
}

}  // namespace fl::binding
