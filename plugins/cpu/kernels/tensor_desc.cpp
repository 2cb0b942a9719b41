#include "tensor_desc.hpp"

#include "parallel_loop.hpp"

#include "../cpu_runtime.hpp"
#include "../device_address.hpp"

namespace fl::cpu::kernels {

TensorDesc describe(const fl_tensor& t, const char* op) {
  if (t.ndim < 0) invalid(op, "undefined tensor argument");
  if (t.ndim > kMaxDims)
    unsupported(op, std::to_string(t.ndim) + "-dim tensors (at most " + std::to_string(kMaxDims) + ")");
  TensorDesc d;
  d.dtype = t.dtype;
  d.ndim = t.ndim;
  // A device tensor's address may carry the fence bit (device_address.hpp); a host scalar's
  // is a plain host address.
  d.data = t.data ? static_cast<char*>(host_address(t.data)) + t.byte_offset : nullptr;
  for (int i = 0; i < t.ndim; ++i) {
    d.shape[i] = t.shape[i];
    d.strides[i] = t.strides ? t.strides[i] : 0;
  }
  if (t.strides == nullptr) contiguous_strides(d.shape, d.ndim, d.strides);
  d.host_scalar = t.device == FL_DEVICE_HOST;
  return d;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;
  if (dim < -n || dim >= n)
    invalid(op, "dim " + std::to_string(dim) + " out of range for " + std::to_string(ndim) + " dims");
  return dim < 0 ? dim + n : dim;
}

void submit(const fl_kernel_call* call, std::function<void()> work) {
  Runtime& runtime = Runtime::get();
  // The team is taken now, not when the work runs: the runtime may be shutting down by then.
  plugin::ParallelFor* team = &runtime.kernel_team();
  runtime.stream(call->device, call->stream).enqueue([team, work = std::move(work)] {
    TeamScope scope(team);
    work();
  });
}

void contiguous_strides(const int64_t* shape, int ndim, int64_t* strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d] > 1 ? shape[d] : 1;
  }
}

void unsupported(const std::string& op, const std::string& why) {
  plugin::raise(FL_ERR_NOT_SUPPORTED, "cpu plugin: " + op + ": not supported: " + why);
}

void invalid(const std::string& op, const std::string& why) {
  plugin::raise(FL_ERR_INVALID_ARGUMENT, "cpu plugin: " + op + ": " + why);
}

std::string shape_string(const TensorDesc& t) {
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

}  // namespace fl::cpu::kernels
