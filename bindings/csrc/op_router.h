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

#include "op_info.h"

#include <string>
#include <vector>

namespace fl::binding {

void route_op(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The dtypes of the tensor arguments, for messages ("Float, Float sparse"); a Tensor[] argument
// shows as "[dtype]" by its first defined element (the foreach ops take lists of one dtype).
std::string dtypes_of(c10::ArrayRef<c10::IValue> args);

// The tier an op would take on a device for a given dtype, without running it
// ("native", "generic", "cpu_fallback" or "error").
std::string predict_tier(const std::string& qualified_op, int device, c10::ScalarType dtype);

// For the ops the binding serves itself (attention_ops.cpp) rather than through route_op:
// calls the entry of `info` in the plugin of fl device `device` with these inputs (schema
// order) and outputs (allocated and sized), passing contiguous copies and temporaries where the
// entry's flags ask for them. False, with `why_not` saying why, when the plugin has no entry
// for the dtype of `inputs`' first tensor or declines the call; throws the plugin's error.
bool call_native_entry(OpInfo& info, c10::DeviceIndex device, const std::vector<c10::IValue>& inputs,
                       const std::vector<at::Tensor>& outputs, std::string& why_not);

// Whether the plugin of fl device `device` has an entry for `info` that lists `dtype`.
bool has_native_entry(OpInfo& info, c10::DeviceIndex device, c10::ScalarType dtype);

// Counts a served call in `tier`; a fallback tier is warned about once per op, with `why_not`
// (as route_op does for every other op).
void count_call(OpInfo& info, Tier tier, c10::DeviceIndex device, c10::ArrayRef<c10::IValue> args,
                const std::string& why_not);

// Profiling switch: while on, route_op accumulates wall time per op.
void set_profiling(bool on);
bool profiling();

}  // namespace fl::binding
