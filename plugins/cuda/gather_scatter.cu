// gather_scatter.cu — gather.out, scatter.src_out, scatter.value_out and scatter_add.out: any
// strides, int64 or int32 indices, one thread per index element.
//  - gather, scatter (src or value): any dtype, elements moved as raw 1/2/4/8-byte words
//    (a value is converted to out's dtype on the device, as ATen's Scalar::to).
//  - scatter: out = self (skipped in place), then every index element writes its target. For
//    a repeated index any of the writes may win, as in ATen's CUDA kernel; a call that asks for
//    determinism (FL_CALL_DETERMINISTIC) takes two passes instead: the first claims each
//    target for its last index position (atomicMax), the second writes only the claimed ones,
//    so the last write in index order wins, which is ATen's CPU result and the CPU plugin's.
//  - scatter_add: atomicAdd in out's dtype, each add rounded to it as in ATen's CUDA kernel:
//    float32, float64, int32, int64, and float16/bfloat16 with CUDA's 16-bit atomics (a
//    compare-and-swap loop on the containing 32-bit word in the HIP build, which has none).
//    Floating sums come out in a different order from run to run, so a deterministic call
//    with a floating dtype is declined (integer sums are exact in any order).
// An index outside [0, size) is reported through the device's error channel
// (device_error.hpp): the next synchronize fails with FL_ERR_DEVICE naming the op, the index
// and the size. The kernel goes on meanwhile: gather writes 0 for that index and scatter skips
// it. ATen's CUDA kernels stop at a device-side assert instead, which leaves the context
// unusable. An index into a dimension of size 0 (every index out of range) is refused at once.
// Scatter in place (out is self) is served; an out that otherwise overlaps self, src or index
// is declined (ATen raises its overlap error).
#include "copy_kernels.hpp"
#include "device_error.cuh"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "scratch_buffer.hpp"
#include "strided_offsets.cuh"

#include <algorithm>
#include <string>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

// Index positions with the offsets of index, the tensor addressed through the index values
// (`indexed`: self for gather, out for scatter; its offset leaves dim out) and the tensor
// addressed at the index's own position (`follower`: out for gather, src for scatter).
struct IndexWalk {
  StridedOffsets<3> offsets;
  int64_t numel = 0;
  int64_t step = 0;   // indexed's stride along dim
  int64_t bound = 0;  // indexed's size along dim: valid indices are [0, bound)
  int32_t dim = 0;
  DeviceErrorSink errors;  // where an index outside [0, bound) is reported
  CheckedOp op = CheckedOp::none;
};

// A 0-dim tensor counts as one element along one dim, as ATen's ensure_nonempty_*.
int32_t effective_ndim(const fl_tensor& t) { return t.ndim == 0 ? 1 : t.ndim; }
int64_t size_at(const fl_tensor& t, int32_t d) { return t.ndim == 0 ? 1 : t.shape[d]; }
int64_t stride_at(const fl_tensor& t, int32_t d) { return t.ndim == 0 ? 1 : t.strides[d]; }

IndexWalk make_walk(const fl_tensor& index, const fl_tensor& indexed, const fl_tensor* follower, int32_t dim,
                    const char* name, CheckedOp op, const LaunchContext& ctx) {
  IndexWalk w;
  for (int32_t d = 0; d < effective_ndim(index); ++d)
    w.offsets.add_dim(size_at(index, d),
                      {stride_at(index, d), d == dim ? 0 : stride_at(indexed, d),
                       follower != nullptr ? stride_at(*follower, d) : 0},
                      name);
  w.numel = plugin::numel(index);
  w.step = stride_at(indexed, dim);
  w.bound = size_at(indexed, dim);
  w.dim = dim;
  w.errors = ctx.errors;
  w.op = op;
  return w;
}

template <class I, class Op>
__global__ void index_walk_kernel(IndexWalk w, const I* __restrict__ index, Op op) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < w.numel; p += step) {
    int64_t off[3];
    w.offsets.at(p, off);
    const int64_t k = static_cast<int64_t>(index[off[0]]);
    const bool in_range = k >= 0 && k < w.bound;
    if (!in_range) report_out_of_range(w.errors, w.op, w.dim, k, w.bound);
    op(in_range, off[1] + k * w.step, off[2], p);
  }
}

