// rms_norm.cu — _fused_rms_norm and _fused_rms_norm_backward (F.rms_norm, nn.RMSNorm) over the
// trailing normalized_shape dims of a contiguous input viewed as M rows of N. Accumulates in
// float (double for float64) and rounds as ATen's CUDA kernels (layer_norm_kernel.cu's RMSNorm
// path) do:
//   rstd = rsqrt(sum(x^2)/N + eps)           (eps None: the accumulation dtype's epsilon)
//   out  = x * rstd * w                       (rounded once into the input's dtype)
//   dx   = (N*w*dy - x*rstd*sum(dy*w*x*rstd)) * rstd/N,   dw = sum over rows of dy*x*rstd
// A warp per row for N <= 1024, a block of 256 per row beyond. The forward reads each row once
// for its sum of squares and again (from cache) to write it. dw: partial column sums per chunk
// of rows, then the chunks summed in a fixed order — no atomics, the same bits run to run.
// Input, weight, out and the gradients share one dtype (a weight of another dtype is declined:
// ATen's rms_norm runs its composite then and never calls these); rstd may be any floating
// dtype (ATen's: float32, float64 for float64 input). Not done: vectorised loads.
#include "block_reduce.cuh"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "norm_rows.cuh"
#include "scratch_buffer.hpp"

#include <limits>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpRowLimit = 1024;  // longest row served by a single warp

template <class T, int TPR>
__global__ void rms_norm_forward(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                 void* rstd_out, fl_dtype_t rstd_dt, int64_t m, int64_t n, double eps) {
  using Acc = acc_type_t<T>;
  __shared__ Acc shared[TPR > 32 ? TPR / 32 : 1];
  const int rows_per_block = blockDim.x / TPR;
  const int t = threadIdx.x % TPR;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / TPR; row < m;
       row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    Acc sum_sq = 0;
    for (int64_t j = t; j < n; j += TPR) {
      const Acc v = convert<Acc>(xr[j]);
      sum_sq += v * v;
    }
    sum_sq = group_reduce<TPR>(sum_sq, SumOf{}, shared);
    const Acc rstd = dmath::rsqrt_(sum_sq / static_cast<Acc>(n) + static_cast<Acc>(eps));
    for (int64_t j = t; j < n; j += TPR) {
      Acc out = convert<Acc>(xr[j]) * rstd;
      if (w != nullptr) out *= convert<Acc>(w[j]);
      yr[j] = convert<T>(out);
    }
    if (t == 0 && rstd_out != nullptr) store_as(rstd_out, row, rstd_dt, rstd);
  }
}

template <class T, int TPR>
__global__ void rms_norm_backward_input(const T* __restrict__ dy, const T* __restrict__ x, const void* rstd_in,
                                        fl_dtype_t rstd_dt, const T* __restrict__ w, T* __restrict__ dx, int64_t m,
                                        int64_t n) {
  using Acc = acc_type_t<T>;
  __shared__ Acc shared[TPR > 32 ? TPR / 32 : 1];
  const int rows_per_block = blockDim.x / TPR;
  const int t = threadIdx.x % TPR;
  const Acc fn = static_cast<Acc>(n);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / TPR; row < m;
       row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const T* dyr = dy + row * n;
    const T* xr = x + row * n;
    T* dxr = dx + row * n;
    const Acc rstd = load_as<Acc>(rstd_in, row, rstd_dt);
    Acc s = 0;
    for (int64_t j = t; j < n; j += TPR) {
      const Acc wj = w != nullptr ? convert<Acc>(w[j]) : Acc(1);
      s += convert<Acc>(dyr[j]) * wj * convert<Acc>(xr[j]) * rstd;
    }
    s = group_reduce<TPR>(s, SumOf{}, shared);
    const Acc scale = (Acc(1) / fn) * rstd;
    for (int64_t j = t; j < n; j += TPR) {
      const Acc wj = w != nullptr ? convert<Acc>(w[j]) : Acc(1);
      const Acc g = fn * wj * convert<Acc>(dyr[j]) - convert<Acc>(xr[j]) * rstd * s;
      dxr[j] = convert<T>(g * scale);
    }
  }
}

