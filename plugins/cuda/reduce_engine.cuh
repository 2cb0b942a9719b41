// reduce_engine.cuh — the reduction engine shared by reduce.cu and variance.cu: a policy P
// (Acc, identity, load, combine, store) reduced over any set of dims of any strides.
// The input's dims are split into kept and reduced groups (each coalesced); output element o
// reduces over r in [0, n_red). Three launch shapes:
//  - warp per output, when the reduced group holds the innermost (stride-1) dim and is short;
//  - block per output, when it holds the innermost dim and is long;
//  - columns (threads over outputs, block rows over r), when the kept group is innermost.
// Reductions are done in a fixed order, so results are reproducible run to run. A policy's
// Acc is shuffled across a warp with shfl_down: the scalar overloads are here, a policy with
// a struct Acc declares its own beside it (found by argument-dependent lookup).
#pragma once

#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "scratch_buffer.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace fl::cuda {

constexpr int kMaxReduceDims = 8;

struct ReduceGeometry {
  int32_t n_kept = 0;
  int32_t n_red = 0;
  int64_t kept_sizes[kMaxReduceDims] = {};
  int64_t kept_strides[kMaxReduceDims] = {};
  int64_t red_sizes[kMaxReduceDims] = {};
  int64_t red_strides[kMaxReduceDims] = {};
  int64_t out_count = 0;
  int64_t red_count = 0;
};

__device__ __forceinline__ int64_t group_offset(int64_t linear, int32_t n, const int64_t* sizes,
                                                const int64_t* strides) {
  if (n == 1) return linear * strides[0];  // the common case: no division
  int64_t off = 0;
  for (int d = n - 1; d >= 0; --d) {
    const int64_t i = linear % sizes[d];
    linear /= sizes[d];
    off += i * strides[d];
  }
  return off;
}

// Where a policy's store writes output o: `data` (of `dtype`); a policy with two results per
// output (var_mean) also writes `second` when it is not null; `param` is a runtime parameter of
// the policy's store (variance: the correction).
struct ReduceOutput {
  void* data = nullptr;
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;
  void* second = nullptr;
  fl_dtype_t second_dtype = FL_DTYPE_FLOAT32;
  double param = 0;
};

__device__ __forceinline__ float shfl_down(float v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double shfl_down(double v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ int32_t shfl_down(int32_t v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
__device__ __forceinline__ int64_t shfl_down(int64_t v, int o) {
  return static_cast<int64_t>(__shfl_down_sync(0xffffffffu, static_cast<long long>(v), o));
}

template <class P>
__device__ __forceinline__ typename P::Acc warp_reduce(typename P::Acc v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = P::combine(v, shfl_down(v, offset));
  return v;
}

template <class P>
__global__ void reduce_warp_per_output(ReduceGeometry g, const void* in, fl_dtype_t in_dt, ReduceOutput out) {
  const int lane = threadIdx.x % 32;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; o < g.out_count;
       o += warps_total) {
    const int64_t base = group_offset(o, g.n_kept, g.kept_sizes, g.kept_strides);
    typename P::Acc acc = P::identity();
    for (int64_t r = lane; r < g.red_count; r += 32)
      acc = P::combine(acc, P::load(in, base + group_offset(r, g.n_red, g.red_sizes, g.red_strides), in_dt, r));
    acc = warp_reduce<P>(acc);
    if (lane == 0) P::store(out, o, acc, g.red_count);
  }
}

constexpr int kReduceBlockThreads = 256;

template <class P>
__global__ void reduce_block_per_output(ReduceGeometry g, const void* in, fl_dtype_t in_dt, ReduceOutput out) {
  __shared__ typename P::Acc partial[kReduceBlockThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t o = blockIdx.x; o < g.out_count; o += gridDim.x) {
    const int64_t base = group_offset(o, g.n_kept, g.kept_sizes, g.kept_strides);
    typename P::Acc acc = P::identity();
    for (int64_t r = threadIdx.x; r < g.red_count; r += kReduceBlockThreads)
      acc = P::combine(acc, P::load(in, base + group_offset(r, g.n_red, g.red_sizes, g.red_strides), in_dt, r));
    acc = warp_reduce<P>(acc);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
      acc = lane < kReduceBlockThreads / 32 ? partial[lane] : P::identity();
      acc = warp_reduce<P>(acc);
      if (lane == 0) P::store(out, o, acc, g.red_count);
    }
    __syncthreads();
  }
}

constexpr int kReduceColX = 32, kReduceColY = 16;

template <class P>
__global__ void reduce_columns(ReduceGeometry g, const void* in, fl_dtype_t in_dt, ReduceOutput out) {
  __shared__ typename P::Acc partial[kReduceColY][kReduceColX + 1];
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kReduceColX; o0 < g.out_count;
       o0 += static_cast<int64_t>(gridDim.x) * kReduceColX) {
    const int64_t o = o0 + threadIdx.x;
    typename P::Acc acc = P::identity();
    if (o < g.out_count) {
      const int64_t base = group_offset(o, g.n_kept, g.kept_sizes, g.kept_strides);
      for (int64_t r = threadIdx.y; r < g.red_count; r += kReduceColY)
        acc = P::combine(acc, P::load(in, base + group_offset(r, g.n_red, g.red_sizes, g.red_strides), in_dt, r));
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < g.out_count) {
      for (int k = 1; k < kReduceColY; ++k) acc = P::combine(acc, partial[k][threadIdx.x]);
      P::store(out, o, acc, g.red_count);
    }
    __syncthreads();
  }
}

