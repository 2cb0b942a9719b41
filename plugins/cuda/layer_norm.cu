// layer_norm.cu — native_layer_norm and native_layer_norm_backward over the trailing
// normalized_shape dims (input viewed as M rows of N). Statistics in float (double for
// float64): two passes for mean then variance (biased), rstd = 1/sqrt(var + eps).
// weight/bias may be of the input's dtype or float32; mean/rstd are stored in whatever dtype
// the core allocated. Weight/bias gradients: per-chunk partial column sums in float, then a
// second kernel sums the chunks in a fixed order (reproducible).
#include "block_reduce.cuh"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "norm_rows.cuh"
#include "scratch_buffer.hpp"

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

struct Affine {
  const void* weight = nullptr;
  fl_dtype_t weight_dt = FL_DTYPE_FLOAT32;
  const void* bias = nullptr;
  fl_dtype_t bias_dt = FL_DTYPE_FLOAT32;
};

template <class T>
__global__ void layer_norm_forward(const T* __restrict__ x, T* __restrict__ y, void* mean_out, fl_dtype_t mean_dt,
                                   void* rstd_out, fl_dtype_t rstd_dt, Affine affine, int64_t m, int64_t n,
                                   double eps) {
  using Acc = acc_type_t<T>;
  __shared__ Acc shared[kThreads / 32];
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    Acc s = 0;
    for (int64_t j = threadIdx.x; j < n; j += kThreads) s += convert<Acc>(xr[j]);
    const Acc mean = group_reduce<kThreads>(s, SumOf{}, shared) / static_cast<Acc>(n);
    Acc v = 0;
    for (int64_t j = threadIdx.x; j < n; j += kThreads) {
      const Acc d = convert<Acc>(xr[j]) - mean;
      v += d * d;
    }
    const Acc var = group_reduce<kThreads>(v, SumOf{}, shared) / static_cast<Acc>(n);
    const Acc rstd = dmath::rsqrt_(var + static_cast<Acc>(eps));
    for (int64_t j = threadIdx.x; j < n; j += kThreads) {
      Acc out = (convert<Acc>(xr[j]) - mean) * rstd;
      if (affine.weight != nullptr) out *= load_as<Acc>(affine.weight, j, affine.weight_dt);
      if (affine.bias != nullptr) out += load_as<Acc>(affine.bias, j, affine.bias_dt);
      yr[j] = convert<T>(out);
    }
    if (threadIdx.x == 0) {
      if (mean_out != nullptr) store_as(mean_out, row, mean_dt, mean);
      if (rstd_out != nullptr) store_as(rstd_out, row, rstd_dt, rstd);
    }
  }
}

// dx = rstd * (dy*w - (sum(dy*w) + xhat * sum(dy*w*xhat)) / N)
template <class T>
__global__ void layer_norm_backward_input(const T* __restrict__ dy, const T* __restrict__ x, const void* mean_in,
                                          fl_dtype_t mean_dt, const void* rstd_in, fl_dtype_t rstd_dt,
                                          const void* weight, fl_dtype_t weight_dt, T* __restrict__ dx, int64_t m,
                                          int64_t n) {
  using Acc = acc_type_t<T>;
  __shared__ Acc shared[kThreads / 32];
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const T* dyr = dy + row * n;
    const T* xr = x + row * n;
    T* dxr = dx + row * n;
    const Acc mean = load_as<Acc>(mean_in, row, mean_dt);
    const Acc rstd = load_as<Acc>(rstd_in, row, rstd_dt);
    Acc a = 0, b = 0;
    for (int64_t j = threadIdx.x; j < n; j += kThreads) {
      const Acc w = weight != nullptr ? load_as<Acc>(weight, j, weight_dt) : Acc(1);
      const Acc g = convert<Acc>(dyr[j]) * w;
      const Acc xhat = (convert<Acc>(xr[j]) - mean) * rstd;
      a += g;
      b += g * xhat;
    }
    a = group_reduce<kThreads>(a, SumOf{}, shared);
    b = group_reduce<kThreads>(b, SumOf{}, shared);
    const Acc inv_n = Acc(1) / static_cast<Acc>(n);
    for (int64_t j = threadIdx.x; j < n; j += kThreads) {
      const Acc w = weight != nullptr ? load_as<Acc>(weight, j, weight_dt) : Acc(1);
      const Acc g = convert<Acc>(dyr[j]) * w;
      const Acc xhat = (convert<Acc>(xr[j]) - mean) * rstd;
      dxr[j] = convert<T>(rstd * (g - (a + xhat * b) * inv_n));
    }
  }
}


