// elementwise_engine.hpp — broadcasting, strided, dtype-converting elementwise loops.
//
// A plan broadcasts every input to the output's shape (missing or size-1 dims get stride 0),
// coalesces dimensions, and runs a typed *contiguous* kernel over the innermost dimension.
// Inputs that are strided, broadcast, host scalars or of another dtype are gathered (and
// converted) chunk by chunk into small stack buffers first; a strided output is written
// through a buffer too. The common contiguous same-dtype case calls the kernel directly.
// Outputs may alias inputs element-for-element (in-place ops).
#pragma once

#include "tensor_desc.hpp"

#include <initializer_list>

namespace fl::cpu::kernels {

constexpr int kMaxOperands = 5;  // output + 4 inputs
constexpr int64_t kChunk = 256;

// A scalar parameter of an op (alpha, a fill value...), kept exact for integers.
struct Param {
  double d = 0;
  int64_t i = 0;
  bool is_int = false;
};
inline Param param_of(double v) { return Param{v, static_cast<int64_t>(v), false}; }
inline Param param_int(int64_t v) { return Param{static_cast<double>(v), v, true}; }
// Reads an ATen Scalar argument (INT, DOUBLE, BOOL or host tensor) keeping int precision.
Param param_arg(const plugin::Args& args, int32_t index);

template <class C>
inline C param_as(const Param& p) {
  if constexpr (std::is_integral_v<C>) return static_cast<C>(p.is_int ? p.i : static_cast<int64_t>(p.d));
  else return static_cast<C>(p.is_int ? static_cast<double>(p.i) : p.d);
}

constexpr int kMaxParams = 4;
// out[0..n) = op(in[0][0..n), in[1][0..n), ...), all contiguous and of the kernel's types.
using ContigFn = void (*)(char* out, char* const* in, int64_t n, const Param* params);
// dst[0..n) (contiguous, type To) = convert(src[i * src_stride_bytes]) (type From).
using ConvertFn = void (*)(const char* src, int64_t src_stride_bytes, char* dst, int64_t n);

ConvertFn converter(fl_dtype_t from, fl_dtype_t to);  // throws NOT_SUPPORTED for complex

struct ElementwisePlan {
  int ndim = 0;
  int num_inputs = 0;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};                 // innermost first
  int64_t strides[kMaxOperands][kMaxDims] = {};  // bytes; operand 0 is the output
  char* base[kMaxOperands] = {};
  int64_t elem_size[kMaxOperands] = {};  // of the type the kernel reads/writes
  ConvertFn convert[kMaxOperands] = {};  // non-null: input stored in another dtype
  bool host_scalar[kMaxOperands] = {};
  alignas(16) unsigned char scalar_bytes[kMaxOperands][16] = {};
  ContigFn kernel = nullptr;
  Param params[kMaxParams];
};

struct PlanInput {
  const TensorDesc* tensor;
  fl_dtype_t kernel_dtype;  // the dtype the contiguous kernel expects for this input
};

// Builds the plan (call time). The output must already have the kernel's output dtype.
// Throws INVALID_ARGUMENT when an input does not broadcast to the output's shape.
ElementwisePlan plan_elementwise(const char* op, const TensorDesc& out,
                                 std::initializer_list<PlanInput> inputs, ContigFn kernel);

// Runs the plan (on the stream worker).
void run_elementwise(const ElementwisePlan& plan);

// Enqueues the plan on the call's stream.
void submit_elementwise(const fl_kernel_call* call, const ElementwisePlan& plan);

// ---- typed contiguous kernels --------------------------------------------------------
// Op<C> is constructed from the params and called with N values of the compute type C.

