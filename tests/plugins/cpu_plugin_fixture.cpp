#include "cpu_plugin_fixture.hpp"

#include <dlfcn.h>

#include <random>

namespace fl::test {

const fl_device_ops& cpu_ops() {
  static const fl_device_ops* ops = [] {
    void* handle = dlopen(FL_CPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) FAIL("dlopen " << FL_CPU_PLUGIN_PATH << ": " << dlerror());
    auto get = reinterpret_cast<fl_plugin_get_ops_fn>(dlsym(handle, FL_PLUGIN_ENTRY_SYMBOL));
    if (get == nullptr) FAIL("no " FL_PLUGIN_ENTRY_SYMBOL " in the plugin");
    const fl_device_ops* table = get();
    fl_host_services host{};
    host.struct_size = sizeof(host);
    host.host_abi_major = FL_ABI_MAJOR;
    host.host_abi_minor = FL_ABI_MINOR;
    if (table->init(&host, "devices=2;seed=0") != FL_OK) FAIL("init failed: " << table->last_error());
    return table;
  }();
  return *ops;
}

size_t element_size(fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_FLOAT64: case FL_DTYPE_INT64: case FL_DTYPE_COMPLEX64: return 8;
    case FL_DTYPE_FLOAT32: case FL_DTYPE_INT32: return 4;
    case FL_DTYPE_FLOAT16: case FL_DTYPE_BFLOAT16: case FL_DTYPE_INT16: return 2;
    case FL_DTYPE_COMPLEX128: return 16;
    default: return 1;
  }
}

DeviceBuffer::DeviceBuffer(size_t bytes, int32_t device) : bytes_(bytes), device_(device) {
  if (bytes > 0) FL_REQUIRE_OK(cpu_ops().fl_malloc(device, bytes, &data_));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) {
    cpu_ops().device_synchronize(device_);
    cpu_ops().fl_free(device_, data_);
  }
}

void DeviceBuffer::upload(const void* src, size_t bytes) {
  REQUIRE(bytes <= bytes_);
  if (bytes == 0) return;
  FL_REQUIRE_OK(cpu_ops().device_synchronize(device_));
  FL_REQUIRE_OK(cpu_ops().fl_memcpy_async(device_, data_, src, bytes, FL_MEMCPY_HOST_TO_DEVICE, nullptr));
  FL_REQUIRE_OK(cpu_ops().stream_synchronize(device_, nullptr));
}

void DeviceBuffer::download(void* dst, size_t bytes) const {
  REQUIRE(bytes <= bytes_);
  if (bytes == 0) return;
  FL_REQUIRE_OK(cpu_ops().device_synchronize(device_));
  FL_REQUIRE_OK(cpu_ops().fl_memcpy_async(device_, dst, data_, bytes, FL_MEMCPY_DEVICE_TO_HOST, nullptr));
  FL_REQUIRE_OK(cpu_ops().stream_synchronize(device_, nullptr));
}

Tensor::Tensor(fl_dtype_t dtype, std::vector<int64_t> shape, std::vector<int64_t> strides,
               int64_t storage_elems, int32_t device) {
  if (strides.empty()) {
    strides.resize(shape.size());
    int64_t s = 1;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      strides[static_cast<size_t>(d)] = s;
      s *= std::max<int64_t>(shape[static_cast<size_t>(d)], 1);
    }
  }
  if (storage_elems < 0) {
    storage_elems = 1;
    for (size_t d = 0; d < shape.size(); ++d) storage_elems += (shape[d] - 1) * strides[d];
    for (int64_t s : shape)
      if (s == 0) storage_elems = 0;
  }
  shape_ = std::make_shared<std::vector<int64_t>>(std::move(shape));
  strides_ = std::make_shared<std::vector<int64_t>>(std::move(strides));
  buffer_ = std::make_shared<DeviceBuffer>(static_cast<size_t>(storage_elems) * element_size(dtype), device);
  desc_.struct_size = sizeof(fl_tensor);
  desc_.data = buffer_->data();
  desc_.byte_offset = 0;
  desc_.dtype = dtype;
  desc_.ndim = static_cast<int32_t>(shape_->size());
  desc_.shape = shape_->data();
  desc_.strides = strides_->data();
  desc_.device = device;
}

Tensor Tensor::view(std::vector<int64_t> shape, std::vector<int64_t> strides, int64_t offset) const {
  Tensor t;
  t.buffer_ = buffer_;
  t.shape_ = std::make_shared<std::vector<int64_t>>(std::move(shape));
  t.strides_ = std::make_shared<std::vector<int64_t>>(std::move(strides));
  t.desc_ = desc_;
  t.desc_.byte_offset = offset * static_cast<int64_t>(element_size(desc_.dtype));
  t.desc_.ndim = static_cast<int32_t>(t.shape_->size());
  t.desc_.shape = t.shape_->data();
  t.desc_.strides = t.strides_->data();
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : *shape_) n *= s;
  return n;
}

