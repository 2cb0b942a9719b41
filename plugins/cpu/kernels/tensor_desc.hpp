// tensor_desc.hpp — a by-value copy of an fl_tensor (shape and strides inline), so queued work
// owns every descriptor it reads after the kernel call returns. Plus call-time helpers shared by
// every kernel: submitting work to the call's stream and checking argument shapes.
#pragma once

#include "scalar_types.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fl::cpu::kernels {

constexpr int kMaxDims = 12;

struct TensorDesc {
  char* data = nullptr;  // element [0,...,0]
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;
  int32_t ndim = 0;
  bool host_scalar = false;     // a 0-dim host value (read at call time into `scalar_bytes`)
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // elements

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  int64_t size(int d) const { return shape[d]; }
  bool contiguous() const {
    int64_t expected = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != expected) return false;
      expected *= shape[d];
    }
    return true;
  }
  template <class T>
  T* ptr() const { return reinterpret_cast<T*>(data); }
};

// Copies the descriptor. Throws FL_ERR_NOT_SUPPORTED beyond kMaxDims dimensions and
// FL_ERR_INVALID_ARGUMENT for an undefined tensor.
TensorDesc describe(const fl_tensor& t, const char* op);

// Normalizes a possibly negative dim against ndim (a 0-dim tensor accepts 0 and -1).
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// Enqueues `work` on the call's stream (NULL = the device's default stream).
void submit(const fl_kernel_call* call, std::function<void()> work);

// Contiguous row-major strides for a shape.
void contiguous_strides(const int64_t* shape, int ndim, int64_t* strides);

[[noreturn]] void unsupported(const std::string& op, const std::string& why);
[[noreturn]] void invalid(const std::string& op, const std::string& why);

std::string shape_string(const TensorDesc& t);

// `in` seen as rows of the trailing `normalized` dims (layer norm, RMS norm): raises
// FL_ERR_INVALID_ARGUMENT when those dims are not the input's last ones.
struct NormalizedRows {
  int64_t rows = 1, cols = 1;
};
NormalizedRows normalized_rows(const char* op, const TensorDesc& in, const std::vector<int64_t>& normalized);

// The bytes a tensor's elements span, [first, last) (ATen's strides are not negative); first ==
// last for an empty tensor.
std::pair<const char*, const char*> byte_span(const TensorDesc& t);

// Whether two tensors' byte spans intersect. A conservative test: interleaved views (x[::2],
// x[1::2]) count as overlapping.
bool overlaps(const TensorDesc& a, const TensorDesc& b);

// The same elements in the same memory: address, dtype, shape, and strides over every dim of
// more than one element (an output that is its input, as in-place ops pass them).
bool same_elements(const TensorDesc& a, const TensorDesc& b);

}  // namespace fl::cpu::kernels
