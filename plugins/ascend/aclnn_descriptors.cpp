// aclnn_descriptors.cpp — see aclnn_descriptors.hpp.
#include "aclnn_descriptors.hpp"

#include "ascend_runtime.hpp"

#include <plugin_support.hpp>

#include <string>

namespace fl::ascend {

aclDataType acl_dtype(fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_FLOAT32: return ACL_FLOAT;
    case FL_DTYPE_FLOAT16: return ACL_FLOAT16;
    case FL_DTYPE_BFLOAT16: return ACL_BF16;
    case FL_DTYPE_FLOAT64: return ACL_DOUBLE;
    case FL_DTYPE_INT64: return ACL_INT64;
    case FL_DTYPE_INT32: return ACL_INT32;
    case FL_DTYPE_INT16: return ACL_INT16;
    case FL_DTYPE_INT8: return ACL_INT8;
    case FL_DTYPE_UINT8: return ACL_UINT8;
    case FL_DTYPE_BOOL: return ACL_BOOL;
    case FL_DTYPE_COMPLEX64: return ACL_COMPLEX64;
    case FL_DTYPE_COMPLEX128: return ACL_COMPLEX128;
    default: plugin::raise(FL_ERR_NOT_SUPPORTED, std::string("no aclDataType for ") + plugin::dtype_name(dtype));
  }
}

AclTensor::AclTensor(const fl_tensor& t) {
  if (t.device == FL_DEVICE_HOST) plugin::raise(FL_ERR_NOT_SUPPORTED, "a host value cannot be an aclTensor");
  const int64_t esize = static_cast<int64_t>(plugin::dtype_size(t.dtype));
  if (t.byte_offset % esize != 0) plugin::raise(FL_ERR_NOT_SUPPORTED, "tensor offset is not a whole element");
  const int64_t offset = t.byte_offset / esize;
  // Storage: a 1-D extent covering every element the view reaches.
  int64_t extent = offset + 1;
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 0) {
      extent = offset;
      break;
    }
    extent += (t.shape[d] - 1) * t.strides[d];
  }
  const int64_t storage[1] = {extent};
  tensor_ = acl().aclCreateTensor(t.shape, static_cast<uint64_t>(t.ndim), acl_dtype(t.dtype), t.strides, offset,
                                  ACL_FORMAT_ND, storage, 1, t.data);
  if (tensor_ == nullptr) plugin::raise(FL_ERR_DEVICE, "aclCreateTensor returned NULL");
}

AclTensor::AclTensor(void* data, fl_dtype_t dtype, const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  int64_t numel = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = numel;
    numel *= shape[d];
  }
  const int64_t storage[1] = {numel};
  tensor_ = acl().aclCreateTensor(shape.data(), shape.size(), acl_dtype(dtype), strides.data(), 0, ACL_FORMAT_ND, storage,
                                  1, data);
  if (tensor_ == nullptr) plugin::raise(FL_ERR_DEVICE, "aclCreateTensor returned NULL");
}

AclTensor::~AclTensor() {
  if (tensor_ != nullptr) (void)acl().aclDestroyTensor(tensor_);
}

AclScalar::AclScalar(double value, fl_dtype_t like) {
  float f = static_cast<float>(value);
  int64_t i = static_cast<int64_t>(value);
  bool b = value != 0.0;
  switch (like) {
    case FL_DTYPE_FLOAT64: scalar_ = acl().aclCreateScalar(&value, ACL_DOUBLE); break;
    case FL_DTYPE_FLOAT32:
    case FL_DTYPE_FLOAT16:
    case FL_DTYPE_BFLOAT16: scalar_ = acl().aclCreateScalar(&f, ACL_FLOAT); break;
    case FL_DTYPE_BOOL: scalar_ = acl().aclCreateScalar(&b, ACL_BOOL); break;
    default: scalar_ = acl().aclCreateScalar(&i, ACL_INT64); break;
  }
  if (scalar_ == nullptr) plugin::raise(FL_ERR_DEVICE, "aclCreateScalar returned NULL");
}

AclScalar::~AclScalar() {
  if (scalar_ != nullptr) (void)acl().aclDestroyScalar(scalar_);
}

AclIntArray::AclIntArray(const std::vector<int64_t>& values) {
  array_ = acl().aclCreateIntArray(values.data(), values.size());
  if (array_ == nullptr) plugin::raise(FL_ERR_DEVICE, "aclCreateIntArray returned NULL");
}

AclIntArray::~AclIntArray() {
  if (array_ != nullptr) (void)acl().aclDestroyIntArray(array_);
}

void launch_aclnn(const char* name, int32_t device, aclrtStream stream,
                  const std::function<aclnnStatus(uint64_t*, aclOpExecutor**)>& prepare, AclnnRunFn run) {
  uint64_t workspace_bytes = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus prepared = prepare(&workspace_bytes, &executor);
  if (prepared != 0)
    plugin::raise(FL_ERR_NOT_SUPPORTED, acl_error_text((std::string(name) + "GetWorkspaceSize").c_str(), prepared));
  void* workspace = stream_scratch(device, stream, 0, workspace_bytes);
  const aclnnStatus ran = run(workspace, workspace_bytes, executor, stream);
  if (ran != 0) plugin::raise(FL_ERR_DEVICE, acl_error_text(name, ran));
}

}  // namespace fl::ascend
