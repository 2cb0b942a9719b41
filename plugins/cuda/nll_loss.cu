// nll_loss.cu — nll_loss_forward / nll_loss_backward for input (N, C) or (C), int64/int32
// targets, optional class weights, reduction none (0) / mean (1) / sum (2), ignore_index.
// A target outside [0, C) that is not ignore_index contributes nothing and is reported through
// the device's error channel (device_error.hpp): the next synchronize fails naming the op
// (ATen stops at a device-side assert instead). The mean/sum reduction is one block in a fixed
// order (reproducible).
#include "block_reduce.cuh"
#include "device_error.cuh"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

namespace fl::cuda {
namespace {

constexpr int kReductionNone = 0, kReductionMean = 1;
constexpr int kThreads = 256;

struct NllShape {
  int64_t batch = 1;
  int64_t classes = 1;
};

NllShape nll_shape(const fl_tensor& self, const fl_tensor& target, const char* name) {
  NllShape s;
  if (self.ndim == 1) {
    s.classes = self.shape[0];
  } else if (self.ndim == 2) {
    s.batch = self.shape[0];
    s.classes = self.shape[1];
  } else {
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": input of " + std::to_string(self.ndim) +
                                            " dims (1 or 2 handled)");
  }
  if (plugin::numel(target) != s.batch)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": target has " + std::to_string(plugin::numel(target)) +
                                               " elements for a batch of " + std::to_string(s.batch));
  if (target.dtype != FL_DTYPE_INT64 && target.dtype != FL_DTYPE_INT32 && target.dtype != FL_DTYPE_UINT8)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": target dtype " + plugin::dtype_name(target.dtype));
  return s;
}

template <class T>
__global__ void nll_forward_none(const T* __restrict__ x, const void* target, fl_dtype_t target_dt,
                                 const T* __restrict__ weight, T* __restrict__ out, int64_t n, int64_t c,
                                 int64_t ignore_index, DeviceErrorSink errors) {
  using Acc = acc_type_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = load_as<int64_t>(target, i, target_dt);
    Acc loss = 0;
    if (t != ignore_index && t >= 0 && t < c) {
      const Acc w = weight != nullptr ? convert<Acc>(weight[t]) : Acc(1);
      loss = -convert<Acc>(x[i * c + t]) * w;
    } else if (t != ignore_index) {
      report_out_of_range(errors, CheckedOp::nll_loss_forward, -1, t, c);
    }
    out[i] = convert<T>(loss);
  }
}

template <class T>
__global__ void nll_forward_reduce(const T* __restrict__ x, const void* target, fl_dtype_t target_dt,
                                   const T* __restrict__ weight, T* __restrict__ out, T* __restrict__ total_weight,
                                   int64_t n, int64_t c, int64_t ignore_index, int mean, DeviceErrorSink errors) {
  using Acc = acc_type_t<T>;
  __shared__ Acc shared[kThreads / 32];
  Acc loss = 0, wsum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t t = load_as<int64_t>(target, i, target_dt);
    if (t != ignore_index && t >= 0 && t < c) {
      const Acc w = weight != nullptr ? convert<Acc>(weight[t]) : Acc(1);
      loss -= convert<Acc>(x[i * c + t]) * w;
      wsum += w;
    } else if (t != ignore_index) {
      report_out_of_range(errors, CheckedOp::nll_loss_forward, -1, t, c);
    }
  }
  loss = group_reduce<kThreads>(loss, SumOf{}, shared);
  wsum = group_reduce<kThreads>(wsum, SumOf{}, shared);
  if (threadIdx.x == 0) {
    *total_weight = convert<T>(wsum);
    *out = convert<T>(mean ? loss / wsum : loss);
  }
}

template <class T>
__global__ void nll_backward_scatter(const T* __restrict__ grad_out, const void* target, fl_dtype_t target_dt,
                                     const T* __restrict__ weight, const T* __restrict__ total_weight,
                                     T* __restrict__ grad_in, int64_t n, int64_t c, int64_t ignore_index,
                                     int reduction, DeviceErrorSink errors) {
  using Acc = acc_type_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = load_as<int64_t>(target, i, target_dt);
    if (t == ignore_index) continue;
    if (t < 0 || t >= c) {
      report_out_of_range(errors, CheckedOp::nll_loss_backward, -1, t, c);
      continue;
    }
    Acc g = convert<Acc>(grad_out[reduction == kReductionNone ? i : 0]);
    if (reduction == kReductionMean) g /= convert<Acc>(*total_weight);
    const Acc w = weight != nullptr ? convert<Acc>(weight[t]) : Acc(1);
    grad_in[i * c + t] = convert<T>(-w * g);
  }
}

