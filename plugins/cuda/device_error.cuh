// device_error.cuh — the device side of device_error.hpp: report_out_of_range, which a kernel
// calls for an index it cannot use (it then skips that element as before).
#pragma once

#include "device_error.hpp"

namespace fl::cuda {

// `dim`: the dimension indexed (-1 for a loss's target), for the message.
__device__ inline void report_out_of_range(const DeviceErrorSink& sink, CheckedOp op, int32_t dim, int64_t value,
                                           int64_t bound) {
  if (sink.claim == nullptr) return;
  // A plain read first: when a whole tensor of indices is bad, only the first threads pay for
  // the atomic.
  if (*static_cast<volatile unsigned int*>(sink.claim) != 0u) return;
  if (atomicCAS(sink.claim, 0u, 1u) != 0u) return;
  volatile DeviceErrorRecord* r = sink.record;
  r->op = static_cast<int32_t>(op);
  r->dim = dim;
  r->value = value;
  r->bound = bound;
  r->stream = sink.stream;
  __threadfence_system();
  r->ready = 1;
}

}  // namespace fl::cuda
