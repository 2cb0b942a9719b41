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

// The threads used without copy_threads= or FL_CUDA_COPY_THREADS: 4, or half the CPUs this
// process may run on when that is fewer; none (the driver copies) with 2 CPUs or fewer.
int default_pageable_upload_threads();

// Sets the host threads that fill the ring (the copy_threads= option, or
// FL_CUDA_COPY_THREADS): 0 leaves every copy to the driver. Called by init only.
void configure_pageable_uploads(int threads);

// True when a copy of `size` bytes from `src` to `dst` is one this module stages: staging is
// on, the size is at least kStagedUploadMinBytes, `src` is pageable host memory (not pinned,
// registered, managed or device memory) and `dst` is memory of `device`.
bool stages_upload(int32_t device, const void* dst, const void* src, size_t size);

// Copies the first bytes of `size` from pageable `src` to device memory `dst` of `device` on
// `stream`, ordered like any copy on that stream, and returns how many: all of them, or fewer
// when the rest must go through the driver (the ring or its threads could not be set up, the
// stream is capturing a graph, or a buffer is still read by a copy queued on another stream).
// Returns once the bytes it copied have been read from `src`; the last chunks' DMAs may still
// be queued on `stream`. Thread-safe: uploads to one device run one at a time, and all
// devices share one team of threads, so their host copies run one at a time too.
size_t upload_pageable(int32_t device, void* dst, const void* src, size_t size, gpuStream_t stream);

// Frees the rings and stops the threads (plugin shutdown; no upload may be running). Not run
// at process exit: the state is left for the OS there, as a daemon thread may be uploading.
void shutdown_pageable_uploads();

}  // namespace fl::cuda