// The loop of contiguous_kernel, inlined into each of its builds below.
template <class TIn, class TOut, template <class> class Op, int N>
[[gnu::always_inline]] inline void contiguous_loop(char* out, char* const* in, int64_t n, const Param* params) {
  using C = opmath_t<TIn>;
  const Op<C> op(params);
  TOut* __restrict o = reinterpret_cast<TOut*>(out);
  const TIn* a = reinterpret_cast<const TIn*>(in[0]);
  if constexpr (N == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = convert<TOut>(op(convert<C>(a[i])));
  } else if constexpr (N == 2) {
    const TIn* b = reinterpret_cast<const TIn*>(in[1]);
    if constexpr (requires(const Op<C>& f, C x) { f.template in_storage<TIn>(x, x); }) {
      // An op whose ATen kernel rounds an intermediate to the storage type (see DivTrunc).
      for (int64_t i = 0; i < n; ++i)
        o[i] = convert<TOut>(op.template in_storage<TIn>(convert<C>(a[i]), convert<C>(b[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = convert<TOut>(op(convert<C>(a[i]), convert<C>(b[i])));
    }
  } else if constexpr (N == 3) {
    const TIn* b = reinterpret_cast<const TIn*>(in[1]);
    const TIn* c = reinterpret_cast<const TIn*>(in[2]);
    for (int64_t i = 0; i < n; ++i)
      o[i] = convert<TOut>(op(convert<C>(a[i]), convert<C>(b[i]), convert<C>(c[i])));
  } else {
    static_assert(N == 4);
    const TIn* b = reinterpret_cast<const TIn*>(in[1]);
    const TIn* c = reinterpret_cast<const TIn*>(in[2]);
    const TIn* d = reinterpret_cast<const TIn*>(in[3]);
    for (int64_t i = 0; i < n; ++i)
      o[i] = convert<TOut>(
          op(convert<C>(a[i]), convert<C>(b[i]), convert<C>(c[i]), convert<C>(d[i])));
  }
}

template <class TIn, class TOut, template <class> class Op, int N>
void contiguous_kernel(char* out, char* const* in, int64_t n, const Param* params) {
  contiguous_loop<TIn, TOut, Op, N>(out, in, n, params);
}

// Ops whose math rounds a multiply-add once (std::fma; see pointwise_functors.hpp) set this.
// The plugin's baseline ISA (x86-64-v2) has no FMA instruction, so there std::fma is a libm
// call per element (4-5x slower on 4M floats); such ops also get a build of their loop for
// AVX2 + FMA, chosen at run time on a CPU that has them (the same bits, one instruction).
template <template <class> class Op>
inline constexpr bool kUsesFma = false;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FL_CPU_FMA_BUILD 1
template <class TIn, class TOut, template <class> class Op, int N>
[[gnu::target("avx2,fma")]] void contiguous_kernel_fma(char* out, char* const* in, int64_t n, const Param* params) {
  contiguous_loop<TIn, TOut, Op, N>(out, in, n, params);
}

inline bool cpu_has_fma() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}
#endif

// A binary Op on a 16-bit float `a` and a second operand already in the compute type (float):
// ATen's CPU mul and div (true, trunc, floor) by a single value (TensorIterator's is_scalar)
// keep that value in float (original_scalar_value<opmath_t>), so a Python scalar such as 0.3
// is not rounded to bfloat16 first. The engine converts that operand to float32 (PlanInput).
template <class TIn, template <class> class Op>
void contiguous_kernel_opmath_b(char* out, char* const* in, int64_t n, const Param* params) {
  using C = opmath_t<TIn>;
  static_assert(std::is_same_v<C, float>);
  const Op<C> op(params);
  TIn* __restrict o = reinterpret_cast<TIn*>(out);
  const TIn* a = reinterpret_cast<const TIn*>(in[0]);
  const C* b = reinterpret_cast<const C*>(in[1]);
  for (int64_t i = 0; i < n; ++i) o[i] = convert<TIn>(op(convert<C>(a[i]), b[i]));
}

// The contiguous kernel of Op for input dtype `dtype` (in Mask), output of the same dtype or
// bool (BoolOut). Throws NOT_SUPPORTED naming `op` for a dtype outside Mask.
template <template <class> class Op, int N, uint64_t Mask, bool BoolOut = false>
ContigFn select_kernel(fl_dtype_t dtype, const char* op) {
  return dispatch<Mask>(dtype, op, [](auto tag) -> ContigFn {
    using T = typename decltype(tag)::type;
    using TOut = std::conditional_t<BoolOut, bool, T>;
#ifdef FL_CPU_FMA_BUILD
    if constexpr (kUsesFma<Op>) {
      if (cpu_has_fma()) return &contiguous_kernel_fma<T, TOut, Op, N>;
    }
#endif
    return &contiguous_kernel<T, TOut, Op, N>;
  });
}

// contiguous_kernel_opmath_b of Op for a 16-bit float `dtype`; nullptr for any other dtype.
template <template <class> class Op>
ContigFn select_kernel_opmath_b(fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_BFLOAT16: return &contiguous_kernel_opmath_b<BFloat16, Op>;
    case FL_DTYPE_FLOAT16: return &contiguous_kernel_opmath_b<Half, Op>;
    default: return nullptr;
  }
}

}  // namespace fl::cpu::kernels
