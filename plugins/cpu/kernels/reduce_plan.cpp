// reduce_plan.cpp — plan_reduce: which input dims a reduction keeps and how they index.
#include "reduce_plan.hpp"

#include <string>

namespace fl::cpu::kernels {

ReducePlan plan_reduce(const char* op, const TensorDesc& in, std::vector<int64_t> dims,
                       bool empty_reduces_nothing) {
  ReducePlan p;
  p.in = in;
  bool reduced[kMaxDims] = {};
  if (dims.empty()) {
    for (int d = 0; d < in.ndim && !empty_reduces_nothing; ++d) reduced[d] = true;
  } else {
    for (int64_t d : dims) {
      int64_t w = wrap_dim(d, in.ndim, op);
      if (in.ndim == 0) continue;
      if (reduced[w]) invalid(op, "dim " + std::to_string(d) + " appears twice");
      reduced[w] = true;
    }
  }
  int64_t os = 1, rs = 1;
  for (int d = in.ndim - 1; d >= 0; --d) {
    if (reduced[d]) {
      p.reduce_stride[d] = rs;
      rs *= in.shape[d];
    } else {
      p.out_stride[d] = os;
      os *= in.shape[d];
    }
  }
  p.out_numel = os;
  p.reduce_numel = rs;
  return p;
}

}  // namespace fl::cpu::kernels
