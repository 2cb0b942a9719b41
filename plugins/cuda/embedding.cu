// embedding.cu — index_select (any dtype: rows are copied as raw elements of 1, 2, 4 or 8
// bytes; embedding's forward reaches it through ATen's composite) and
// embedding_dense_backward (float atomics into a float/double accumulator, then converted;
// not bitwise reproducible, so a call that asks for determinism gets FL_ERR_NOT_SUPPORTED).
// An index outside [0, size): index_select writes zeros for it and reports it through the
// device's error channel (device_error.hpp), so the next synchronize fails naming the op (ATen
// stops at a device-side assert); embedding backward skips it without a report (its forward,
// index_select, reported it).
#include "device_error.cuh"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "scratch_buffer.hpp"

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

template <class E>
__global__ void index_select_kernel(const E* __restrict__ src, const void* index, fl_dtype_t index_dt,
                                    E* __restrict__ dst, int64_t total, int64_t n_index, int64_t dim_size,
                                    int64_t inner, int32_t dim, DeviceErrorSink errors) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner;
    const int64_t rest = e / inner;
    const int64_t j = rest % n_index;
    const int64_t o = rest / n_index;
    const int64_t k = load_as<int64_t>(index, j, index_dt);
    if (k >= 0 && k < dim_size) {
      dst[e] = src[(o * dim_size + k) * inner + i];
    } else {
      dst[e] = E{};
      report_out_of_range(errors, CheckedOp::index_select, dim, k, dim_size);
    }
  }
}

template <class Acc>
__global__ void count_indices(const void* indices, fl_dtype_t idx_dt, int64_t n, int64_t num_weights,
                              int32_t* counts) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = load_as<int64_t>(indices, i, idx_dt);
    if (k >= 0 && k < num_weights) atomicAdd(&counts[k], 1);
  }
}

template <class T, class Acc>
__global__ void embedding_backward_accumulate(const T* __restrict__ grad, const void* indices, fl_dtype_t idx_dt,
                                              int64_t n, int64_t d, int64_t num_weights, int64_t padding_idx,
                                              const int32_t* counts, Acc* acc) {
  const int64_t total = n * d;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / d, c = e % d;
    const int64_t k = load_as<int64_t>(indices, i, idx_dt);
    if (k < 0 || k >= num_weights || k == padding_idx) continue;
    Acc g = convert<Acc>(grad[e]);
    if (counts != nullptr) g /= static_cast<Acc>(counts[k]);
    atomicAdd(&acc[k * d + c], g);
  }
}

template <class Acc, class T>
__global__ void convert_accumulator(const Acc* __restrict__ acc, T* __restrict__ out, int64_t n) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[e] = convert<T>(acc[e]);
}

bool is_index_dtype(fl_dtype_t dt) { return dt == FL_DTYPE_INT64 || dt == FL_DTYPE_INT32; }

}  // namespace

