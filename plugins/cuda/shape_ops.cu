// shape_ops.cu — cat, tril/triu and arange.
//  - cat.out(tensors, dim): each input copied (and converted to out's dtype) into its slice
//    of out through the elementwise engine's strided copy, one launch per non-empty input;
//    legacy empty 1-D inputs (shape [0]) are skipped, as in ATen.
//  - tril.out/triu.out(self, diagonal): dense tensors (the entries take no strided ones), any
//    dtype, copied by element size; in place allowed.
//  - arange.start_out(start, end, step): out[i] = start + i * step, in int64 for integer
//    outputs, float for float32/float16/bfloat16 (as ATen's CUDA kernel), double for float64.
#include "copy_kernels.hpp"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

#include <string>
#include <vector>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

template <class E>
__global__ void triangle_kernel(const E* __restrict__ in, E* out, int64_t total, int64_t rows, int64_t cols,
                                int64_t diagonal, bool lower) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t j = idx % cols;
    const int64_t i = (idx / cols) % rows;
    const bool keep = lower ? (j - i <= diagonal) : (j - i >= diagonal);
    out[idx] = keep ? in[idx] : E{};
  }
}

template <class C>
__global__ void arange_kernel(void* out, fl_dtype_t dt, int64_t n, C start, C step) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    store_as(out, i, dt, start + step * static_cast<C>(i));
}

fl_status_t triangle_entry(const fl_kernel_call* call, const char* name, bool lower) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& in = device_tensor(a, 0, name);
    const int64_t diagonal = a.is_none(1) ? 0 : a.integer(1);
    const fl_tensor& out = a.output(0);
    if (in.ndim < 2) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": input must have at least 2 dims");
    if (out.dtype != in.dtype) unsupported_dtype(name, out.dtype);
    if (!plugin::is_contiguous(in) || !plugin::is_contiguous(out) || plugin::numel(out) != plugin::numel(in))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": non-dense tensors");
    const int64_t total = plugin::numel(out);
    if (total == 0) return;
    const int64_t rows = in.shape[in.ndim - 2], cols = in.shape[in.ndim - 1];
    const unsigned grid = grid_for(total, kThreads, ctx);
    const void* src = plugin::data_ptr<const void>(in);
    void* dst = plugin::data_ptr<void>(out);
    switch (plugin::dtype_size(in.dtype)) {
      case 1: triangle_kernel<uint8_t><<<grid, kThreads, 0, ctx.stream>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), total, rows, cols, diagonal, lower); break;
      case 2: triangle_kernel<uint16_t><<<grid, kThreads, 0, ctx.stream>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), total, rows, cols, diagonal, lower); break;
      case 4: triangle_kernel<uint32_t><<<grid, kThreads, 0, ctx.stream>>>(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), total, rows, cols, diagonal, lower); break;
      case 8: triangle_kernel<uint64_t><<<grid, kThreads, 0, ctx.stream>>>(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), total, rows, cols, diagonal, lower); break;
      default: unsupported_dtype(name, in.dtype);
    }
    check_launch("triangle_kernel");
  });
}

}  // namespace

FL_CUDA_KERNEL(k_tril_out) { return triangle_entry(call, "aten::tril", true); }
FL_CUDA_KERNEL(k_triu_out) { return triangle_entry(call, "aten::triu", false); }

// arange.start_out(start, end, step=1) -> out (its size computed by the core)
FL_CUDA_KERNEL(k_arange_out) {
  return plugin::guard([&] {
    const char* name = "aten::arange";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& out = a.output(0);
    if (!plugin::is_contiguous(out)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": non-dense output");
    if (!is_real_dtype(out.dtype) || out.dtype == FL_DTYPE_BOOL) unsupported_dtype(name, out.dtype);
    const double start = a.number(0);
    const double step = a.is_none(2) ? 1.0 : a.number(2);
    const int64_t n = plugin::numel(out);
    if (n == 0) return;
    const unsigned grid = grid_for(n, kThreads, ctx);
    void* dst = plugin::data_ptr<void>(out);
    if (out.dtype == FL_DTYPE_FLOAT64) {
      arange_kernel<double><<<grid, kThreads, 0, ctx.stream>>>(dst, out.dtype, n, start, step);
    } else if (is_floating_dtype(out.dtype)) {
      arange_kernel<float><<<grid, kThreads, 0, ctx.stream>>>(dst, out.dtype, n, static_cast<float>(start),
                                                              static_cast<float>(step));
    } else {
      arange_kernel<int64_t><<<grid, kThreads, 0, ctx.stream>>>(dst, out.dtype, n, static_cast<int64_t>(start),
                                                                static_cast<int64_t>(step));
    }
    check_launch("arange_kernel");
  });
}

// cat.out(tensors, dim) -> out
FL_CUDA_KERNEL(k_cat_out) {
  return plugin::guard([&] {
    const char* name = "aten::cat";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_value& list = a.at(0);
    if (list.kind != FL_VALUE_TENSOR_LIST) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": no tensor list");
    const fl_tensor& out = a.output(0);
    if (!is_real_dtype(out.dtype)) unsupported_dtype(name, out.dtype);
    const int32_t dim = normalize_dim(a.is_none(1) ? 0 : a.integer(1), out.ndim, name);
    // Check everything before the first copy is enqueued.
    std::vector<const fl_tensor*> parts;
    int64_t along = 0;
    for (int64_t k = 0; k < list.u.tensors.len; ++k) {
      const fl_tensor& t = list.u.tensors.data[k];
      if (t.ndim < 0) continue;
      if (t.ndim == 1 && t.shape[0] == 0) continue;  // legacy empty tensor
      if (t.device == FL_DEVICE_HOST) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": host tensor");
      if (!is_real_dtype(t.dtype)) unsupported_dtype(name, t.dtype);
      if (t.ndim != out.ndim) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": inputs of different ranks");
      for (int d = 0; d < out.ndim; ++d)
        if (d != dim && t.shape[d] != out.shape[d])
          plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": sizes differ outside the cat dim");
      along += t.shape[dim];
      parts.push_back(&t);
    }
    if (out.ndim > 0 && along != out.shape[dim])
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output size along dim does not match");
    if (plugin::numel(out) == 0) return;
    int64_t offset = 0;
    for (const fl_tensor* t : parts) {
      fl_tensor slice = out;
      std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
      slice.shape = shape.data();
      slice.byte_offset = out.byte_offset + offset * out.strides[dim] * static_cast<int64_t>(plugin::dtype_size(out.dtype));
      if (plugin::numel(*t) > 0) launch_broadcast_copy(*t, slice, ctx);
      offset += t->shape[dim];
    }
  });
}

}  // namespace fl::cuda
