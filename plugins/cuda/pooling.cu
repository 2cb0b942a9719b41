// pooling.cu — max_pool2d_with_indices and its backward for (N, C, H, W) or (C, H, W)
// tensors of any strides (each thread walks the written tensor's memory order: channels
// innermost for channels_last, width innermost otherwise). Indices are flat positions h * W + w within each plane, as in ATen.
// The forward follows ATen's CUDA loop (NaN wins); the backward gathers: each input element
// sums the gradients of the output windows whose index names it, so no atomics are needed
// and results are reproducible.
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

struct PoolGeometry {
  int64_t n = 1, c = 1;  // batch (1 for a 3-D input) and channels
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// Element strides of a (N, C, H, W) operand (n = 0 for a 3-D one).
struct Strides4 {
  int64_t n = 0, c = 0, h = 0, w = 0;
};

Strides4 strides4(const fl_tensor& t) {
  if (t.ndim == 3) return Strides4{0, t.strides[0], t.strides[1], t.strides[2]};
  return Strides4{t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

// Splits a flat element number into (n, c, h, w) of an (N, C, H, W) space, walked with the
// channel innermost (channels_last) or the width innermost (NCHW), so that consecutive
// threads touch consecutive addresses of the tensor the kernel writes.
template <bool kChannelsInner>
__device__ __forceinline__ void split_index(int64_t e, int64_t c_count, int64_t h_count, int64_t w_count,
                                            int64_t& n, int64_t& c, int64_t& h, int64_t& w) {
  if (kChannelsInner) {
    c = e % c_count;
    e /= c_count;
    w = e % w_count;
    e /= w_count;
    h = e % h_count;
    n = e / h_count;
  } else {
    w = e % w_count;
    e /= w_count;
    h = e % h_count;
    e /= h_count;
    c = e % c_count;
    n = e / c_count;
  }
}

template <class T, bool kChannelsInner>
__global__ void max_pool2d_forward(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices,
                                   PoolGeometry g, Strides4 sx, Strides4 sy, Strides4 si) {
  using Acc = acc_type_t<T>;
  const int64_t total = g.n * g.c * g.out_h * g.out_w;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n, c, oh, ow;
    split_index<kChannelsInner>(e, g.c, g.out_h, g.out_w, n, c, oh, ow);
    int64_t hstart = oh * g.sh - g.ph, wstart = ow * g.sw - g.pw;
    const int64_t hend = hstart + static_cast<int64_t>(g.kh - 1) * g.dh + 1 < g.in_h
                             ? hstart + static_cast<int64_t>(g.kh - 1) * g.dh + 1 : g.in_h;
    const int64_t wend = wstart + static_cast<int64_t>(g.kw - 1) * g.dw + 1 < g.in_w
                             ? wstart + static_cast<int64_t>(g.kw - 1) * g.dw + 1 : g.in_w;
    while (hstart < 0) hstart += g.dh;
    while (wstart < 0) wstart += g.dw;
    const T* xp = x + n * sx.n + c * sx.c;
    int64_t max_index = hstart * g.in_w + wstart;
    Acc max_val = -INFINITY;
    for (int64_t h = hstart; h < hend; h += g.dh) {
      for (int64_t w = wstart; w < wend; w += g.dw) {
        const Acc v = convert<Acc>(xp[h * sx.h + w * sx.w]);
        if (v > max_val || dmath::isnan_(v)) {
          max_index = h * g.in_w + w;
          max_val = v;
        }
      }
    }
    y[n * sy.n + c * sy.c + oh * sy.h + ow * sy.w] = convert<T>(max_val);
    indices[n * si.n + c * si.c + oh * si.h + ow * si.w] = max_index;
  }
}

template <class T, bool kChannelsInner>
__global__ void max_pool2d_backward(const T* __restrict__ grad_out, const int64_t* __restrict__ indices,
                                    T* __restrict__ grad_in, PoolGeometry g, Strides4 sgo, Strides4 si,
                                    Strides4 sgi) {
  using Acc = acc_type_t<T>;
  const int64_t total = g.n * g.c * g.in_h * g.in_w;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n, c, h, w;
    split_index<kChannelsInner>(e, g.c, g.in_h, g.in_w, n, c, h, w);
    // Output rows/cols whose window may cover (h, w), as in ATen's max_pool_backward_nchw.
    const int64_t ext_h = static_cast<int64_t>(g.kh - 1) * g.dh + 1;
    const int64_t ext_w = static_cast<int64_t>(g.kw - 1) * g.dw + 1;
    const int64_t phstart = (h + g.ph < ext_h) ? 0 : (h + g.ph - ext_h) / g.sh + 1;
    const int64_t pwstart = (w + g.pw < ext_w) ? 0 : (w + g.pw - ext_w) / g.sw + 1;
    const int64_t phend = (h + g.ph) / g.sh + 1 < g.out_h ? (h + g.ph) / g.sh + 1 : g.out_h;
    const int64_t pwend = (w + g.pw) / g.sw + 1 < g.out_w ? (w + g.pw) / g.sw + 1 : g.out_w;
    const int64_t target = h * g.in_w + w;
    const int64_t*  ip = indices + n * si.n + c * si.c;
    const T* gp = grad_out + n * sgo.n + c * sgo.c;
    Acc sum = 0;
    for (int64_t oh = phstart; oh < phend; ++oh)
      for (int64_t ow = pwstart; ow < pwend; ++ow)
        if (ip[oh * si.h + ow * si.w] == target) sum += convert<Acc>(gp[oh * sgo.h + ow * sgo.w]);
    grad_in[n * sgi.n + c * sgi.c + h * sgi.h + w * sgi.w] = convert<T>(sum);
  }
}

// The tensor a kernel writes has its channels innermost (channels_last).
bool channels_inner(const fl_tensor& t) {
  return t.ndim == 4 && t.shape[1] > 1 && t.strides[1] == 1;
}

int pair_at(const std::vector<int64_t>& v, size_t i, int fallback) {
  if (v.empty()) return fallback;
  return static_cast<int>(v.size() == 1 ? v[0] : v[i]);
}

// Reads kernel_size, stride, padding, dilation from inputs first..first+3; the spatial
// sizes from `input` and `output`.
PoolGeometry pool_geometry(const Args& a, int32_t first, const fl_tensor& input, const fl_tensor& output,
                           const char* name) {
  if (input.ndim != 3 && input.ndim != 4)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": input must be 3-D or 4-D");
  if (output.ndim != input.ndim) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output rank differs");
  const std::vector<int64_t> k = a.ints(first);
  const std::vector<int64_t> s = a.is_none(first + 1) ? std::vector<int64_t>{} : a.ints(first + 1);
  const std::vector<int64_t> p = a.is_none(first + 2) ? std::vector<int64_t>{0} : a.ints(first + 2);
  const std::vector<int64_t> d = a.is_none(first + 3) ? std::vector<int64_t>{1} : a.ints(first + 3);
  if (k.empty() || k.size() > 2 || s.size() > 2 || p.size() > 2 || d.size() > 2)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": bad kernel_size/stride/padding/dilation");
  PoolGeometry g;
  g.kh = pair_at(k, 0, 1);
  g.kw = pair_at(k, 1, 1);
  g.sh = pair_at(s, 0, g.kh);
  g.sw = pair_at(s, 1, g.kw);
  g.ph = pair_at(p, 0, 0);
  g.pw = pair_at(p, 1, 0);
  g.dh = pair_at(d, 0, 1);
  g.dw = pair_at(d, 1, 1);
  if (g.kh <= 0 || g.kw <= 0 || g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0 || g.ph < 0 || g.pw < 0)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": non-positive kernel/stride/dilation");
  const int nd = input.ndim;
  for (int i = 0; i < nd - 2; ++i)
    if (input.shape[i] != output.shape[i])
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": batch/channel sizes differ");
  g.n = nd == 4 ? input.shape[0] : 1;
  g.c = input.shape[nd - 3];
  g.in_h = input.shape[nd - 2];
  g.in_w = input.shape[nd - 1];
  g.out_h = output.shape[nd - 2];
  g.out_w = output.shape[nd - 1];
  return g;
}

}  // namespace