// index_select.out(self, dim, index) -> out
FL_CUDA_KERNEL(k_index_select_out) {
  return plugin::guard([&] {
    const char* name = "aten::index_select";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const fl_tensor& index = device_tensor(a, 2, name);
    const fl_tensor& out = a.output(0);
    if (!is_index_dtype(index.dtype)) unsupported_dtype(name, index.dtype);
    if (index.ndim > 1) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": index must be 0-D or 1-D");
    if (out.dtype != self.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtype differs");
    const int32_t dim = normalize_dim(a.integer(1), self.ndim, name);
    int64_t outer = 1, inner = 1;
    const int64_t dim_size = self.ndim > 0 ? self.shape[dim] : 1;
    for (int d = 0; d < dim; ++d) outer *= self.shape[d];
    for (int d = dim + 1; d < self.ndim; ++d) inner *= self.shape[d];
    const int64_t n_index = plugin::numel(index);
    const int64_t total = outer * n_index * inner;
    if (plugin::numel(out) != total)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output has the wrong number of elements");
    if (total == 0) return;
    const unsigned grid = grid_for(total, kThreads, ctx);
    const void* idx = plugin::data_ptr<const void>(index);
    switch (plugin::dtype_size(self.dtype)) {
      case 1:
        index_select_kernel<uint8_t><<<grid, kThreads, 0, ctx.stream>>>(plugin::data_ptr<const uint8_t>(self), idx,
            index.dtype, plugin::data_ptr<uint8_t>(out), total, n_index, dim_size, inner, dim, ctx.errors);
        break;
      case 2:
        index_select_kernel<uint16_t><<<grid, kThreads, 0, ctx.stream>>>(plugin::data_ptr<const uint16_t>(self), idx,
            index.dtype, plugin::data_ptr<uint16_t>(out), total, n_index, dim_size, inner, dim, ctx.errors);
        break;
      case 4:
        index_select_kernel<uint32_t><<<grid, kThreads, 0, ctx.stream>>>(plugin::data_ptr<const uint32_t>(self), idx,
            index.dtype, plugin::data_ptr<uint32_t>(out), total, n_index, dim_size, inner, dim, ctx.errors);
        break;
      case 8:
        index_select_kernel<uint64_t><<<grid, kThreads, 0, ctx.stream>>>(plugin::data_ptr<const uint64_t>(self), idx,
            index.dtype, plugin::data_ptr<uint64_t>(out), total, n_index, dim_size, inner, dim, ctx.errors);
        break;
      default: unsupported_dtype(name, self.dtype);
    }
    check_launch("index_select_kernel");
  });
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq) -> out
FL_CUDA_KERNEL(k_embedding_dense_backward) {
  return plugin::guard([&] {
    const char* name = "aten::embedding_dense_backward";
    if (call != nullptr && (call->flags & FL_CALL_DETERMINISTIC))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": uses atomics, not deterministic");
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& grad = device_tensor(a, 0, name);
    const fl_tensor& indices = device_tensor(a, 1, name);
    const int64_t num_weights = a.integer(2);
    const int64_t padding_idx = a.integer(3);
    const bool scale_by_freq = a.boolean(4);
    const fl_tensor& out = a.output(0);
    if (!is_index_dtype(indices.dtype)) unsupported_dtype(name, indices.dtype);
    if (grad.dtype != out.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes");
    const int64_t n = plugin::numel(indices);
    const int64_t d = n > 0 ? plugin::numel(grad) / n : 0;
    if (out.ndim != 2 || out.shape[0] != num_weights || (n > 0 && out.shape[1] != d))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output shape does not match");
    const int64_t out_n = plugin::numel(out);
    const bool ok = dispatch_float(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = acc_type_t<T>;
      if (out_n == 0) return;
      const bool direct = std::is_same_v<T, Acc>;
      ScratchBuffer acc_buf(direct ? 0 : static_cast<size_t>(out_n) * sizeof(Acc), ctx.stream);
      Acc* acc = direct ? reinterpret_cast<Acc*>(plugin::data_ptr<void>(out)) : acc_buf.get<Acc>();
      check_gpu(gpuMemsetAsync(acc, 0, static_cast<size_t>(out_n) * sizeof(Acc), ctx.stream), "cudaMemsetAsync");
      ScratchBuffer counts(scale_by_freq ? static_cast<size_t>(num_weights) * sizeof(int32_t) : 0, ctx.stream);
      const void* idx = plugin::data_ptr<const void>(indices);
      if (n > 0 && d > 0) {
        if (scale_by_freq) {
          check_gpu(gpuMemsetAsync(counts.get(), 0, static_cast<size_t>(num_weights) * sizeof(int32_t), ctx.stream),
                    "cudaMemsetAsync");
          count_indices<Acc><<<grid_for(n, kThreads, ctx), kThreads, 0, ctx.stream>>>(idx, indices.dtype, n,
                                                                                      num_weights, counts.get<int32_t>());
          check_launch("count_indices");
        }
        embedding_backward_accumulate<T, Acc><<<grid_for(n * d, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            plugin::data_ptr<const T>(grad), idx, indices.dtype, n, d, num_weights, padding_idx,
            scale_by_freq ? counts.get<int32_t>() : nullptr, acc);
        check_launch("embedding_backward_accumulate");
      }
      if (!direct) {
        convert_accumulator<Acc, T><<<grid_for(out_n, kThreads, ctx), kThreads, 0, ctx.stream>>>(
            acc, plugin::data_ptr<T>(out), out_n);
        check_launch("convert_accumulator");
      }
    });
    if (!ok) unsupported_dtype(name, out.dtype);
  });
}

}  // namespace fl::cuda
