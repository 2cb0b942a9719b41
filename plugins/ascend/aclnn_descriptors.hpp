// aclnn_descriptors.hpp — RAII owners of the aclnn descriptors built for one call
// (aclCreateTensor/aclCreateScalar/aclCreateIntArray, destroyed with the matching
// aclDestroy*), and the two-phase launch: aclnnXxxGetWorkspaceSize, then aclnnXxx on the
// stream with the stream's workspace. Descriptors are host-side and are released as soon as
// the operator is enqueued.
#pragma once

#include "acl_api.hpp"

#include <fl_abi.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace fl::ascend {

aclDataType acl_dtype(fl_dtype_t dtype);  // FL_ERR_NOT_SUPPORTED for a dtype aclnn lacks

class AclTensor {
 public:
  AclTensor() = default;
  // A view of `t` (shape, strides, element offset) on its device memory, format ND.
  explicit AclTensor(const fl_tensor& t);
  // A dense tensor over `data` with `shape`, of `dtype`.
  AclTensor(void* data, fl_dtype_t dtype, const std::vector<int64_t>& shape);
  ~AclTensor();
  AclTensor(const AclTensor&) = delete;
  AclTensor& operator=(const AclTensor&) = delete;
  aclTensor* get() const { return tensor_; }

 private:
  aclTensor* tensor_ = nullptr;
};

class AclScalar {
 public:
  // `value` stored as the dtype aclnn expects beside a tensor of `like` (float for half
  // types and float32, double for float64, int64 for integers, bool for bool).
  AclScalar(double value, fl_dtype_t like);
  ~AclScalar();
  AclScalar(const AclScalar&) = delete;
  AclScalar& operator=(const AclScalar&) = delete;
  aclScalar* get() const { return scalar_; }

 private:
  aclScalar* scalar_ = nullptr;
};

class AclIntArray {
 public:
  explicit AclIntArray(const std::vector<int64_t>& values);
  ~AclIntArray();
  AclIntArray(const AclIntArray&) = delete;
  AclIntArray& operator=(const AclIntArray&) = delete;
  aclIntArray* get() const { return array_; }

 private:
  aclIntArray* array_ = nullptr;
};

// First phase (`prepare` calls aclnnXxxGetWorkspaceSize): a failure there is aclnn refusing
// the arguments, reported as FL_ERR_NOT_SUPPORTED before anything is enqueued. Second phase
// (`run`, aclnnXxx) enqueues on `stream` with the stream's workspace; failure: FL_ERR_DEVICE.
void launch_aclnn(const char* name, int32_t device, aclrtStream stream,
                  const std::function<aclnnStatus(uint64_t*, aclOpExecutor**)>& prepare, AclnnRunFn run);

}  // namespace fl::ascend
