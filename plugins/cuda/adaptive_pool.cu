// adaptive_pool.cu — _adaptive_avg_pool2d and its backward for (N, C, H, W) or (C, H, W)
// tensors of any strides, any output size (window of output row i: [floor(i*H/OH),
// ceil((i+1)*H/OH)), as ATen). One thread per output element (forward) or per input element
// (backward, summing the windows that cover it: no atomics, reproducible). Threads run over
// the channel fastest when the input is channels_last (channel stride 1), so that a warp's
// loads are coalesced; otherwise in NCHW order. Sums in float (double for float64).
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

#include <string>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

struct Pool4 {
  int64_t n, c, h, w;            // input sizes
  int64_t oh, ow;                // output sizes
  int64_t is[4];                 // input strides (n, c, h, w)
  int64_t os[4];                 // output strides
  bool channel_fastest;          // thread order (n, h, w, c) instead of (n, c, h, w)
};

__device__ __forceinline__ int64_t window_start(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }
__device__ __forceinline__ int64_t window_end(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

// Splits linear index `i` over sizes (n, c, a, b) in the thread order.
__device__ __forceinline__ void split_index(int64_t i, const Pool4& p, int64_t a_size, int64_t b_size, int64_t& n,
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

template <class T>
__global__ void adaptive_avg_forward(const T* __restrict__ in, T* __restrict__ out, Pool4 p, int64_t total) {
  using Acc = acc_type_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t n, c, y, x;
    split_index(i, p, p.oh, p.ow, n, c, y, x);
    const int64_t h0 = window_start(y, p.oh, p.h), h1 = window_end(y, p.oh, p.h);
    const int64_t w0 = window_start(x, p.ow, p.w), w1 = window_end(x, p.ow, p.w);
    const T* base = in + n * p.is[0] + c * p.is[1];
    Acc s = 0;
    for (int64_t hh = h0; hh < h1; ++hh)
      for (int64_t ww = w0; ww < w1; ++ww) s += convert<Acc>(base[hh * p.is[2] + ww * p.is[3]]);
    out[n * p.os[0] + c * p.os[1] + y * p.os[2] + x * p.os[3]] =
        convert<T>(s / static_cast<Acc>((h1 - h0) * (w1 - w0)));
  }
}

// grad_input[n, c, h, w] = sum over output cells whose window covers (h, w) of dy / window size.
// Here p.is are grad_output's strides and p.os grad_input's.
template <class T>
__global__ void adaptive_avg_backward(const T* __restrict__ dy, T* __restrict__ dx, Pool4 p, int64_t total) {
  using Acc = acc_type_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t n, c, h, w;
    split_index(i, p, p.h, p.w, n, c, h, w);
    // Output rows whose window can contain h: from floor(h*OH/H) to ceil((h+1)*OH/H).
    const int64_t y0 = (h * p.oh) / p.h, y1 = ((h + 1) * p.oh + p.h - 1) / p.h;
    const int64_t x0 = (w * p.ow) / p.w, x1 = ((w + 1) * p.ow + p.w - 1) / p.w;
    const T* base = dy + n * p.is[0] + c * p.is[1];
    Acc s = 0;
    for (int64_t y = y0; y < y1 && y < p.oh; ++y) {
      const int64_t hs = window_start(y, p.oh, p.h), he = window_end(y, p.oh, p.h);
      if (h < hs || h >= he) continue;
      for (int64_t x = x0; x < x1 && x < p.ow; ++x) {
        const int64_t ws = window_start(x, p.ow, p.w), we = window_end(x, p.ow, p.w);
        if (w < ws || w >= we) continue;
        s += convert<Acc>(base[y * p.is[2] + x * p.is[3]]) / static_cast<Acc>((he - hs) * (we - ws));
      }
    }
    dx[n * p.os[0] + c * p.os[1] + h * p.os[2] + w * p.os[3]] = convert<T>(s);
  }
}

// Sizes and strides of a 3-D or 4-D tensor as 4-D (a 3-D tensor gets N = 1).
void as_4d(const fl_tensor& t, int64_t sizes[4], int64_t strides[4], const char* name) {
  if (t.ndim != 3 && t.ndim != 4)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": only 3-D or 4-D tensors");
  const int lead = 4 - t.ndim;
  for (int d = 0; d < 4; ++d) {
    sizes[d] = d < lead ? 1 : t.shape[d - lead];
    strides[d] = d < lead ? 0 : t.strides[d - lead];
  }
}

}  // namespace

// _adaptive_avg_pool2d.out(self, output_size[2]) -> out
FL_CUDA_KERNEL(k_adaptive_avg_pool2d) {
  return plugin::guard([&] {
    const char* name = "aten::_adaptive_avg_pool2d";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    const fl_tensor& out = a.output(0);
    if (out.dtype != in.dtype) unsupported_dtype(name, out.dtype);
    Pool4 p{};
    int64_t isz[4], osz[4];
    as_4d(in, isz, p.is, name);
    as_4d(out, osz, p.os, name);
    p.n = isz[0]; p.c = isz[1]; p.h = isz[2]; p.w = isz[3];
    p.oh = osz[2]; p.ow = osz[3];
    if (osz[0] != p.n || osz[1] != p.c) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output shape");
    p.channel_fastest = p.is[1] == 1 && p.c > 1;
    const int64_t total = plugin::numel(out);
    if (total > 0 && (p.h == 0 || p.w == 0))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": empty spatial input");
    const bool ok = dispatch_float(in.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (total == 0) return;
      adaptive_avg_forward<T><<<grid_for(total, kThreads, ctx), kThreads, 0, ctx.stream>>>(
          plugin::data_ptr<const T>(in), plugin::data_ptr<T>(out), p, total);
      check_launch("adaptive_avg_forward");
    });
    if (!ok) unsupported_dtype(name, in.dtype);
  });
}

// _adaptive_avg_pool2d_backward.out(grad_output, self) -> grad_input (self's shape)
FL_CUDA_KERNEL(k_adaptive_avg_pool2d_backward) {
  return plugin::guard([&] {
    const char* name = "aten::_adaptive_avg_pool2d_backward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& dy = device_tensor(a, 0, name);
    const fl_tensor& self = device_tensor(a, 1, name);
    const fl_tensor& dx = a.output(0);
    if (dx.dtype != dy.dtype) unsupported_dtype(name, dx.dtype);
    Pool4 p{};
    int64_t dysz[4], dxsz[4], selfsz[4], selfst[4];
    as_4d(dy, dysz, p.is, name);
    as_4d(dx, dxsz, p.os, name);
    as_4d(self, selfsz, selfst, name);
    p.n = dxsz[0]; p.c = dxsz[1]; p.h = dxsz[2]; p.w = dxsz[3];
    p.oh = dysz[2]; p.ow = dysz[3];
    if (dysz[0] != p.n || dysz[1] != p.c) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": shapes");
    p.channel_fastest = p.os[1] == 1 && p.c > 1;
    const int64_t total = plugin::numel(dx);
    const bool ok = dispatch_float(dy.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (total == 0) return;
      // An empty output (OH or OW 0) covers nothing: the loops below write zeros.
      adaptive_avg_backward<T><<<grid_for(total, kThreads, ctx), kThreads, 0, ctx.stream>>>(
          plugin::data_ptr<const T>(dy), plugin::data_ptr<T>(dx), p, total);
      check_launch("adaptive_avg_backward");
    });
    if (!ok) unsupported_dtype(name, dy.dtype);
  });
}

}  // namespace fl::cuda
