// Tests of core/caching_allocator: rounding, the small and large pools, split and merge,
// per-stream reuse, record_stream deferral, the memory_fraction cap, retry after a cache
// flush, empty_cache, stats and peaks — driven through a fake device (fake_device_memory.hpp).
#include "caching_allocator.h"
#include "error.h"
#include "fake_device_memory.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using Catch::Matchers::Contains;
using fl::CachingAllocator;
using fl::test::FakeDeviceMemory;

namespace {

constexpr uint64_t MiB = 1ull << 20;

fl_stream_t stream(uintptr_t n) { return reinterpret_cast<fl_stream_t>(n * 0x1000); }

uintptr_t address(void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

TEST_CASE("allocator: sizes are rounded up to 512 bytes; size 0 gives nullptr") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  CHECK(a.allocate(0, nullptr) == nullptr);
  void* p1 = a.allocate(1, nullptr);
  void* p2 = a.allocate(512, nullptr);
  void* p3 = a.allocate(513, nullptr);
  CHECK(a.block_size(p1) == 512);
  CHECK(a.block_size(p2) == 512);
  CHECK(a.block_size(p3) == 1024);
  auto s = a.stats();
  CHECK(s.allocated_bytes == 2048);
  CHECK(s.requested_bytes == 1 + 512 + 513);
  CHECK(s.num_allocs == 3);
  a.deallocate(p1);
  a.deallocate(p2);
  a.deallocate(p3);
  a.deallocate(nullptr);  // no-op
  CHECK(a.stats().allocated_bytes == 0);
  CHECK(a.stats().num_frees == 3);
}

TEST_CASE("allocator: small requests share 2 MiB segments and are carved from them") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* p1 = a.allocate(1000, nullptr);
  void* p2 = a.allocate(1000, nullptr);
  CHECK(dev.mallocs == 1);
  REQUIRE(dev.blocks.size() == 1);
  CHECK(dev.blocks.begin()->second == CachingAllocator::kSmallSegment);
  // Split: the second block follows the first inside the same segment.
  CHECK(address(p2) == address(p1) + 1024);
  CHECK(a.stats().reserved_bytes == CachingAllocator::kSmallSegment);
  // The largest small request (1 MiB) still comes from the small pool.
  void* p3 = a.allocate(CachingAllocator::kSmallRequest, nullptr);
  CHECK(dev.mallocs == 1);
  CHECK(address(p3) == address(p1) + 2048);
  a.deallocate(p1);
  a.deallocate(p2);
  a.deallocate(p3);
}

TEST_CASE("allocator: large requests get segments of their own rounded to 2 MiB") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* p = a.allocate(CachingAllocator::kSmallRequest + 1, nullptr);
  CHECK(dev.mallocs == 1);
  CHECK(dev.blocks.at(p) == 2 * MiB);
  // The 1 MiB - 512 left over is not worth a split in the large pool: the block keeps it.
  CHECK(a.block_size(p) == 2 * MiB);
  void* q = a.allocate(5 * MiB, nullptr);
  CHECK(dev.blocks.at(q) == 6 * MiB);
  CHECK(a.block_size(q) == 6 * MiB);
  CHECK(a.stats().reserved_bytes == 8 * MiB);
  CHECK(a.stats().num_segments == 2);
  a.deallocate(p);
  a.deallocate(q);
}

TEST_CASE("allocator: a freed block is reused, split, and merged back with its neighbours") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* big = a.allocate(10 * MiB, nullptr);
  a.deallocate(big);
  CHECK(a.stats().allocated_bytes == 0);
  CHECK(a.stats().reserved_bytes == 10 * MiB);

  // Two 4 MiB requests are carved from the cached 10 MiB segment: no new fl_malloc.
  void* x = a.allocate(4 * MiB, nullptr);
  void* y = a.allocate(4 * MiB, nullptr);
  CHECK(dev.mallocs == 1);
  CHECK(x == big);
  CHECK(address(y) == address(x) + 4 * MiB);
  CHECK(a.block_size(y) == 4 * MiB);

  // Freed in either order, the pieces merge into one 10 MiB block again.
  a.deallocate(x);
  a.deallocate(y);
  void* whole = a.allocate(10 * MiB, nullptr);
  CHECK(whole == big);
  CHECK(dev.mallocs == 1);
  a.deallocate(whole);

  // Middle block freed last: merges with both neighbours.
  void* m1 = a.allocate(3 * MiB, nullptr);
  void* m2 = a.allocate(3 * MiB, nullptr);
  void* m3 = a.allocate(4 * MiB, nullptr);
  CHECK(dev.mallocs == 1);
  a.deallocate(m1);
  a.deallocate(m3);
  a.deallocate(m2);
  CHECK(a.allocate(10 * MiB, nullptr) == big);
  CHECK(dev.mallocs == 1);
}

