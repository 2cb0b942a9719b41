// op_router.h — the boxed kernel behind every ATen op on fl that has no explicit
// registration. Per call, the first tier that can serve it runs:
//   1. native   — the device plugin's kernel-table entry for the op (its out= overload);
//   2. generic  — a decomposition written once in terms of other ops (generic_kernels.h);
//   3. cpu      — the op's CPU kernel on host views/copies of the arguments (cpu_fallback.h);
//   4. error    — a NotImplementedError naming the op, the dtypes and the device.
// Tiers 2 and 3 are switchable in the config (`fallback:`); `strict` makes them errors.
// Every fallback is counted per op and warned about once.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>

namespace fl::binding {

void route_op(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The dtypes of the tensor arguments, for messages ("Float, Float sparse"); a Tensor[] argument
// shows as "[dtype]" by its first defined element (the foreach ops take lists of one dtype).
std::string dtypes_of(c10::ArrayRef<c10::IValue> args);

// The tier an op would take on a device for a given dtype, without running it
// ("native", "generic", "cpu_fallback" or "error").
std::string predict_tier(const std::string& qualified_op, int device, c10::ScalarType dtype);

// Profiling switch: while on, route_op accumulates wall time per op.
void set_profiling(bool on);
bool profiling();

}  // namespace fl::binding
