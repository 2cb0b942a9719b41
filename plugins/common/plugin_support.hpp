// plugin_support.hpp — header-only helpers shared by Torch-FL's own plugins (C++ side of the
// ABI boundary). Depends on abi/fl_abi.h only: no core, no libtorch. A vendor may copy it.
//
// What it gives:
//   - a thread-local last-error string and `fl::plugin::guard(...)`, which runs a lambda,
//     turns any C++ exception into a status + message, so no exception crosses the ABI;
//   - `PluginError` to throw with a status code;
//   - accessors for fl_kernel_call inputs with checks (tensor, int, double, bool, lists);
//   - dtype sizes and names, numel/contiguity helpers, and a host-scalar reader.
#pragma once

#include <fl_abi.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace fl::plugin {

// fl_tensor.device value for a 0-dim tensor in host memory (a wrapped Python number). Its
// data is readable by the host during the kernel call only.
constexpr int32_t kHostDevice = -1;

class PluginError : public std::runtime_error {
 public:
  PluginError(fl_status_t status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  fl_status_t status() const noexcept { return status_; }

 private:
  fl_status_t status_;
};

inline std::string& last_error_slot() {
  thread_local std::string message;
  return message;
}

inline const char* last_error() { return last_error_slot().c_str(); }

inline fl_status_t fail(fl_status_t status, const std::string& message) {
  last_error_slot() = message;
  return status;
}

// Runs `body` (returning void or fl_status_t); maps exceptions to status codes and records
// the message for last_error(). Clears the message on success.
template <class Body>
fl_status_t guard(Body&& body) noexcept {
  try {
    last_error_slot().clear();
    if constexpr (std::is_same_v<decltype(body()), void>) {
      body();
      return FL_OK;
    } else {
      return body();
    }
  } catch (const PluginError& e) {
    return fail(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(FL_ERR_OUT_OF_MEMORY, "host allocation failed (std::bad_alloc)");
  } catch (const std::exception& e) {
    return fail(FL_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(FL_ERR_INTERNAL, "internal error: unknown exception");
  }
}

[[noreturn]] inline void raise(fl_status_t status, const std::string& message) {
  throw PluginError(status, message);
}

// A copy of `call` to change a few fields of and pass on: only the `struct_size` bytes the
// core wrote are read (an older core's call is shorter than this header's struct); the rest
// stays zero, as absent fields read.
inline fl_kernel_call copy_call(const fl_kernel_call* call) {
  fl_kernel_call copy{};
  std::memcpy(&copy, call, call->struct_size < sizeof copy ? call->struct_size : sizeof copy);
  return copy;
}

inline size_t dtype_size(fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_FLOAT32: return 4;
    case FL_DTYPE_FLOAT64: return 8;
    case FL_DTYPE_FLOAT16: return 2;
    case FL_DTYPE_BFLOAT16: return 2;
    case FL_DTYPE_INT64: return 8;
    case FL_DTYPE_INT32: return 4;
    case FL_DTYPE_INT16: return 2;
    case FL_DTYPE_INT8: return 1;
    case FL_DTYPE_UINT8: return 1;
    case FL_DTYPE_BOOL: return 1;
    case FL_DTYPE_COMPLEX64: return 8;
    case FL_DTYPE_COMPLEX128: return 16;
    default: raise(FL_ERR_INVALID_ARGUMENT, "unknown dtype " + std::to_string(dtype));
  }
}

inline const char* dtype_name(fl_dtype_t dtype) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16", "int64", "int32",
                                "int16",   "int8",    "uint8",   "bool",     "complex64",
                                "complex128"};
  return (dtype >= 0 && dtype < FL_DTYPE_COUNT) ? names[dtype] : "unknown";
}

inline int64_t numel(const fl_tensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

inline bool is_contiguous(const fl_tensor& t) {
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

// Dense and non-overlapping: its elements fill exactly numel() consecutive slots from data, in
// some order of dimensions (row-major, channels_last, a transpose). An elementwise kernel may
// walk such tensors in memory order when every operand has the same shape and strides.
inline bool is_dense(const fl_tensor& t) {
  if (t.ndim > 16) return false;
  int32_t order[16];
  int32_t n = 0;
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 0) return true;
    if (t.shape[d] != 1) order[n++] = d;
  }
  // Insertion sort of the non-trivial dimensions by stride, smallest first.
  for (int32_t i = 1; i < n; ++i)
    for (int32_t j = i; j > 0 && t.strides[order[j]] < t.strides[order[j - 1]]; --j) {
      const int32_t tmp = order[j];
      order[j] = order[j - 1];
      order[j - 1] = tmp;
    }
  int64_t expected = 1;
  for (int32_t i = 0; i < n; ++i) {
    if (t.strides[order[i]] != expected) return false;
    expected *= t.shape[order[i]];
  }
  return true;
}