const void* optional_weight(const Args& a, int32_t i, fl_dtype_t dtype, const char* name) {
  if (a.is_none(i)) return nullptr;
  const fl_tensor& w = device_tensor(a, i, name);
  if (w.dtype != dtype)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": weight dtype differs from input dtype");
  return plugin::data_ptr<const void>(w);
}

}  // namespace

// nll_loss_forward.output(self, target, weight?, reduction, ignore_index) -> (output, total_weight)
FL_CUDA_KERNEL(k_nll_loss_forward) {
  return plugin::guard([&] {
    const char* name = "aten::nll_loss_forward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const fl_tensor& target = device_tensor(a, 1, name);
    const void* weight = optional_weight(a, 2, self.dtype, name);
    const int64_t reduction = a.integer(3);
    const int64_t ignore_index = a.integer(4);
    const fl_tensor& out = a.output(0);
    const fl_tensor& total_weight = a.output(1);
    const NllShape s = nll_shape(self, target, name);
    if (out.dtype != self.dtype || total_weight.dtype != self.dtype)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtypes differ from input dtype");
    const bool ok = dispatch_float(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = plugin::data_ptr<const T>(self);
      const T* w = static_cast<const T*>(weight);
      if (reduction == kReductionNone && self.ndim == 2) {
        check_gpu(gpuMemsetAsync(plugin::data_ptr<void>(total_weight), 0, sizeof(T), ctx.stream), "cudaMemsetAsync");
        if (s.batch == 0) return;
        nll_forward_none<T><<<grid_for(s.batch, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            x, plugin::data_ptr<const void>(target), target.dtype, w, plugin::data_ptr<T>(out), s.batch, s.classes,
            ignore_index, ctx.errors);
        check_launch("nll_forward_none");
      } else {
        nll_forward_reduce<T><<<1, kThreads, 0, ctx.stream>>>(
            x, plugin::data_ptr<const void>(target), target.dtype, w, plugin::data_ptr<T>(out),
            plugin::data_ptr<T>(total_weight), s.batch, s.classes, ignore_index,
            reduction == kReductionMean ? 1 : 0, ctx.errors);
        check_launch("nll_forward_reduce");
      }
    });
    if (!ok) unsupported_dtype(name, self.dtype);
  });
}

// nll_loss_backward.grad_input(grad_output, self, target, weight?, reduction, ignore_index,
// total_weight) -> grad_input
FL_CUDA_KERNEL(k_nll_loss_backward) {
  return plugin::guard([&] {
    const char* name = "aten::nll_loss_backward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& grad_out = device_tensor(a, 0, name);
    const fl_tensor& self = device_tensor(a, 1, name);
    const fl_tensor& target = device_tensor(a, 2, name);
    const void* weight = optional_weight(a, 3, self.dtype, name);
    const int64_t reduction = a.integer(4);
    const int64_t ignore_index = a.integer(5);
    const fl_tensor& total_weight = device_tensor(a, 6, name);
    const fl_tensor& grad_in = a.output(0);
    const NllShape s = nll_shape(self, target, name);
    if (grad_out.dtype != self.dtype || total_weight.dtype != self.dtype || grad_in.dtype != self.dtype)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes");
    const bool ok = dispatch_float(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t n_in = plugin::numel(grad_in);
      if (n_in == 0) return;
      check_gpu(gpuMemsetAsync(plugin::data_ptr<void>(grad_in), 0, static_cast<size_t>(n_in) * sizeof(T), ctx.stream),
                "cudaMemsetAsync");
      if (s.batch == 0) return;
      const int red = (reduction == kReductionNone && self.ndim == 2) ? kReductionNone
                      : static_cast<int>(reduction == kReductionNone ? 2 : reduction);
      nll_backward_scatter<T><<<grid_for(s.batch, kThreads, ctx), kThreads, 0, ctx.stream>>>(
          plugin::data_ptr<const T>(grad_out), plugin::data_ptr<const void>(target), target.dtype,
          static_cast<const T*>(weight), plugin::data_ptr<const T>(total_weight), plugin::data_ptr<T>(grad_in), s.batch,
          s.classes, ignore_index, red, ctx.errors);
      check_launch("nll_backward_scatter");
    });
    if (!ok) unsupported_dtype(name, self.dtype);
  });
}

}  // namespace fl::cuda
