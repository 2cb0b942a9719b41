// scan.cu — cumsum.out(self, int dim, *, ScalarType? dtype): out[..., i, ...] = the sum of
// self[..., 0..i, ...] along dim. Each element of self is first converted to out's dtype (the
// core sizes out with dtype, or int64 for an integral or bool self), as ATen does, then summed
// in float for float16/bfloat16, in double for float32 and float64 (ATen's CUDA kernel sums
// float32 in float; double costs the H200 little and gives the CPU plugin's and ATen's CPU
// results), and in int64 for integers; every partial sum is rounded to out's dtype.
// Two kernels, any strides in and out:
//  - a thread per line, summing in order (many lines, or short ones);
//  - a block per line for long lines: tiles of 256 elements, each an inclusive scan in shared
//    memory (Hillis-Steele) plus the carry of the tiles before. The association differs from
//    the serial order, so float results can differ from the CPU's in the last bits.
// Both read an element before writing it, so in place (out is self) is served. A bool out is
// declined. Not tuned: a single very long line runs on one block.
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "strided_offsets.cuh"

#include <algorithm>
#include <string>
#include <type_traits>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

// Lines along dim: the offsets of out and self at each line's first element.
struct ScanLines {
  StridedOffsets<2> starts;
  int64_t count = 0;
  int64_t length = 0;
  int64_t out_step = 0;  // strides along dim
  int64_t in_step = 0;
};

template <class T>
using scan_acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, std::conditional_t<is_half_type_v<T>, float, double>>;

template <class T, class Acc>
__global__ void cumsum_line_per_thread(ScanLines lines, const void* in, fl_dtype_t in_dtype, T* out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; line < lines.count; line += step) {
    int64_t off[2];
    lines.starts.at(line, off);
    Acc sum = Acc(0);
    for (int64_t i = 0; i < lines.length; ++i) {
      sum += convert<Acc>(load_as<T>(in, off[1] + i * lines.in_step, in_dtype));
      out[off[0] + i * lines.out_step] = convert<T>(sum);
    }
  }
}

template <class T, class Acc>
__global__ void cumsum_line_per_block(ScanLines lines, const void* in, fl_dtype_t in_dtype, T* out) {
  __shared__ Acc partial[2][kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  for (int64_t line = blockIdx.x; line < lines.count; line += gridDim.x) {
    int64_t off[2];
    lines.starts.at(line, off);
    Acc carry = Acc(0);
    for (int64_t base = 0; base < lines.length; base += kThreads) {
      const int64_t i = base + tid;
      partial[0][tid] = i < lines.length ? convert<Acc>(load_as<T>(in, off[1] + i * lines.in_step, in_dtype)) : Acc(0);
      __syncthreads();
      int cur = 0;
      for (int shift = 1; shift < kThreads; shift <<= 1) {
        Acc x = partial[cur][tid];
        if (tid >= shift) x += partial[cur][tid - shift];
        partial[cur ^ 1][tid] = x;
        cur ^= 1;
        __syncthreads();
      }
      if (i < lines.length) out[off[0] + i * lines.out_step] = convert<T>(carry + partial[cur][tid]);
      carry += partial[cur][kThreads - 1];
      __syncthreads();  // every thread has read the tile's total before the next tile's writes
    }
  }
}

}  // namespace

// cumsum.out(self, dim, *, dtype) -> out
FL_CUDA_KERNEL(k_cumsum_out) {
  return plugin::guard([&] {
    const char* name = "aten::cumsum";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const int32_t dim = normalize_dim(a.integer(1), self.ndim, name);
    const fl_tensor& out = a.output(0);
    if (out.ndim != self.ndim || !std::equal(self.shape, self.shape + self.ndim, out.shape))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output shape differs from self's");
    if (!is_real_dtype(self.dtype)) unsupported_dtype(name, self.dtype);
    if (!is_real_dtype(out.dtype) || out.dtype == FL_DTYPE_BOOL) unsupported_dtype(name, out.dtype);
    if (overlaps(out, self) && !same_elements(out, self))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": an output that partly overlaps self");
    ScanLines lines;
    lines.length = 1;  // a 0-dim tensor: one line of one element
    for (int32_t d = 0; d < self.ndim; ++d) {
      if (d == dim) {
        lines.length = self.shape[d];
        lines.out_step = out.strides[d];
        lines.in_step = self.strides[d];
      } else {
        lines.starts.add_dim(self.shape[d], {out.strides[d], self.strides[d]}, name);
      }
    }
    lines.count = lines.starts.positions();
    if (plugin::numel(self) == 0) return;
    // A block per line when lines are long and either few or contiguous along dim.
    const bool per_block = lines.length >= 256 && (lines.count < 8192 || lines.in_step == 1);
    const void* in = plugin::data_ptr<const void>(self);
    auto launch = [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = scan_acc_t<T>;
      T* o = plugin::data_ptr<T>(out);
      if (per_block) {
        const auto grid = static_cast<unsigned>(std::min<int64_t>(lines.count, std::max<int64_t>(ctx.sm_count, 1) * 16));
        cumsum_line_per_block<T, Acc><<<grid, kThreads, 0, ctx.stream>>>(lines, in, self.dtype, o);
      } else {
        cumsum_line_per_thread<T, Acc><<<grid_for(lines.count, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            lines, in, self.dtype, o);
      }
    };
    switch (out.dtype) {
      case FL_DTYPE_INT64: launch(TypeTag<int64_t>{}); break;
      case FL_DTYPE_INT32: launch(TypeTag<int32_t>{}); break;
      case FL_DTYPE_INT16: launch(TypeTag<int16_t>{}); break;
      case FL_DTYPE_INT8: launch(TypeTag<int8_t>{}); break;
      case FL_DTYPE_UINT8: launch(TypeTag<uint8_t>{}); break;
      default:
        if (!dispatch_float(out.dtype, launch)) unsupported_dtype(name, out.dtype);
    }
    check_launch(per_block ? "cumsum_line_per_block" : "cumsum_line_per_thread");
  });
}

}  // namespace fl::cuda
