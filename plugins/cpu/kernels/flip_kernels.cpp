// flip_kernels.cpp — flip.out(self, int[] dims): out[p] = self[p with p[d] -> size(d) - 1 - p[d]
// for each d in dims]. Any strides in and out, any dtype (elements moved as bytes); negative
// dims wrap, a dim listed twice is ATen's error, no dims is a copy. A flipped dim is read
// through a negated stride from its last element, so the loop is a plain strided copy.
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "strided_walk.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

void flip_out(const fl_kernel_call* call) {
  const char* op = "aten::flip.out";
  Args args(call);
  const TensorDesc self = describe(args.tensor(0), op);
  const std::vector<int64_t> dims = args.ints(1);
  const TensorDesc out = describe(args.output(0), op);
  if (self.host_scalar) unsupported(op, "a host value where a device tensor is expected");
  if (out.dtype != self.dtype) unsupported(op, "output dtype differs from self's");
  if (out.ndim != self.ndim || !std::equal(self.shape, self.shape + self.ndim, out.shape))
    invalid(op, "output " + shape_string(out) + " differs from self " + shape_string(self));
  bool flipped[kMaxDims] = {};
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, self.ndim, op);
    if (flipped[w]) invalid(op, "dim " + std::to_string(w) + " appears multiple times in the list of dims");
    flipped[w] = true;
  }
  if (self.numel() == 0) return;
  // Rows of the innermost dim (a 0-dim tensor: one row of one element), walked over the others.
  const int inner_dim = self.ndim - 1;
  const int64_t row = self.ndim > 0 ? self.shape[inner_dim] : 1;
  int64_t out_step = 0, in_step = 0, in_origin = 0;
  StridedWalk<2> rows;
  for (int d = 0; d < self.ndim; ++d) {
    const int64_t in_stride = flipped[d] ? -self.strides[d] : self.strides[d];
    if (flipped[d]) in_origin += (self.shape[d] - 1) * self.strides[d];
    if (d == inner_dim) {
      out_step = out.strides[d];
      in_step = in_stride;
    } else {
      rows.add_dim(self.shape[d], {out.strides[d], in_stride});
    }
  }
  const size_t element = plugin::dtype_size(self.dtype);
  const char* src = self.data + in_origin * static_cast<int64_t>(element);
  char* dst = out.data;
  submit(call, [=] {
    const auto e = static_cast<int64_t>(element);
    parallel_for(rows.positions(), std::max<int64_t>(1, kParallelGrain / row), [&](int64_t begin, int64_t end) {
      StridedWalk<2> w = rows;
      w.seek(begin);
      for (int64_t r = begin; r < end; ++r, w.next()) {
        char* o = dst + w.offset[0] * e;
        const char* i = src + w.offset[1] * e;
        for (int64_t j = 0; j < row; ++j) copy_element(o + j * out_step * e, i + j * in_step * e, element);
      }
    });
  });
}

}  // namespace

void register_flip_kernels(KernelRegistry& r) {
  r.add("aten::flip.out", kAllMask, FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_STRIDED_OUTPUTS | FL_KERNEL_DETERMINISTIC,
        guarded<flip_out>);
}

}  // namespace fl::cpu::kernels
