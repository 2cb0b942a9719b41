// elementwise_select.cu — maximum, minimum, clamp (Scalar and Tensor bounds), where, the
// comparisons eq/ne/lt/le/gt/ge (bool output, compared in the promoted input type) and
// logical_and/or/xor (bool output; NaN counts as true). NaN propagates through
// maximum/minimum/clamp as in ATen.
#include "elementwise.cuh"
#include "kernels.hpp"
#include "kernel_glue.hpp"

namespace fl::cuda {
namespace {

using dmath::isnan_;

template <class C>
__device__ __forceinline__ C nan_max(C a, C b) {
  if (isnan_(a)) return a;
  if (isnan_(b)) return b;
  return a > b ? a : b;
}
template <class C>
__device__ __forceinline__ C nan_min(C a, C b) {
  if (isnan_(a)) return a;
  if (isnan_(b)) return b;
  return a < b ? a : b;
}

template <class C>
struct MaximumOp : OpTraits {
  explicit MaximumOp(const OpParams&) {}
  __device__ C operator()(C a, C b) const { return nan_max(a, b); }
};

template <class C>
struct MinimumOp : OpTraits {
  explicit MinimumOp(const OpParams&) {}
  __device__ C operator()(C a, C b) const { return nan_min(a, b); }
};

// mode bit 1: a lower bound is present; bit 2: an upper bound is present.
template <class C>
struct ClampOp : OpTraits {
  int mode;
  explicit ClampOp(const OpParams& q) : mode(q.mode) {}
  __device__ C operator()(C x, C lo, C hi) const {
    if (mode & 1) x = nan_max(x, lo);
    if (mode & 2) x = nan_min(x, hi);
    return x;
  }
};

template <class C>
struct WhereOp : OpTraits {
  explicit WhereOp(const OpParams&) {}
  __device__ C operator()(C cond, C a, C b) const { return cond != C(0) ? a : b; }
};

enum CompareKind { kEq, kNe, kLt, kLe, kGt, kGe };

template <class C>
struct CompareOp : OpTraits {
  static constexpr bool kBoolOut = true;
  int kind;
  explicit CompareOp(const OpParams& q) : kind(q.mode) {}
  __device__ bool operator()(C a, C b) const {
    switch (kind) {
      case kEq: return a == b;
      case kNe: return a != b;
      case kLt: return a < b;
      case kLe: return a <= b;
      case kGt: return a > b;
      default: return a >= b;
    }
  }
};

enum LogicalKind { kAnd, kOr, kXor };

template <class C>
struct LogicalOp : OpTraits {
  static constexpr bool kBoolOut = true;
  int kind;
  explicit LogicalOp(const OpParams& q) : kind(q.mode) {}
  __device__ bool operator()(C a, C b) const {
    const bool x = a != C(0), y = b != C(0);  // NaN != 0: true
    switch (kind) {
      case kAnd: return x && y;
      case kOr: return x || y;
      default: return x != y;
    }
  }
};

fl_status_t run_compare(const fl_kernel_call* call, CompareKind kind, const char* name) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const std::vector<ElementwiseInput> ins = {elementwise_input(a, 0), elementwise_input(a, 1)};
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    OpParams q;
    q.mode = kind;
    launch_elementwise<CompareOp, 2>(name, p, compute_kind_for(p, ins, false), q, ctx);
  });
}

// Inputs of any real dtypes, tested in their promoted type (as the comparisons). Only a bool
// output is served; for another output dtype (ATen writes 0/1) the core falls back.
fl_status_t run_logical(const fl_kernel_call* call, LogicalKind kind, const char* name) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    if (a.output(0).dtype != FL_DTYPE_BOOL) unsupported_dtype(name, a.output(0).dtype);
    const std::vector<ElementwiseInput> ins = {elementwise_input(a, 0), elementwise_input(a, 1)};
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    OpParams q;
    q.mode = kind;
    launch_elementwise<LogicalOp, 2>(name, p, compute_kind_for(p, ins, false), q, ctx);
  });
}

template <template <class> class Op>
fl_status_t run_binary(const fl_kernel_call* call, const char* name) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const std::vector<ElementwiseInput> ins = {elementwise_input(a, 0), elementwise_input(a, 1)};
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    launch_elementwise<Op, 2>(name, p, compute_kind_for(p, ins, true), OpParams{}, ctx);
  });
}

}  // namespace

FL_CUDA_KERNEL(k_maximum_out) { return run_binary<MaximumOp>(call, "aten::maximum"); }
FL_CUDA_KERNEL(k_minimum_out) { return run_binary<MinimumOp>(call, "aten::minimum"); }

// clamp.out(self, Scalar? min, Scalar? max) and clamp.Tensor_out(self, Tensor? min, Tensor? max).
FL_CUDA_KERNEL(k_clamp_out) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const bool has_min = !a.is_none(1), has_max = !a.is_none(2);
    if (!has_min && !has_max)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, "aten::clamp: at least one of min and max must be given");
    std::vector<ElementwiseInput> ins = {elementwise_input(a, 0),
                                         has_min ? elementwise_input(a, 1) : scalar_input(0, false),
                                         has_max ? elementwise_input(a, 2) : scalar_input(0, false)};
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    OpParams q;
    q.mode = (has_min ? 1 : 0) | (has_max ? 2 : 0);
    launch_elementwise<ClampOp, 3>("aten::clamp", p, compute_kind_for(p, ins, true), q, ctx);
  });
}

