// cpu_fallback.h — tier 3 of the router: run the op's CPU kernel. Read-only fl tensors are
// seen by the host directly when the device memory is host-accessible (no copy), otherwise
// copied to host memory; tensors the op writes are written in place on host-accessible
// devices (in-place ops) or copied back afterwards (out= arguments, which the CPU kernel may
// resize); fresh results are copied to the device; `device=fl` arguments become CPU. Waits for
// the device's current stream first.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace fl::binding {

// `host_backend`: the kernel to run, CPU for dense ops, SparseCPU for sparse COO ones and
// SparseCsrCPU for sparse compressed ones (sparse_ops.cpp). A tensor that appears twice (smm passes its result as both self and out=)
// gets one host copy, so the kernel sees the aliasing the caller set up.
void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device,
                      c10::DispatchKey host_backend = c10::DispatchKey::CPU);

}  // namespace fl::binding
