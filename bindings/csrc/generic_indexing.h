// generic_indexing.h — a generic-tier kernel (see generic_kernels.h) for advanced indexing with
// integer index tensors, `x[idx]`, `x[:, idx]`, `x[rows, cols]` (aten::index.Tensor), written in
// ops every plugin serves natively. One index tensor is an index_select along its dimension.
// Several: the indexed dimensions are moved to the front and flattened, each element's position
// in them is computed from the broadcast index tensors, and index_select picks the rows.
// Negative indices wrap, as in ATen. The result has ATen's layout:
// the broadcast index shape replaces the indexed dimensions where they are adjacent, and goes
// first where they are not.
//
// Declined (false: the CPU fallback serves the call, as before): boolean or byte masks (`x[mask]`,
// whose result size depends on the data), and index tensors of other dtypes.
//
// An index out of range: with one index tensor, index_select reports it in ATen's words for that
// dimension; with several, the position is marked -1 and index_select reports "index -1 is out of
// bounds" for the flattened dimensions. Either way it raises (on a GPU, at the next wait for the
// device) and does not read out of bounds.
#pragma once

#include "generic_kernels.h"

namespace fl::binding {

// index.Tensor_out(self, indices: Tensor?[]) -> out
bool index_tensor(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);

// _index_put_impl.out(self, indices: Tensor?[], values, accumulate, unsafe) -> out (self itself for
// index_put_, `x[idx] = v`, and for indexing's backward, which accumulates): integer indices as
// above, through scatter (scatter_add when accumulating; with repeated indices and no
// accumulation any one write wins, as ATen leaves it open); or one boolean mask with a single
// value (`x[mask] = 0`), as where(mask, value, self). Other masks: the CPU fallback.
bool index_put(const std::vector<c10::IValue>& in, std::vector<at::Tensor>& out);

}  // namespace fl::binding