TEST_CASE("allocator: cached blocks are reused only by the stream they were allocated on") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* p = a.allocate(8 * MiB, stream(1));
  a.deallocate(p);
  void* q = a.allocate(8 * MiB, stream(2));
  CHECK(q != p);
  CHECK(dev.mallocs == 2);
  void* r = a.allocate(8 * MiB, stream(1));
  CHECK(r == p);
  CHECK(dev.mallocs == 2);
  a.deallocate(q);
  a.deallocate(r);
}

TEST_CASE("allocator: record_stream defers reuse until the other stream's event completes") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* p = a.allocate(4 * MiB, stream(1));
  a.record_stream(p, stream(2));
  a.record_stream(p, stream(1));  // its own stream: nothing to track
  a.deallocate(p);
  REQUIRE(dev.events.size() == 1);
  CHECK(dev.events[0]->stream == stream(2));
  CHECK(dev.synchronizes == 0);

  // The event has not completed: the block must not come back.
  void* q = a.allocate(4 * MiB, stream(1));
  CHECK(q != p);
  a.deallocate(q);

  dev.complete_events_on(stream(2));
  void* r = a.allocate(4 * MiB, stream(1));
  CHECK((r == p || r == q));
  CHECK(dev.live_events == 0);  // the completed event was destroyed
  a.deallocate(r);
  CHECK(dev.synchronizes == 0);
}

TEST_CASE("allocator: record_stream without event support synchronizes the device on free") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(/*with_events=*/false), dev.capacity_, 1.0);
  void* p = a.allocate(4 * MiB, stream(1));
  a.record_stream(p, stream(2));
  a.deallocate(p);
  CHECK(dev.synchronizes == 1);
  CHECK(a.allocate(4 * MiB, stream(1)) == p);
}

TEST_CASE("allocator: record_stream of an unknown pointer is ignored") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  int local = 0;
  CHECK_NOTHROW(a.record_stream(&local, stream(2)));
  CHECK(dev.events.empty());
}

TEST_CASE("allocator: memory_fraction caps reserved bytes; OOM message carries the stats") {
  FakeDeviceMemory dev(100 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 0.25);  // limit 25 MiB
  CHECK(a.stats().limit_bytes == 25 * MiB);
  void* p = a.allocate(20 * MiB, nullptr);
  try {
    a.allocate(10 * MiB, nullptr);
    FAIL("allocation past the cap succeeded");
  } catch (const fl::OutOfMemoryError& e) {
    const std::string m = e.what();
    CHECK(e.status() == FL_ERR_OUT_OF_MEMORY);
    CHECK_THAT(m, Contains("fake:0"));
    CHECK_THAT(m, Contains("memory_fraction cap"));
    CHECK_THAT(m, Contains("allocate 10.00 MiB"));
    CHECK_THAT(m, Contains("Allocated 20.00 MiB"));
    CHECK_THAT(m, Contains("reserved 20.00 MiB"));
    CHECK_THAT(m, Contains("requested 20.00 MiB"));
    CHECK_THAT(m, Contains("limit 25.00 MiB"));
  }
  CHECK(a.stats().num_ooms == 1);
  CHECK(dev.mallocs == 1);  // the cap refused it before the device was asked
  a.deallocate(p);
}

TEST_CASE("allocator: a small request refused by the cap says so (segment size counts)") {
  FakeDeviceMemory dev(100 * MiB);
  // Limit 3 MiB: one 2 MiB small segment fits, a second would not.
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 0.03);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(a.allocate(CachingAllocator::kSmallSegment / 4, nullptr));
  CHECK(dev.mallocs == 1);
  try {
    a.allocate(512, nullptr);
    FAIL("allocation past the cap succeeded");
  } catch (const fl::OutOfMemoryError& e) {
    CHECK_THAT(std::string(e.what()), Contains("memory_fraction cap"));
  }
  for (void* b : blocks) a.deallocate(b);
}

