// softmax_kernels.cpp — _softmax, _log_softmax and their backward over any dim.
// Inputs arrive contiguous (no FL_KERNEL_STRIDED_INPUTS). Math in float for float32 and the
// 16-bit floats, double for float64; half_to_float (16-bit in, float32 out) is handled.
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// A tensor seen as [outer, dim, inner] around one dim.
struct SoftmaxShape {
  int64_t outer = 1, dim = 1, inner = 1;
};

SoftmaxShape softmax_shape(const TensorDesc& t, int64_t dim) {
  SoftmaxShape s;
  for (int d = 0; d < t.ndim; ++d) {
    if (d < dim) s.outer *= t.shape[d];
    else if (d == dim) s.dim = t.shape[d];
    else s.inner *= t.shape[d];
  }
  return s;
}

// Rows per part: about 4096 elements each, an eighth of a simple loop's grain, as every element
// costs an exp (libm's, about 10 ns here: a 4096 x 10 log_softmax took 0.4 ms on one thread).
int64_t rows_grain(const SoftmaxShape& s) {
  return std::max<int64_t>(1, kParallelGrain / 8 / std::max<int64_t>(s.dim, 1));
}

template <class TIn, class TOut, bool Log>
void softmax_forward(const SoftmaxShape& s, const TIn* in, TOut* out) {
  using C = opmath_t<TIn>;
  // One row per (outer, inner) pair, split over the threads; each row's math is unchanged.
  parallel_for(s.outer * s.inner, rows_grain(s), [&](int64_t begin, int64_t end) {
    std::vector<C> row(static_cast<size_t>(s.dim));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r / s.inner, i = r % s.inner;
      const TIn* x = in + o * s.dim * s.inner + i;
      TOut* y = out + o * s.dim * s.inner + i;
      C max = -INFINITY;
      for (int64_t d = 0; d < s.dim; ++d) {
        C v = convert<C>(x[d * s.inner]);
        row[static_cast<size_t>(d)] = v;
        max = std::isnan(v) || v > max ? v : max;
      }
      C sum = 0;
      for (int64_t d = 0; d < s.dim; ++d) sum += std::exp(row[static_cast<size_t>(d)] - max);
      if constexpr (Log) {
        C log_sum = std::log(sum);
        for (int64_t d = 0; d < s.dim; ++d) y[d * s.inner] = convert<TOut>(row[static_cast<size_t>(d)] - max - log_sum);
      } else {
        C inv = C(1) / sum;
        for (int64_t d = 0; d < s.dim; ++d)
          y[d * s.inner] = convert<TOut>(std::exp(row[static_cast<size_t>(d)] - max) * inv);
      }
    }
  });
}

// softmax: gi = y * (g - sum(g * y)); log_softmax: gi = g - exp(y) * sum(g)
template <class T, bool Log>
void softmax_backward(const SoftmaxShape& s, const T* grad, const T* output, T* gi) {
  using C = opmath_t<T>;
  parallel_for(s.outer * s.inner, rows_grain(s), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r / s.inner, i = r % s.inner;
      int64_t base = o * s.dim * s.inner + i;
      C acc = 0;
      for (int64_t d = 0; d < s.dim; ++d) {
        C g = convert<C>(grad[base + d * s.inner]);
        acc += Log ? g : g * convert<C>(output[base + d * s.inner]);
      }
      for (int64_t d = 0; d < s.dim; ++d) {
        C g = convert<C>(grad[base + d * s.inner]);
        C y = convert<C>(output[base + d * s.inner]);
        gi[base + d * s.inner] = convert<T>(Log ? g - std::exp(y) * acc : y * (g - acc));
      }
    }
  });
}

void check_same_shape(const char* op, const TensorDesc& a, const TensorDesc& b) {
  if (a.numel() != b.numel() || a.ndim != b.ndim) invalid(op, "shapes " + shape_string(a) + " and " + shape_string(b) + " differ");
}