// op(in_range, target offset in indexed, offset in follower, index position) per index element.
template <class Op>
void launch_walk(const IndexWalk& w, const fl_tensor& index, const Op& op, const LaunchContext& ctx,
                 const char* kernel) {
  const unsigned grid = grid_for(w.numel, kThreads, ctx);
  if (index.dtype == FL_DTYPE_INT64)
    index_walk_kernel<int64_t, Op><<<grid, kThreads, 0, ctx.stream>>>(w, plugin::data_ptr<const int64_t>(index), op);
  else
    index_walk_kernel<int32_t, Op><<<grid, kThreads, 0, ctx.stream>>>(w, plugin::data_ptr<const int32_t>(index), op);
  check_launch(kernel);
}

template <class E>
struct GatherOp {
  const E* self;
  E* out;
  __device__ void operator()(bool in_range, int64_t at, int64_t pos, int64_t) const {
    out[pos] = in_range ? self[at] : E{};
  }
};

template <class E>
struct ScatterOp {
  const E* src;
  E* out;
  __device__ void operator()(bool in_range, int64_t at, int64_t pos, int64_t) const {
    if (in_range) out[at] = src[pos];
  }
};

struct ScatterValueOp {
  void* out;
  fl_dtype_t dtype;
  bool is_int;  // the Scalar was integral: int_value is exact past 2^53
  int64_t int_value;
  double value;
  __device__ void operator()(bool in_range, int64_t at, int64_t, int64_t) const {
    if (!in_range) return;
    if (is_int) store_as(out, at, dtype, int_value);
    else store_as(out, at, dtype, value);
  }
};

// Deterministic scatter, pass 1: each target remembers its last index position (plus one).
struct ClaimOp {
  unsigned long long* winner;  // per element offset of out
  __device__ void operator()(bool in_range, int64_t at, int64_t, int64_t p) const {
    if (in_range) atomicMax(&winner[at], static_cast<unsigned long long>(p) + 1ull);
  }
};

// Pass 2: only the claiming position writes.
template <class Inner>
struct ClaimedOp {
  const unsigned long long* winner;
  Inner inner;
  __device__ void operator()(bool in_range, int64_t at, int64_t pos, int64_t p) const {
    if (in_range && winner[at] == static_cast<unsigned long long>(p) + 1ull) inner(true, at, pos, p);
  }
};

#if defined(__HIP_PLATFORM_AMD__)
// HIP has no 16-bit float atomics: a compare-and-swap loop on the 32-bit word holding the
// element (the other half of the word is kept as it is).
template <class T>
__device__ void atomic_add_16bit(T* address, T value) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t{3});
  const unsigned int shift = (a & 2) ? 16u : 0u;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const uint16_t bits = static_cast<uint16_t>((assumed >> shift) & 0xffffu);
    T current;
    __builtin_memcpy(&current, &bits, 2);
    const T sum = convert<T>(convert<float>(current) + convert<float>(value));
    uint16_t sum_bits;
    __builtin_memcpy(&sum_bits, &sum, 2);
    const unsigned int updated = (assumed & ~(0xffffu << shift)) | (static_cast<unsigned int>(sum_bits) << shift);
    old = atomicCAS(word, assumed, updated);
  } while (assumed != old);
}
__device__ __forceinline__ void atomic_add(gpu_half* p, gpu_half v) { atomic_add_16bit(p, v); }
__device__ __forceinline__ void atomic_add(gpu_bfloat16* p, gpu_bfloat16 v) { atomic_add_16bit(p, v); }
#else
__device__ __forceinline__ void atomic_add(gpu_half* p, gpu_half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(gpu_bfloat16* p, gpu_bfloat16 v) { atomicAdd(p, v); }
#endif
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(reinterpret_cast<int*>(p), v); }
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  // Two's complement: an unsigned add is the signed add.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

template <class T>
struct ScatterAddOp {
  const T* src;
  T* out;
  __device__ void operator()(bool in_range, int64_t at, int64_t pos, int64_t) const {
    if (in_range) atomic_add(out + at, src[pos]);
  }
};

bool is_index_dtype(fl_dtype_t dt) { return dt == FL_DTYPE_INT64 || dt == FL_DTYPE_INT32; }

void raise_invalid(const char* name, const std::string& why) {
  plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": " + why);
}

bool same_shape(const fl_tensor& a, const fl_tensor& b) {
  return a.ndim == b.ndim && std::equal(a.shape, a.shape + a.ndim, b.shape);
}