// max_pool2d_with_indices.out(self, kernel_size, stride, padding, dilation, ceil_mode)
//   -> (out, indices)
FL_CUDA_KERNEL(k_max_pool2d_with_indices) {
  return plugin::guard([&] {
    const char* name = "aten::max_pool2d_with_indices";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& input = device_tensor(a, 0, name);
    const fl_tensor& out = a.output(0);
    const fl_tensor& indices = a.output(1);
    if (out.dtype != input.dtype || indices.dtype != FL_DTYPE_INT64)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtypes");
    const PoolGeometry g = pool_geometry(a, 1, input, out, name);
    if (indices.ndim != out.ndim) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": indices rank differs");
    const int64_t total = g.n * g.c * g.out_h * g.out_w;
    if (total == 0) return;
    const Strides4 sx = strides4(input), sy = strides4(out), si = strides4(indices);
    const bool ok = dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const dim3 grid = grid_for(total, kThreads, ctx);
      if (channels_inner(out))
        max_pool2d_forward<T, true><<<grid, kThreads, 0, ctx.stream>>>(
            plugin::data_ptr<const T>(input), plugin::data_ptr<T>(out), plugin::data_ptr<int64_t>(indices), g, sx, sy, si);
      else
        max_pool2d_forward<T, false><<<grid, kThreads, 0, ctx.stream>>>(
            plugin::data_ptr<const T>(input), plugin::data_ptr<T>(out), plugin::data_ptr<int64_t>(indices), g, sx, sy, si);
      check_launch("max_pool2d_forward");
    });
    if (!ok) unsupported_dtype(name, input.dtype);
  });
}

