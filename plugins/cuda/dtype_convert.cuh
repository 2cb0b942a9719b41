// dtype_convert.cuh — element conversions and math overloads used by every kernel source.
// Half types convert through float (round to nearest even), as ATen does for the CUDA
// backend. Runtime-typed loads/stores let one kernel read any mix of real dtypes; complex
// dtypes are rejected on the host before any launch.
#pragma once

#include "gpu_runtime.h"

#include <fl_abi.h>

#include <cstdint>
#include <type_traits>

namespace fl::cuda {

template <class T>
inline constexpr bool is_half_type_v =
    std::is_same_v<T, gpu_half> || std::is_same_v<T, gpu_bfloat16>;

template <class To, class From>
__host__ __device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, gpu_bfloat16>) {
    if constexpr (std::is_same_v<From, gpu_half>) return gpu_float2bfloat16(gpu_half2float(v));
    else return gpu_float2bfloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, gpu_half>) {
    if constexpr (std::is_same_v<From, gpu_bfloat16>) return gpu_float2half(gpu_bfloat162float(v));
    else return gpu_float2half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<From, gpu_bfloat16>) {
    return static_cast<To>(gpu_bfloat162float(v));
  } else if constexpr (std::is_same_v<From, gpu_half>) {
    return static_cast<To>(gpu_half2float(v));
  } else {
    return static_cast<To>(v);
  }
}

// Reads element `idx` of `base` (of dtype `dt`) as C.
template <class C>
__device__ __forceinline__ C load_as(const void* base, int64_t idx, fl_dtype_t dt) {
  switch (dt) {
    case FL_DTYPE_FLOAT32: return convert<C>(static_cast<const float*>(base)[idx]);
    case FL_DTYPE_FLOAT64: return convert<C>(static_cast<const double*>(base)[idx]);
    case FL_DTYPE_FLOAT16: return convert<C>(static_cast<const gpu_half*>(base)[idx]);
    case FL_DTYPE_BFLOAT16: return convert<C>(static_cast<const gpu_bfloat16*>(base)[idx]);
    case FL_DTYPE_INT64: return convert<C>(static_cast<const int64_t*>(base)[idx]);
    case FL_DTYPE_INT32: return convert<C>(static_cast<const int32_t*>(base)[idx]);
    case FL_DTYPE_INT16: return convert<C>(static_cast<const int16_t*>(base)[idx]);
    case FL_DTYPE_INT8: return convert<C>(static_cast<const int8_t*>(base)[idx]);
    case FL_DTYPE_UINT8: return convert<C>(static_cast<const uint8_t*>(base)[idx]);
    case FL_DTYPE_BOOL: return convert<C>(static_cast<const uint8_t*>(base)[idx] != 0);
    default: return C(0);
  }
}

// Writes `v` converted to dtype `dt` at element `idx` of `base`.
template <class V>
__device__ __forceinline__ void store_as(void* base, int64_t idx, fl_dtype_t dt, V v) {
  switch (dt) {
    case FL_DTYPE_FLOAT32: static_cast<float*>(base)[idx] = convert<float>(v); break;
    case FL_DTYPE_FLOAT64: static_cast<double*>(base)[idx] = convert<double>(v); break;
    case FL_DTYPE_FLOAT16: static_cast<gpu_half*>(base)[idx] = convert<gpu_half>(v); break;
    case FL_DTYPE_BFLOAT16: static_cast<gpu_bfloat16*>(base)[idx] = convert<gpu_bfloat16>(v); break;
    case FL_DTYPE_INT64: static_cast<int64_t*>(base)[idx] = convert<int64_t>(v); break;
    case FL_DTYPE_INT32: static_cast<int32_t*>(base)[idx] = convert<int32_t>(v); break;
    case FL_DTYPE_INT16: static_cast<int16_t*>(base)[idx] = convert<int16_t>(v); break;
    case FL_DTYPE_INT8: static_cast<int8_t*>(base)[idx] = convert<int8_t>(v); break;
    case FL_DTYPE_UINT8: static_cast<uint8_t*>(base)[idx] = convert<uint8_t>(v); break;
    case FL_DTYPE_BOOL: static_cast<uint8_t*>(base)[idx] = convert<bool>(v) ? 1 : 0; break;
    default: break;
  }
}

// Math on the compute types (float, double; int64_t where it makes sense).
namespace dmath {
__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ double exp_(double x) { return exp(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ double log_(double x) { return log(x); }
__device__ __forceinline__ float sqrt_(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_(double x) { return sqrt(x); }
__device__ __forceinline__ float rsqrt_(float x) { return rsqrtf(x); }
__device__ __forceinline__ double rsqrt_(double x) { return rsqrt(x); }
__device__ __forceinline__ float tanh_(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_(double x) { return tanh(x); }
__device__ __forceinline__ float erf_(float x) { return erff(x); }
__device__ __forceinline__ double erf_(double x) { return erf(x); }
__device__ __forceinline__ float pow_(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double pow_(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float fmod_(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double fmod_(double x, double y) { return fmod(x, y); }
__device__ __forceinline__ float floor_(float x) { return floorf(x); }
__device__ __forceinline__ double floor_(double x) { return floor(x); }
__device__ __forceinline__ float trunc_(float x) { return truncf(x); }
__device__ __forceinline__ double trunc_(double x) { return trunc(x); }
__device__ __forceinline__ float sin_(float x) { return sinf(x); }
__device__ __forceinline__ double sin_(double x) { return sin(x); }
__device__ __forceinline__ float cos_(float x) { return cosf(x); }
__device__ __forceinline__ double cos_(double x) { return cos(x); }
__device__ __forceinline__ float expm1_(float x) { return expm1f(x); }
__device__ __forceinline__ double expm1_(double x) { return expm1(x); }
__device__ __forceinline__ float log1p_(float x) { return log1pf(x); }
__device__ __forceinline__ double log1p_(double x) { return log1p(x); }
__device__ __forceinline__ float ceil_(float x) { return ceilf(x); }
__device__ __forceinline__ double ceil_(double x) { return ceil(x); }
__device__ __forceinline__ float nearbyint_(float x) { return nearbyintf(x); }
__device__ __forceinline__ double nearbyint_(double x) { return nearbyint(x); }
__device__ __forceinline__ float copysign_(float x, float y) { return copysignf(x, y); }
__device__ __forceinline__ double copysign_(double x, double y) { return copysign(x, y); }
__device__ __forceinline__ float abs_(float x) { return fabsf(x); }
__device__ __forceinline__ double abs_(double x) { return fabs(x); }
__device__ __forceinline__ int64_t abs_(int64_t x) { return x < 0 ? -x : x; }
// a * b + c: one rounding for the float types (written out, not left to nvcc's contraction,
// because the CPU plugin computes the same fused forms, so that replicas of a model on the two
// plugins step bit-identically: see plugins/cpu/kernels/pointwise_functors.hpp); exact for int64.
template <class C>
__device__ __forceinline__ C fma_(C a, C b, C c) {
  if constexpr (std::is_floating_point_v<C>) return fma(a, b, c);
  else return a * b + c;
}
template <class C>
__device__ __forceinline__ bool isnan_(C x) {
  if constexpr (std::is_floating_point_v<C>) return x != x;
  else return false;
}
}  // namespace dmath

}  // namespace fl::cuda
