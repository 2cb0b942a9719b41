// pageable_upload.cpp — see pageable_upload.hpp.
#include "pageable_upload.hpp"

#include "gpu_check.hpp"

#include <plugin_support.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fl::cuda {
namespace {

constexpr size_t kChunk = size_t{8} << 20;
constexpr int kSlots = 3;
constexpr int kDefaultThreads = 4;
constexpr int kMaxThreads = 64;

// `threads` host threads (the caller is one of them) copy one job, each its own part. The
// helpers sleep between jobs: they must not spin beside the threads of a CPU device.
class CopyTeam {
 public:
  explicit CopyTeam(int threads) : parts_(threads) {
    for (int i = 1; i < threads; ++i) helpers_.emplace_back([this, i] { serve(i); });
  }
  ~CopyTeam() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : helpers_) t.join();
  }
  CopyTeam(const CopyTeam&) = delete;
  CopyTeam& operator=(const CopyTeam&) = delete;

  // One job at a time (uploads to two devices share the team).
  void copy(void* dst, const void* src, size_t bytes) {
    std::lock_guard use(use_mutex_);
    {
      std::lock_guard lock(mutex_);
      dst_ = static_cast<char*>(dst);
      src_ = static_cast<const char*>(src);
      bytes_ = bytes;
      pending_ = parts_ - 1;
      ++job_;
    }
    wake_.notify_all();
    copy_part(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void copy_part(int i) {
    // Parts of whole 4 KiB pages, so that two threads never write into one page.
    const size_t pages = (bytes_ + 4095) / 4096;
    const size_t per = (pages + parts_ - 1) / parts_ * 4096;
    const size_t from = std::min(bytes_, per * static_cast<size_t>(i));
    const size_t to = std::min(bytes_, from + per);
    if (to > from) std::memcpy(dst_ + from, src_ + from, to - from);
  }

  void serve(int i) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || job_ != seen; });
        if (stopping_) return;
        seen = job_;
      }
      copy_part(i);
      {
        std::lock_guard lock(mutex_);
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }

  const int parts_;
  std::vector<std::thread> helpers_;
  std::mutex use_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool stopping_ = false;
  uint64_t job_ = 0;
  int pending_ = 0;
  char* dst_ = nullptr;
  const char* src_ = nullptr;
  size_t bytes_ = 0;
};

// A device's ring: pinned buffers and, per buffer, the event after the DMA that last read it.
struct Ring {
  std::mutex mutex;  // one upload at a time
  void* buffers[kSlots] = {};
  cudaEvent_t drained[kSlots] = {};
  bool used[kSlots] = {};
};

struct Uploads {
  int threads = kDefaultThreads;
  std::mutex mutex;  // guards team and rings' creation
  std::unique_ptr<CopyTeam> team;
  std::vector<std::unique_ptr<Ring>> rings;
};

Uploads& uploads() {
  static Uploads u;
  return u;
}

// The ring of `device` (created on first use, with `device` current).
Ring& ring_of(int32_t device) {
  Uploads& u = uploads();
  std::lock_guard lock(u.mutex);
  if (!u.team) u.team = std::make_unique<CopyTeam>(u.threads);
  if (u.rings.size() <= static_cast<size_t>(device)) u.rings.resize(static_cast<size_t>(device) + 1);
  auto& ring = u.rings[static_cast<size_t>(device)];
  if (!ring) {
    auto fresh = std::make_unique<Ring>();
    try {
      for (int s = 0; s < kSlots; ++s) {
        // Portable: the buffers stay pinned for every device's context.
        check_gpu(cudaHostAlloc(&fresh->buffers[s], kChunk, cudaHostAllocPortable), "cudaHostAlloc (upload ring)");
        check_gpu(cudaEventCreateWithFlags(&fresh->drained[s], cudaEventDisableTiming), "cudaEventCreate (upload ring)");
      }
    } catch (...) {
      for (int s = 0; s < kSlots; ++s) {
        if (fresh->buffers[s] != nullptr) (void)cudaFreeHost(fresh->buffers[s]);
        if (fresh->drained[s] != nullptr) (void)cudaEventDestroy(fresh->drained[s]);
      }
      throw;
    }
    ring = std::move(fresh);
  }
  return *ring;
}

}  // namespace

void configure_pageable_uploads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "copy_threads=" + std::to_string(threads) + " is not in 0.." +
                                               std::to_string(kMaxThreads));
  Uploads& u = uploads();
  std::lock_guard lock(u.mutex);
  u.team.reset();
  u.threads = threads;
}

int pageable_upload_threads() { return uploads().threads; }

bool stages_upload(int32_t device, const void* dst, const void* src, size_t size) {
  if (uploads().threads == 0 || size < kStagedUploadMinBytes) return false;
  cudaPointerAttributes s{}, d{};
  if (cudaPointerGetAttributes(&s, src) != cudaSuccess || cudaPointerGetAttributes(&d, dst) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return s.type == cudaMemoryTypeUnregistered && d.type == cudaMemoryTypeDevice && d.device == device;
}

void upload_pageable(int32_t device, void* dst, const void* src, size_t size, cudaStream_t stream) {
  Ring& ring = ring_of(device);
  CopyTeam& team = *uploads().team;
  std::lock_guard lock(ring.mutex);
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  for (size_t offset = 0, k = 0; offset < size; offset += kChunk, ++k) {
    const int s = static_cast<int>(k % kSlots);
    const size_t n = std::min(kChunk, size - offset);
    // The DMA that last read this buffer (this upload's or an earlier one's) has finished.
    if (ring.used[s]) check_gpu(cudaEventSynchronize(ring.drained[s]), "cudaEventSynchronize (upload ring)");
    team.copy(ring.buffers[s], in + offset, n);
    check_gpu(cudaMemcpyAsync(out + offset, ring.buffers[s], n, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (staged)");
    check_gpu(cudaEventRecord(ring.drained[s], stream), "cudaEventRecord (upload ring)");
    ring.used[s] = true;
  }
}

void shutdown_pageable_uploads() {
  Uploads& u = uploads();
  std::lock_guard lock(u.mutex);
  for (auto& ring : u.rings) {
    if (!ring) continue;
    for (int s = 0; s < kSlots; ++s) {
      if (ring->used[s]) (void)cudaEventSynchronize(ring->drained[s]);
      (void)cudaEventDestroy(ring->drained[s]);
      (void)cudaFreeHost(ring->buffers[s]);
    }
  }
  u.rings.clear();
  u.team.reset();
}

}  // namespace fl::cuda
