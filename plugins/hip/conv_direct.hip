// conv_direct.hip — convolution_overrideable and convolution_backward_overrideable for the
// HIP plugin without MIOpen (Debian's ROCm has none): direct kernels, one thread per output
// element (forward), per grad_input element (backward data), per weight element (backward
// weight) and per channel (grad_bias); accumulation in float (double for float64), fixed
// order: deterministic. 1-D and 2-D, groups, stride, padding, dilation.
// Not done: transposed and 3-D convolutions (FL_ERR_NOT_SUPPORTED, the core falls back);
// no im2col/implicit-GEMM, so large convolutions are slow.
#include "device_state.hpp"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

#include <string>
#include <vector>

namespace fl::cuda {
namespace {

// Geometry in NCHW terms (a 1-D convolution has h = oh = kh = 1).
struct ConvGeometry {
  int64_t batch = 0, c_in = 0, h = 1, w = 0, c_out = 0, kh = 1, kw = 0, oh = 1, ow = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};

// Reads (stride, padding, dilation, transposed, output_padding, groups) at first..first+5.
ConvGeometry geometry(const Args& a, int32_t first, const fl_tensor& input, const fl_tensor& weight, const char* op) {
  if (a.boolean(first + 3)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": transposed convolution");
  if (input.ndim != 3 && input.ndim != 4)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": " + std::to_string(input.ndim - 2) + "-D convolution");
  if (weight.ndim != input.ndim) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": weight and input ranks differ");
  const bool two_d = input.ndim == 4;
  const auto stride = a.ints(first), padding = a.ints(first + 1), dilation = a.ints(first + 2);
  const size_t dims = two_d ? 2 : 1;
  auto pick = [&](const std::vector<int64_t>& v, size_t i, const char* what) {
    if (v.size() != dims && v.size() != 1)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " has " + std::to_string(v.size()) + " values");
    return v.size() == 1 ? v[0] : v[i];
  };
  ConvGeometry g;
  g.groups = a.integer(first + 5);
  g.batch = input.shape[0];
  g.c_in = input.shape[1];
  g.c_out = weight.shape[0];
  if (two_d) {
    g.h = input.shape[2], g.w = input.shape[3], g.kh = weight.shape[2], g.kw = weight.shape[3];
    g.sh = pick(stride, 0, "stride"), g.sw = pick(stride, 1, "stride");
    g.ph = pick(padding, 0, "padding"), g.pw = pick(padding, 1, "padding");
    g.dh = pick(dilation, 0, "dilation"), g.dw = pick(dilation, 1, "dilation");
  } else {
    g.w = input.shape[2], g.kw = weight.shape[2];
    g.sw = pick(stride, 0, "stride"), g.pw = pick(padding, 0, "padding"), g.dw = pick(dilation, 0, "dilation");
  }
  if (g.groups <= 0 || g.c_in % g.groups != 0 || g.c_out % g.groups != 0 || weight.shape[1] * g.groups != g.c_in)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": channels do not match groups");
  if (g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0 || g.ph < 0 || g.pw < 0)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": bad stride, padding or dilation");
  g.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  if (g.oh <= 0 || g.ow <= 0) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": output would be empty");
  return g;
}

void expect_dense(const fl_tensor& t, int64_t numel, const char* op, const char* what) {
  if (plugin::numel(t) != numel || !plugin::is_contiguous(t))
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " has the wrong shape");
}

template <class T>
__global__ void conv_forward_kernel(ConvGeometry g, const T* in, const T* wt, const T* bias, T* out) {
  using Acc = acc_type_t<T>;
  const int64_t total = g.batch * g.c_out * g.oh * g.ow;
  const int64_t cg_in = g.c_in / g.groups, cg_out = g.c_out / g.groups;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ox = idx % g.ow, oy = (idx / g.ow) % g.oh, co = (idx / (g.ow * g.oh)) % g.c_out,
                  n = idx / (g.ow * g.oh * g.c_out);
    const int64_t grp = co / cg_out;
    Acc acc = bias != nullptr ? convert<Acc>(bias[co]) : Acc(0);
    for (int64_t ci = 0; ci < cg_in; ++ci) {
      const T* plane = in + ((n * g.c_in + grp * cg_in + ci) * g.h) * g.w;
      const T* kern = wt + ((co * cg_in + ci) * g.kh) * g.kw;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          acc += convert<Acc>(plane[iy * g.w + ix]) * convert<Acc>(kern[ky * g.kw + kx]);
        }
      }
    }
    out[idx] = convert<T>(acc);
  }
}

template <class T>
__global__ void conv_grad_input_kernel(ConvGeometry g, const T* grad, const T* wt, T* grad_in) {
  using Acc = acc_type_t<T>;
  const int64_t total = g.batch * g.c_in * g.h * g.w;
  const int64_t cg_in = g.c_in / g.groups, cg_out = g.c_out / g.groups;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ix = idx % g.w, iy = (idx / g.w) % g.h, ci = (idx / (g.w * g.h)) % g.c_in, n = idx / (g.w * g.h * g.c_in);
    const int64_t grp = ci / cg_in, ci_local = ci % cg_in;
    Acc acc = Acc(0);
    for (int64_t col = 0; col < cg_out; ++col) {
      const int64_t co = grp * cg_out + col;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t ty = iy + g.ph - ky * g.dh;
        if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t tx = ix + g.pw - kx * g.dw;
          if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
          acc += convert<Acc>(grad[((n * g.c_out + co) * g.oh + ty / g.sh) * g.ow + tx / g.sw]) *
                 convert<Acc>(wt[((co * cg_in + ci_local) * g.kh + ky) * g.kw + kx]);
        }
      }
    }
    grad_in[idx] = convert<T>(acc);
  }
}

