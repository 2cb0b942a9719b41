// acl_api.hpp — the part of the CANN API this plugin calls, declared here so the plugin builds
// without the CANN SDK, and resolved at init with dlopen/dlsym (acl_loader.cpp). Every
// prototype and enum value below is the documented one (CANN 8.x headers and the "AscendCL
// API Reference"): acl/acl_base.h, acl/acl_rt.h, aclnn/acl_meta.h and the per-operator
// aclnnop/aclnn_*.h headers named beside each entry.
//
// Libraries: libascendcl.so (runtime, acl*/aclrt*), libnnopbase.so (aclCreateTensor and the
// other aclnn descriptors; older CANN releases export them from libopapi.so, so both are
// searched), libopapi.so (aclnn operators).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fl::ascend {

// ---- acl/acl_base.h --------------------------------------------------------------------
using aclError = int32_t;
constexpr aclError ACL_SUCCESS = 0;
constexpr aclError ACL_ERROR_RT_MEMORY_ALLOCATION = 207001;  // "memory allocation error"
using aclrtStream = void*;
using aclrtEvent = void*;

enum aclDataType : int32_t {  // acl_base.h aclDataType
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_INT64 = 9,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_COMPLEX64 = 16,
  ACL_COMPLEX128 = 17,
  ACL_BF16 = 27,
};

enum aclFormat : int32_t { ACL_FORMAT_NCHW = 0, ACL_FORMAT_ND = 2 };  // acl_base.h aclFormat

// ---- acl/acl_rt.h ----------------------------------------------------------------------
enum aclrtMemcpyKind : int32_t {
  ACL_MEMCPY_HOST_TO_HOST = 0,
  ACL_MEMCPY_HOST_TO_DEVICE = 1,
  ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
};
enum aclrtMemMallocPolicy : int32_t { ACL_MEM_MALLOC_HUGE_FIRST = 0 };
enum aclrtMemAttr : int32_t { ACL_DDR_MEM = 0, ACL_HBM_MEM = 1 };
enum aclrtStreamStatus : int32_t { ACL_STREAM_STATUS_COMPLETE = 0, ACL_STREAM_STATUS_NOT_READY = 1 };
enum aclrtEventRecordedStatus : int32_t {
  ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
  ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
};
enum aclrtDevAttr : int32_t { ACL_DEV_ATTR_AICORE_CORE_NUM = 101 };
constexpr uint32_t ACL_EVENT_SYNC = 0x1u;
constexpr uint32_t ACL_EVENT_TIME_LINE = 0x8u;
struct aclrtUuid {
  char bytes[16];
};

// ---- aclnn/acl_meta.h ------------------------------------------------------------------
struct aclTensor;
struct aclScalar;
struct aclIntArray;
struct aclOpExecutor;
using aclnnStatus = int32_t;

// aclnnXxx (second phase): every operator has this signature.
using AclnnRunFn = aclnnStatus (*)(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream);

