// scalar_types.hpp — element types of the CPU kernels: float16/bfloat16 storage structs with
// float conversion (round to nearest even), the fl_dtype_t <-> C++ type mapping, the "opmath"
// type each dtype computes in, and dtype dispatch over a compile-time mask.
#pragma once

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace fl::cpu::kernels {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int shift = 0;
      while (!(man & 0x400)) { man <<= 1; ++shift; }
      man &= 0x3ff;
      bits = sign | (static_cast<uint32_t>(127 - 15 + 1 - shift) << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal half or zero: units of 2^-24, rounded to even
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(magnitude * 16777216.0f)));
  }
  uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

// Conversions between any two storage types (C++ semantics for arithmetic types, through
// float for the 16-bit floats, nonzero -> true for bool).
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<From, Half>) {
    return convert<To>(half_to_float(v.bits));
  } else if constexpr (std::is_same_v<From, BFloat16>) {
    return convert<To>(bf16_to_float(v.bits));
  } else if constexpr (std::is_same_v<To, Half>) {
    return Half{float_to_half(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return BFloat16{float_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // Out-of-range float -> int is undefined in C++; we saturate (NaN -> 0). ATen's result
    // there is platform-specific (e.g. -1.0 -> uint8 wraps to 255); not reproduced.
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
    double d = static_cast<double>(v);
    if (std::isnan(d)) return To(0);
    if (d <= lo) return std::numeric_limits<To>::min();
    if (d >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(d);
  } else {
    return static_cast<To>(v);
  }
}

// The type arithmetic happens in (ATen's opmath): float for the 16-bit floats.
template <class T> struct OpMath { using type = T; };
template <> struct OpMath<Half> { using type = float; };
template <> struct OpMath<BFloat16> { using type = float; };
template <class T> using opmath_t = typename OpMath<T>::type;

template <class T> constexpr fl_dtype_t dtype_of();
template <> constexpr fl_dtype_t dtype_of<float>() { return FL_DTYPE_FLOAT32; }
template <> constexpr fl_dtype_t dtype_of<double>() { return FL_DTYPE_FLOAT64; }
template <> constexpr fl_dtype_t dtype_of<Half>() { return FL_DTYPE_FLOAT16; }
template <> constexpr fl_dtype_t dtype_of<BFloat16>() { return FL_DTYPE_BFLOAT16; }
template <> constexpr fl_dtype_t dtype_of<int64_t>() { return FL_DTYPE_INT64; }
template <> constexpr fl_dtype_t dtype_of<int32_t>() { return FL_DTYPE_INT32; }
template <> constexpr fl_dtype_t dtype_of<int16_t>() { return FL_DTYPE_INT16; }
template <> constexpr fl_dtype_t dtype_of<int8_t>() { return FL_DTYPE_INT8; }
template <> constexpr fl_dtype_t dtype_of<uint8_t>() { return FL_DTYPE_UINT8; }
template <> constexpr fl_dtype_t dtype_of<bool>() { return FL_DTYPE_BOOL; }

constexpr uint64_t bit(fl_dtype_t d) { return uint64_t{1} << d; }

constexpr uint64_t kFloatingMask =
    bit(FL_DTYPE_FLOAT32) | bit(FL_DTYPE_FLOAT64) | bit(FL_DTYPE_FLOAT16) | bit(FL_DTYPE_BFLOAT16);
constexpr uint64_t kIntegralMask = bit(FL_DTYPE_INT64) | bit(FL_DTYPE_INT32) | bit(FL_DTYPE_INT16) |
                                   bit(FL_DTYPE_INT8) | bit(FL_DTYPE_UINT8);
constexpr uint64_t kArithmeticMask = kFloatingMask | kIntegralMask;
constexpr uint64_t kAllMask = kArithmeticMask | bit(FL_DTYPE_BOOL);
// float32/float64 only (GEMM through BLAS).
constexpr uint64_t kBlasMask = bit(FL_DTYPE_FLOAT32) | bit(FL_DTYPE_FLOAT64);

inline bool is_floating(fl_dtype_t d) { return (kFloatingMask & bit(d)) != 0; }
inline bool is_integral(fl_dtype_t d) { return (kIntegralMask & bit(d)) != 0; }

template <class T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) for the C++ type of `dtype` if it is in Mask; otherwise throws
// FL_ERR_NOT_SUPPORTED naming `what`.
template <uint64_t Mask, class F>
decltype(auto) dispatch(fl_dtype_t dtype, const char* what, F&& f) {
#define FL_CPU_CASE(DT, T) \
  case DT:                 \
    if constexpr ((Mask & bit(DT)) != 0) return f(TypeTag<T>{}); \
    break;
  switch (dtype) {
    FL_CPU_CASE(FL_DTYPE_FLOAT32, float)
    FL_CPU_CASE(FL_DTYPE_FLOAT64, double)
    FL_CPU_CASE(FL_DTYPE_FLOAT16, Half)
    FL_CPU_CASE(FL_DTYPE_BFLOAT16, BFloat16)
    FL_CPU_CASE(FL_DTYPE_INT64, int64_t)
    FL_CPU_CASE(FL_DTYPE_INT32, int32_t)
    FL_CPU_CASE(FL_DTYPE_INT16, int16_t)
    FL_CPU_CASE(FL_DTYPE_INT8, int8_t)
    FL_CPU_CASE(FL_DTYPE_UINT8, uint8_t)
    FL_CPU_CASE(FL_DTYPE_BOOL, bool)
    default: break;
  }
#undef FL_CPU_CASE
  plugin::raise(FL_ERR_NOT_SUPPORTED, std::string("cpu plugin: ") + what + " does not handle dtype " +
                                          plugin::dtype_name(dtype));
}

}  // namespace fl::cpu::kernels
