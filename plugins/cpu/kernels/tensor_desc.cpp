#include "tensor_desc.hpp"

#include "parallel_loop.hpp"

#include "../cpu_runtime.hpp"
#include "../device_address.hpp"

#include <functional>
#include <utility>

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

NormalizedRows normalized_rows(const char* op, const TensorDesc& in, const std::vector<int64_t>& normalized) {
  const int64_t k = static_cast<int64_t>(normalized.size());
  if (k == 0 || k > in.ndim) invalid(op, "bad normalized_shape");
  NormalizedRows s;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t d = in.ndim - k + i;
    if (in.shape[d] != normalized[static_cast<size_t>(i)])
      invalid(op, "normalized_shape does not match input " + shape_string(in));
    s.cols *= in.shape[d];
  }
  for (int64_t d = 0; d < in.ndim - k; ++d) s.rows *= in.shape[d];
  return s;
}

std::pair<const char*, const char*> byte_span(const TensorDesc& t) {
  if (t.numel() == 0 || t.data == nullptr) return {t.data, t.data};
  int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) last += (t.shape[d] - 1) * t.strides[d];
  return {t.data, t.data + (last + 1) * static_cast<int64_t>(plugin::dtype_size(t.dtype))};
}

bool overlaps(const TensorDesc& a, const TensorDesc& b) {
  const auto [a_first, a_last] = byte_span(a);
  const auto [b_first, b_last] = byte_span(b);
  const std::less<const char*> before;
  return a_first != a_last && b_first != b_last && before(a_first, b_last) && before(b_first, a_last);
}

bool same_elements(const TensorDesc& a, const TensorDesc& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.strides[d] != b.strides[d])) return false;
  return true;
}

}  // namespace fl::cpu::kernels
