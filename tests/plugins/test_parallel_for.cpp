// The plugins' ParallelFor (plugins/common) with fixed thread counts: how a range is split,
// errors from a part, nested loops, and concurrent callers (under TSan in CI).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

using fl::plugin::ParallelFor;

namespace {

// The (begin, end) of every part one for_range call ran, sorted.
std::vector<std::pair<int64_t, int64_t>> parts_of(ParallelFor& team, int64_t n, int64_t grain) {
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> parts;
  team.for_range(n, grain, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mutex);
    parts.emplace_back(begin, end);
  });
  std::sort(parts.begin(), parts.end());
  return parts;
}

}  // namespace

TEST_CASE("parallel for: the chunks tile the range in near-equal pieces, as many as the grain and the threads allow") {
  ParallelFor team(4);
  CHECK(team.threads() == 4);
  const size_t most = static_cast<size_t>(4 * ParallelFor::kChunksPerThread);
  struct Case { int64_t n, grain; size_t chunks; };
  for (Case c : {Case{1, 1, 1}, Case{3, 1, 3}, Case{16, 1, 16}, Case{103, 1, most}, Case{103, 30, 3},
                 Case{103, 200, 1}, Case{1 << 20, 1 << 17, 8}, Case{7, 0, 7}}) {
    auto parts = parts_of(team, c.n, c.grain);
    INFO("n " << c.n << " grain " << c.grain);
    REQUIRE(parts.size() == c.chunks);
    int64_t next = 0, smallest = c.n, largest = 0;
    for (auto [begin, end] : parts) {
      CHECK(begin == next);
      next = end;
      smallest = std::min(smallest, end - begin);
      largest = std::max(largest, end - begin);
    }
    CHECK(next == c.n);
    CHECK(largest - smallest <= 1);
  }
  CHECK(parts_of(team, 0, 1).empty());  // nothing to do: the body is not called
}

TEST_CASE("parallel for: helpers take chunks beside the caller") {
  ParallelFor team(4);
  std::mutex mutex;
  std::vector<std::thread::id> ids;
  // 16 chunks (4 threads x kChunksPerThread) of 10 ms: the helpers wake long before the
  // caller could run them all, even on a loaded machine.
  team.for_range(16, 1, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> lock(mutex);
    ids.push_back(std::this_thread::get_id());
  });
  CHECK(ids.size() == 16);
  CHECK(std::find(ids.begin(), ids.end(), std::this_thread::get_id()) != ids.end());
  std::sort(ids.begin(), ids.end());
  CHECK(std::unique(ids.begin(), ids.end()) - ids.begin() > 1);
}

TEST_CASE("parallel for: a stalled helper holds only its own chunk back") {
  // The helper's chunk blocks until the caller has run the other seven (or 10 s pass): with
  // parts fixed per thread the caller would wait for the helper's share, which waits for it.
  ParallelFor team(2);
  const auto caller = std::this_thread::get_id();
  std::atomic<int> caller_chunks{0}, helper_chunks{0};
  std::atomic<bool> helper_timed_out{false};
  team.for_range(8, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() == caller) {
      ++caller_chunks;
      return;
    }
    ++helper_chunks;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (caller_chunks.load() + helper_chunks.load() < 8) {
      if (std::chrono::steady_clock::now() > deadline) {
        helper_timed_out = true;
        return;
      }
      std::this_thread::yield();
    }
  });
  CHECK(caller_chunks + helper_chunks == 8);
  CHECK(helper_chunks <= 1);
  CHECK_FALSE(helper_timed_out);
}

TEST_CASE("parallel for: an exception from any chunk reaches the caller, and the team runs on") {
  ParallelFor team(4);
  const auto caller = std::this_thread::get_id();
  SECTION("the caller's chunk") {
    // Whichever chunk the caller claims first (a helper may claim the first of the range):
    // chunks of 5 ms keep the helpers from taking all 16.
    std::atomic<bool> thrown{false};
    CHECK_THROWS_WITH(team.for_range(16, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (std::this_thread::get_id() == caller && !thrown.exchange(true)) throw std::runtime_error("chunk failed");
    }), "chunk failed");
  }
  SECTION("a helper's chunk") {
    std::atomic<bool> thrown{false};
    // Chunks of 5 ms, so that helpers take some; only a helper throws.
    CHECK_THROWS_WITH(team.for_range(16, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (std::this_thread::get_id() != caller && !thrown.exchange(true)) throw std::runtime_error("helper failed");
    }), "helper failed");
  }
  CHECK(parts_of(team, 8, 1).size() == 8);
}

TEST_CASE("parallel for: a loop inside a part runs whole on that part's thread") {
  ParallelFor team(3);
  std::atomic<int64_t> inner_items{0};
  std::atomic<int> inner_calls{0}, elsewhere{0};
  team.for_range(3, 1, [&](int64_t, int64_t) {
    const auto outer = std::this_thread::get_id();
    team.for_range(100, 1, [&](int64_t begin, int64_t end) {
      // (Catch2's assertions are not thread-safe: counted here, checked by the caller.)
      if (std::this_thread::get_id() != outer) ++elsewhere;
      inner_items += end - begin;
      ++inner_calls;
    });
  });
  CHECK(inner_items == 300);
  CHECK(inner_calls == 3);
  CHECK(elsewhere == 0);
}

TEST_CASE("parallel for: concurrent callers take turns and each gets its whole range") {
  ParallelFor team(4);
  const int64_t n = 10000;
  std::vector<std::vector<int64_t>> out(3, std::vector<int64_t>(n, 0));
  std::vector<std::thread> callers;
  for (size_t t = 0; t < out.size(); ++t)
    callers.emplace_back([&, t] {
      for (int k = 1; k <= 20; ++k)
        team.for_range(n, 100, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[t][i] += static_cast<int64_t>(t) + 1;
        });
    });
  for (auto& c : callers) c.join();
  for (size_t t = 0; t < out.size(); ++t)
    CHECK(std::all_of(out[t].begin(), out[t].end(), [&](int64_t v) { return v == 20 * (static_cast<int64_t>(t) + 1); }));
}

TEST_CASE("parallel for: one thread runs the whole range on the caller") {
  ParallelFor team(1);
  auto parts = parts_of(team, 1 << 20, 1);  // one thread: one chunk, the whole range
  REQUIRE(parts.size() == 1);
  CHECK(parts[0] == std::make_pair(int64_t{0}, int64_t{1} << 20));
}
