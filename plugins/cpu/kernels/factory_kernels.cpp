// factory_kernels.cpp — arange.start_out(start, end, step): out[i] = start + i * step, in
// double for floating outputs (float for the 16-bit ones, as ATen's acc type) and int64 for
// integral ones (start and step read as int64, exact past 2^53), then converted to the output
// dtype. Exact for integer-valued ranges; with a fractional step, float32, float16 and
// bfloat16 results can differ from ATen's vectorised CPU loop (which adds in the tensor's
// dtype) in the last bit.
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <string>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

template <class Acc>
void fill_range(char* dst, fl_dtype_t dtype, int64_t n, Acc start, Acc step) {
  const ConvertFn store = converter(std::is_floating_point_v<Acc> ? (sizeof(Acc) == 8 ? FL_DTYPE_FLOAT64 : FL_DTYPE_FLOAT32)
                                                                  : FL_DTYPE_INT64,
                                    dtype);
  const size_t element = plugin::dtype_size(dtype);
  parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    std::vector<Acc> values(static_cast<size_t>(end - begin));
    for (int64_t i = begin; i < end; ++i) values[static_cast<size_t>(i - begin)] = start + step * static_cast<Acc>(i);
    store(reinterpret_cast<const char*>(values.data()), sizeof(Acc), dst + static_cast<size_t>(begin) * element,
          end - begin);
  });
}

// An integral range's start or step: an int argument exactly (past 2^53 a double would
// round it), a floating one truncated as ATen converts it to int64.
int64_t integral_scalar(const Args& args, int32_t index, int64_t if_none) {
  if (args.is_none(index)) return if_none;
  if (args.at(index).kind == FL_VALUE_INT) return args.integer(index);
  return static_cast<int64_t>(args.number(index));
}

void arange_start_out(const fl_kernel_call* call) {
  const char* op = "aten::arange.start_out";
  Args args(call);
  TensorDesc out = describe(args.output(0), op);
  if (!out.contiguous()) unsupported(op, "non-contiguous output");
  if (out.dtype == FL_DTYPE_BOOL || out.dtype >= FL_DTYPE_COMPLEX64)
    unsupported(op, std::string("output dtype ") + plugin::dtype_name(out.dtype));
  const double start = args.number(0);
  const double step = args.is_none(2) ? 1.0 : args.number(2);
  const int64_t n = out.numel();
  if (n == 0) return;
  char* dst = out.data;
  const fl_dtype_t dtype = out.dtype;
  const int64_t int_start = integral_scalar(args, 0, 0), int_step = integral_scalar(args, 2, 1);
  submit(call, [=] {
    if (dtype == FL_DTYPE_FLOAT64 || dtype == FL_DTYPE_FLOAT32) fill_range<double>(dst, dtype, n, start, step);
    else if (is_floating(dtype))
      fill_range<float>(dst, dtype, n, static_cast<float>(start), static_cast<float>(step));
    else fill_range<int64_t>(dst, dtype, n, int_start, int_step);
  });
}

}  // namespace

void register_factory_kernels(KernelRegistry& r) {
  r.add("aten::arange.start_out", kArithmeticMask, FL_KERNEL_DETERMINISTIC, guarded<arange_start_out>);
}

}  // namespace fl::cpu::kernels