TEST_CASE("allocator: when fl_malloc fails the cache is released and the request retried") {
  FakeDeviceMemory dev(16 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* p = a.allocate(10 * MiB, nullptr);
  a.deallocate(p);  // cached: 10 MiB reserved, device has 6 MiB left
  void* q = a.allocate(12 * MiB, nullptr);  // fails once, flush frees the 10 MiB, retry works
  CHECK(q != nullptr);
  auto s = a.stats();
  CHECK(s.num_cache_flushes == 1);
  CHECK(s.num_device_frees == 1);
  CHECK(s.reserved_bytes == 12 * MiB);
  CHECK(s.num_ooms == 0);
  CHECK(dev.synchronizes >= 1);  // cached memory is returned only after a device sync

  // With nothing left to release the retry fails too: device OOM, not the cap.
  try {
    a.allocate(8 * MiB, nullptr);
    FAIL("allocation on a full device succeeded");
  } catch (const fl::OutOfMemoryError& e) {
    CHECK_THAT(std::string(e.what()), Contains("the device has no room"));
  }
  CHECK(a.stats().num_ooms == 1);
  a.deallocate(q);
}

TEST_CASE("allocator: a transient fl_malloc failure is retried after the flush") {
  FakeDeviceMemory dev(64 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  dev.fail_next_mallocs = 1;
  void* p = a.allocate(4 * MiB, nullptr);
  CHECK(p != nullptr);
  CHECK(dev.mallocs == 2);
  CHECK(a.stats().num_cache_flushes == 1);
  a.deallocate(p);
}

TEST_CASE("allocator: empty_cache returns fully free segments and keeps used ones") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* small_a = a.allocate(1000, nullptr);
  void* small_b = a.allocate(1000, nullptr);
  void* large = a.allocate(8 * MiB, nullptr);
  void* other = a.allocate(4 * MiB, nullptr);
  a.deallocate(small_a);   // its segment still holds small_b
  a.deallocate(large);
  CHECK(dev.blocks.size() == 3);
  a.empty_cache();
  CHECK(dev.blocks.size() == 2);            // the 8 MiB segment went back
  CHECK(dev.blocks.count(large) == 0);
  CHECK(dev.blocks.count(other) == 1);
  CHECK(a.stats().reserved_bytes == CachingAllocator::kSmallSegment + 4 * MiB);
  CHECK(dev.bad_frees == 0);
  a.deallocate(small_b);
  a.deallocate(other);
  a.empty_cache();
  CHECK(dev.blocks.empty());
  CHECK(dev.used == 0);
  CHECK(a.stats().reserved_bytes == 0);
  CHECK(a.stats().num_segments == 0);
}

TEST_CASE("allocator: empty_cache also returns blocks waiting on events (after a sync)") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* p = a.allocate(4 * MiB, stream(1));
  a.record_stream(p, stream(3));
  a.deallocate(p);
  a.empty_cache();
  CHECK(dev.blocks.empty());
  CHECK(dev.live_events == 0);
}

TEST_CASE("allocator: stats track peaks; reset_peak_stats lowers them to the current values") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  void* p = a.allocate(6 * MiB, nullptr);
  void* q = a.allocate(4 * MiB, nullptr);
  a.deallocate(p);
  auto s = a.stats();
  CHECK(s.allocated_bytes == 4 * MiB);
  CHECK(s.peak_allocated_bytes == 10 * MiB);
  CHECK(s.peak_reserved_bytes == 10 * MiB);
  CHECK(s.num_device_mallocs == 2);
  a.reset_peak_stats();
  s = a.stats();
  CHECK(s.peak_allocated_bytes == 4 * MiB);
  CHECK(s.peak_reserved_bytes == 10 * MiB);  // reserved did not drop (cached)
  a.empty_cache();
  a.reset_peak_stats();
  CHECK(a.stats().peak_reserved_bytes == 4 * MiB);
  a.deallocate(q);
}

TEST_CASE("allocator: deallocate of a pointer it does not own throws; double free too") {
  FakeDeviceMemory dev(1024 * MiB);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  int local = 0;
  CHECK_THROWS_AS(a.deallocate(&local), fl::Error);
  void* p = a.allocate(100, nullptr);
  CHECK_THROWS_WITH(a.deallocate(static_cast<char*>(p) + 1), Contains("does not own"));
  a.deallocate(p);
  CHECK_THROWS_AS(a.deallocate(p), fl::Error);
}

TEST_CASE("allocator: memory_fraction outside (0, 1] is rejected; changing it moves the limit") {
  FakeDeviceMemory dev(100 * MiB);
  CHECK_THROWS_AS(CachingAllocator("fake:0", dev.backend(), dev.capacity_, 0.0), fl::ConfigError);
  CHECK_THROWS_AS(CachingAllocator("fake:0", dev.backend(), dev.capacity_, 1.5), fl::ConfigError);
  CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
  CHECK(a.stats().limit_bytes == 0);
  a.set_memory_fraction(0.5);
  CHECK(a.memory_fraction() == 0.5);
  CHECK(a.stats().limit_bytes == 50 * MiB);
  CHECK_THROWS_AS(a.allocate(60 * MiB, nullptr), fl::OutOfMemoryError);
  CHECK_THROWS_AS(a.set_memory_fraction(-1), fl::ConfigError);
}

TEST_CASE("allocator: destruction returns cached segments to the device") {
  FakeDeviceMemory dev(1024 * MiB);
  {
    CachingAllocator a("fake:0", dev.backend(), dev.capacity_, 1.0);
    void* p = a.allocate(4 * MiB, nullptr);
    void* q = a.allocate(1000, nullptr);
    a.deallocate(p);
    a.deallocate(q);
    CHECK(dev.blocks.size() == 2);
  }
  CHECK(dev.blocks.empty());
  CHECK(dev.bad_frees == 0);
}
