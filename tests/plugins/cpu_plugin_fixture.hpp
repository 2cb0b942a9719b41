// cpu_plugin_fixture.hpp — loads libfl_cpu.so with dlopen and drives it through the ABI table
// only: device buffers, tensor descriptors, kernel calls by ATen op name.
#pragma once

#include <fl_abi.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace fl::test {

// The loaded plugin, initialized once per process with "devices=2;seed=0".
const fl_device_ops& cpu_ops();

// Checks a status, printing last_error on failure.
#define FL_REQUIRE_OK(expr)                                                        \
  do {                                                                             \
    fl_status_t fl_status_ = (expr);                                               \
    INFO(#expr << " -> " << fl_status_ << ": " << fl::test::cpu_ops().last_error()); \
    REQUIRE(fl_status_ == FL_OK);                                                  \
  } while (0)

size_t element_size(fl_dtype_t dtype);

// A block of device memory (fl_malloc/fl_free) on `device`.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, int32_t device = 0);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* src, size_t bytes);   // synchronous
  void download(void* dst, size_t bytes) const;  // synchronous

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  int32_t device_ = 0;
};

// A tensor in device memory with its own shape/strides storage.
class Tensor {
 public:
  Tensor(fl_dtype_t dtype, std::vector<int64_t> shape, std::vector<int64_t> strides = {},
         int64_t storage_elems = -1, int32_t device = 0);
  template <class T>
  static Tensor from(fl_dtype_t dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    Tensor t(dtype, std::move(shape));
    REQUIRE(values.size() * sizeof(T) == t.storage_bytes());
    t.write_storage(values.data(), values.size() * sizeof(T));
    return t;
  }
  // A view sharing storage with `base` (strides in elements, offset in elements).
  Tensor view(std::vector<int64_t> shape, std::vector<int64_t> strides, int64_t offset = 0) const;

  int64_t numel() const;
  const fl_tensor& desc() const { return desc_; }
  fl_dtype_t dtype() const { return desc_.dtype; }
  const std::vector<int64_t>& shape() const { return *shape_; }
  size_t storage_bytes() const { return buffer_->bytes(); }
  void write_storage(const void* src, size_t bytes) { buffer_->upload(src, bytes); }
  // Storage contents (after synchronizing the device).
  template <class T>
  std::vector<T> storage() const {
    std::vector<T> out(buffer_->bytes() / sizeof(T));
    buffer_->download(out.data(), out.size() * sizeof(T));
    return out;
  }
  // Logical elements in row-major order, honouring strides and offset.
  template <class T>
  std::vector<T> values() const {
    std::vector<T> all = storage<T>();
    std::vector<T> out;
    out.reserve(static_cast<size_t>(numel()));
    const auto& shape = *shape_;
    std::vector<int64_t> index(shape.size(), 0);
    for (int64_t n = 0; n < numel(); ++n) {
      int64_t off = desc_.byte_offset / static_cast<int64_t>(sizeof(T));
      for (size_t d = 0; d < shape.size(); ++d) off += index[d] * (*strides_)[d];
      out.push_back(all[static_cast<size_t>(off)]);
      for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
        if (++index[static_cast<size_t>(d)] < shape[static_cast<size_t>(d)]) break;
        index[static_cast<size_t>(d)] = 0;
      }
    }
    return out;
  }

 private:
  Tensor() = default;
  std::shared_ptr<DeviceBuffer> buffer_;
  std::shared_ptr<std::vector<int64_t>> shape_, strides_;
  fl_tensor desc_{};
};

// An undefined output slot (ndim == -1).
fl_tensor undefined_tensor();

// A 0-dim host value (a wrapped Python number).
class HostScalar {
 public:
  explicit HostScalar(double v) : dtype_(FL_DTYPE_FLOAT64) { std::memcpy(bytes_, &v, 8); init(); }
  explicit HostScalar(int64_t v) : dtype_(FL_DTYPE_INT64) { std::memcpy(bytes_, &v, 8); init(); }
  HostScalar(const HostScalar&) = delete;
  const fl_tensor& desc() const { return desc_; }

 private:
  void init();
  fl_dtype_t dtype_;
  alignas(8) unsigned char bytes_[8] = {};
  fl_tensor desc_{};
};

// Builds the inputs of a kernel call.
class Inputs {
 public:
  Inputs() = default;
  Inputs(const Inputs&) = delete;  // values point into this object's lists
  Inputs& operator=(const Inputs&) = delete;
  Inputs& tensor(const Tensor& t) { return tensor(t.desc()); }
  Inputs& tensor(const fl_tensor& t);
  Inputs& host(const HostScalar& s) { return tensor(s.desc()); }
  Inputs& none();
  Inputs& integer(int64_t v);
  Inputs& real(double v);
  Inputs& boolean(bool v);
  Inputs& ints(std::vector<int64_t> v);
  Inputs& bools(std::vector<int32_t> v);
  Inputs& str(std::string s);
  const std::vector<fl_value>& values() const { return values_; }

 private:
  std::vector<fl_value> values_;
  std::deque<std::vector<int64_t>> int_lists_;
  std::deque<std::vector<int32_t>> bool_lists_;
  std::deque<std::string> strings_;
};

// Looks up `op` in the kernel table (REQUIREs it exists).
const fl_kernel_entry& kernel(const std::string& op);
bool has_kernel(const std::string& op);

// Calls the kernel on the default stream of device 0 (or `stream`); returns its status
// without synchronizing.
fl_status_t call_kernel(const std::string& op, const Inputs& inputs, std::vector<fl_tensor> outputs,
                        fl_stream_t stream = nullptr, int32_t device = 0);
// Calls it, REQUIREs FL_OK, and synchronizes the stream (REQUIRE FL_OK).
void run_kernel(const std::string& op, const Inputs& inputs, std::vector<fl_tensor> outputs,
                fl_stream_t stream = nullptr, int32_t device = 0);
std::vector<fl_tensor> outs(std::initializer_list<const Tensor*> tensors);

// Random values in [lo, hi) from a fixed seed.
std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

}  // namespace fl::test