// The resolved entry points. Required ones are checked at load; optional ones may be NULL.
struct AclApi {
  // acl/acl.h, acl/acl_rt.h (libascendcl.so)
  aclError (*aclInit)(const char* configPath);
  aclError (*aclFinalize)();
  const char* (*aclGetRecentErrMsg)();
  aclError (*aclrtGetDeviceCount)(uint32_t* count);
  aclError (*aclrtSetDevice)(int32_t deviceId);
  aclError (*aclrtGetDevice)(int32_t* deviceId);
  aclError (*aclrtResetDevice)(int32_t deviceId);
  aclError (*aclrtSynchronizeDevice)();
  const char* (*aclrtGetSocName)();
  aclError (*aclrtGetMemInfo)(aclrtMemAttr attr, size_t* free, size_t* total);
  aclError (*aclrtMalloc)(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
  aclError (*aclrtFree)(void* devPtr);
  aclError (*aclrtMallocHost)(void** hostPtr, size_t size);
  aclError (*aclrtFreeHost)(void* hostPtr);
  aclError (*aclrtMemcpy)(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind);
  aclError (*aclrtMemcpyAsync)(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                               aclrtStream stream);
  aclError (*aclrtMemsetAsync)(void* devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream);
  aclError (*aclrtCreateStream)(aclrtStream* stream);
  aclError (*aclrtDestroyStream)(aclrtStream stream);
  aclError (*aclrtSynchronizeStream)(aclrtStream stream);
  aclError (*aclrtStreamWaitEvent)(aclrtStream stream, aclrtEvent event);
  aclError (*aclrtCreateEvent)(aclrtEvent* event);
  aclError (*aclrtDestroyEvent)(aclrtEvent event);
  aclError (*aclrtRecordEvent)(aclrtEvent event, aclrtStream stream);
  aclError (*aclrtQueryEventStatus)(aclrtEvent event, aclrtEventRecordedStatus* status);
  aclError (*aclrtSynchronizeEvent)(aclrtEvent event);
  aclError (*aclrtEventElapsedTime)(float* ms, aclrtEvent start, aclrtEvent end);
  // optional (newer CANN releases or some products only)
  aclError (*aclrtCreateEventWithFlag)(aclrtEvent* event, uint32_t flag);
  aclError (*aclrtStreamQuery)(aclrtStream stream, aclrtStreamStatus* status);
  aclError (*aclrtDeviceGetUuid)(int32_t deviceId, aclrtUuid* uuid);
  aclError (*aclrtGetPhyDevIdByLogicDevId)(int32_t logicDevId, int32_t* phyDevId);
  aclError (*aclrtGetDeviceInfo)(uint32_t deviceId, aclrtDevAttr attr, int64_t* value);
  aclError (*aclrtDeviceCanAccessPeer)(int32_t* canAccessPeer, int32_t deviceId, int32_t peerDeviceId);
  aclError (*aclrtDeviceEnablePeerAccess)(int32_t peerDeviceId, uint32_t flags);

  // aclnn/acl_meta.h (libnnopbase.so, or libopapi.so)
  aclTensor* (*aclCreateTensor)(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                const int64_t* stride, int64_t offset, aclFormat format, const int64_t* storageDims,
                                uint64_t storageDimsNum, void* tensorData);
  aclScalar* (*aclCreateScalar)(void* value, aclDataType dataType);
  aclIntArray* (*aclCreateIntArray)(const int64_t* value, uint64_t size);
  aclnnStatus (*aclDestroyTensor)(const aclTensor* tensor);
  aclnnStatus (*aclDestroyScalar)(const aclScalar* scalar);
  aclnnStatus (*aclDestroyIntArray)(const aclIntArray* array);

  // aclnnop/*.h (libopapi.so): first phases; the second phases are AclnnRunFn.
  // aclnn_add.h
  aclnnStatus (*aclnnAddGetWorkspaceSize)(const aclTensor* self, const aclTensor* other, const aclScalar* alpha,
                                          aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnAdd;
  aclnnStatus (*aclnnAddsGetWorkspaceSize)(const aclTensor* self, const aclScalar* other, const aclScalar* alpha,
                                           aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnAdds;
  // aclnn_sub.h
  aclnnStatus (*aclnnSubGetWorkspaceSize)(const aclTensor* self, const aclTensor* other, const aclScalar* alpha,
                                          aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnSub;
  aclnnStatus (*aclnnSubsGetWorkspaceSize)(const aclTensor* self, const aclScalar* other, const aclScalar* alpha,
                                           aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnSubs;
  // aclnn_mul.h
  aclnnStatus (*aclnnMulGetWorkspaceSize)(const aclTensor* self, const aclTensor* other, aclTensor* out,
                                          uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnMul;
  aclnnStatus (*aclnnMulsGetWorkspaceSize)(const aclTensor* self, const aclScalar* other, aclTensor* out,
                                           uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnMuls;
  // aclnn_div.h
  aclnnStatus (*aclnnDivGetWorkspaceSize)(const aclTensor* self, const aclTensor* other, aclTensor* out,
                                          uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnDiv;
  aclnnStatus (*aclnnDivsGetWorkspaceSize)(const aclTensor* self, const aclScalar* other, aclTensor* out,
                                           uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnDivs;
  // aclnn_mm.h, aclnn_addmm.h, aclnn_batch_matmul.h (cubeMathType: 0 KEEP_DTYPE, 1 ALLOW_FP32_DOWN_PRECISION)
  aclnnStatus (*aclnnMmGetWorkspaceSize)(const aclTensor* self, const aclTensor* mat2, aclTensor* out,
                                         int8_t cubeMathType, uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnMm;
  aclnnStatus (*aclnnAddmmGetWorkspaceSize)(const aclTensor* self, const aclTensor* mat1, const aclTensor* mat2,
                                            const aclScalar* beta, const aclScalar* alpha, aclTensor* out,
                                            int8_t cubeMathType, uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnAddmm;
  aclnnStatus (*aclnnBatchMatMulGetWorkspaceSize)(const aclTensor* self, const aclTensor* mat2, aclTensor* out,
                                                  int8_t cubeMathType, uint64_t* workspaceSize,
                                                  aclOpExecutor** executor);
  AclnnRunFn aclnnBatchMatMul;
  // aclnn_relu.h, aclnn_softmax.h, aclnn_logsoftmax.h
  aclnnStatus (*aclnnReluGetWorkspaceSize)(const aclTensor* self, aclTensor* out, uint64_t* workspaceSize,
                                           aclOpExecutor** executor);
  AclnnRunFn aclnnRelu;
  aclnnStatus (*aclnnSoftmaxGetWorkspaceSize)(const aclTensor* self, int64_t dim, aclTensor* out,
                                              uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnSoftmax;
  aclnnStatus (*aclnnLogSoftmaxGetWorkspaceSize)(const aclTensor* self, int64_t dim, aclTensor* out,
                                                 uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnLogSoftmax;
  // aclnn_convolution.h
  aclnnStatus (*aclnnConvolutionGetWorkspaceSize)(const aclTensor* input, const aclTensor* weight, const aclTensor* bias,
                                                  const aclIntArray* stride, const aclIntArray* padding,
                                                  const aclIntArray* dilation, bool transposed,
                                                  const aclIntArray* outputPadding, int64_t groups, aclTensor* output,
                                                  int8_t cubeMathType, uint64_t* workspaceSize,
                                                  aclOpExecutor** executor);
  AclnnRunFn aclnnConvolution;
  // aclnn_max_pool2d_with_indices.h (indices are INT32 on the device)
  aclnnStatus (*aclnnMaxPool2dWithIndicesGetWorkspaceSize)(const aclTensor* self, const aclIntArray* kernelSize,
                                                           const aclIntArray* stride, const aclIntArray* padding,
                                                           const aclIntArray* dilation, bool ceilMode, aclTensor* out,
                                                           aclTensor* indices, uint64_t* workspaceSize,
                                                           aclOpExecutor** executor);
  AclnnRunFn aclnnMaxPool2dWithIndices;
  // aclnn_cast.h
  aclnnStatus (*aclnnCastGetWorkspaceSize)(const aclTensor* self, aclDataType dtype, aclTensor* out,
                                           uint64_t* workspaceSize, aclOpExecutor** executor);
  AclnnRunFn aclnnCast;
};

// Opens the CANN libraries and resolves every entry above. Raises FL_ERR_NO_DEVICE with
// "AscendCL runtime not found: <dlerror>" when a library or a required symbol is missing.
const AclApi& load_acl_api();
// The loaded table (load_acl_api must have succeeded).
const AclApi& acl();
// Closes the libraries (at shutdown).
void unload_acl_api();

// "<what>: aclError <code>: <aclGetRecentErrMsg>".
std::string acl_error_text(const char* what, aclError err);

}  // namespace fl::ascend
