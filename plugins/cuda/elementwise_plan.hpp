// elementwise_plan.hpp — host-side description of one elementwise launch: the output and up
// to kMaxInputs inputs broadcast to the output's shape (ATen rules), dims of size 1 dropped
// and mergeable dims coalesced, so the kernel indexes at most kMaxDims dims. An input may be
// a scalar instead of a tensor (a Scalar argument or a 0-dim host tensor, read at call time).
// The struct is passed by value to the kernels: everything it needs is copied in.
#pragma once

#include <fl_abi.h>

#include <cstdint>
#include <vector>

namespace fl::cuda {

constexpr int kMaxDims = 8;
constexpr int kMaxInputs = 4;

struct ElementwiseOperands {
  int32_t ndim = 0;
  int32_t num_inputs = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t out_strides[kMaxDims] = {};
  int64_t in_strides[kMaxInputs][kMaxDims] = {};
  void* out = nullptr;
  const void* in[kMaxInputs] = {};     // nullptr: input k is the scalar scalar[k]
  fl_dtype_t out_dtype = FL_DTYPE_FLOAT32;
  fl_dtype_t in_dtype[kMaxInputs] = {};
  double scalar[kMaxInputs] = {};
  // All tensor operands are dense in the output's order (one dim of stride 1 after
  // coalescing, or a single element): the kernel may use flat vectorised indexing.
  bool contiguous = false;
};

// One input of an elementwise op: a device tensor, or a scalar value.
struct ElementwiseInput {
  const fl_tensor* tensor = nullptr;  // nullptr: use `scalar`
  double scalar = 0.0;
  bool scalar_is_floating = false;   // the scalar came as a float (takes part in promotion)
};

// The arithmetic type a launch computes in.
enum class ComputeKind { Float, Double, Int };

// Builds the launch description. Raises FL_ERR_INVALID_ARGUMENT when an input cannot be
// broadcast to the output, FL_ERR_NOT_SUPPORTED for complex dtypes or more than kMaxDims
// dims left after coalescing.
ElementwiseOperands plan_elementwise(const fl_tensor& out, const std::vector<ElementwiseInput>& inputs);

bool is_floating_dtype(fl_dtype_t dtype);
bool is_real_dtype(fl_dtype_t dtype);  // not complex, known

// ATen-like promotion for the arithmetic: Double if any operand (or floating scalar) is
// float64, else Float if any is floating, else Int. `include_output` also counts the output.
ComputeKind compute_kind_for(const ElementwiseOperands& p, const std::vector<ElementwiseInput>& inputs,
                             bool include_output);

}  // namespace fl::cuda
