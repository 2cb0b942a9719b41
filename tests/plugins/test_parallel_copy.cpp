// The plugins' ParallelCopy (plugins/common) with a fixed thread count: chunking, the serial cases, and
// concurrent callers (under TSan in CI).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "parallel_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

using fl::plugin::ParallelCopy;

namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

}  // namespace

TEST_CASE("parallel copy: every size around the split threshold lands whole") {
  ParallelCopy copier(4);
  const size_t min = ParallelCopy::kMinParallelBytes;
  for (size_t n : {size_t{0}, size_t{1}, min - 1, min, min + 1, 4 * min + 3, 5 * ParallelCopy::kMinChunkBytes + 7}) {
    auto src = pattern(n, static_cast<uint32_t>(n));
    std::vector<uint8_t> dst(n + 2, 0xAB);
    copier.copy(dst.data() + 1, src.data(), n);
    INFO("bytes " << n);
    CHECK(std::equal(src.begin(), src.end(), dst.begin() + 1));  // (memcmp of NULL, 0 is UB)
    CHECK(dst.front() == 0xAB);  // nothing written outside [dst, dst + n)
    CHECK(dst.back() == 0xAB);
  }
}

TEST_CASE("parallel copy: overlapping ranges move as memmove does") {
  ParallelCopy copier(4);
  const size_t n = 3 * ParallelCopy::kMinParallelBytes, shift = 4097;
  for (bool forward : {true, false}) {
    auto buf = pattern(n + shift, 7);
    auto expected = buf;
    uint8_t* base = buf.data();
    if (forward) {
      copier.copy(base + shift, base, n);
      std::memmove(expected.data() + shift, expected.data(), n);
    } else {
      copier.copy(base, base + shift, n);
      std::memmove(expected.data(), expected.data() + shift, n);
    }
    CHECK(buf == expected);
  }
}

TEST_CASE("parallel copy: concurrent callers take turns") {
  ParallelCopy copier(4);
  const size_t n = 2 * ParallelCopy::kMinParallelBytes + 11;
  std::vector<std::vector<uint8_t>> src, dst;
  for (uint32_t t = 0; t < 3; ++t) {
    src.push_back(pattern(n, t + 1));
    dst.emplace_back(n, 0);
  }
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 5; ++k) copier.copy(dst[t].data(), src[t].data(), n);
    });
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < 3; ++t) CHECK(dst[t] == src[t]);
}

TEST_CASE("parallel copy: one thread copies alone") {
  ParallelCopy copier(1);
  auto src = pattern(2 * ParallelCopy::kMinParallelBytes, 3);
  std::vector<uint8_t> dst(src.size());
  copier.copy(dst.data(), src.data(), src.size());
  CHECK(dst == src);
}