// The scatter family's checks: out is self's shape and dtype, overlaps nothing it reads
// (unless it is self), and index fits self and src. False for an empty index (only the copy
// of self to do).
bool check_scatter(const char* name, const fl_tensor& self, int32_t dim, const fl_tensor& index,
                   const fl_tensor* src, const fl_tensor& out) {
  if (out.dtype != self.dtype || (src != nullptr && src->dtype != self.dtype))
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": self, src and out of different dtypes");
  if (!same_shape(out, self)) raise_invalid(name, "output shape differs from self's");
  if (!same_elements(out, self) && overlaps(out, self))
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": an output that partly overlaps self");
  if (overlaps(out, index) || (src != nullptr && overlaps(out, *src)))
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": an output that overlaps index or src");
  if (plugin::numel(index) == 0) return false;
  if (!is_index_dtype(index.dtype)) unsupported_dtype(name, index.dtype);
  if (effective_ndim(index) != effective_ndim(self) || (src != nullptr && effective_ndim(*src) != effective_ndim(self)))
    raise_invalid(name, "index tensor must have the same number of dimensions as self and src");
  for (int32_t d = 0; d < effective_ndim(index); ++d) {
    if (d != dim && size_at(index, d) > size_at(self, d)) raise_invalid(name, "index is larger than self outside dim");
    if (src != nullptr && size_at(index, d) > size_at(*src, d)) raise_invalid(name, "index is larger than src");
  }
  if (size_at(self, dim) == 0) raise_invalid(name, "every index is out of bounds for a dimension of size 0");
  return true;
}

// out = self unless out is self.
void copy_self(const fl_tensor& self, const fl_tensor& out, const LaunchContext& ctx) {
  if (!same_elements(out, self) && plugin::numel(self) > 0) launch_broadcast_copy(self, out, ctx);
}

// Elements of the span of out's memory (its largest offset plus one), for the claim buffer.
int64_t element_span(const fl_tensor& t) {
  int64_t end = 0;
  for (int32_t d = 0; d < t.ndim; ++d) end += (t.shape[d] - 1) * t.strides[d];
  return end + 1;
}

// Launches `op` over the index positions: once, or (deterministic) a claim pass and `op` for
// the claiming positions only.
template <class Op>
void launch_scatter(const IndexWalk& w, const fl_tensor& index, const fl_tensor& out, const Op& op, bool deterministic,
                    const LaunchContext& ctx) {
  if (!deterministic) {
    launch_walk(w, index, op, ctx, "scatter_kernel");
    return;
  }
  const size_t bytes = static_cast<size_t>(element_span(out)) * sizeof(unsigned long long);
  ScratchBuffer winner(bytes, ctx.stream);
  check_gpu(gpuMemsetAsync(winner.get(), 0, bytes, ctx.stream), "cudaMemsetAsync");
  launch_walk(w, index, ClaimOp{winner.get<unsigned long long>()}, ctx, "scatter_claim_kernel");
  launch_walk(w, index, ClaimedOp<Op>{winner.get<unsigned long long>(), op}, ctx, "scatter_claimed_kernel");
}

}  // namespace

