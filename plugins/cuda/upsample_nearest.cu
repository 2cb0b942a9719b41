// upsample_nearest.cu — nearest-neighbour upsampling of (N, C, H, W) tensors of any strides,
// forward and backward, in ATen's two modes: "nearest" (upsample_nearest2d: source row
// floor(dst * scale)) and "nearest-exact" (_upsample_nearest_exact2d: floor((dst + 0.5) *
// scale)), in float as ATen's CUDA kernels (UpSample.cuh), capped at the last row/column.
// The forward copies elements of any dtype (one thread per output element). The backward
// gives each input pixel one thread, which sums the gradients of the outputs that read it
// (a contiguous range of rows and of columns, since the source index never decreases), in
// output order: no atomics, reproducible, and the same order as the CPU plugin's sums.
// Threads run over the channel fastest when the written tensor is channels_last.
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

#include <cstdint>
#include <string>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

struct Upsample4 {
  int64_t n, c, h, w;   // input sizes
  int64_t oh, ow;       // output sizes
  int64_t is[4];        // strides of the input (forward) or grad_input (backward), (n, c, h, w)
  int64_t os[4];        // strides of the output (forward) or grad_output (backward)
  float scale_h, scale_w;
  bool exact;           // "nearest-exact"
  bool channel_fastest;
};

__device__ __forceinline__ int64_t source_index(int64_t dst, int64_t in_size, float scale, bool exact) {
  const float pos = exact ? (static_cast<float>(dst) + 0.5f) * scale : static_cast<float>(dst) * scale;
  const int64_t src = static_cast<int64_t>(floorf(pos));
  return src < in_size - 1 ? src : in_size - 1;
}

// The first output index in [0, out_size] whose source index is >= i (out_size when none).
__device__ __forceinline__ int64_t first_output_reading(int64_t i, int64_t in_size, int64_t out_size, float scale,
                                                        bool exact) {
  int64_t o = static_cast<int64_t>(ceilf(static_cast<float>(i) / scale));
  o = o < 0 ? 0 : (o > out_size ? out_size : o);
  while (o > 0 && source_index(o - 1, in_size, scale, exact) >= i) --o;
  while (o < out_size && source_index(o, in_size, scale, exact) < i) ++o;
  return o;
}

// Splits linear index `i` over (n, c, a, b) in the thread order.
__device__ __forceinline__ void split_index(int64_t i, const Upsample4& p, int64_t a_size, int64_t b_size, int64_t& n,
                                            int64_t& c, int64_t& a, int64_t& b) {
  if (p.channel_fastest) {
    c = i % p.c; i /= p.c;
    b = i % b_size; i /= b_size;
    a = i % a_size; n = i / a_size;
  } else {
    b = i % b_size; i /= b_size;
    a = i % a_size; i /= a_size;
    c = i % p.c; n = i / p.c;
  }
}

template <class E>  // an unsigned integer of the element's size: the forward only copies
__global__ void upsample_nearest_forward(const E* __restrict__ in, E* __restrict__ out, Upsample4 p, int64_t total) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t n, c, y, x;
    split_index(i, p, p.oh, p.ow, n, c, y, x);
    const int64_t sy = source_index(y, p.h, p.scale_h, p.exact), sx = source_index(x, p.w, p.scale_w, p.exact);
    out[n * p.os[0] + c * p.os[1] + y * p.os[2] + x * p.os[3]] =
        in[n * p.is[0] + c * p.is[1] + sy * p.is[2] + sx * p.is[3]];
  }
}

template <class T>
__global__ void upsample_nearest_backward(const T* __restrict__ dy, T* __restrict__ dx, Upsample4 p, int64_t total) {
  using Acc = acc_type_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t n, c, h, w;
    split_index(i, p, p.h, p.w, n, c, h, w);
    const int64_t y0 = first_output_reading(h, p.h, p.oh, p.scale_h, p.exact);
    const int64_t y1 = first_output_reading(h + 1, p.h, p.oh, p.scale_h, p.exact);
    const int64_t x0 = first_output_reading(w, p.w, p.ow, p.scale_w, p.exact);
    const int64_t x1 = first_output_reading(w + 1, p.w, p.ow, p.scale_w, p.exact);
    const T* base = dy + n * p.os[0] + c * p.os[1];
    Acc s = 0;
    for (int64_t y = y0; y < y1; ++y)
      for (int64_t x = x0; x < x1; ++x) s += convert<Acc>(base[y * p.os[2] + x * p.os[3]]);
    dx[n * p.is[0] + c * p.is[1] + h * p.is[2] + w * p.is[3]] = convert<T>(s);
  }
}

