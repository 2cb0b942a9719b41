// dispatch.cuh — maps runtime float dtypes onto template types for kernels that are
// templated on their storage types (softmax, layer norm, pooling...).
#pragma once

#include "gpu_runtime.h"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <string>

namespace fl::cuda {

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for a float dtype; false when the dtype is not a float type.
template <class F>
bool dispatch_float(fl_dtype_t dt, F&& f) {
  switch (dt) {
    case FL_DTYPE_FLOAT32: f(TypeTag<float>{}); return true;
    case FL_DTYPE_FLOAT64: f(TypeTag<double>{}); return true;
    case FL_DTYPE_FLOAT16: f(TypeTag<gpu_half>{}); return true;
    case FL_DTYPE_BFLOAT16: f(TypeTag<gpu_bfloat16>{}); return true;
    default: return false;
  }
}

// Pairs (in, out) of float dtypes: equal, or a half type widened to / narrowed from float32.
template <class F>
bool dispatch_float_pair(fl_dtype_t in, fl_dtype_t out, F&& f) {
  if (in == out) return dispatch_float(in, [&](auto t) { f(t, t); });
  if (in == FL_DTYPE_BFLOAT16 && out == FL_DTYPE_FLOAT32) { f(TypeTag<gpu_bfloat16>{}, TypeTag<float>{}); return true; }
  if (in == FL_DTYPE_FLOAT16 && out == FL_DTYPE_FLOAT32) { f(TypeTag<gpu_half>{}, TypeTag<float>{}); return true; }
  if (in == FL_DTYPE_FLOAT32 && out == FL_DTYPE_BFLOAT16) { f(TypeTag<float>{}, TypeTag<gpu_bfloat16>{}); return true; }
  if (in == FL_DTYPE_FLOAT32 && out == FL_DTYPE_FLOAT16) { f(TypeTag<float>{}, TypeTag<gpu_half>{}); return true; }
  return false;
}

// float for storage types narrower than float, else the type itself.
template <class T>
using acc_type_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace fl::cuda
