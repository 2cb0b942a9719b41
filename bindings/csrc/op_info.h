// op_info.h — what the router needs to know about an ATen operator, computed once per
// operator and cached: its form (functional, in-place, out=), the name of the kernel-table
// entry that serves it (the out= overload when there is one), and per-tier call counters.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <atomic>
#include <string>
#include <vector>

struct fl_kernel_entry;

namespace fl::binding {

enum class Tier : int { Native = 0, Generic = 1, CpuFallback = 2 };
constexpr int kTierCount = 3;
const char* tier_name(Tier tier);

enum class OpForm { Functional, InPlace, Out };

struct OpInfo {
  std::string name;            // "aten::add.Tensor"
  std::string kernel_name;     // "aten::add.out"
  OpForm form = OpForm::Functional;
  size_t num_arguments = 0;
  size_t num_out_arguments = 0;   // for OpForm::Out: the trailing out= arguments
  size_t num_returns = 0;
  std::atomic<bool> meta_unavailable{false};   // the Meta kernel failed once: skip native
  std::array<std::atomic<uint64_t>, kTierCount> calls{};
  std::atomic<uint64_t> nanoseconds{0};         // with the profiler on: host time
  std::atomic<uint64_t> device_nanoseconds{0};  // with device timing on (device_timer.h)
  std::atomic<bool> warned{false};
  std::atomic<bool> warned_sparse{false};       // the sparse fallbacks' warnings (sparse_ops.cpp): COO,
  std::atomic<bool> warned_sparse_compressed{false};  // and CSR, CSC, BSR, BSC
  bool explicitly_registered = false;           // registered on PrivateUse1 by name (not the fallback)
  // A convolution (its TF32 switch is torch.backends.cudnn.allow_tf32, as on CUDA, rather
  // than the matmul precision).
  bool convolution = false;
  // The values of its float arguments can size its outputs (arange(0.0, 1.0, 0.1), an
  // upsample's scale_factors): they are part of its output-metadata cache key. Elsewhere only
  // their type is (output_meta.cpp).
  bool float_values_size_outputs = false;
  // Tagged nondeterministic_seeded (native_dropout): a native call carries an RNG pair drawn
  // from the device's generator (fl_kernel_call.rng_seed/rng_offset).
  bool seeded = false;
  // Tagged pointwise (add_, mul_, clamp_...): TensorIterator ops, which refuse an output that
  // overlaps itself or partly overlaps an input; the router checks the same (op_router.cpp).
  bool pointwise = false;
  // cat: ATen refuses an out= whose elements overlap each other or any input's (the router
  // checks the same, with ATen's messages; the meta pass ran on meta tensors).
  bool refuses_overlapping_out = false;
  // Per plugin (by index in the runtime's plugin list): resolved table entry, or nullptr.
  std::vector<const fl_kernel_entry*> entries;
  std::atomic<bool> entries_resolved{false};
};

// The OpInfo of `op` (created on first use; lives for the process).
OpInfo& op_info(const c10::OperatorHandle& op);

// Every OpInfo created so far (for statistics).
std::vector<const OpInfo*> all_op_infos();

// The kernel-table name for an operator overload given as "aten::name.overload" (used by
// op_support queries): the out= overload when the operator has one.
std::string kernel_name_for(const std::string& qualified_name);

// Whether that operator is a convolution (OpInfo::convolution).
bool is_convolution(const std::string& qualified_name);

}  // namespace fl::binding
