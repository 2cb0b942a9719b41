// fake_device_memory.hpp — a DeviceMemoryBackend for CachingAllocator tests: fake addresses
// (never dereferenced), a capacity, call counters and events whose completion the test sets.
#pragma once

#include "caching_allocator.h"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

struct fl_event_s {
  fl_stream_t stream;
  bool done;
};

namespace fl::test {

class FakeDeviceMemory {
 public:
  explicit FakeDeviceMemory(uint64_t capacity) : capacity_(capacity) {}

  DeviceMemoryBackend backend(bool with_events = true) {
    DeviceMemoryBackend b;
    b.malloc = [this](size_t n, void** p) -> fl_status_t {
      ++mallocs;
      if (fail_next_mallocs > 0) {
        --fail_next_mallocs;
        return FL_ERR_OUT_OF_MEMORY;
      }
      if (used + n > capacity_) return FL_ERR_OUT_OF_MEMORY;
      *p = reinterpret_cast<void*>(next_address_);
      next_address_ += n + 4096;  // a gap, so neighbouring segments are never contiguous
      blocks[*p] = n;
      used += n;
      return FL_OK;
    };
    b.free = [this](void* p) {
      ++frees;
      auto it = blocks.find(p);
      if (it == blocks.end()) {
        ++bad_frees;
        return;
      }
      used -= it->second;
      blocks.erase(it);
    };
    b.synchronize = [this] {
      ++synchronizes;
      for (auto& e : events) e->done = true;  // a device sync completes every recorded event
    };
    if (with_events) {
      b.record_event = [this](fl_stream_t s) {
        events.push_back(std::make_unique<fl_event_s>(fl_event_s{s, false}));
        ++live_events;
        return events.back().get();
      };
      b.event_done = [](fl_event_t e) { return e->done; };
      b.destroy_event = [this](fl_event_t) { --live_events; };
    }
    b.last_error = [] { return std::string("fake: no room"); };
    return b;
  }

  void complete_events_on(fl_stream_t s) {
    for (auto& e : events)
      if (e->stream == s) e->done = true;
  }

  uint64_t capacity_;
  uint64_t used = 0;
  uint64_t next_address_ = 0x100000000ull;
  int mallocs = 0;
  int frees = 0;
  int bad_frees = 0;
  int synchronizes = 0;
  int fail_next_mallocs = 0;
  int live_events = 0;
  std::map<void*, size_t> blocks;
  std::vector<std::unique_ptr<fl_event_s>> events;
};

}  // namespace fl::test
