// softmax.cu — _softmax / _log_softmax forward and backward along any dim of a contiguous
// tensor viewed as [outer, D, inner]. inner == 1 (the last dim): a warp per row (D <= 1024)
// or a block per row; otherwise a thread per (outer, inner) column, coalesced over inner.
// Three passes over the row (max, sum, write), accumulated in float (double for float64).
#include "block_reduce.cuh"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

#include <cmath>

namespace fl::cuda {
namespace {

template <class Tin, class Tout, class Acc, int TPR, bool kLog>
__global__ void softmax_rows(const Tin* __restrict__ in, Tout* __restrict__ out, int64_t rows, int64_t D) {
  __shared__ Acc shared[TPR > 32 ? TPR / 32 : 1];
  const int rows_per_block = blockDim.x / TPR;
  const int t = threadIdx.x % TPR;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / TPR; row < rows;
       row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const Tin* x = in + row * D;
    Tout* y = out + row * D;
    Acc m = -INFINITY;
    for (int64_t j = t; j < D; j += TPR) m = fmax(m, convert<Acc>(x[j]));
    m = group_reduce<TPR>(m, MaxOf{}, shared);
    Acc s = 0;
    for (int64_t j = t; j < D; j += TPR) s += dmath::exp_(convert<Acc>(x[j]) - m);
    s = group_reduce<TPR>(s, SumOf{}, shared);
    if constexpr (kLog) {
      const Acc shift = m + dmath::log_(s);
      for (int64_t j = t; j < D; j += TPR) y[j] = convert<Tout>(convert<Acc>(x[j]) - shift);
    } else {
      const Acc inv = Acc(1) / s;
      for (int64_t j = t; j < D; j += TPR) y[j] = convert<Tout>(dmath::exp_(convert<Acc>(x[j]) - m) * inv);
    }
  }
}

template <class Tin, class Tout, class Acc, bool kLog>
__global__ void softmax_columns(const Tin* __restrict__ in, Tout* __restrict__ out, int64_t outer, int64_t D,
                                int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = idx / inner, i = idx % inner;
    const Tin* x = in + o * D * inner + i;
    Tout* y = out + o * D * inner + i;
    Acc m = -INFINITY;
    for (int64_t j = 0; j < D; ++j) m = fmax(m, convert<Acc>(x[j * inner]));
    Acc s = 0;
    for (int64_t j = 0; j < D; ++j) s += dmath::exp_(convert<Acc>(x[j * inner]) - m);
    if constexpr (kLog) {
      const Acc shift = m + dmath::log_(s);
      for (int64_t j = 0; j < D; ++j) y[j * inner] = convert<Tout>(convert<Acc>(x[j * inner]) - shift);
    } else {
      const Acc inv = Acc(1) / s;
      for (int64_t j = 0; j < D; ++j) y[j * inner] = convert<Tout>(dmath::exp_(convert<Acc>(x[j * inner]) - m) * inv);
    }
  }
}

// softmax: gi = y * (g - sum(g * y)); log_softmax: gi = g - exp(y) * sum(g).
template <class Tg, class Tout, class Acc, int TPR, bool kLog>
__global__ void softmax_backward_rows(const Tg* __restrict__ grad, const Tg* __restrict__ outp,
                                      Tout* __restrict__ gin, int64_t rows, int64_t D) {
  __shared__ Acc shared[TPR > 32 ? TPR / 32 : 1];
  const int rows_per_block = blockDim.x / TPR;
  const int t = threadIdx.x % TPR;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / TPR; row < rows;
       row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const Tg* g = grad + row * D;
    const Tg* y = outp + row * D;
    Tout* gi = gin + row * D;
    Acc s = 0;
    for (int64_t j = t; j < D; j += TPR) {
      if constexpr (kLog) s += convert<Acc>(g[j]);
      else s += convert<Acc>(g[j]) * convert<Acc>(y[j]);
    }
    s = group_reduce<TPR>(s, SumOf{}, shared);
    for (int64_t j = t; j < D; j += TPR) {
      const Acc gj = convert<Acc>(g[j]), yj = convert<Acc>(y[j]);
      if constexpr (kLog) gi[j] = convert<Tout>(gj - dmath::exp_(yj) * s);
      else gi[j] = convert<Tout>(yj * (gj - s));
    }
  }
}

template <class Tg, class Tout, class Acc, bool kLog>
__global__ void softmax_backward_columns(const Tg* __restrict__ grad, const Tg* __restrict__ outp,
                                         Tout* __restrict__ gin, int64_t outer, int64_t D, int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = idx / inner, i = idx % inner;
    const int64_t base = o * D * inner + i;
    Acc s = 0;
    for (int64_t j = 0; j < D; ++j) {
      const int64_t k = base + j * inner;
      if constexpr (kLog) s += convert<Acc>(grad[k]);
      else s += convert<Acc>(grad[k]) * convert<Acc>(outp[k]);
    }
    for (int64_t j = 0; j < D; ++j) {
      const int64_t k = base + j * inner;
      const Acc gj = convert<Acc>(grad[k]), yj = convert<Acc>(outp[k]);
      if constexpr (kLog) gin[k] = convert<Tout>(gj - dmath::exp_(yj) * s);
      else gin[k] = convert<Tout>(yj * (gj - s));
    }
  }
}

