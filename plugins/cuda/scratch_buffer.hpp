// scratch_buffer.hpp — temporary device memory ordered on a stream (cudaMallocAsync from the
// device's default pool, freed with cudaFreeAsync on the same stream when the owner goes out
// of scope, after the work that uses it has been enqueued).
#pragma once

#include "gpu_check.hpp"
#include "gpu_runtime.h"

#include <cstddef>

namespace fl::cuda {

class ScratchBuffer {
 public:
  ScratchBuffer(size_t bytes, gpuStream_t stream) : stream_(stream) {
    if (bytes > 0) check_gpu(gpuMallocAsync(&ptr_, bytes, stream), "cudaMallocAsync (scratch)");
  }
  ~ScratchBuffer() {
    if (ptr_ != nullptr) (void)gpuFreeAsync(ptr_, stream_);
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  template <class T = void>
  T* get() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  gpuStream_t stream_;
};

}  // namespace fl::cuda
