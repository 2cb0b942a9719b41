// group_norm.cu — native_group_norm_backward on contiguous (N, C, HxW) input (the forward
// runs as ATen's composite over batch norm). In float (double for float64), four kernels, each
// summing in a fixed order (reproducible):
//  1. per (n, c) row: dxm = sum_hw dy * (x - mean), db = sum_hw dy;
//  2. per (n, g), over its D = C/group channels (M = D*HxW elements): with
//     sum_g = sum_c w*db and sum_gx = rstd * sum_c w*dxm (the group's sums of dy*w and
//     dy*w*xhat), c2 = -rstd^2 * sum_gx / M and c3 = -rstd * sum_g / M;
//  3. dx = rstd*w*dy + c2*(x - mean) + c3;
//  4. per channel: dgamma = sum_n dxm * rstd, dbeta = sum_n db.
// mean/rstd ([N, group]), weight and the weight/bias gradients may have any floating dtype.
#include "block_reduce.cuh"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "scratch_buffer.hpp"

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

struct GroupNormShape {
  int64_t n = 0, c = 0, hw = 0, group = 1;
  __host__ __device__ int64_t channels_per_group() const { return c / group; }
};

// A floating vector of any dtype (NULL: absent).
struct AnyVector {
  const void* data = nullptr;
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;
};

// TPR threads per (n, c) row of hw elements; rows of one warp (TPR 32) or block (TPR 256).
template <class T, class Acc, int TPR>
__global__ void group_norm_row_sums(const T* __restrict__ dy, const T* __restrict__ x, AnyVector mean,
                                    GroupNormShape s, Acc* __restrict__ dxm, Acc* __restrict__ db) {
  __shared__ Acc shared[TPR > 32 ? TPR / 32 : 1];
  const int rows_per_block = blockDim.x / TPR;
  const int t = threadIdx.x % TPR;
  const int64_t rows = s.n * s.c, d = s.channels_per_group();
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / TPR; row < rows;
       row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const int64_t n = row / s.c, c = row % s.c;
    const Acc mu = load_as<Acc>(mean.data, n * s.group + c / d, mean.dtype);
    const T* dyr = dy + row * s.hw;
    const T* xr = x + row * s.hw;
    Acc a = 0, b = 0;
    for (int64_t j = t; j < s.hw; j += TPR) {
      const Acc g = convert<Acc>(dyr[j]);
      a += g * (convert<Acc>(xr[j]) - mu);
      b += g;
    }
    a = group_reduce<TPR>(a, SumOf{}, shared);
    b = group_reduce<TPR>(b, SumOf{}, shared);
    if (t == 0) {
      dxm[row] = a;
      db[row] = b;
    }
  }
}

// One thread per (n, g).
template <class Acc>
__global__ void group_norm_coefficients(const Acc* __restrict__ dxm, const Acc* __restrict__ db, AnyVector rstd,
                                        AnyVector weight, GroupNormShape s, Acc* __restrict__ c2,
                                        Acc* __restrict__ c3) {
  const int64_t groups = s.n * s.group, d = s.channels_per_group();
  const Acc inv_m = Acc(1) / static_cast<Acc>(d * s.hw);
  for (int64_t ng = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; ng < groups;
       ng += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = ng / s.group, g = ng % s.group;
    Acc sum_g = 0, sum_gx = 0;
    for (int64_t c = g * d; c < (g + 1) * d; ++c) {
      const Acc w = weight.data != nullptr ? load_as<Acc>(weight.data, c, weight.dtype) : Acc(1);
      sum_g += w * db[n * s.c + c];
      sum_gx += w * dxm[n * s.c + c];
    }
    const Acc rs = load_as<Acc>(rstd.data, ng, rstd.dtype);
    sum_gx *= rs;
    c2[ng] = -rs * rs * sum_gx * inv_m;
    c3[ng] = -rs * sum_g * inv_m;
  }
}