// gather.out(self, dim, index, *, sparse_grad) -> out (index's shape)
FL_CUDA_KERNEL(k_gather_out) {
  return plugin::guard([&] {
    const char* name = "aten::gather";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const int32_t dim = normalize_dim(a.integer(1), self.ndim, name);
    const fl_tensor& index = device_tensor(a, 2, name);
    const fl_tensor& out = a.output(0);
    if (out.dtype != self.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtype differs");
    if (!same_shape(out, index)) raise_invalid(name, "output shape differs from index's");
    if (plugin::numel(index) == 0) return;  // ATen checks nothing more for an empty index
    if (!is_index_dtype(index.dtype)) unsupported_dtype(name, index.dtype);
    if (effective_ndim(index) != effective_ndim(self))
      raise_invalid(name, "index tensor must have the same number of dimensions as input tensor");
    for (int32_t d = 0; d < effective_ndim(index); ++d)
      if (d != dim && size_at(index, d) > size_at(self, d)) raise_invalid(name, "index is larger than self outside dim");
    if (size_at(self, dim) == 0) raise_invalid(name, "every index is out of bounds for a dimension of size 0");
    const IndexWalk w = make_walk(index, self, &out, dim, name, CheckedOp::gather, ctx);
    const bool ok = dispatch_element_size(plugin::dtype_size(self.dtype), [&](auto e) {
      using E = decltype(e);
      launch_walk(w, index, GatherOp<E>{plugin::data_ptr<const E>(self), plugin::data_ptr<E>(out)}, ctx, "gather_kernel");
    });
    if (!ok) unsupported_dtype(name, self.dtype);
  });
}

// scatter.src_out(self, dim, index, src) -> out
FL_CUDA_KERNEL(k_scatter_src_out) {
  return plugin::guard([&] {
    const char* name = "aten::scatter.src";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const int32_t dim = normalize_dim(a.integer(1), self.ndim, name);
    const fl_tensor& index = device_tensor(a, 2, name);
    const fl_tensor& src = device_tensor(a, 3, name);
    const fl_tensor& out = a.output(0);
    const bool any = check_scatter(name, self, dim, index, &src, out);
    const IndexWalk w = any ? make_walk(index, out, &src, dim, name, CheckedOp::scatter, ctx) : IndexWalk{};
    copy_self(self, out, ctx);
    if (!any) return;
    const bool deterministic = (call->flags & FL_CALL_DETERMINISTIC) != 0;
    const bool ok = dispatch_element_size(plugin::dtype_size(self.dtype), [&](auto e) {
      using E = decltype(e);
      launch_scatter(w, index, out, ScatterOp<E>{plugin::data_ptr<const E>(src), plugin::data_ptr<E>(out)},
                     deterministic, ctx);
    });
    if (!ok) unsupported_dtype(name, self.dtype);
  });
}

// scatter.value_out(self, dim, index, value) -> out
FL_CUDA_KERNEL(k_scatter_value_out) {
  return plugin::guard([&] {
    const char* name = "aten::scatter.value";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const int32_t dim = normalize_dim(a.integer(1), self.ndim, name);
    const fl_tensor& index = device_tensor(a, 2, name);
    const fl_tensor& out = a.output(0);
    if (!is_real_dtype(self.dtype)) unsupported_dtype(name, self.dtype);
    ScatterValueOp op{plugin::data_ptr<void>(out), out.dtype, false, 0, 0.0};
    const fl_value& v = a.at(3);
    if (v.kind == FL_VALUE_INT) {
      op.is_int = true;
      op.int_value = v.u.i;
    } else if (v.kind == FL_VALUE_BOOL) {
      op.is_int = true;
      op.int_value = v.u.b ? 1 : 0;
    } else if (v.kind == FL_VALUE_TENSOR && v.u.tensor != nullptr && v.u.tensor->dtype == FL_DTYPE_INT64) {
      plugin::require_host_tensor(*v.u.tensor, name);
      op.is_int = true;
      op.int_value = *plugin::data_ptr<const int64_t>(*v.u.tensor);
    } else {
      op.value = a.number(3);
    }
    const bool any = check_scatter(name, self, dim, index, nullptr, out);
    const IndexWalk w = any ? make_walk(index, out, nullptr, dim, name, CheckedOp::scatter_value, ctx) : IndexWalk{};
    copy_self(self, out, ctx);
    if (!any) return;
    launch_scatter(w, index, out, op, (call->flags & FL_CALL_DETERMINISTIC) != 0, ctx);
  });
}

// scatter_add.out(self, dim, index, src) -> out
FL_CUDA_KERNEL(k_scatter_add_out) {
  return plugin::guard([&] {
    const char* name = "aten::scatter_add";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const int32_t dim = normalize_dim(a.integer(1), self.ndim, name);
    const fl_tensor& index = device_tensor(a, 2, name);
    const fl_tensor& src = device_tensor(a, 3, name);
    const fl_tensor& out = a.output(0);
    const bool floating = is_floating_dtype(self.dtype);
    if (!floating && self.dtype != FL_DTYPE_INT64 && self.dtype != FL_DTYPE_INT32) unsupported_dtype(name, self.dtype);
    if (floating && (call->flags & FL_CALL_DETERMINISTIC))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": floating atomics, not deterministic");
    const bool any = check_scatter(name, self, dim, index, &src, out);
    const IndexWalk w = any ? make_walk(index, out, &src, dim, name, CheckedOp::scatter_add, ctx) : IndexWalk{};
    copy_self(self, out, ctx);
    if (!any) return;
    auto launch = [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_walk(w, index, ScatterAddOp<T>{plugin::data_ptr<const T>(src), plugin::data_ptr<T>(out)}, ctx,
                  "scatter_add_kernel");
    };
    if (self.dtype == FL_DTYPE_INT64) launch(TypeTag<int64_t>{});
    else if (self.dtype == FL_DTYPE_INT32) launch(TypeTag<int32_t>{});
    else dispatch_float(self.dtype, launch);
  });
}

}  // namespace fl::cuda
