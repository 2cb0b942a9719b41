// device_error.hpp — how a kernel reports a bad argument that only the device can see (an
// index out of range: checking it on the host would need the index tensor copied back first).
//
// The first thread that finds one claims the device's claim word (device memory, atomicCAS),
// writes what it found into the device's record (page-locked host memory mapped into the
// device's address space), fences, and sets `ready`. Every other report is dropped until the
// host has read that one. The host reads the record after each of its waits for the device
// (stream_synchronize, event_synchronize, device_synchronize; never after a query, which the
// core calls from paths that must not throw) and, when it is ready, clears it and fails that
// wait with FL_ERR_DEVICE naming the op, the index and the bound. ATen's CUDA kernels instead
// stop at a device-side assert, which leaves the CUDA context unusable; here the process goes on.
//
// Which wait reports it: the record names the stream the kernel ran on. stream_synchronize of
// that stream takes it, and device_synchronize (which waits for every stream) takes it whatever
// the stream; a wait for another stream, and event_synchronize (whose event does not say which
// stream it covers; the binding's pinned-memory cache and device timers wait on events), leave
// it for those. So the report reaches the thread that waits for the stream that ran the op, or
// the next wait for the whole device (a user's torch.fl.synchronize, but also the allocator's
// wait before it returns cached memory to the driver, which then raises it).
//
// Limits: one report outstanding per device (the first; the op's outputs are not valid); while
// it is, further reports from any stream are dropped. A kernel still running on another stream
// when the host clears the record may lose its report.
#pragma once

#include "gpu_runtime.h"

#include <cstdint>

namespace fl::cuda {

// The ops whose kernels report; the host turns the number back into the op's name.
enum class CheckedOp : int32_t {
  none = 0,
  index_select,
  gather,
  scatter,
  scatter_value,
  scatter_add,
  nll_loss_forward,
  nll_loss_backward,
};

// What the reporting thread found. Lives in mapped page-locked host memory.
struct DeviceErrorRecord {
  int32_t ready;  // 1 once the fields below are written (stored last, after a system fence)
  int32_t op;     // a CheckedOp
  int32_t dim;    // the indexed dimension (-1: none, as for a loss's target)
  int32_t unused;
  int64_t value;  // the index (or target) found
  int64_t bound;   // valid values are [0, bound)
  uint64_t stream; // the stream the kernel ran on (its gpuStream_t's bits)
};

// What a kernel is handed to report with: two device addresses (NULL: reports are dropped).
struct DeviceErrorSink {
  unsigned int* claim = nullptr;        // device memory: 0 until a thread claims the record
  DeviceErrorRecord* record = nullptr;  // the device's address of the mapped host record
  uint64_t stream = 0;                  // the launch's stream, written into the record
};

// One device's sink and the host side of it. Created at init with the device current.
struct DeviceErrorChannel {
  DeviceErrorSink sink;
  DeviceErrorRecord* host_record = nullptr;  // the host's address of the same record
  gpuStream_t clear_stream = nullptr;        // a private stream that resets the claim word
};

void create_device_error_channel(DeviceErrorChannel& channel);
void destroy_device_error_channel(DeviceErrorChannel& channel);  // never throws

// After a host wait for `device` returned: when a kernel left a report (on `stream`, or on any
// stream when `stream` is null: a wait for the whole device), clears it and raises FL_ERR_DEVICE
// with the op, the value and the bound. Callers hold no plugin lock.
void raise_pending_device_error(int32_t device, const gpuStream_t* stream);

}  // namespace fl::cuda
