// host_tensor.h — a tensor in host memory for fl-plugin-check: a dtype, a shape, strides in
// elements over its own storage, and conversions to and from double for every dtype the
// checker generates (float32/64, bfloat16, float16, int64, int32, bool).
#pragma once

#include <fl_abi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fl::check {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_string(const Shape& shape);
size_t dtype_bytes(fl_dtype_t dtype);
const char* dtype_label(fl_dtype_t dtype);
bool is_floating(fl_dtype_t dtype);

// Rounds `value` as storing it in `dtype` would (bf16/fp16 round to nearest even).
double round_to_dtype(double value, fl_dtype_t dtype);

struct HostTensor {
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;
  Shape shape;
  Shape strides;                // elements, over `storage`
  std::vector<uint8_t> storage; // storage_elements() * dtype_bytes(dtype) bytes
  bool host_scalar = false;     // passed with device FL_DEVICE_HOST (a wrapped number)

  // Contiguous tensor from logical values (rounded to the dtype).
  static HostTensor from_values(fl_dtype_t dtype, const Shape& shape, const std::vector<double>& values);
  static HostTensor zeros(fl_dtype_t dtype, const Shape& shape);

  int64_t numel() const { return shape_numel(shape); }
  int64_t storage_elements() const;
  size_t storage_bytes() const { return storage.size(); }
  double get_storage(int64_t element) const;
  void set_storage(int64_t element, double value);
  // Element at a multi-index of this tensor's shape.
  double at(const Shape& index) const;
  // Element read as broadcast to `out_shape` at `out_index` (ATen's right-aligned rules).
  double broadcast_at(const Shape& out_shape, const Shape& out_index) const;
  // Logical values in row-major order.
  std::vector<double> values() const;
  // The transpose of the last two dims as a strided view over new storage that holds the
  // same logical values (so the result equals *this, read through non-contiguous strides).
  HostTensor as_transposed_storage() const;
  // A 4-D tensor as a channels_last view (NHWC storage, NCHW shape) holding the same values.
  HostTensor as_channels_last_storage() const;
};

// Advances a row-major multi-index; false after the last one.
bool next_index(Shape& index, const Shape& shape);

}  // namespace fl::check
