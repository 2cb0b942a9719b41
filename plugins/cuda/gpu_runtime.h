// gpu_runtime.h — the thin layer between Torch-FL's GPU kernel sources and the vendor runtime.
// Kernel sources (*.cu) use only the gpu* names below, so a HIP build can compile the same
// sources with hipcc by providing a sibling header that maps them to hip* instead.
// cuBLAS and cuDNN are not reached from here: they live in their own files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
using gpuDeviceProp_t = cudaDeviceProp;
using gpu_half = __half;
using gpu_bfloat16 = __nv_bfloat16;

#define gpuSuccess cudaSuccess
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuPeekAtLastError cudaPeekAtLastError
#define gpuSetDevice cudaSetDevice
#define gpuGetDevice cudaGetDevice
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuDeviceCanAccessPeer cudaDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess cudaDeviceEnablePeerAccess
#define gpuErrorPeerAccessAlreadyEnabled cudaErrorPeerAccessAlreadyEnabled
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMallocHost cudaMallocHost
#define gpuFreeHost cudaFreeHost
#define gpuHostAllocMapped(ptr, size) cudaHostAlloc((ptr), (size), cudaHostAllocMapped)
#define gpuHostGetDevicePointer cudaHostGetDevicePointer
#define gpuMallocAsync cudaMallocAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemcpyHostToHost cudaMemcpyHostToHost
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuStreamCreateWithPriority cudaStreamCreateWithPriority
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamQuery cudaStreamQuery
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuDeviceGetStreamPriorityRange cudaDeviceGetStreamPriorityRange
#define gpuErrorNotReady cudaErrorNotReady
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventDefault cudaEventDefault
#define gpuEventBlockingSync cudaEventBlockingSync
#define gpuSetDeviceFlags cudaSetDeviceFlags
#define gpuGetDeviceFlags cudaGetDeviceFlags
#define gpuDeviceScheduleMask cudaDeviceScheduleMask
#define gpuDeviceScheduleSpin cudaDeviceScheduleSpin
#define gpuDeviceScheduleYield cudaDeviceScheduleYield
#define gpuDeviceScheduleBlockingSync cudaDeviceScheduleBlockingSync
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuMemPool_t cudaMemPool_t
#define gpuDeviceGetDefaultMemPool cudaDeviceGetDefaultMemPool
#define gpuMemPoolSetAttribute cudaMemPoolSetAttribute
#define gpuMemPoolAttrReleaseThreshold cudaMemPoolAttrReleaseThreshold
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion

// Converting between storage and float inside kernels.
#define gpu_float2bfloat16 __float2bfloat16
#define gpu_bfloat162float __bfloat162float
#define gpu_float2half __float2half
#define gpu_half2float __half2float