// Columns split along the reduced dim (few outputs, many rows: a wide bias gradient): block
// (x, y) reduces outputs [32x, 32x+32) over rows [y*chunk, (y+1)*chunk) into
// partial[y * out_count + o]; reduce_column_splits then combines the splits in order.
template <class P>
__global__ void reduce_columns_split(ReduceGeometry g, const void* in, fl_dtype_t in_dt, int64_t chunk,
                                     typename P::Acc* partial) {
  __shared__ typename P::Acc tile[kReduceColY][kReduceColX + 1];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kReduceColX + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < g.red_count ? r0 + chunk : g.red_count;
  typename P::Acc acc = P::identity();
  if (o < g.out_count) {
    const int64_t base = group_offset(o, g.n_kept, g.kept_sizes, g.kept_strides);
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kReduceColY)
      acc = P::combine(acc, P::load(in, base + group_offset(r, g.n_red, g.red_sizes, g.red_strides), in_dt, r));
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < g.out_count) {
    for (int k = 1; k < kReduceColY; ++k) acc = P::combine(acc, tile[k][threadIdx.x]);
    partial[static_cast<int64_t>(blockIdx.y) * g.out_count + o] = acc;
  }
}

template <class P>
__global__ void reduce_column_splits(const typename P::Acc* partial, int64_t splits, int64_t out_count,
                                     int64_t red_count, ReduceOutput out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_count; o += step) {
    typename P::Acc acc = partial[o];
    for (int64_t s = 1; s < splits; ++s) acc = P::combine(acc, partial[s * out_count + o]);
    P::store(out, o, acc, red_count);
  }
}

// Splits and coalesces the dims of `in` (reduce[d] true: reduced).
inline ReduceGeometry make_geometry(const fl_tensor& in, const std::vector<bool>& reduce) {
  ReduceGeometry g;
  std::vector<int64_t> ks, kst, rs, rst;
  auto push = [](std::vector<int64_t>& sizes, std::vector<int64_t>& strides, int64_t size, int64_t stride) {
    if (size == 1) return;
    if (!sizes.empty() && strides.back() == stride * size) {
      sizes.back() *= size;
      strides.back() = stride;
      return;
    }
    sizes.push_back(size);
    strides.push_back(stride);
  };
  g.out_count = 1;
  g.red_count = 1;
  for (int d = 0; d < in.ndim; ++d) {
    if (reduce[static_cast<size_t>(d)]) {
      push(rs, rst, in.shape[d], in.strides[d]);
      g.red_count *= in.shape[d];
    } else {
      push(ks, kst, in.shape[d], in.strides[d]);
      g.out_count *= in.shape[d];
    }
  }
  if (ks.size() > static_cast<size_t>(kMaxReduceDims) || rs.size() > static_cast<size_t>(kMaxReduceDims))
    plugin::raise(FL_ERR_NOT_SUPPORTED, "reduction over too many non-mergeable dims");
  g.n_kept = static_cast<int32_t>(ks.size());
  g.n_red = static_cast<int32_t>(rs.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    g.kept_sizes[i] = ks[i];
    g.kept_strides[i] = kst[i];
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    g.red_sizes[i] = rs[i];
    g.red_strides[i] = rst[i];
  }
  return g;
}

