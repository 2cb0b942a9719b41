// pointwise_common.hpp — call-time glue shared by the elementwise kernels: turning ATen
// Scalar arguments into host-scalar operands, choosing the compute dtype as ATen does, and
// planning + enqueuing the loop.
#pragma once

#include "elementwise_engine.hpp"
#include "type_promotion.hpp"

#include <initializer_list>
#include <string>

namespace fl::cpu::kernels {

// An ATen Scalar (INT/DOUBLE/BOOL value, or a 0-dim host tensor) viewed as a 0-dim host
// operand. Not movable: desc.data points into the object.
class ScalarOperand {
 public:
  ScalarOperand(const plugin::Args& args, int32_t index, const char* op);
  ScalarOperand(const ScalarOperand&) = delete;
  ScalarOperand& operator=(const ScalarOperand&) = delete;
  const TensorDesc& desc() const { return desc_; }

 private:
  TensorDesc desc_;
  alignas(16) unsigned char storage_[16] = {};
};

// How the compute dtype relates to the operands.
enum class Promotion {
  kSame,        // compute in result_type(operands); the output has that dtype
  kIntToFloat,  // like kSame, but integer/bool results compute in float32 (true division,
                // sqrt, exp...); the output must be floating
  kCompare,     // compute in result_type(operands); the output is bool
};

using KernelSelector = ContigFn (*)(fl_dtype_t, const char*);
// select_kernel_opmath_b<Op>: a kernel whose second operand is float, for a 16-bit float
// compute dtype (nullptr otherwise).
using OpmathOperandSelector = ContigFn (*)(fl_dtype_t);

// Picks the compute dtype (throws NOT_SUPPORTED when the output dtype differs from ATen's),
// plans the loop over `inputs` (converted to the compute dtype) and enqueues it.
// `typing` lists the operands that take part in type promotion. With `opmath_b`, a second
// input of one element is converted to float instead, and opmath_b's kernel runs where it has
// one for the compute dtype (ATen's mul and div by a single value of a 16-bit float tensor).
void launch_pointwise(const fl_kernel_call* call, const char* op, const TensorDesc& out,
                      std::initializer_list<const TensorDesc*> typing,
                      std::initializer_list<const TensorDesc*> inputs, KernelSelector select,
                      Promotion promotion, std::initializer_list<Param> params = {},
                      OpmathOperandSelector opmath_b = nullptr);

// Same, with an explicit compute dtype for the inputs (e.g. where's bool condition is
// converted to the compute dtype of self/other).
void launch_pointwise_as(const fl_kernel_call* call, const char* op, const TensorDesc& out,
                         fl_dtype_t compute, std::initializer_list<const TensorDesc*> inputs,
                         KernelSelector select, std::initializer_list<Param> params = {});

// A unary entry's body: (self[, scalars as params]) -> out, Op over self.
template <template <class> class Op, uint64_t Mask, Promotion P>
void unary_body(const fl_kernel_call* call, const char* op, std::initializer_list<Param> params = {}) {
  plugin::Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&self}, {&self}, &select_kernel<Op, 1, Mask>, P, params);
}

// Defines entry FN as unary_body of fn::FUNCTOR (files that use it include pointwise_functors.hpp).
#define FL_CPU_UNARY_ENTRY(FN, OP_NAME, FUNCTOR, MASK, PROMOTION)       \
  void FN(const fl_kernel_call* call) {                                 \
    unary_body<fn::FUNCTOR, MASK, Promotion::PROMOTION>(call, OP_NAME); \
  }

// "none" -> 0, "tanh" -> 1, else INVALID_ARGUMENT (gelu's `approximate`).
int64_t gelu_approximation(const plugin::Args& args, int32_t index);

}  // namespace fl::cpu::kernels
