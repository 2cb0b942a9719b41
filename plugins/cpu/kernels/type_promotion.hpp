// type_promotion.hpp — ATen's result_type rules for the dtypes the CPU plugin stores:
// dimensioned tensors outrank 0-dim tensors, which outrank wrapped numbers (0-dim host
// values), and a lower-priority operand only promotes across categories (bool < int < float).
// A wrapped floating number counts as the default dtype (float32). Complex is not handled.
#pragma once

#include "tensor_desc.hpp"

#include <initializer_list>

namespace fl::cpu::kernels {

// Pairwise promotion (torch.promote_types) over the non-complex dtypes.
fl_dtype_t promote_types(fl_dtype_t a, fl_dtype_t b);

// torch.result_type over the tensor operands (null pointers are skipped).
fl_dtype_t result_type(std::initializer_list<const TensorDesc*> operands);

}  // namespace fl::cpu::kernels
