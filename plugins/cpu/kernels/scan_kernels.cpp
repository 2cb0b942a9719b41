// scan_kernels.cpp — cumsum.out(self, int dim, *, ScalarType? dtype): out[..., i, ...] = the sum
// of self[..., 0..i, ...] along dim. As ATen's CPU kernel: self is first converted to out's
// dtype (the core sizes out with dtype, or int64 for an integral or bool self), then each line
// is summed in order in ATen's CPU accumulate type of that dtype (double for float32 and
// float64, float for float16/bfloat16, int64 for integers) and every partial sum is rounded
// to out's dtype. Lines along dim run in parallel. Any strides in and out; in place (out is
// self) is served (a line is read a chunk ahead of its writes); a bool out is declined.
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "strided_walk.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// ATen's at::acc_type<T, /*is_cuda=*/false>.
template <class T>
using cpu_acc_t = std::conditional_t<std::is_floating_point_v<T>, double,
                                     std::conditional_t<std::is_integral_v<T>, int64_t, float>>;

struct ScanLines {
  StridedWalk<2> walk;   // offsets of out and self at the start of each line
  int64_t length = 1;    // size along dim
  int64_t out_step = 0;  // strides along dim
  int64_t in_step = 0;
};

template <class T>
void cumsum_lines(const ScanLines& lines, const char* in, fl_dtype_t in_dtype, T* out) {
  using Acc = cpu_acc_t<T>;
  const ConvertFn to_out_dtype = converter(in_dtype, dtype_of<T>());
  const int64_t in_element = static_cast<int64_t>(plugin::dtype_size(in_dtype));
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / lines.length);
  parallel_for(lines.walk.positions(), grain, [&](int64_t begin, int64_t end) {
    StridedWalk<2> w = lines.walk;
    w.seek(begin);
    T chunk[kChunk];
    for (int64_t line = begin; line < end; ++line, w.next()) {
      Acc sum = Acc(0);
      T* o = out + w.offset[0];
      const char* i = in + w.offset[1] * in_element;
      for (int64_t c = 0; c < lines.length; c += kChunk) {
        const int64_t n = std::min<int64_t>(kChunk, lines.length - c);
        to_out_dtype(i + c * lines.in_step * in_element, lines.in_step * in_element, reinterpret_cast<char*>(chunk), n);
        for (int64_t t = 0; t < n; ++t) {
          sum += convert<Acc>(chunk[t]);
          o[(c + t) * lines.out_step] = convert<T>(sum);
        }
      }
    }
  });
}

void cumsum_out(const fl_kernel_call* call) {
  const char* op = "aten::cumsum.out";
  Args args(call);
  const TensorDesc self = describe(args.tensor(0), op);
  const int64_t dim = wrap_dim(args.integer(1), self.ndim, op);
  const TensorDesc out = describe(args.output(0), op);
  if (self.host_scalar) unsupported(op, "a host value where a device tensor is expected");
  if (out.ndim != self.ndim || !std::equal(self.shape, self.shape + self.ndim, out.shape))
    invalid(op, "output " + shape_string(out) + " differs from self " + shape_string(self));
  if (out.dtype == FL_DTYPE_BOOL) unsupported(op, "a bool output");
  if (overlaps(out, self) && !(out.dtype == self.dtype && same_elements(out, self)))
    unsupported(op, "an output that partly overlaps self");
  using Fn = void (*)(const ScanLines&, const char*, fl_dtype_t, char*);
  const Fn scan = dispatch<kArithmeticMask>(out.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](const ScanLines& l, const char* in, fl_dtype_t in_dtype, char* o) {
      cumsum_lines<T>(l, in, in_dtype, reinterpret_cast<T*>(o));
    };
  });
  converter(self.dtype, out.dtype);  // declines a dtype pair it cannot convert, before enqueuing
  if (self.numel() == 0) return;
  ScanLines lines;
  for (int d = 0; d < self.ndim; ++d) {
    if (d == dim) {
      lines.length = self.shape[d];
      lines.out_step = out.strides[d];
      lines.in_step = self.strides[d];
    } else {
      lines.walk.add_dim(self.shape[d], {out.strides[d], self.strides[d]});
    }
  }
  const char* in = self.data;
  const fl_dtype_t in_dtype = self.dtype;
  char* o = out.data;
  submit(call, [=] { scan(lines, in, in_dtype, o); });
}

}  // namespace

void register_scan_kernels(KernelRegistry& r) {
  // The mask is self's dtype; out's (its dtype argument) may be any but bool.
  r.add("aten::cumsum.out", kAllMask,
        FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_STRIDED_OUTPUTS | FL_KERNEL_ALIASING_OK | FL_KERNEL_DETERMINISTIC,
        guarded<cumsum_out>);
}

}  // namespace fl::cpu::kernels