struct SoftmaxShape {
  int64_t outer = 1, D = 1, inner = 1;
};

SoftmaxShape softmax_shape(const fl_tensor& t, int64_t dim_arg, const char* name) {
  SoftmaxShape s;
  if (t.ndim == 0) {
    (void)normalize_dim(dim_arg, 0, name);
    return s;
  }
  const int32_t dim = normalize_dim(dim_arg, t.ndim, name);
  for (int d = 0; d < dim; ++d) s.outer *= t.shape[d];
  s.D = t.shape[dim];
  for (int d = dim + 1; d < t.ndim; ++d) s.inner *= t.shape[d];
  return s;
}

constexpr int kThreads = 256;

template <bool kLog>
fl_status_t softmax_forward(const fl_kernel_call* call, const char* name) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    const fl_tensor& out = a.output(0);
    const SoftmaxShape s = softmax_shape(in, a.integer(1), name);
    if (plugin::numel(in) == 0) return;
    const bool ok = dispatch_float_pair(in.dtype, out.dtype, [&](auto ti, auto to) {
      using Tin = typename decltype(ti)::type;
      using Tout = typename decltype(to)::type;
      using Acc = acc_type_t<Tin>;
      const Tin* x = plugin::data_ptr<const Tin>(in);
      Tout* y = plugin::data_ptr<Tout>(out);
      if (s.inner == 1) {
        const int64_t rows = s.outer;
        if (s.D <= 1024) {
          const unsigned grid = grid_for(rows, kThreads / 32, ctx);
          softmax_rows<Tin, Tout, Acc, 32, kLog><<<grid, kThreads, 0, ctx.stream>>>(x, y, rows, s.D);
        } else {
          const unsigned grid = grid_for(rows, 1, ctx);
          softmax_rows<Tin, Tout, Acc, kThreads, kLog><<<grid, kThreads, 0, ctx.stream>>>(x, y, rows, s.D);
        }
        check_launch("softmax_rows");
      } else {
        const unsigned grid = grid_for(s.outer * s.inner, kThreads, ctx);
        softmax_columns<Tin, Tout, Acc, kLog><<<grid, kThreads, 0, ctx.stream>>>(x, y, s.outer, s.D, s.inner);
        check_launch("softmax_columns");
      }
    });
    if (!ok)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": dtypes " + plugin::dtype_name(in.dtype) + " -> " +
                                              plugin::dtype_name(out.dtype) + " not supported");
  });
}

// (grad_output, output, dim, input_dtype) -> grad_input.
template <bool kLog>
fl_status_t softmax_backward(const fl_kernel_call* call, const char* name) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& grad = device_tensor(a, 0, name);
    const fl_tensor& outp = device_tensor(a, 1, name);
    const fl_tensor& gin = a.output(0);
    if (grad.dtype != outp.dtype)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": grad_output and output dtypes differ");
    const SoftmaxShape s = softmax_shape(grad, a.integer(2), name);
    if (plugin::numel(grad) == 0) return;
    const bool ok = dispatch_float_pair(grad.dtype, gin.dtype, [&](auto tg, auto to) {
      using Tg = typename decltype(tg)::type;
      using Tout = typename decltype(to)::type;
      using Acc = acc_type_t<Tg>;
      const Tg* g = plugin::data_ptr<const Tg>(grad);
      const Tg* y = plugin::data_ptr<const Tg>(outp);
      Tout* gi = plugin::data_ptr<Tout>(gin);
      if (s.inner == 1) {
        if (s.D <= 1024) {
          const unsigned grid = grid_for(s.outer, kThreads / 32, ctx);
          softmax_backward_rows<Tg, Tout, Acc, 32, kLog><<<grid, kThreads, 0, ctx.stream>>>(g, y, gi, s.outer, s.D);
        } else {
          const unsigned grid = grid_for(s.outer, 1, ctx);
          softmax_backward_rows<Tg, Tout, Acc, kThreads, kLog><<<grid, kThreads, 0, ctx.stream>>>(g, y, gi, s.outer, s.D);
        }
        check_launch("softmax_backward_rows");
      } else {
        const unsigned grid = grid_for(s.outer * s.inner, kThreads, ctx);
        softmax_backward_columns<Tg, Tout, Acc, kLog>
            <<<grid, kThreads, 0, ctx.stream>>>(g, y, gi, s.outer, s.D, s.inner);
        check_launch("softmax_backward_columns");
      }
    });
    if (!ok)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": dtypes " + plugin::dtype_name(grad.dtype) + " -> " +
                                              plugin::dtype_name(gin.dtype) + " not supported");
  });
}

}  // namespace

FL_CUDA_KERNEL(k_softmax_out) { return softmax_forward<false>(call, "aten::_softmax"); }
FL_CUDA_KERNEL(k_log_softmax_out) { return softmax_forward<true>(call, "aten::_log_softmax"); }
FL_CUDA_KERNEL(k_softmax_backward_out) { return softmax_backward<false>(call, "aten::_softmax_backward_data"); }
FL_CUDA_KERNEL(k_log_softmax_backward_out) {
  return softmax_backward<true>(call, "aten::_log_softmax_backward_data");
}

}  // namespace fl::cuda
