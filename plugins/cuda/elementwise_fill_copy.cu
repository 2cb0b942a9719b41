// elementwise_fill_copy.cu — fill (Scalar or 0-dim tensor value), zero, and copy with dtype
// conversion and broadcasting (copy.out(self, src): out takes self's dtype, values from src).
// A same-dtype dense copy is a plain device-to-device memcpy.
#include "elementwise.cuh"
#include "kernels.hpp"
#include "copy_kernels.hpp"
#include "kernel_glue.hpp"

namespace fl::cuda {
namespace {

template <class C>
struct IdentityOp : OpTraits {
  static constexpr bool kConverts = true;
  explicit IdentityOp(const OpParams&) {}
  __device__ C operator()(C a) const { return a; }
};

void launch_identity(const char* name, const fl_tensor& out, const ElementwiseInput& value,
                     const LaunchContext& ctx) {
  const std::vector<ElementwiseInput> ins = {value};
  const ElementwiseOperands p = plan_elementwise(out, ins);
  if (p.numel == 0) return;
  if (p.contiguous && value.tensor != nullptr && value.tensor->dtype == out.dtype &&
      plugin::numel(*value.tensor) == p.numel) {
    check_gpu(gpuMemcpyAsync(p.out, p.in[0], static_cast<size_t>(p.numel) * plugin::dtype_size(out.dtype),
                             gpuMemcpyDeviceToDevice, ctx.stream),
              "cudaMemcpyAsync (copy)");
    return;
  }
  launch_elementwise<IdentityOp, 1>(name, p, compute_kind_for(p, ins, true), OpParams{}, ctx);
}

}  // namespace

// fill.Scalar_out(self, value) and fill.Tensor_out(self, value).
FL_CUDA_KERNEL(k_fill_out) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    launch_identity("aten::fill", a.output(0), elementwise_input(a, 1), ctx);
  });
}

FL_CUDA_KERNEL(k_zero_out) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& out = a.output(0);
    if (plugin::is_contiguous(out)) {
      const int64_t n = plugin::numel(out);
      if (n > 0)
        check_gpu(gpuMemsetAsync(plugin::data_ptr<void>(out), 0,
                                 static_cast<size_t>(n) * plugin::dtype_size(out.dtype), ctx.stream),
                  "cudaMemsetAsync (zero)");
      return;
    }
    launch_identity("aten::zero", out, scalar_input(0.0, false), ctx);
  });
}

// copy.out(self, src, non_blocking).
FL_CUDA_KERNEL(k_copy_out) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    launch_identity("aten::copy", a.output(0), elementwise_input(a, 1), ctx);
  });
}

}  // namespace fl::cuda

namespace fl::cuda {

void launch_broadcast_copy(const fl_tensor& src, const fl_tensor& dst, const LaunchContext& ctx) {
  ElementwiseInput in;
  in.tensor = &src;
  launch_identity("copy", dst, in, ctx);
}

DenseTensor make_dense(void* data, fl_dtype_t dtype, const std::vector<int64_t>& shape, int32_t device) {
  DenseTensor t;
  t.shape = shape;
  t.strides.assign(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d)
    t.strides[static_cast<size_t>(d)] = t.strides[static_cast<size_t>(d) + 1] * shape[static_cast<size_t>(d) + 1];
  t.view.struct_size = sizeof(fl_tensor);
  t.view.data = data;
  t.view.byte_offset = 0;
  t.view.dtype = dtype;
  t.view.ndim = static_cast<int32_t>(shape.size());
  t.view.shape = t.shape.data();
  t.view.strides = t.strides.data();
  t.view.device = device;
  return t;
}

}  // namespace fl::cuda
