// gpu_runtime.h (HIP) — the HIP side of the thin layer that Torch-FL's GPU kernel sources
// use (plugins/cuda/gpu_runtime.h is the CUDA side, with the same names). The kernel
// sources of plugins/cuda/ are compiled by hipcc against this header: meson stages them in
// the build directory next to a copy of this file, because a quoted #include looks in the
// including file's directory first (see plugins/hip/meson.build).
//
// Warp-level code: the shared sources reduce over 32-lane groups with __shfl_*_sync. AMD
// GPUs run 64-lane wavefronts (32 on RDNA in wave32 mode); the HIP shuffles below take
// width 32, which splits a wavefront into independent 32-lane groups, so the CUDA
// semantics hold on either wavefront size. The lane mask is ignored: HIP 5.2 shuffles
// involve every active lane, and the shared sources always pass the full mask.
#pragma once

#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
using gpuDeviceProp_t = hipDeviceProp_t;
using gpu_half = __half;
using gpu_bfloat16 = hip_bfloat16;

#define gpuSuccess hipSuccess
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuPeekAtLastError hipPeekAtLastError
#define gpuSetDevice hipSetDevice
#define gpuGetDevice hipGetDevice
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuDeviceCanAccessPeer hipDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define gpuErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMallocHost(ptr, size) hipHostMalloc((ptr), (size), hipHostMallocDefault)
#define gpuFreeHost hipHostFree
#define gpuHostAllocMapped(ptr, size) hipHostMalloc((ptr), (size), hipHostMallocMapped)
#define gpuHostGetDevicePointer hipHostGetDevicePointer
#define gpuMallocAsync hipMallocAsync
#define gpuFreeAsync hipFreeAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemcpyHostToHost hipMemcpyHostToHost
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuStreamCreateWithPriority hipStreamCreateWithPriority
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamQuery hipStreamQuery
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuDeviceGetStreamPriorityRange hipDeviceGetStreamPriorityRange
#define gpuErrorNotReady hipErrorNotReady
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventDefault hipEventDefault
#define gpuEventBlockingSync hipEventBlockingSync
#define gpuSetDeviceFlags hipSetDeviceFlags
#define gpuGetDeviceFlags hipGetDeviceFlags
#define gpuDeviceScheduleMask hipDeviceScheduleMask
#define gpuDeviceScheduleSpin hipDeviceScheduleSpin
#define gpuDeviceScheduleYield hipDeviceScheduleYield
#define gpuDeviceScheduleBlockingSync hipDeviceScheduleBlockingSync
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion

// Converting between storage and float inside kernels (round to nearest even both ways).
__host__ __device__ inline gpu_bfloat16 gpu_float2bfloat16(float f) { return hip_bfloat16(f); }
__host__ __device__ inline float gpu_bfloat162float(gpu_bfloat16 b) { return static_cast<float>(b); }
#define gpu_float2half __float2half
#define gpu_half2float __half2float

// CUDA's 32-lane shuffles in HIP terms (see the note at the top).
#if !defined(__shfl_xor_sync)
#define __shfl_xor_sync(mask, var, lane_mask) __shfl_xor((var), (lane_mask), 32)
#endif
#if !defined(__shfl_down_sync)
#define __shfl_down_sync(mask, var, delta) __shfl_down((var), (delta), 32)
#endif
