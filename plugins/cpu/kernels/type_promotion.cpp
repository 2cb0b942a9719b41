#include "type_promotion.hpp"

namespace fl::cpu::kernels {

namespace {

constexpr fl_dtype_t kUndefined = -1;

int category(fl_dtype_t d) {
  if (d == FL_DTYPE_BOOL) return 0;
  if (is_integral(d)) return 1;
  return 2;
}

int float_rank(fl_dtype_t d) {
  switch (d) {
    case FL_DTYPE_FLOAT16: return 1;
    case FL_DTYPE_BFLOAT16: return 1;
    case FL_DTYPE_FLOAT32: return 2;
    default: return 3;  // float64
  }
}

int int_rank(fl_dtype_t d) {
  switch (d) {
    case FL_DTYPE_UINT8: return 1;
    case FL_DTYPE_INT8: return 1;
    case FL_DTYPE_INT16: return 2;
    case FL_DTYPE_INT32: return 3;
    default: return 4;  // int64
  }
}

fl_dtype_t promote_skip_undefined(fl_dtype_t a, fl_dtype_t b) {
  if (a == kUndefined) return b;
  if (b == kUndefined) return a;
  return promote_types(a, b);
}

// ATen's combine_categories(higher, lower), without complex.
fl_dtype_t combine_categories(fl_dtype_t higher, fl_dtype_t lower) {
  if (higher != kUndefined && is_floating(higher)) return higher;
  if (higher == FL_DTYPE_BOOL || (lower != kUndefined && is_floating(lower)))
    return promote_skip_undefined(higher, lower);
  if (higher != kUndefined) return higher;
  return lower;
}

}  // namespace

fl_dtype_t promote_types(fl_dtype_t a, fl_dtype_t b) {
  if (a == b) return a;
  if (a >= FL_DTYPE_COMPLEX64 || b >= FL_DTYPE_COMPLEX64)
    unsupported("type promotion", "complex dtypes");
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    int ra = float_rank(a), rb = float_rank(b);
    if (ra == rb) return FL_DTYPE_FLOAT32;  // float16 with bfloat16
    return ra > rb ? a : b;
  }
  // integers
  if ((a == FL_DTYPE_UINT8 && b == FL_DTYPE_INT8) || (a == FL_DTYPE_INT8 && b == FL_DTYPE_UINT8))
    return FL_DTYPE_INT16;
  return int_rank(a) > int_rank(b) ? a : b;
}

fl_dtype_t result_type(std::initializer_list<const TensorDesc*> operands) {
  fl_dtype_t dim_result = kUndefined, zero_result = kUndefined, wrapped_result = kUndefined;
  for (const TensorDesc* t : operands) {
    if (t == nullptr) continue;
    fl_dtype_t d = t->dtype;
    if (t->host_scalar) {
      if (is_floating(d)) d = FL_DTYPE_FLOAT32;  // the default dtype
      else if (is_integral(d)) d = FL_DTYPE_INT64;
      wrapped_result = promote_skip_undefined(wrapped_result, d);
    } else if (t->ndim == 0) {
      zero_result = promote_skip_undefined(zero_result, d);
    } else {
      dim_result = promote_skip_undefined(dim_result, d);
    }
  }
  return combine_categories(dim_result, combine_categories(zero_result, wrapped_result));
}

}  // namespace fl::cpu::kernels