template <class T>
__global__ void conv_grad_weight_kernel(ConvGeometry g, const T* grad, const T* in, T* grad_w) {
  using Acc = acc_type_t<T>;
  const int64_t cg_in = g.c_in / g.groups, cg_out = g.c_out / g.groups;
  const int64_t total = g.c_out * cg_in * g.kh * g.kw;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t kx = idx % g.kw, ky = (idx / g.kw) % g.kh, ci_local = (idx / (g.kw * g.kh)) % cg_in,
                  co = idx / (g.kw * g.kh * cg_in);
    const int64_t ci = (co / cg_out) * cg_in + ci_local;
    Acc acc = Acc(0);
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          acc += convert<Acc>(grad[((n * g.c_out + co) * g.oh + oy) * g.ow + ox]) *
                 convert<Acc>(in[((n * g.c_in + ci) * g.h + iy) * g.w + ix]);
        }
      }
    grad_w[idx] = convert<T>(acc);
  }
}

template <class T>
__global__ void conv_grad_bias_kernel(ConvGeometry g, const T* grad, T* grad_b) {
  using Acc = acc_type_t<T>;
  for (int64_t co = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; co < g.c_out;
       co += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc acc = Acc(0);
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t p = 0; p < g.oh * g.ow; ++p) acc += convert<Acc>(grad[(n * g.c_out + co) * g.oh * g.ow + p]);
    grad_b[co] = convert<T>(acc);
  }
}

constexpr int kThreads = 256;

void same_dtype(const fl_tensor& a, const fl_tensor& b, const char* op) {
  if (a.dtype != b.dtype)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": mixed dtypes " + plugin::dtype_name(a.dtype) + " and " +
                                            plugin::dtype_name(b.dtype));
}

}  // namespace

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
//                          output_padding, groups) -> out
FL_CUDA_KERNEL(k_convolution) {
  constexpr const char* op = "aten::convolution_overrideable";
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& input = device_tensor(a, 0, op);
    const fl_tensor& weight = device_tensor(a, 1, op);
    const fl_tensor* bias = a.is_none(2) ? nullptr : &device_tensor(a, 2, op);
    const fl_tensor& out = a.output(0);
    const ConvGeometry g = geometry(a, 3, input, weight, op);
    same_dtype(input, weight, op);
    same_dtype(input, out, op);
    if (bias != nullptr) same_dtype(input, *bias, op);
    expect_dense(out, g.batch * g.c_out * g.oh * g.ow, op, "out");
    const int64_t total = g.batch * g.c_out * g.oh * g.ow;
    const bool ok = dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      conv_forward_kernel<T><<<grid_for(total, kThreads, ctx), kThreads, 0, ctx.stream>>>(
          g, plugin::data_ptr<const T>(input), plugin::data_ptr<const T>(weight),
          bias != nullptr ? plugin::data_ptr<const T>(*bias) : nullptr, plugin::data_ptr<T>(out));
    });
    if (!ok) unsupported_dtype(op, input.dtype);
    check_launch(op);
  });
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
//     transposed, output_padding, groups, bool[3] output_mask) -> (grad_input, grad_weight, grad_bias)
FL_CUDA_KERNEL(k_convolution_backward) {
  constexpr const char* op = "aten::convolution_backward_overrideable";
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& grad = device_tensor(a, 0, op);
    const fl_tensor& input = device_tensor(a, 1, op);
    const fl_tensor& weight = device_tensor(a, 2, op);
    const ConvGeometry g = geometry(a, 3, input, weight, op);
    same_dtype(grad, input, op);
    same_dtype(grad, weight, op);
    expect_dense(grad, g.batch * g.c_out * g.oh * g.ow, op, "grad_output");
    const std::vector<bool> mask = a.is_none(9) ? std::vector<bool>{true, true, true} : a.bools(9);
    auto wanted = [&](int i) {
      if (i >= a.num_outputs() || i >= static_cast<int>(mask.size()) || !mask[static_cast<size_t>(i)]) return false;
      if (plugin::is_undefined(a.output(i))) return false;
      same_dtype(grad, a.output(i), op);
      return true;
    };
    const bool want_in = wanted(0), want_w = wanted(1), want_b = wanted(2);
    if (want_in) expect_dense(a.output(0), g.batch * g.c_in * g.h * g.w, op, "grad_input");
    if (want_w) expect_dense(a.output(1), plugin::numel(weight), op, "grad_weight");
    if (want_b) expect_dense(a.output(2), g.c_out, op, "grad_bias");
    const bool ok = dispatch_float(grad.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* go = plugin::data_ptr<const T>(grad);
      if (want_in) {
        const int64_t total = g.batch * g.c_in * g.h * g.w;
        conv_grad_input_kernel<T><<<grid_for(total, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            g, go, plugin::data_ptr<const T>(weight), plugin::data_ptr<T>(a.output(0)));
      }
      if (want_w)
        conv_grad_weight_kernel<T><<<grid_for(plugin::numel(weight), kThreads, ctx), kThreads, 0, ctx.stream>>>(
            g, go, plugin::data_ptr<const T>(input), plugin::data_ptr<T>(a.output(1)));
      if (want_b)
        conv_grad_bias_kernel<T><<<grid_for(g.c_out, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            g, go, plugin::data_ptr<T>(a.output(2)));
    });
    if (!ok) unsupported_dtype(op, grad.dtype);
    check_launch(op);
  });
}

}  // namespace fl::cuda