// _softmax.out(self, int dim, bool half_to_float)
template <bool Log>
void softmax_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc in = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  int64_t dim = wrap_dim(args.integer(1), in.ndim, op);
  check_same_shape(op, in, out);
  SoftmaxShape s = softmax_shape(in, dim);
  using Fn = void (*)(const SoftmaxShape&, const char*, char*);
  Fn fn = nullptr;
  if (in.dtype == out.dtype) {
    fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn {
      using T = typename decltype(tag)::type;
      return [](const SoftmaxShape& sh, const char* i, char* o) {
        softmax_forward<T, T, Log>(sh, reinterpret_cast<const T*>(i), reinterpret_cast<T*>(o));
      };
    });
  } else if (out.dtype == FL_DTYPE_FLOAT32 && (in.dtype == FL_DTYPE_FLOAT16 || in.dtype == FL_DTYPE_BFLOAT16)) {
    fn = dispatch<bit(FL_DTYPE_FLOAT16) | bit(FL_DTYPE_BFLOAT16)>(in.dtype, op, [](auto tag) -> Fn {
      using T = typename decltype(tag)::type;
      return [](const SoftmaxShape& sh, const char* i, char* o) {
        softmax_forward<T, float, Log>(sh, reinterpret_cast<const T*>(i), reinterpret_cast<float*>(o));
      };
    });
  } else {
    unsupported(op, std::string(plugin::dtype_name(in.dtype)) + " -> " + plugin::dtype_name(out.dtype));
  }
  if (in.numel() == 0) return;
  const char* src = in.data;
  char* dst = out.data;
  submit(call, [fn, s, src, dst] { fn(s, src, dst); });
}

// _softmax_backward_data.out(grad_output, output, int dim, ScalarType input_dtype)
template <bool Log>
void softmax_backward_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc output = describe(args.tensor(1), op);
  TensorDesc gi = describe(args.output(0), op);
  int64_t dim = wrap_dim(args.integer(2), grad.ndim, op);
  check_same_shape(op, grad, output);
  check_same_shape(op, grad, gi);
  if (grad.dtype != output.dtype || grad.dtype != gi.dtype)
    unsupported(op, "mixed dtypes (half_to_float backward)");
  SoftmaxShape s = softmax_shape(grad, dim);
  using Fn = void (*)(const SoftmaxShape&, const char*, const char*, char*);
  Fn fn = dispatch<kFloatingMask>(grad.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](const SoftmaxShape& sh, const char* g, const char* y, char* o) {
      softmax_backward<T, Log>(sh, reinterpret_cast<const T*>(g), reinterpret_cast<const T*>(y),
                               reinterpret_cast<T*>(o));
    };
  });
  if (grad.numel() == 0) return;
  const char* g = grad.data;
  const char* y = output.data;
  char* o = gi.data;
  submit(call, [fn, s, g, y, o] { fn(s, g, y, o); });
}

void softmax_out(const fl_kernel_call* c) { softmax_body<false>(c, "aten::_softmax.out"); }
void log_softmax_out(const fl_kernel_call* c) { softmax_body<true>(c, "aten::_log_softmax.out"); }
void softmax_backward_out(const fl_kernel_call* c) {
  softmax_backward_body<false>(c, "aten::_softmax_backward_data.out");
}
void log_softmax_backward_out(const fl_kernel_call* c) {
  softmax_backward_body<true>(c, "aten::_log_softmax_backward_data.out");
}

}  // namespace

void register_softmax_kernels(KernelRegistry& r) {
  r.add("aten::_softmax.out", kFloatingMask, 0, guarded<softmax_out>);
  r.add("aten::_log_softmax.out", kFloatingMask, 0, guarded<log_softmax_out>);
  r.add("aten::_softmax_backward_data.out", kFloatingMask, 0, guarded<softmax_backward_out>);
  r.add("aten::_log_softmax_backward_data.out", kFloatingMask, 0, guarded<log_softmax_backward_out>);
}

}  // namespace fl::cpu::kernels