// where.self_out(condition, self, other): the condition does not take part in promotion.
FL_CUDA_KERNEL(k_where_self_out) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const std::vector<ElementwiseInput> ins = {elementwise_input(a, 0), elementwise_input(a, 1),
                                               elementwise_input(a, 2)};
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    const ComputeKind kind = compute_kind_for(p, {ins[1], ins[2]}, true);
    launch_elementwise<WhereOp, 3>("aten::where", p, kind, OpParams{}, ctx);
  });
}

// masked_fill's common case (an attention mask): self and out dense in one layout, a scalar
// value, a bool mask broadcast over them. V elements of one row per thread, 16-byte loads
// and stores of self/out; the mask offset of each vector in 32-bit multiply-shift arithmetic.
template <class T, int V>
__global__ void masked_fill_rows(const T* __restrict__ self, T* out, const bool* __restrict__ mask,
                                 Offsets32<1> mo, uint32_t mask_inner_stride, float value, uint32_t vectors) {
  const T fill = convert<T>(value);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += gridDim.x * blockDim.x) {
    uint32_t out_off = 0, moff[1] = {};  // out_off: unused (out is dense)
    mo.add_offsets(i * V, out_off, moff);
    const AlignedVector<T, V> x = reinterpret_cast<const AlignedVector<T, V>*>(self)[i];
    AlignedVector<T, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = mask[moff[0] + j * mask_inner_stride] ? fill : x.v[j];
    reinterpret_cast<AlignedVector<T, V>*>(out)[i] = r;
  }
}

// Launches masked_fill_rows when the planned operands (mask, value, self) allow it.
template <class T>
bool try_masked_fill_rows(const ElementwiseOperands& p, const LaunchContext& ctx) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kMask = 0, kValue = 1, kSelf = 2;
  if (p.out_dtype != dtype_of<T>() || p.in[kSelf] == nullptr || p.in_dtype[kSelf] != p.out_dtype) return false;
  if (p.in[kValue] != nullptr || p.in[kMask] == nullptr || p.in_dtype[kMask] != FL_DTYPE_BOOL) return false;
  if (p.ndim < 1 || p.numel > 2147483647LL || p.numel % V != 0) return false;
  if (!aligned_to(p.out, 16) || !aligned_to(p.in[kSelf], 16)) return false;
  // out and self: dense, row-major over the coalesced dims, the same strides.
  int64_t expected = 1;
  for (int d = p.ndim - 1; d >= 0; --d) {
    if (p.out_strides[d] != expected || p.in_strides[kSelf][d] != expected) return false;
    expected *= p.sizes[d];
  }
  const int64_t inner_mask = p.in_strides[kMask][p.ndim - 1];
  if (p.sizes[p.ndim - 1] % V != 0 || (inner_mask != 0 && inner_mask != 1)) return false;
  static_assert(kMask == 0, "Offsets32<1> describes input 0");
  Offsets32<1> mo;  // the mask's offsets (out, dense, always fits)
  if (!offsets32<1>(p, mo)) return false;
  const uint32_t vectors = static_cast<uint32_t>(p.numel / V);
  masked_fill_rows<T, V><<<grid_for(vectors, kElementwiseThreads, ctx), kElementwiseThreads, 0, ctx.stream>>>(
      static_cast<const T*>(p.in[kSelf]), static_cast<T*>(p.out), static_cast<const bool*>(p.in[kMask]), mo,
      static_cast<uint32_t>(inner_mask), static_cast<float>(p.scalar[kValue]), vectors);
  check_launch("masked_fill_rows");
  return true;
}

// masked_fill.Scalar_out / Tensor_out(self, mask, value): out = mask ? value : self.
FL_CUDA_KERNEL(k_masked_fill_out) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const std::vector<ElementwiseInput> ins = {elementwise_input(a, 1), elementwise_input(a, 2),
                                               elementwise_input(a, 0)};
    const ElementwiseOperands p = plan_elementwise(a.output(0), ins);
    if (p.numel > 0 && (try_masked_fill_rows<float>(p, ctx) || try_masked_fill_rows<gpu_bfloat16>(p, ctx) ||
                        try_masked_fill_rows<gpu_half>(p, ctx)))
      return;
    const ComputeKind kind = compute_kind_for(p, {ins[2]}, true);
    launch_elementwise<WhereOp, 3>("aten::masked_fill", p, kind, OpParams{}, ctx);
  });
}

FL_CUDA_KERNEL(k_eq_out) { return run_compare(call, kEq, "aten::eq"); }
FL_CUDA_KERNEL(k_ne_out) { return run_compare(call, kNe, "aten::ne"); }
FL_CUDA_KERNEL(k_lt_out) { return run_compare(call, kLt, "aten::lt"); }
FL_CUDA_KERNEL(k_le_out) { return run_compare(call, kLe, "aten::le"); }
FL_CUDA_KERNEL(k_gt_out) { return run_compare(call, kGt, "aten::gt"); }
FL_CUDA_KERNEL(k_ge_out) { return run_compare(call, kGe, "aten::ge"); }
// logical_and.out / logical_or.out / logical_xor.out(self, other).
FL_CUDA_KERNEL(k_logical_and_out) { return run_logical(call, kAnd, "aten::logical_and"); }
FL_CUDA_KERNEL(k_logical_or_out) { return run_logical(call, kOr, "aten::logical_or"); }
FL_CUDA_KERNEL(k_logical_xor_out) { return run_logical(call, kXor, "aten::logical_xor"); }

}  // namespace fl::cuda