// partial[chunk][j] = sum over the chunk's rows of dy * x * rstd (column j).
template <class T, class Acc>
__global__ void rms_norm_weight_grad_partial(const T* __restrict__ dy, const T* __restrict__ x, const void* rstd_in,
                                             fl_dtype_t rstd_dt, Acc* __restrict__ partial, int64_t m, int64_t n,
                                             int64_t rows_per_chunk) {
  __shared__ Acc column[kColY][kColX + 1];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColX + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t row_begin = chunk * rows_per_chunk;
  const int64_t row_end = row_begin + rows_per_chunk < m ? row_begin + rows_per_chunk : m;
  Acc acc = 0;
  if (j < n)
    for (int64_t row = row_begin + threadIdx.y; row < row_end; row += kColY)
      acc += convert<Acc>(dy[row * n + j]) * convert<Acc>(x[row * n + j]) * load_as<Acc>(rstd_in, row, rstd_dt);
  column[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    for (int k = 1; k < kColY; ++k) acc += column[k][threadIdx.x];
    partial[chunk * n + j] = acc;
  }
}

// Declines (before any work) a tensor the kernels cannot read as a dense row-major array.
void require_contiguous(const fl_tensor& t, const char* what, const char* name) {
  if (!plugin::is_contiguous(t))
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": non-contiguous " + what);
}

// The optional weight (input i): nullptr when None; else of the input's dtype and N elements.
const fl_tensor* optional_weight(const Args& a, int32_t i, const fl_tensor& input, const RowsCols& rc,
                                 const char* name) {
  if (a.is_none(i)) return nullptr;
  const fl_tensor& w = device_tensor(a, i, name);
  if (w.dtype != input.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": weight dtype differs from input");
  if (plugin::numel(w) != rc.n)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": weight must have prod(normalized_shape) elements");
  require_contiguous(w, "weight", name);
  return &w;
}

}  // namespace

// _fused_rms_norm(input, normalized_shape, weight?, eps?) -> (output, rstd)
FL_CUDA_KERNEL(k_fused_rms_norm) {
  return plugin::guard([&] {
    const char* name = "aten::_fused_rms_norm";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& input = device_tensor(a, 0, name);
    const RowsCols rc = rows_cols(input, a.ints(1), name);
    const fl_tensor* weight = optional_weight(a, 2, input, rc, name);
    const double eps = !a.is_none(3) ? a.number(3)
                       : input.dtype == FL_DTYPE_FLOAT64 ? std::numeric_limits<double>::epsilon()
                                                         : static_cast<double>(std::numeric_limits<float>::epsilon());
    const fl_tensor& out = a.output(0);
    if (out.dtype != input.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtype differs");
    if (plugin::numel(out) != plugin::numel(input)) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output size");
    void* rstd = output_requested(a, 1) ? plugin::data_ptr<void>(a.output(1)) : nullptr;
    const fl_dtype_t rstd_dt = rstd != nullptr ? a.output(1).dtype : FL_DTYPE_FLOAT32;
    if (rstd != nullptr && !is_floating_dtype(rstd_dt))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": rstd must be floating");
    if (rstd != nullptr && plugin::numel(a.output(1)) != rc.m)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": rstd must have one element per row");
    require_contiguous(input, "input", name);
    require_contiguous(out, "output", name);
    if (rstd != nullptr) require_contiguous(a.output(1), "rstd", name);
    if (rc.m == 0) return;
    const bool ok = dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = plugin::data_ptr<const T>(input);
      const T* wp = weight != nullptr ? plugin::data_ptr<const T>(*weight) : nullptr;
      T* yp = plugin::data_ptr<T>(out);
      if (rc.n <= kWarpRowLimit)
        rms_norm_forward<T, 32><<<grid_for(rc.m, kThreads / 32, ctx), kThreads, 0, ctx.stream>>>(
            xp, wp, yp, rstd, rstd_dt, rc.m, rc.n, eps);
      else
        rms_norm_forward<T, kThreads><<<grid_for(rc.m, 1, ctx), kThreads, 0, ctx.stream>>>(
            xp, wp, yp, rstd, rstd_dt, rc.m, rc.n, eps);
      check_launch("rms_norm_forward");
    });
    if (!ok) unsupported_dtype(name, input.dtype);
  });
}