template <class T, class Acc, int TPR>
__global__ void group_norm_input_grad(const T* __restrict__ dy, const T* __restrict__ x, AnyVector mean,
                                      AnyVector rstd, AnyVector weight, const Acc* __restrict__ c2,
                                      const Acc* __restrict__ c3, GroupNormShape s, T* __restrict__ dx) {
  const int rows_per_block = blockDim.x / TPR;
  const int t = threadIdx.x % TPR;
  const int64_t rows = s.n * s.c, d = s.channels_per_group();
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / TPR; row < rows;
       row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const int64_t n = row / s.c, c = row % s.c, ng = n * s.group + c / d;
    const Acc mu = load_as<Acc>(mean.data, ng, mean.dtype);
    const Acc w = weight.data != nullptr ? load_as<Acc>(weight.data, c, weight.dtype) : Acc(1);
    const Acc a = load_as<Acc>(rstd.data, ng, rstd.dtype) * w, b = c2[ng], k = c3[ng];
    const T* dyr = dy + row * s.hw;
    const T* xr = x + row * s.hw;
    T* dxr = dx + row * s.hw;
    for (int64_t j = t; j < s.hw; j += TPR)
      dxr[j] = convert<T>(a * convert<Acc>(dyr[j]) + b * (convert<Acc>(xr[j]) - mu) + k);
  }
}

// One thread per channel, summing over n in order.
template <class Acc>
__global__ void group_norm_param_grads(const Acc* __restrict__ dxm, const Acc* __restrict__ db, AnyVector rstd,
                                       GroupNormShape s, void* dgamma, fl_dtype_t dgamma_dt, void* dbeta,
                                       fl_dtype_t dbeta_dt) {
  const int64_t d = s.channels_per_group();
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < s.c;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc gw = 0, gb = 0;
    for (int64_t n = 0; n < s.n; ++n) {
      gw += dxm[n * s.c + c] * load_as<Acc>(rstd.data, n * s.group + c / d, rstd.dtype);
      gb += db[n * s.c + c];
    }
    if (dgamma != nullptr) store_as(dgamma, c, dgamma_dt, gw);
    if (dbeta != nullptr) store_as(dbeta, c, dbeta_dt, gb);
  }
}

// A [count]-element floating vector input or output (contiguous: the entry takes no strides).
void check_vector(const fl_tensor& t, int64_t count, const char* name, const char* what) {
  if (!is_floating_dtype(t.dtype)) unsupported_dtype(name, t.dtype);
  if (plugin::numel(t) != count)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": " + what + " must have " + std::to_string(count) +
                                               " elements, got " + std::to_string(plugin::numel(t)));
}