fl_tensor undefined_tensor() {
  fl_tensor t{};
  t.struct_size = sizeof(fl_tensor);
  t.ndim = -1;
  return t;
}

void HostScalar::init() {
  desc_.struct_size = sizeof(fl_tensor);
  desc_.data = bytes_;
  desc_.dtype = dtype_;
  desc_.ndim = 0;
  desc_.device = FL_DEVICE_HOST;
}

Inputs& Inputs::tensor(const fl_tensor& t) {
  fl_value v{};
  v.kind = FL_VALUE_TENSOR;
  v.u.tensor = &t;
  values_.push_back(v);
  return *this;
}
Inputs& Inputs::none() {
  fl_value v{};
  v.kind = FL_VALUE_NONE;
  values_.push_back(v);
  return *this;
}
Inputs& Inputs::integer(int64_t i) {
  fl_value v{};
  v.kind = FL_VALUE_INT;
  v.u.i = i;
  values_.push_back(v);
  return *this;
}
Inputs& Inputs::real(double d) {
  fl_value v{};
  v.kind = FL_VALUE_DOUBLE;
  v.u.d = d;
  values_.push_back(v);
  return *this;
}
Inputs& Inputs::boolean(bool b) {
  fl_value v{};
  v.kind = FL_VALUE_BOOL;
  v.u.b = b ? 1 : 0;
  values_.push_back(v);
  return *this;
}
Inputs& Inputs::ints(std::vector<int64_t> list) {
  int_lists_.push_back(std::move(list));
  fl_value v{};
  v.kind = FL_VALUE_INT_LIST;
  v.u.ints.data = int_lists_.back().data();
  v.u.ints.len = static_cast<int64_t>(int_lists_.back().size());
  values_.push_back(v);
  return *this;
}
Inputs& Inputs::bools(std::vector<int32_t> list) {
  bool_lists_.push_back(std::move(list));
  fl_value v{};
  v.kind = FL_VALUE_BOOL_LIST;
  v.u.bools.data = bool_lists_.back().data();
  v.u.bools.len = static_cast<int64_t>(bool_lists_.back().size());
  values_.push_back(v);
  return *this;
}
Inputs& Inputs::str(std::string s) {
  strings_.push_back(std::move(s));
  fl_value v{};
  v.kind = FL_VALUE_STRING;
  v.u.str = strings_.back().c_str();
  values_.push_back(v);
  return *this;
}

namespace {
const fl_kernel_entry* find_kernel(const std::string& op) {
  const fl_kernel_entry* entries = nullptr;
  size_t count = 0;
  if (cpu_ops().kernels_get(&entries, &count) != FL_OK) return nullptr;
  for (size_t i = 0; i < count; ++i)
    if (op == entries[i].op) return &entries[i];
  return nullptr;
}
}  // namespace

bool has_kernel(const std::string& op) { return find_kernel(op) != nullptr; }

const fl_kernel_entry& kernel(const std::string& op) {
  const fl_kernel_entry* e = find_kernel(op);
  INFO("kernel " << op);
  REQUIRE(e != nullptr);
  return *e;
}

fl_status_t call_kernel(const std::string& op, const Inputs& inputs, std::vector<fl_tensor> outputs,
                        fl_stream_t stream, int32_t device) {
  const fl_kernel_entry& e = kernel(op);
  fl_kernel_call call{};
  call.struct_size = sizeof(call);
  call.device = device;
  call.stream = stream;
  call.num_inputs = static_cast<int32_t>(inputs.values().size());
  call.inputs = inputs.values().data();
  call.num_outputs = static_cast<int32_t>(outputs.size());
  call.outputs = outputs.data();
  call.kernel_data = e.kernel_data;
  return e.fn(&call);
}

void run_kernel(const std::string& op, const Inputs& inputs, std::vector<fl_tensor> outputs,
                fl_stream_t stream, int32_t device) {
  INFO("kernel " << op);
  FL_REQUIRE_OK(call_kernel(op, inputs, std::move(outputs), stream, device));
  FL_REQUIRE_OK(cpu_ops().stream_synchronize(device, stream));
}

std::vector<fl_tensor> outs(std::initializer_list<const Tensor*> tensors) {
  std::vector<fl_tensor> v;
  for (const Tensor* t : tensors) v.push_back(t->desc());
  return v;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace fl::test