// max_pool2d_with_indices_backward.grad_input(grad_output, self, kernel_size, stride, padding,
// dilation, ceil_mode, indices) -> grad_input
FL_CUDA_KERNEL(k_max_pool2d_with_indices_backward) {
  return plugin::guard([&] {
    const char* name = "aten::max_pool2d_with_indices_backward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& grad_out = device_tensor(a, 0, name);
    const fl_tensor& input = device_tensor(a, 1, name);
    const fl_tensor& indices = device_tensor(a, 7, name);
    const fl_tensor& grad_in = a.output(0);
    if (grad_out.dtype != input.dtype || grad_in.dtype != input.dtype || indices.dtype != FL_DTYPE_INT64)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": dtypes");
    const PoolGeometry g = pool_geometry(a, 2, input, grad_out, name);
    if (indices.ndim != grad_out.ndim || grad_in.ndim != input.ndim)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": ranks differ");
    const int64_t total = g.n * g.c * g.in_h * g.in_w;
    if (total == 0) return;
    const Strides4 sgo = strides4(grad_out), si = strides4(indices), sgi = strides4(grad_in);
    const bool ok = dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const dim3 grid = grid_for(total, kThreads, ctx);
      if (channels_inner(grad_in))
        max_pool2d_backward<T, true><<<grid, kThreads, 0, ctx.stream>>>(
            plugin::data_ptr<const T>(grad_out), plugin::data_ptr<const int64_t>(indices), plugin::data_ptr<T>(grad_in),
            g, sgo, si, sgi);
      else
        max_pool2d_backward<T, false><<<grid, kThreads, 0, ctx.stream>>>(
            plugin::data_ptr<const T>(grad_out), plugin::data_ptr<const int64_t>(indices), plugin::data_ptr<T>(grad_in),
            g, sgo, si, sgi);
      check_launch("max_pool2d_backward");
    });
    if (!ok) unsupported_dtype(name, input.dtype);
  });
}

}  // namespace fl::cuda