template <class P>
void launch_policy(const ReduceGeometry& g, const fl_tensor& in, const ReduceOutput& dst, const LaunchContext& ctx) {
  if (g.out_count == 0) return;
  const void* src = plugin::data_ptr<const void>(in);
  const bool inner_reduced = g.n_kept == 0 || (g.n_red > 0 && g.red_strides[g.n_red - 1] == 1) ||
                             (g.n_red > 0 && g.kept_strides[g.n_kept - 1] != 1);
  const int64_t max_blocks = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 1) * 32;
  if (inner_reduced && g.red_count <= 1024) {
    const int64_t warps_per_block = kReduceBlockThreads / 32;
    int64_t blocks = (g.out_count + warps_per_block - 1) / warps_per_block;
    if (blocks > max_blocks) blocks = max_blocks;
    reduce_warp_per_output<P><<<static_cast<unsigned>(blocks), kReduceBlockThreads, 0, ctx.stream>>>(
        g, src, in.dtype, dst);
    check_launch("reduce_warp_per_output");
  } else if (inner_reduced) {
    int64_t blocks = g.out_count < max_blocks ? g.out_count : max_blocks;
    reduce_block_per_output<P><<<static_cast<unsigned>(blocks), kReduceBlockThreads, 0, ctx.stream>>>(
        g, src, in.dtype, dst);
    check_launch("reduce_block_per_output");
  } else {
    int64_t blocks = (g.out_count + kReduceColX - 1) / kReduceColX;
    const int64_t want = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 1) * 4;
    // Split the rows when the columns alone would leave most of the GPU idle and each split
    // still gets at least 256 rows.
    int64_t splits = blocks < want ? (want + blocks - 1) / blocks : 1;
    if (splits > g.red_count / 256) splits = g.red_count / 256;
    if (splits > 65535) splits = 65535;
    if (splits >= 2) {
      const int64_t chunk = (g.red_count + splits - 1) / splits;
      splits = (g.red_count + chunk - 1) / chunk;
      ScratchBuffer partial(static_cast<size_t>(splits * g.out_count) * sizeof(typename P::Acc), ctx.stream);
      const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
      reduce_columns_split<P><<<grid, dim3(kReduceColX, kReduceColY), 0, ctx.stream>>>(
          g, src, in.dtype, chunk, partial.get<typename P::Acc>());
      check_launch("reduce_columns_split");
      reduce_column_splits<P><<<grid_for(g.out_count, 256, ctx), 256, 0, ctx.stream>>>(
          partial.get<typename P::Acc>(), splits, g.out_count, g.red_count, dst);
      check_launch("reduce_column_splits");
      return;
    }
    if (blocks > max_blocks) blocks = max_blocks;
    reduce_columns<P><<<static_cast<unsigned>(blocks), dim3(kReduceColX, kReduceColY), 0, ctx.stream>>>(
        g, src, in.dtype, dst);
    check_launch("reduce_columns");
  }
}

// The single-output form: `out` any real dtype, the policy's param 0.
template <class P>
void launch_policy(const ReduceGeometry& g, const fl_tensor& in, const fl_tensor& out, const LaunchContext& ctx) {
  ReduceOutput dst;
  dst.data = plugin::data_ptr<void>(out);
  dst.dtype = out.dtype;
  launch_policy<P>(g, in, dst, ctx);
}

// Which dims of `in` a dim-list argument names; NONE or an empty list means all.
inline std::vector<bool> reduce_mask(const Args& a, int32_t i, const fl_tensor& in, const char* name) {
  std::vector<bool> mask(static_cast<size_t>(in.ndim), false);
  std::vector<int64_t> dims;
  if (!a.is_none(i)) dims = a.ints(i);
  if (dims.empty()) {
    std::fill(mask.begin(), mask.end(), true);
    return mask;
  }
  for (int64_t d : dims) {
    const int32_t nd = normalize_dim(d, in.ndim, name);
    if (in.ndim == 0) continue;
    if (mask[static_cast<size_t>(nd)])
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": dim " + std::to_string(d) + " repeated");
    mask[static_cast<size_t>(nd)] = true;
  }
  return mask;
}

}  // namespace fl::cuda
