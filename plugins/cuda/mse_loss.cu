// mse_loss.cu — mse_loss and mse_loss_backward, as ATen's CUDA kernels compute them: the
// elementwise loss (x - y)^2, then for mean/sum the reduction engine over all of it (the
// loss held in a stream-ordered scratch tensor of the input's dtype, as ATen's temporary);
// the gradient (norm * (x - y)) * g with norm 2, or 2/N for the mean. The 16-bit floats
// compute each formula in float and round once at the store (ATen's Half arithmetic rounds
// after every operation: results may differ from it in the last bit there).
#include "elementwise.cuh"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "reduce.hpp"
#include "scratch_buffer.hpp"

#include <string>
#include <vector>

namespace fl::cuda {
namespace {

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

template <class C> struct SquaredDifferenceOp : FloatOnly {
  explicit SquaredDifferenceOp(const OpParams&) {}
  __device__ C operator()(C x, C y) const {
    const C d = x - y;
    return d * d;
  }
};

template <class C> struct MseBackwardOp : FloatOnly {
  C norm;
  explicit MseBackwardOp(const OpParams& q) : norm(static_cast<C>(q.a)) {}
  __device__ C operator()(C x, C y, C g) const { return norm * (x - y) * g; }
};

int64_t reduction_arg(const Args& a, int32_t i, const char* name) {
  const int64_t r = a.is_none(i) ? int64_t{kMean} : a.integer(i);
  if (r < kNone || r > kSum) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": bad reduction " + std::to_string(r));
  return r;
}

bool same_shape(const fl_tensor& a, const fl_tensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

}  // namespace

// mse_loss.out(self, target, int reduction=Mean): floating self and target of one dtype; a
// target broadcast against self is served for reduction none only.
FL_CUDA_KERNEL(k_mse_loss_out) {
  return plugin::guard([&] {
    const char* name = "aten::mse_loss";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const fl_tensor& target = device_tensor(a, 1, name);
    const fl_tensor& out = a.output(0);
    const int64_t reduction = reduction_arg(a, 2, name);
    if (!is_floating_dtype(self.dtype) || target.dtype != self.dtype || out.dtype != self.dtype)
      unsupported_dtype(name, target.dtype != self.dtype ? target.dtype : out.dtype);
    const std::vector<ElementwiseInput> ins = {elementwise_input(a, 0), elementwise_input(a, 1)};
    if (reduction == kNone) {
      const ElementwiseOperands p = plan_elementwise(out, ins);
      launch_elementwise<SquaredDifferenceOp, 2>(name, p, compute_kind_for(p, ins, true), {}, ctx);
      return;
    }
    if (!same_shape(self, target)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": broadcast target");
    if (plugin::numel(out) != 1) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output is not one element");
    // The elementwise loss, contiguous in self's shape, then summed (or averaged) into out.
    std::vector<int64_t> strides(static_cast<size_t>(self.ndim));
    int64_t numel = 1;
    for (int32_t d = self.ndim - 1; d >= 0; --d) {
      strides[static_cast<size_t>(d)] = numel;
      numel *= self.shape[d];
    }
    ScratchBuffer buffer(static_cast<size_t>(numel) * plugin::dtype_size(self.dtype), ctx.stream);
    fl_tensor loss = self;
    loss.data = buffer.get();
    loss.byte_offset = 0;
    loss.strides = strides.data();
    const ElementwiseOperands p = plan_elementwise(loss, ins);
    launch_elementwise<SquaredDifferenceOp, 2>(name, p, compute_kind_for(p, ins, true), {}, ctx);
    std::vector<int> all(static_cast<size_t>(self.ndim));
    for (int32_t d = 0; d < self.ndim; ++d) all[static_cast<size_t>(d)] = d;
    if (reduction == kMean) launch_mean(loss, all, out, ctx);
    else launch_sum(loss, all, out, ctx);
  });
}

// mse_loss_backward.grad_input(grad_output, self, target, int reduction): grad_output is
// 0-dim (mean, sum) or of the loss's shape (none), broadcast as ATen does.
FL_CUDA_KERNEL(k_mse_loss_backward) {
  return plugin::guard([&] {
    const char* name = "aten::mse_loss_backward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& grad = device_tensor(a, 0, name);
    const fl_tensor& self = device_tensor(a, 1, name);
    const fl_tensor& target = device_tensor(a, 2, name);
    const int64_t reduction = reduction_arg(a, 3, name);
    const fl_tensor& grad_input = a.output(0);
    if (!is_floating_dtype(self.dtype) || target.dtype != self.dtype || grad.dtype != self.dtype ||
        grad_input.dtype != self.dtype)
      unsupported_dtype(name, grad_input.dtype != self.dtype ? grad_input.dtype : grad.dtype);
    OpParams q;
    q.a = reduction == kMean ? 2.0 / static_cast<double>(plugin::numel(self)) : 2.0;
    const std::vector<ElementwiseInput> ins = {elementwise_input(a, 1), elementwise_input(a, 2), elementwise_input(a, 0)};
    const ElementwiseOperands p = plan_elementwise(grad_input, ins);
    launch_elementwise<MseBackwardOp, 3>(name, p, compute_kind_for(p, ins, true), q, ctx);
  });
}

}  // namespace fl::cuda
