// triangle_kernels.cpp — tril.out and triu.out (self, int diagonal): the lower (upper)
// triangle of each matrix in the last two dims, zeros elsewhere. Contiguous tensors of any
// dtype; elements are copied as bytes, and zero bytes are every dtype's zero.
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

void triangle_out(const fl_kernel_call* call, const char* op, bool lower) {
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  const int64_t diagonal = args.integer(1);
  if (self.ndim < 2) invalid(op, "input tensor must have at least 2 dimensions");
  if (out.dtype != self.dtype) unsupported(op, "output dtype differs from the input's");
  if (out.ndim != self.ndim || !std::equal(self.shape, self.shape + self.ndim, out.shape))
    invalid(op, "output " + shape_string(out) + " differs from the input " + shape_string(self));
  if (self.numel() == 0) return;
  if (!self.contiguous() || !out.contiguous()) unsupported(op, "non-contiguous tensors");
  const int64_t rows = self.shape[self.ndim - 2], cols = self.shape[self.ndim - 1];
  const int64_t all_rows = self.numel() / cols;
  const size_t element = plugin::dtype_size(self.dtype);
  const char* src = self.data;
  char* dst = out.data;
  submit(call, [=] {
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / cols);
    parallel_for(all_rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t i = r % rows;
        // Kept columns [keep_begin, keep_end): j - i <= diagonal (lower), j - i >= diagonal (upper).
        const int64_t keep_begin = lower ? 0 : std::clamp<int64_t>(i + diagonal, 0, cols);
        const int64_t keep_end = lower ? std::clamp<int64_t>(i + diagonal + 1, 0, cols) : cols;
        const char* s = src + static_cast<size_t>(r * cols) * element;
        char* d = dst + static_cast<size_t>(r * cols) * element;
        std::memset(d, 0, static_cast<size_t>(keep_begin) * element);
        if (keep_end > keep_begin && s != d)
          std::memcpy(d + keep_begin * element, s + keep_begin * element,
                      static_cast<size_t>(keep_end - keep_begin) * element);
        std::memset(d + keep_end * element, 0, static_cast<size_t>(cols - keep_end) * element);
      }
    });
  });
}

void tril_out(const fl_kernel_call* call) { triangle_out(call, "aten::tril.out", true); }
void triu_out(const fl_kernel_call* call) { triangle_out(call, "aten::triu.out", false); }

}  // namespace

void register_triangle_kernels(KernelRegistry& r) {
  const uint32_t f = FL_KERNEL_DETERMINISTIC | FL_KERNEL_ALIASING_OK;  // in place: rows are read before written
  r.add("aten::tril.out", kAllMask, f, guarded<tril_out>);
  r.add("aten::triu.out", kAllMask, f, guarded<triu_out>);
}

}  // namespace fl::cpu::kernels