bool wanted(const Args& a, const std::vector<bool>& mask, int32_t i) {
  return mask[static_cast<size_t>(i)] && i < a.num_outputs() && !plugin::is_undefined(a.output(i)) &&
         a.output(i).data != nullptr;
}

}  // namespace

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group,
// output_mask[3]) -> (grad_input, grad_weight, grad_bias)
FL_CUDA_KERNEL(k_native_group_norm_backward) {
  return plugin::guard([&] {
    const char* name = "aten::native_group_norm_backward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& dy = device_tensor(a, 0, name);
    const fl_tensor& input = device_tensor(a, 1, name);
    const fl_tensor& mean_t = device_tensor(a, 2, name);
    const fl_tensor& rstd_t = device_tensor(a, 3, name);
    GroupNormShape s;
    s.n = a.integer(5);
    s.c = a.integer(6);
    s.hw = a.integer(7);
    s.group = a.integer(8);
    if (s.n < 0 || s.c < 0 || s.hw < 0 || s.group <= 0 || s.c % s.group != 0)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": bad N, C, HxW or group");
    if (plugin::numel(input) != s.n * s.c * s.hw || plugin::numel(dy) != plugin::numel(input))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": input/grad_out do not hold N*C*HxW elements");
    if (dy.dtype != input.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes");
    check_vector(mean_t, s.n * s.group, name, "mean");
    check_vector(rstd_t, s.n * s.group, name, "rstd");
    const AnyVector mean{plugin::data_ptr<const void>(mean_t), mean_t.dtype};
    const AnyVector rstd{plugin::data_ptr<const void>(rstd_t), rstd_t.dtype};
    AnyVector weight;
    if (!a.is_none(4)) {
      const fl_tensor& w = device_tensor(a, 4, name);
      check_vector(w, s.c, name, "weight");
      weight = AnyVector{plugin::data_ptr<const void>(w), w.dtype};
    }
    std::vector<bool> mask = {true, true, true};
    if (!a.is_none(9)) mask = a.bools(9);
    if (mask.size() != 3) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output_mask must have 3 entries");
    const bool want_dx = wanted(a, mask, 0), want_dw = wanted(a, mask, 1), want_db = wanted(a, mask, 2);
    if (want_dx && (a.output(0).dtype != input.dtype || plugin::numel(a.output(0)) != plugin::numel(input)))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": grad_input must have the input's dtype and size");
    if (want_dw) check_vector(a.output(1), s.c, name, "grad_weight");
    if (want_db) check_vector(a.output(2), s.c, name, "grad_bias");
    if (!want_dx && !want_dw && !want_db) return;
    const bool ok = dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = acc_type_t<T>;
      const int64_t rows = s.n * s.c, groups = s.n * s.group;
      const T* dyp = plugin::data_ptr<const T>(dy);
      const T* xp = plugin::data_ptr<const T>(input);
      ScratchBuffer dxm(static_cast<size_t>(rows) * sizeof(Acc), ctx.stream);
      ScratchBuffer db(static_cast<size_t>(rows) * sizeof(Acc), ctx.stream);
      // A warp per row up to 1024 elements, else a block (as softmax's rows).
      const bool wide = s.hw > 1024;
      if (rows > 0) {
        if (wide)
          group_norm_row_sums<T, Acc, kThreads><<<grid_for(rows, 1, ctx), kThreads, 0, ctx.stream>>>(
              dyp, xp, mean, s, dxm.get<Acc>(), db.get<Acc>());
        else
          group_norm_row_sums<T, Acc, 32><<<grid_for(rows, kThreads / 32, ctx), kThreads, 0, ctx.stream>>>(
              dyp, xp, mean, s, dxm.get<Acc>(), db.get<Acc>());
        check_launch("group_norm_row_sums");
      }
      if (want_dx && rows > 0 && s.hw > 0) {
        ScratchBuffer c2(static_cast<size_t>(groups) * sizeof(Acc), ctx.stream);
        ScratchBuffer c3(static_cast<size_t>(groups) * sizeof(Acc), ctx.stream);
        group_norm_coefficients<Acc><<<grid_for(groups, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            dxm.get<Acc>(), db.get<Acc>(), rstd, weight, s, c2.get<Acc>(), c3.get<Acc>());
        check_launch("group_norm_coefficients");
        T* dxp = plugin::data_ptr<T>(a.output(0));
        if (wide)
          group_norm_input_grad<T, Acc, kThreads><<<grid_for(rows, 1, ctx), kThreads, 0, ctx.stream>>>(
              dyp, xp, mean, rstd, weight, c2.get<Acc>(), c3.get<Acc>(), s, dxp);
        else
          group_norm_input_grad<T, Acc, 32><<<grid_for(rows, kThreads / 32, ctx), kThreads, 0, ctx.stream>>>(
              dyp, xp, mean, rstd, weight, c2.get<Acc>(), c3.get<Acc>(), s, dxp);
        check_launch("group_norm_input_grad");
      }
      if ((want_dw || want_db) && s.c > 0) {
        void* dgamma = want_dw ? plugin::data_ptr<void>(a.output(1)) : nullptr;
        void* dbeta = want_db ? plugin::data_ptr<void>(a.output(2)) : nullptr;
        const fl_dtype_t dgamma_dt = want_dw ? a.output(1).dtype : FL_DTYPE_FLOAT32;
        const fl_dtype_t dbeta_dt = want_db ? a.output(2).dtype : FL_DTYPE_FLOAT32;
        group_norm_param_grads<Acc><<<grid_for(s.c, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            dxm.get<Acc>(), db.get<Acc>(), rstd, s, dgamma, dgamma_dt, dbeta, dbeta_dt);
        check_launch("group_norm_param_grads");
      }
    });
    if (!ok) unsupported_dtype(name, input.dtype);
  });
}

}  // namespace fl::cuda