// _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight?, bool[2] output_mask)
// -> (grad_input, grad_weight); grad_weight only with a weight (ATen returns None without one).
FL_CUDA_KERNEL(k_fused_rms_norm_backward) {
  return plugin::guard([&] {
    const char* name = "aten::_fused_rms_norm_backward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& dy = device_tensor(a, 0, name);
    const fl_tensor& input = device_tensor(a, 1, name);
    const RowsCols rc = rows_cols(input, a.ints(2), name);
    const fl_tensor& rstd = device_tensor(a, 3, name);
    const fl_tensor* weight = optional_weight(a, 4, input, rc, name);
    std::vector<bool> mask = {true, true};
    if (!a.is_none(5)) mask = a.bools(5);
    if (mask.size() != 2) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output_mask must have 2 entries");
    const bool want_dx = mask[0] && output_requested(a, 0);
    const bool want_dw = mask[1] && weight != nullptr && output_requested(a, 1);
    if (dy.dtype != input.dtype || (want_dx && a.output(0).dtype != input.dtype) ||
        (want_dw && a.output(1).dtype != input.dtype))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes");
    if (!is_floating_dtype(rstd.dtype)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": rstd must be floating");
    if (plugin::numel(dy) != plugin::numel(input) || (want_dx && plugin::numel(a.output(0)) != plugin::numel(input)))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": grad_out/grad_input size");
    if (plugin::numel(rstd) != rc.m)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": rstd must have one element per row");
    if (want_dw && plugin::numel(a.output(1)) != rc.n)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": grad_weight must have prod(normalized_shape) elements");
    require_contiguous(dy, "grad_out", name);
    require_contiguous(input, "input", name);
    require_contiguous(rstd, "rstd", name);
    if (want_dx) require_contiguous(a.output(0), "grad_input", name);
    if (want_dw) require_contiguous(a.output(1), "grad_weight", name);
    const bool ok = dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = acc_type_t<T>;
      const T* dyp = plugin::data_ptr<const T>(dy);
      const T* xp = plugin::data_ptr<const T>(input);
      const void* rp = plugin::data_ptr<const void>(rstd);
      const T* wp = weight != nullptr ? plugin::data_ptr<const T>(*weight) : nullptr;
      if (want_dx && rc.m > 0 && rc.n > 0) {
        T* dxp = plugin::data_ptr<T>(a.output(0));
        if (rc.n <= kWarpRowLimit)
          rms_norm_backward_input<T, 32><<<grid_for(rc.m, kThreads / 32, ctx), kThreads, 0, ctx.stream>>>(
              dyp, xp, rp, rstd.dtype, wp, dxp, rc.m, rc.n);
        else
          rms_norm_backward_input<T, kThreads><<<grid_for(rc.m, 1, ctx), kThreads, 0, ctx.stream>>>(
              dyp, xp, rp, rstd.dtype, wp, dxp, rc.m, rc.n);
        check_launch("rms_norm_backward_input");
      }
      if (want_dw && rc.n > 0) {
        // Chunks of at least 64 rows, at most 65535 of them (the grid's y limit).
        int64_t rows_per_chunk = (rc.m + 65534) / 65535;
        if (rows_per_chunk < 64) rows_per_chunk = 64;
        const int64_t chunks = (rc.m + rows_per_chunk - 1) / rows_per_chunk;  // 0 when there are no rows
        ScratchBuffer partial(static_cast<size_t>(chunks * rc.n) * sizeof(Acc), ctx.stream);
        if (chunks > 0) {
          const dim3 grid(static_cast<unsigned>((rc.n + kColX - 1) / kColX), static_cast<unsigned>(chunks));
          rms_norm_weight_grad_partial<T, Acc><<<grid, dim3(kColX, kColY), 0, ctx.stream>>>(
              dyp, xp, rp, rstd.dtype, partial.get<Acc>(), rc.m, rc.n, rows_per_chunk);
          check_launch("rms_norm_weight_grad_partial");
        }
        sum_chunks<Acc><<<grid_for(rc.n, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            partial.get<Acc>(), chunks, rc.n, plugin::data_ptr<void>(a.output(1)), a.output(1).dtype);
        check_launch("sum_chunks");
      }
    });
    if (!ok) unsupported_dtype(name, input.dtype);
  });
}

}  // namespace fl::cuda
