// cuda_pageable_staging.cu — host-to-device copies from pageable memory on one GPU: the CUDA
// driver's own path (cudaMemcpyAsync from pageable memory, staged by the driver) against
// staging by hand through a ring of pinned buffers, filled by N host threads while the DMA
// reads the previous chunk; and the pinned copy as the ceiling. Plain CUDA runtime, no
// Torch-FL: it asks whether a plugin could copy pageable memory faster than the driver.
//
//   nvcc -O2 -std=c++20 -o /tmp/pageable_staging bench/cuda_pageable_staging.cu
//   /tmp/pageable_staging [MiB=256] [repeats=5]
//
// Prints GB/s of payload (best of the repeats) per method.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// N threads (the caller is thread 0) each copy 1/N of a job; two barrier phases per job.
class CopyTeam {
 public:
  explicit CopyTeam(int n) : n_(n), start_(n), done_(n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~CopyTeam() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : workers_) t.join();
  }
  void copy(void* dst, const void* src, size_t bytes) {
    dst_ = static_cast<char*>(dst);
    src_ = static_cast<const char*>(src);
    bytes_ = bytes;
    start_.arrive_and_wait();
    part(0);
    done_.arrive_and_wait();
  }

 private:
  void part(int i) {
    const size_t per = (bytes_ + n_ - 1) / n_;
    const size_t from = std::min(bytes_, per * i), to = std::min(bytes_, from + per);
    if (to > from) std::memcpy(dst_ + from, src_ + from, to - from);
  }
  void loop(int i) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      part(i);
      done_.arrive_and_wait();
    }
  }
  int n_;
  std::barrier<> start_, done_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
  char* dst_ = nullptr;
  const char* src_ = nullptr;
  size_t bytes_ = 0;
};

double best_gbps(size_t bytes, int repeats, const std::function<void()>& run) {
  run();  // warm-up
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t = now();
    run();
    best = std::max(best, bytes / (now() - t) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const size_t bytes = mib << 20;
  char* src = static_cast<char*>(std::malloc(bytes));
  for (size_t i = 0; i < bytes; i += 4096) src[i] = static_cast<char>(i >> 12);  // touch every page
  void* dst = nullptr;
  check(cudaMalloc(&dst, bytes), "cudaMalloc");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf("payload %zu MiB, best of %d; %u host threads\n", mib, repeats, std::thread::hardware_concurrency());

  std::printf("driver, pageable:        %6.1f GB/s\n", best_gbps(bytes, repeats, [&] {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "memcpy");
    check(cudaStreamSynchronize(stream), "sync");
  }));
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
  std::memcpy(pinned, src, bytes);
  std::printf("driver, pinned:          %6.1f GB/s\n", best_gbps(bytes, repeats, [&] {
    check(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, stream), "memcpy");
    check(cudaStreamSynchronize(stream), "sync");
  }));
  check(cudaFreeHost(pinned), "cudaFreeHost");

  for (size_t chunk_mib : {2, 8}) {
    const size_t chunk = chunk_mib << 20;
    constexpr int kSlots = 3;
    void* ring[kSlots];
    cudaEvent_t drained[kSlots];
    for (int s = 0; s < kSlots; ++s) {
      check(cudaMallocHost(&ring[s], chunk), "cudaMallocHost");
      check(cudaEventCreateWithFlags(&drained[s], cudaEventDisableTiming), "cudaEventCreate");
    }
    for (int threads : {1, 2, 4, 8}) {
      CopyTeam team(threads);
      const double gbps = best_gbps(bytes, repeats, [&] {
        for (size_t off = 0, k = 0; off < bytes; off += chunk, ++k) {
          const int s = static_cast<int>(k % kSlots);
          const size_t n = std::min(chunk, bytes - off);
          if (k >= kSlots) check(cudaEventSynchronize(drained[s]), "event sync");  // its last DMA ran
          team.copy(ring[s], src + off, n);
          check(cudaMemcpyAsync(static_cast<char*>(dst) + off, ring[s], n, cudaMemcpyHostToDevice, stream), "memcpy");
          check(cudaEventRecord(drained[s], stream), "event record");
        }
        check(cudaStreamSynchronize(stream), "sync");
      });
      std::printf("ring of %d x %zu MiB, %d thread%s: %6.1f GB/s\n", kSlots, chunk_mib, threads,
                  threads == 1 ? ", " : "s,", gbps);
    }
    for (int s = 0; s < kSlots; ++s) {
      cudaFreeHost(ring[s]);
      cudaEventDestroy(drained[s]);
    }
  }
  cudaFree(dst);
  std::free(src);
  return 0;
}
