// kernel_glue.hpp — host helpers shared by the kernel entry points: reading inputs as
// elementwise operands, the entry-point wrapper, and messages for unsupported cases.
#pragma once

#include "device_state.hpp"
#include "elementwise_plan.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <string>
#include <vector>

namespace fl::cuda {

using plugin::Args;

// Input `i` as an elementwise operand: a device tensor, or a scalar (a Scalar argument, or a
// 0-dim host tensor read now).
inline ElementwiseInput elementwise_input(const Args& a, int32_t i) {
  const fl_value& v = a.at(i);
  ElementwiseInput in;
  switch (v.kind) {
    case FL_VALUE_TENSOR:
      if (v.u.tensor == nullptr) plugin::raise(FL_ERR_INVALID_ARGUMENT, "input " + std::to_string(i) + " is NULL");
      if (v.u.tensor->device == FL_DEVICE_HOST) {
        in.scalar = plugin::read_host_scalar(*v.u.tensor);
        in.scalar_is_floating = is_floating_dtype(v.u.tensor->dtype);
      } else {
        in.tensor = v.u.tensor;
      }
      return in;
    case FL_VALUE_DOUBLE: in.scalar = v.u.d; in.scalar_is_floating = true; return in;
    case FL_VALUE_INT: in.scalar = static_cast<double>(v.u.i); return in;
    case FL_VALUE_BOOL: in.scalar = v.u.b ? 1.0 : 0.0; return in;
    default:
      plugin::raise(FL_ERR_INVALID_ARGUMENT, "input " + std::to_string(i) + " is neither a tensor nor a number");
  }
}

inline ElementwiseInput scalar_input(double value, bool floating) {
  ElementwiseInput in;
  in.scalar = value;
  in.scalar_is_floating = floating;
  return in;
}

// A device tensor input (not a host scalar), checked.
inline const fl_tensor& device_tensor(const Args& a, int32_t i, const char* op) {
  const fl_tensor& t = a.tensor(i);
  if (t.device == FL_DEVICE_HOST)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": input " + std::to_string(i) + " is a host value");
  return t;
}

inline std::string optional_string(const Args& a, int32_t i) {
  if (a.is_none(i)) return "";
  const fl_value& v = a.at(i);
  if (v.kind != FL_VALUE_STRING || v.u.str == nullptr)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "input " + std::to_string(i) + " is not a string");
  return v.u.str;
}

[[noreturn]] inline void unsupported_dtype(const char* op, fl_dtype_t dtype) {
  plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": dtype " + plugin::dtype_name(dtype) + " not supported");
}

// Normalises a possibly negative dim against ndim (a 0-dim tensor accepts 0 and -1).
inline int32_t normalize_dim(int64_t dim, int32_t ndim, const char* op) {
  const int32_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": dim " + std::to_string(dim) +
                                               " out of range for " + std::to_string(ndim) + " dims");
  return static_cast<int32_t>(dim < 0 ? dim + n : dim);
}

// Whether the bytes two device tensors' elements span intersect (strides non-negative; an
// empty tensor spans nothing). Conservative: interleaved views (x[::2], x[1::2]) count.
inline bool overlaps(const fl_tensor& a, const fl_tensor& b) {
  auto span = [](const fl_tensor& t, const char*& first, const char*& last) {
    first = last = static_cast<const char*>(t.data) + t.byte_offset;
    if (t.data == nullptr || plugin::numel(t) == 0) return;
    int64_t end = 0;
    for (int32_t d = 0; d < t.ndim; ++d) end += (t.shape[d] - 1) * t.strides[d];
    last = first + (end + 1) * static_cast<int64_t>(plugin::dtype_size(t.dtype));
  };
  const char *a_first, *a_last, *b_first, *b_last;
  span(a, a_first, a_last);
  span(b, b_first, b_last);
  return a_first != a_last && b_first != b_last && a_first < b_last && b_first < a_last;
}

// The same elements in the same memory (an output that is its input, as in-place ops pass
// them): address, dtype, shape, and strides over every dim of more than one element.
inline bool same_elements(const fl_tensor& a, const fl_tensor& b) {
  if (plugin::data_ptr(a) != plugin::data_ptr(b) || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.strides[d] != b.strides[d])) return false;
  return true;
}

}  // namespace fl::cuda

// Declares/defines a kernel entry point of the ABI's fl_kernel_fn type.
#define FL_CUDA_KERNEL(name) fl_status_t name(const fl_kernel_call* call)