// ATen's compute_scales_value<float>: 1 / scale when the caller gave one, else in / out.
float source_scale(const Args& a, int32_t index, int64_t in_size, int64_t out_size) {
  if (!a.is_none(index)) {
    const double s = a.number(index);
    if (s > 0.) return static_cast<float>(1.0 / s);
  }
  return static_cast<float>(in_size) / static_cast<float>(out_size);
}

// The geometry of input `in` and output `out` (both 4-D); scales at `scales_at`, `+ 1`.
Upsample4 geometry(const Args& a, const fl_tensor& in, const fl_tensor& out, int32_t scales_at, bool exact,
                   const char* name) {
  if (in.ndim != 4 || out.ndim != 4) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": only 4-D tensors");
  if (in.shape[0] != out.shape[0] || in.shape[1] != out.shape[1])
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": batch/channel sizes differ");
  Upsample4 p{};
  p.n = in.shape[0]; p.c = in.shape[1]; p.h = in.shape[2]; p.w = in.shape[3];
  p.oh = out.shape[2]; p.ow = out.shape[3];
  for (int d = 0; d < 4; ++d) {
    p.is[d] = in.strides[d];
    p.os[d] = out.strides[d];
  }
  if ((p.h == 0 || p.w == 0) && p.oh * p.ow > 0)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": empty input, non-empty output");
  p.scale_h = source_scale(a, scales_at, p.h, p.oh);
  p.scale_w = source_scale(a, scales_at + 1, p.w, p.ow);
  p.exact = exact;
  return p;
}

// upsample_nearest2d.out / _upsample_nearest_exact2d.out(self, output_size, scales_h?, scales_w?)
fl_status_t run_forward(const fl_kernel_call* call, bool exact, const char* name) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    const fl_tensor& out = a.output(0);
    if (out.dtype != in.dtype) unsupported_dtype(name, out.dtype);
    Upsample4 p = geometry(a, in, out, 2, exact, name);
    p.channel_fastest = p.os[1] == 1 && p.c > 1;
    const int64_t total = plugin::numel(out);
    if (total == 0) return;
    const unsigned grid = grid_for(total, kThreads, ctx);
    auto launch = [&](auto element) {
      using E = decltype(element);
      upsample_nearest_forward<E><<<grid, kThreads, 0, ctx.stream>>>(plugin::data_ptr<const E>(in),
                                                                      plugin::data_ptr<E>(out), p, total);
    };
    switch (plugin::dtype_size(in.dtype)) {
      case 1: launch(uint8_t{}); break;
      case 2: launch(uint16_t{}); break;
      case 4: launch(uint32_t{}); break;
      case 8: launch(uint64_t{}); break;
      default: unsupported_dtype(name, in.dtype);
    }
    check_launch("upsample_nearest_forward");
  });
}

// upsample_nearest2d_backward.grad_input / _upsample_nearest_exact2d_backward.grad_input
//   (grad_output, output_size, input_size, scales_h?, scales_w?)
fl_status_t run_backward(const fl_kernel_call* call, bool exact, const char* name) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& dy = device_tensor(a, 0, name);
    const fl_tensor& dx = a.output(0);
    if (dx.dtype != dy.dtype) unsupported_dtype(name, dx.dtype);
    const std::vector<int64_t> input_size = a.ints(2);
    if (input_size.size() != 4 || dx.ndim != 4)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": input_size must have 4 sizes");
    for (int d = 0; d < 4; ++d)
      if (dx.shape[d] != input_size[static_cast<size_t>(d)])
        plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": grad_input does not have input_size");
    Upsample4 p = geometry(a, dx, dy, 3, exact, name);
    p.channel_fastest = p.is[1] == 1 && p.c > 1;
    const int64_t total = plugin::numel(dx);
    const bool ok = dispatch_float(dy.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (total == 0) return;
      upsample_nearest_backward<T><<<grid_for(total, kThreads, ctx), kThreads, 0, ctx.stream>>>(
          plugin::data_ptr<const T>(dy), plugin::data_ptr<T>(dx), p, total);
      check_launch("upsample_nearest_backward");
    });
    if (!ok) unsupported_dtype(name, dy.dtype);
  });
}

}  // namespace

FL_CUDA_KERNEL(k_upsample_nearest2d) { return run_forward(call, false, "aten::upsample_nearest2d"); }
FL_CUDA_KERNEL(k_upsample_nearest_exact2d) { return run_forward(call, true, "aten::_upsample_nearest_exact2d"); }
FL_CUDA_KERNEL(k_upsample_nearest2d_backward) {
  return run_backward(call, false, "aten::upsample_nearest2d_backward");
}
FL_CUDA_KERNEL(k_upsample_nearest_exact2d_backward) {
  return run_backward(call, true, "aten::_upsample_nearest_exact2d_backward");
}

}  // namespace fl::cuda
