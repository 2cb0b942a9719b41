// pageable_upload.cpp — see pageable_upload.hpp.
#include "pageable_upload.hpp"

#include "device_state.hpp"
#include "gpu_check.hpp"
#include "plugin_state.hpp"

#include <parallel_copy.hpp>
#include <plugin_support.hpp>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fl::cuda {
namespace {

constexpr size_t kChunk = size_t{8} << 20;
constexpr int kSlots = 3;
constexpr int kDefaultThreads = 4;
constexpr int kMaxThreads = 64;

// A device's ring: pinned buffers and, per buffer, the event after the DMA that last read it
// and the stream that DMA was queued on.
struct Ring {
  std::mutex mutex;  // one upload at a time
  void* buffers[kSlots] = {};
  cudaEvent_t drained[kSlots] = {};
  cudaStream_t stream_of[kSlots] = {};
  bool used[kSlots] = {};
  int next = 0;  // the buffer the next chunk goes through
};

struct Uploads {
  std::atomic<int> threads{kDefaultThreads};
  std::mutex mutex;  // guards team and rings' creation
  std::unique_ptr<plugin::ParallelCopy> team;  // fills the buffers (plugins/common)
  std::vector<std::unique_ptr<Ring>> rings;
  std::vector<bool> unavailable;  // devices whose ring could not be set up
};

// Never destroyed: at process exit another thread may still be uploading (a daemon thread),
// and destroying the team under it would leave that thread waiting for its helpers.
Uploads& uploads() {
  static auto* u = new Uploads();
  return *u;
}

void free_ring(Ring& ring) {
  for (int s = 0; s < kSlots; ++s) {
    if (ring.buffers[s] != nullptr) (void)cudaFreeHost(ring.buffers[s]);
    if (ring.drained[s] != nullptr) (void)cudaEventDestroy(ring.drained[s]);
  }
}

// The ring of `device` (created on first use, with `device` current), and the team; NULL when
// they cannot be set up (logged once per device): the driver then copies, as without staging.
Ring* ring_of(int32_t device) {
  Uploads& u = uploads();
  std::lock_guard lock(u.mutex);
  const auto d = static_cast<size_t>(device);
  if (u.rings.size() <= d) {
    u.rings.resize(d + 1);
    u.unavailable.resize(d + 1, false);
  }
  if (u.unavailable[d]) return nullptr;
  auto& ring = u.rings[d];
  if (ring && u.team) return ring.get();
  std::string failure;
  if (!u.team) {
    try {
      u.team = std::make_unique<plugin::ParallelCopy>(u.threads.load());
    } catch (const std::exception& e) {
      failure = std::string("its copy threads could not start (") + e.what() + ")";
    }
  }
  if (failure.empty() && !ring) {
    auto fresh = std::make_unique<Ring>();
    cudaError_t err = cudaSuccess;
    for (int s = 0; s < kSlots && err == cudaSuccess; ++s) {
      // Portable: the buffers stay pinned for every device's context.
      err = cudaHostAlloc(&fresh->buffers[s], kChunk, cudaHostAllocPortable);
      if (err == cudaSuccess) err = cudaEventCreateWithFlags(&fresh->drained[s], cudaEventDisableTiming | event_wait_flags());
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      free_ring(*fresh);
      failure = std::string("its pinned buffers could not be set up (") + cudaGetErrorString(err) + ")";
    } else {
      ring = std::move(fresh);
    }
  }
  if (!failure.empty()) {
    u.unavailable[d] = true;
    log_message(FL_LOG_WARN, "cuda plugin: device " + std::to_string(device) + ": large copies from pageable "
                             "memory go through the driver: " + failure);
    return nullptr;
  }
  return ring.get();
}

}  // namespace

int default_pageable_upload_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return cpus <= 2 ? 0 : std::min(kDefaultThreads, cpus / 2);
}

void configure_pageable_uploads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "copy_threads=" + std::to_string(threads) + " is not in 0.." +
                                               std::to_string(kMaxThreads));
  Uploads& u = uploads();
  std::lock_guard lock(u.mutex);
  u.team.reset();
  u.threads = threads;
}

bool stages_upload(int32_t device, const void* dst, const void* src, size_t size) {
  if (uploads().threads == 0 || size < kStagedUploadMinBytes) return false;
  cudaPointerAttributes s{}, d{};
  if (cudaPointerGetAttributes(&s, src) != cudaSuccess || cudaPointerGetAttributes(&d, dst) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return s.type == cudaMemoryTypeUnregistered && d.type == cudaMemoryTypeDevice && d.device == device;
}

size_t upload_pageable(int32_t device, void* dst, const void* src, size_t size, gpuStream_t stream) {
  // A stream capturing a graph would record copies out of the ring's buffers, which a replay
  // would read whatever they then hold: the driver's path refuses pageable memory there.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (capture != cudaStreamCaptureStatusNone) return 0;
  Ring* ring = ring_of(device);
  if (ring == nullptr) return 0;
  plugin::ParallelCopy& team = *uploads().team;
  std::lock_guard lock(ring->mutex);
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  size_t offset = 0;
  bool queued = false;
  try {
    while (offset < size) {
      const int s = ring->next;
      const size_t n = std::min(kChunk, size - offset);
      if (ring->used[s]) {
        // A buffer still read by a copy queued on another stream: waiting here would tie this
        // stream to that one's backlog, which the driver's path does not; it copies the rest.
        if (ring->stream_of[s] != stream) {
          const cudaError_t q = cudaEventQuery(ring->drained[s]);
          if (q == cudaErrorNotReady) {
            (void)cudaGetLastError();
            break;
          }
          check_gpu(q, "cudaEventQuery (upload ring)");
        }
        // The DMA that last read this buffer (this upload's or an earlier one's) has finished.
        check_gpu(cudaEventSynchronize(ring->drained[s]), "cudaEventSynchronize (upload ring)");
      }
      team.copy(ring->buffers[s], in + offset, n);
      check_gpu(cudaMemcpyAsync(out + offset, ring->buffers[s], n, cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync (staged)");
      queued = true;
      check_gpu(cudaEventRecord(ring->drained[s], stream), "cudaEventRecord (upload ring)");
      ring->used[s] = true;
      ring->stream_of[s] = stream;
      ring->next = (s + 1) % kSlots;
      offset += n;
    }
  } catch (...) {
    // No DMA out of a ring buffer may be left untracked: the next upload would refill it.
    if (queued) (void)cudaStreamSynchronize(stream);
    throw;
  }
  return offset;
}

void shutdown_pageable_uploads() {
  Uploads& u = uploads();
  std::lock_guard lock(u.mutex);
  for (auto& ring : u.rings) {
    if (!ring) continue;
    for (int s = 0; s < kSlots; ++s)
      if (ring->used[s]) (void)cudaEventSynchronize(ring->drained[s]);
    free_ring(*ring);
  }
  u.rings.clear();
  u.unavailable.clear();
  u.team.reset();
}

}  // namespace fl::cuda
