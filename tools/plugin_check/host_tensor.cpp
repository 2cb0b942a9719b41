// host_tensor.cpp — host tensors and dtype conversions for fl-plugin-check.
#include "host_tensor.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace fl::check {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = step;
    step *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

size_t dtype_bytes(fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_FLOAT32: case FL_DTYPE_INT32: return 4;
    case FL_DTYPE_FLOAT64: case FL_DTYPE_INT64: return 8;
    case FL_DTYPE_FLOAT16: case FL_DTYPE_BFLOAT16: return 2;
    case FL_DTYPE_BOOL: case FL_DTYPE_UINT8: case FL_DTYPE_INT8: return 1;
    default: throw std::invalid_argument("dtype not handled by the checker");
  }
}

const char* dtype_label(fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_FLOAT32: return "float32";
    case FL_DTYPE_FLOAT64: return "float64";
    case FL_DTYPE_FLOAT16: return "float16";
    case FL_DTYPE_BFLOAT16: return "bfloat16";
    case FL_DTYPE_INT64: return "int64";
    case FL_DTYPE_INT32: return "int32";
    case FL_DTYPE_BOOL: return "bool";
    default: return "other";
  }
}

bool is_floating(fl_dtype_t dtype) {
  return dtype == FL_DTYPE_FLOAT32 || dtype == FL_DTYPE_FLOAT64 || dtype == FL_DTYPE_FLOAT16 ||
         dtype == FL_DTYPE_BFLOAT16;
}

namespace {

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_fp16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
float fp16_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

}  // namespace

double round_to_dtype(double value, fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_FLOAT32: return static_cast<float>(value);
    case FL_DTYPE_BFLOAT16: return bf16_to_float(float_to_bf16(static_cast<float>(value)));
    case FL_DTYPE_FLOAT16: return fp16_to_float(float_to_fp16(static_cast<float>(value)));
    case FL_DTYPE_INT64: case FL_DTYPE_INT32: return std::trunc(value);
    case FL_DTYPE_BOOL: return value != 0 ? 1 : 0;
    default: return value;
  }
}

HostTensor HostTensor::from_values(fl_dtype_t dtype, const Shape& shape, const std::vector<double>& values) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = contiguous_strides(shape);
  t.storage.assign(static_cast<size_t>(shape_numel(shape)) * dtype_bytes(dtype), 0);
  for (int64_t i = 0; i < shape_numel(shape); ++i) t.set_storage(i, values.at(static_cast<size_t>(i)));
  return t;
}

HostTensor HostTensor::zeros(fl_dtype_t dtype, const Shape& shape) {
  return from_values(dtype, shape, std::vector<double>(static_cast<size_t>(shape_numel(shape)), 0.0));
}

int64_t HostTensor::storage_elements() const { return static_cast<int64_t>(storage.size() / dtype_bytes(dtype)); }

double HostTensor::get_storage(int64_t element) const {
  const uint8_t* p = storage.data() + element * static_cast<int64_t>(dtype_bytes(dtype));
  switch (dtype) {
    case FL_DTYPE_FLOAT32: { float v; std::memcpy(&v, p, 4); return v; }
    case FL_DTYPE_FLOAT64: { double v; std::memcpy(&v, p, 8); return v; }
    case FL_DTYPE_BFLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_float(v); }
    case FL_DTYPE_FLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return fp16_to_float(v); }
    case FL_DTYPE_INT64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case FL_DTYPE_INT32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case FL_DTYPE_BOOL: case FL_DTYPE_UINT8: return *p;
    case FL_DTYPE_INT8: return static_cast<int8_t>(*p);
    default: throw std::invalid_argument("dtype not handled by the checker");
  }
}

void HostTensor::set_storage(int64_t element, double value) {
  uint8_t* p = storage.data() + element * static_cast<int64_t>(dtype_bytes(dtype));
  switch (dtype) {
    case FL_DTYPE_FLOAT32: { float v = static_cast<float>(value); std::memcpy(p, &v, 4); break; }
    case FL_DTYPE_FLOAT64: std::memcpy(p, &value, 8); break;
    case FL_DTYPE_BFLOAT16: { uint16_t v = float_to_bf16(static_cast<float>(value)); std::memcpy(p, &v, 2); break; }
    case FL_DTYPE_FLOAT16: { uint16_t v = float_to_fp16(static_cast<float>(value)); std::memcpy(p, &v, 2); break; }
    case FL_DTYPE_INT64: { int64_t v = static_cast<int64_t>(value); std::memcpy(p, &v, 8); break; }
    case FL_DTYPE_INT32: { int32_t v = static_cast<int32_t>(value); std::memcpy(p, &v, 4); break; }
    case FL_DTYPE_BOOL: *p = value != 0 ? 1 : 0; break;
    case FL_DTYPE_UINT8: *p = static_cast<uint8_t>(value); break;
    case FL_DTYPE_INT8: *p = static_cast<uint8_t>(static_cast<int8_t>(value)); break;
    default: throw std::invalid_argument("dtype not handled by the checker");
  }
}

double HostTensor::at(const Shape& index) const {
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) offset += index[d] * strides[d];
  return get_storage(offset);
}

double HostTensor::broadcast_at(const Shape& out_shape, const Shape& out_index) const {
  int64_t offset = 0;
  const size_t lead = out_shape.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) offset += out_index[lead + d] * strides[d];
  return get_storage(offset);
}

std::vector<double> HostTensor::values() const {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel()));
  if (numel() == 0) return out;
  Shape index(shape.size(), 0);
  do out.push_back(at(index));
  while (next_index(index, shape));
  return out;
}

HostTensor HostTensor::as_transposed_storage() const {
  if (shape.size() < 2) return *this;
  // Storage laid out with the last two dims swapped; strides swapped back.
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  HostTensor t = zeros(dtype, swapped);
  Shape st = t.strides;
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  t.shape = shape;
  t.strides = st;
  if (numel() == 0) return t;
  Shape index(shape.size(), 0);
  do {
    int64_t offset = 0;
    for (size_t d = 0; d < shape.size(); ++d) offset += index[d] * t.strides[d];
    t.set_storage(offset, at(index));
  } while (next_index(index, shape));
  return t;
}

HostTensor HostTensor::as_channels_last_storage() const {
  if (shape.size() != 4) return *this;
  HostTensor t = zeros(dtype, shape);
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  t.strides = {h * w * c, 1, w * c, c};
  if (numel() == 0) return t;
  Shape index(4, 0);
  do {
    int64_t offset = 0;
    for (size_t d = 0; d < 4; ++d) offset += index[d] * t.strides[d];
    t.set_storage(offset, at(index));
  } while (next_index(index, shape));
  return t;
}

bool next_index(Shape& index, const Shape& shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (++index[d] < shape[d]) return true;
    index[d] = 0;
  }
  return false;
}

}  // namespace fl::check
