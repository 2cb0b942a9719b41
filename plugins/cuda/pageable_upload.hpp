// pageable_upload.hpp — host-to-device copies from pageable memory, staged by the plugin.
//
// The CUDA driver stages a copy from pageable memory through its own pinned buffers with one
// host thread: 6.3 GB/s on the H200 host, against 55 GB/s from pinned memory. Here the copy
// goes in 8 MiB chunks through a ring of three pinned buffers per device, each filled by a
// small team of host threads while the DMA reads the one before
// (bench/cuda_pageable_staging.cu measured 26 GB/s with 4 threads, 30 GB/s with 8).
#pragma once

#include "gpu_runtime.h"

#include <cstddef>
#include <cstdint>

namespace fl::cuda {

// Copies of at least this many bytes are staged; smaller ones go to the driver.
constexpr size_t kStagedUploadMinBytes = size_t{4} << 20;

// Sets the host threads that fill the ring (the copy_threads= option, or
// FL_CUDA_COPY_THREADS; default 4): 0 leaves every copy to the driver. Called by init only.
void configure_pageable_uploads(int threads);

// The threads configured (0: staging off).
int pageable_upload_threads();

// True when a copy of `size` bytes from `src` to `dst` is one this module stages: staging is
// on, the size is at least kStagedUploadMinBytes, `src` is pageable host memory (not pinned,
// registered, managed or device memory) and `dst` is memory of `device`.
bool stages_upload(int32_t device, const void* dst, const void* src, size_t size);

// Copies `size` bytes from pageable `src` to device memory `dst` of `device` on `stream`,
// ordered like any copy on that stream. Returns once every byte of `src` has been read (the
// caller may then change or free it); the last chunks' DMAs may still be queued on `stream`.
// Thread-safe: uploads to one device run one at a time; different devices in parallel.
void upload_pageable(int32_t device, void* dst, const void* src, size_t size, gpuStream_t stream);

// Frees the rings and stops the threads (plugin shutdown; no upload may be running).
void shutdown_pageable_uploads();

}  // namespace fl::cuda