// Same shape and, over the dimensions of more than one element, the same strides.
inline bool same_layout(const fl_tensor& a, const fl_tensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
    if (a.shape[d] != 1 && a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

// An output slot the core marked "not requested" (e.g. a masked-off gradient).
inline bool is_undefined(const fl_tensor& t) { return t.ndim < 0; }

template <class T = void>
inline T* data_ptr(const fl_tensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

// Refuses a tensor in device memory where a host value is read at call time: the host may
// not be able to dereference it (a GPU's memory; the CPU plugin's with host_accessible=0), and
// a value read now would not see work still queued on the stream.
inline void require_host_tensor(const fl_tensor& t, const char* what) {
  if (t.device != FL_DEVICE_HOST)
    raise(FL_ERR_NOT_SUPPORTED, std::string(what) + ": a device tensor where a host scalar is expected");
}

// Reads element 0 of a 0-dim host tensor (FL_DEVICE_HOST) as double.
inline double read_host_scalar(const fl_tensor& t) {
  require_host_tensor(t, "read_host_scalar");
  const void* p = data_ptr<const void>(t);
  switch (t.dtype) {
    case FL_DTYPE_FLOAT32: return *static_cast<const float*>(p);
    case FL_DTYPE_FLOAT64: return *static_cast<const double*>(p);
    case FL_DTYPE_INT64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case FL_DTYPE_INT32: return *static_cast<const int32_t*>(p);
    case FL_DTYPE_INT16: return *static_cast<const int16_t*>(p);
    case FL_DTYPE_INT8: return *static_cast<const int8_t*>(p);
    case FL_DTYPE_UINT8: return *static_cast<const uint8_t*>(p);
    case FL_DTYPE_BOOL: return *static_cast<const uint8_t*>(p) ? 1.0 : 0.0;
    case FL_DTYPE_FLOAT16: {
      uint16_t h; std::memcpy(&h, p, 2);
      uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
      float f;
      if (exp == 0) f = std::ldexp(static_cast<float>(man), -24);
      else if (exp == 31) f = man ? NAN : INFINITY;
      else f = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
      return sign ? -f : f;
    }
    case FL_DTYPE_BFLOAT16: {
      uint16_t h; std::memcpy(&h, p, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16; float f; std::memcpy(&f, &bits, 4);
      return f;
    }
    default: raise(FL_ERR_NOT_SUPPORTED, std::string("cannot read a host scalar of dtype ") +
                                             dtype_name(t.dtype));
  }
}

// Checked access to the inputs of a kernel call, by schema position.
class Args {
 public:
  explicit Args(const fl_kernel_call* call) : call_(call) {
    if (call == nullptr) raise(FL_ERR_INVALID_ARGUMENT, "kernel called with a NULL call");
  }
  int32_t size() const { return call_->num_inputs; }
  const fl_value& at(int32_t i) const {
    if (i < 0 || i >= call_->num_inputs)
      raise(FL_ERR_INVALID_ARGUMENT, "kernel input " + std::to_string(i) + " missing (got " +
                                         std::to_string(call_->num_inputs) + ")");
    return call_->inputs[i];
  }
  bool is_none(int32_t i) const { return i >= call_->num_inputs || at(i).kind == FL_VALUE_NONE; }
  const fl_tensor& tensor(int32_t i) const {
    const fl_value& v = at(i);
    if (v.kind != FL_VALUE_TENSOR || v.u.tensor == nullptr)
      raise(FL_ERR_INVALID_ARGUMENT, "kernel input " + std::to_string(i) + " is not a tensor");
    return *v.u.tensor;
  }
  // Ints, doubles and bools convert among themselves (an ATen Scalar arrives as either).
  double number(int32_t i) const {
    const fl_value& v = at(i);
    switch (v.kind) {
      case FL_VALUE_DOUBLE: return v.u.d;
      case FL_VALUE_INT: return static_cast<double>(v.u.i);
      case FL_VALUE_BOOL: return v.u.b ? 1.0 : 0.0;
      case FL_VALUE_TENSOR: return read_host_scalar(*v.u.tensor);
      default: raise(FL_ERR_INVALID_ARGUMENT, "kernel input " + std::to_string(i) + " is not a number");
    }
  }
  int64_t integer(int32_t i) const {
    const fl_value& v = at(i);
    if (v.kind == FL_VALUE_INT) return v.u.i;
    if (v.kind == FL_VALUE_BOOL) return v.u.b;
    raise(FL_ERR_INVALID_ARGUMENT, "kernel input " + std::to_string(i) + " is not an int");
  }
  bool boolean(int32_t i) const {
    const fl_value& v = at(i);
    if (v.kind == FL_VALUE_BOOL) return v.u.b != 0;
    if (v.kind == FL_VALUE_INT) return v.u.i != 0;
    raise(FL_ERR_INVALID_ARGUMENT, "kernel input " + std::to_string(i) + " is not a bool");
  }
  std::vector<int64_t> ints(int32_t i) const {
    const fl_value& v = at(i);
    if (v.kind == FL_VALUE_INT) return {v.u.i};
    if (v.kind != FL_VALUE_INT_LIST)
      raise(FL_ERR_INVALID_ARGUMENT, "kernel input " + std::to_string(i) + " is not an int list");
    return std::vector<int64_t>(v.u.ints.data, v.u.ints.data + v.u.ints.len);
  }
  std::vector<bool> bools(int32_t i) const {
    const fl_value& v = at(i);
    if (v.kind != FL_VALUE_BOOL_LIST)
      raise(FL_ERR_INVALID_ARGUMENT, "kernel input " + std::to_string(i) + " is not a bool list");
    std::vector<bool> out;
    for (int64_t k = 0; k < v.u.bools.len; ++k) out.push_back(v.u.bools.data[k] != 0);
    return out;
  }
  const fl_tensor& output(int32_t i) const {
    if (i < 0 || i >= call_->num_outputs)
      raise(FL_ERR_INVALID_ARGUMENT, "kernel output " + std::to_string(i) + " missing");
    return call_->outputs[i];
  }
  int32_t num_outputs() const { return call_->num_outputs; }

 private:
  const fl_kernel_call* call_;
};

}  // namespace fl::plugin