// partial_w[chunk][j] = sum over the chunk's rows of dy * xhat; partial_b[chunk][j] = sum of dy.
template <class T, class Acc>
__global__ void layer_norm_backward_params_partial(const T* __restrict__ dy, const T* __restrict__ x,
                                                   const void* mean_in, fl_dtype_t mean_dt, const void* rstd_in,
                                                   fl_dtype_t rstd_dt, Acc* partial_w, Acc* partial_b, int64_t m,
                                                   int64_t n, int64_t rows_per_chunk) {
  __shared__ Acc sw[kColY][kColX + 1];
  __shared__ Acc sb[kColY][kColX + 1];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColX + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t row_begin = chunk * rows_per_chunk;
  const int64_t row_end = row_begin + rows_per_chunk < m ? row_begin + rows_per_chunk : m;
  Acc aw = 0, ab = 0;
  if (j < n) {
    for (int64_t row = row_begin + threadIdx.y; row < row_end; row += kColY) {
      const Acc g = convert<Acc>(dy[row * n + j]);
      const Acc xhat = (convert<Acc>(x[row * n + j]) - load_as<Acc>(mean_in, row, mean_dt)) *
                       load_as<Acc>(rstd_in, row, rstd_dt);
      aw += g * xhat;
      ab += g;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    for (int k = 1; k < kColY; ++k) {
      aw += sw[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    if (partial_w != nullptr) partial_w[chunk * n + j] = aw;
    if (partial_b != nullptr) partial_b[chunk * n + j] = ab;
  }
}

const void* optional_param(const Args& a, int32_t i, fl_dtype_t* dt, const char* name) {
  if (a.is_none(i)) return nullptr;
  const fl_tensor& t = device_tensor(a, i, name);
  if (!is_floating_dtype(t.dtype)) unsupported_dtype(name, t.dtype);
  *dt = t.dtype;
  return plugin::data_ptr<const void>(t);
}

}  // namespace

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
FL_CUDA_KERNEL(k_native_layer_norm) {
  return plugin::guard([&] {
    const char* name = "aten::native_layer_norm";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& input = device_tensor(a, 0, name);
    const RowsCols rc = rows_cols(input, a.ints(1), name);
    Affine affine;
    affine.weight = optional_param(a, 2, &affine.weight_dt, name);
    affine.bias = optional_param(a, 3, &affine.bias_dt, name);
    const double eps = a.number(4);
    const fl_tensor& out = a.output(0);
    if (out.dtype != input.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtype differs");
    void* mean = output_requested(a, 1) ? plugin::data_ptr<void>(a.output(1)) : nullptr;
    void* rstd = output_requested(a, 2) ? plugin::data_ptr<void>(a.output(2)) : nullptr;
    const fl_dtype_t mean_dt = mean != nullptr ? a.output(1).dtype : FL_DTYPE_FLOAT32;
    const fl_dtype_t rstd_dt = rstd != nullptr ? a.output(2).dtype : FL_DTYPE_FLOAT32;
    if ((mean != nullptr && !is_floating_dtype(mean_dt)) || (rstd != nullptr && !is_floating_dtype(rstd_dt)))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mean/rstd must be floating");
    if (rc.m == 0) return;
    const bool ok = dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      layer_norm_forward<T><<<grid_for(rc.m, 1, ctx), kThreads, 0, ctx.stream>>>(
          plugin::data_ptr<const T>(input), plugin::data_ptr<T>(out), mean, mean_dt, rstd, rstd_dt, affine, rc.m, rc.n,
          eps);
      check_launch("layer_norm_forward");
    });
    if (!ok) unsupported_dtype(name, input.dtype);
  });
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask[3]) -> (grad_input, grad_weight, grad_bias)
FL_CUDA_KERNEL(k_native_layer_norm_backward) {
  return plugin::guard([&] {
    const char* name = "aten::native_layer_norm_backward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& dy = device_tensor(a, 0, name);
    const fl_tensor& input = device_tensor(a, 1, name);
    const RowsCols rc = rows_cols(input, a.ints(2), name);
    const fl_tensor& mean = device_tensor(a, 3, name);
    const fl_tensor& rstd = device_tensor(a, 4, name);
    fl_dtype_t weight_dt = FL_DTYPE_FLOAT32, bias_dt = FL_DTYPE_FLOAT32;
    const void* weight = optional_param(a, 5, &weight_dt, name);
    (void)optional_param(a, 6, &bias_dt, name);
    std::vector<bool> mask = {true, true, true};
    if (!a.is_none(7)) mask = a.bools(7);
    if (mask.size() != 3) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output_mask must have 3 entries");
    const bool want_dx = mask[0] && output_requested(a, 0);
    const bool want_dw = mask[1] && output_requested(a, 1);
    const bool want_db = mask[2] && output_requested(a, 2);
    if (dy.dtype != input.dtype || (want_dx && a.output(0).dtype != input.dtype))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes");
    if (!is_floating_dtype(mean.dtype) || !is_floating_dtype(rstd.dtype))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mean/rstd must be floating");
    if ((want_dw && !is_floating_dtype(a.output(1).dtype)) || (want_db && !is_floating_dtype(a.output(2).dtype)))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": weight/bias gradients must be floating");
    const bool ok = dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = acc_type_t<T>;
      const T* dyp = plugin::data_ptr<const T>(dy);
      const T* xp = plugin::data_ptr<const T>(input);
      if (want_dx && rc.m > 0) {
        layer_norm_backward_input<T><<<grid_for(rc.m, 1, ctx), kThreads, 0, ctx.stream>>>(
            dyp, xp, plugin::data_ptr<const void>(mean), mean.dtype, plugin::data_ptr<const void>(rstd), rstd.dtype,
            weight, weight_dt, plugin::data_ptr<T>(a.output(0)), rc.m, rc.n);
        check_launch("layer_norm_backward_input");
      }
      if ((want_dw || want_db) && rc.n > 0) {
        const int64_t rows_per_chunk = 64;
        int64_t chunks = (rc.m + rows_per_chunk - 1) / rows_per_chunk;
        if (chunks < 1) chunks = 1;
        if (chunks > 65535) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": too many rows");
        const size_t partial_bytes = static_cast<size_t>(chunks * rc.n) * sizeof(Acc);
        ScratchBuffer pw(want_dw ? partial_bytes : 0, ctx.stream);
        ScratchBuffer pb(want_db ? partial_bytes : 0, ctx.stream);
        const dim3 grid(static_cast<unsigned>((rc.n + kColX - 1) / kColX), static_cast<unsigned>(chunks));
        layer_norm_backward_params_partial<T, Acc><<<grid, dim3(kColX, kColY), 0, ctx.stream>>>(
            dyp, xp, plugin::data_ptr<const void>(mean), mean.dtype, plugin::data_ptr<const void>(rstd), rstd.dtype,
            pw.get<Acc>(), pb.get<Acc>(), rc.m, rc.n, rows_per_chunk);
        check_launch("layer_norm_backward_params_partial");
        if (want_dw) {
          sum_chunks<Acc><<<grid_for(rc.n, kThreads, ctx), kThreads, 0, ctx.stream>>>(
              pw.get<Acc>(), chunks, rc.n, plugin::data_ptr<void>(a.output(1)), a.output(1).dtype);
          check_launch("sum_chunks");
        }
        if (want_db) {
          sum_chunks<Acc><<<grid_for(rc.n, kThreads, ctx), kThreads, 0, ctx.stream>>>(
              pb.get<Acc>(), chunks, rc.n, plugin::data_ptr<void>(a.output(2)), a.output(2).dtype);
          check_launch("sum_chunks");
        }
      }
    });
    if (!ok) unsupported_dtype(name, input.dtype);
  });
}

}  // namespace fl::cuda
