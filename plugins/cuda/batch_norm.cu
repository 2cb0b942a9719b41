// batch_norm.cu — native_batch_norm (training and eval, running-stat update) and
// native_batch_norm_backward over an (N, C, *) input of any strides (NCHW, channels_last,
// 1-D (N, C) or (N, C, L)). The non-channel dims of every tensor taking part are coalesced
// jointly into at most three dims, indexed with 32-bit multiply-shift division (at most
// 2^31 - 1 elements per channel). Two launch shapes: "outer" (channel not innermost: a block
// per channel and chunk of rows) and "inner" (channel stride 1: 32 channels by 8 rows per
// block, coalesced across channels), and a "rows" fast path when every tensor is NHWC-packed
// ([M, C] row-major, as channels_last activations are): 16-byte loads of V channels per
// thread, C / V threads per row.
// Statistics: Welford in float per (chunk, channel), chunks merged in a fixed order
// (reproducible); biased variance for normalisation, unbiased for the running variance,
// as ATen. x/y/dy/dx: float32, bfloat16, float16 (one dtype for all of them); weight, bias,
// running and saved statistics: any float dtype. float64 answers FL_ERR_NOT_SUPPORTED.
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "elementwise.cuh"
#include "fast_divmod.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "scratch_buffer.hpp"

#include <string>
#include <vector>

namespace fl::cuda {
namespace {

constexpr int kOuterThreads = 256;
constexpr int kInnerX = 32, kInnerY = 8;

struct BnGeom {
  int32_t channels = 0;
  uint32_t per_channel = 0;  // M: elements per channel
  FastDivmod div2, div1;     // by the sizes of dims 2 and 1 (dim 2 innermost)
};

struct BnStrides {
  int64_t c = 0, s0 = 0, s1 = 0, s2 = 0;
};

__device__ __forceinline__ int64_t bn_offset(const BnGeom& g, const BnStrides& s, int64_t c, uint32_t m) {
  uint32_t q, i2, i0, i1;
  g.div2.divmod(m, q, i2);
  g.div1.divmod(q, i0, i1);
  return c * s.c + static_cast<int64_t>(i0) * s.s0 + static_cast<int64_t>(i1) * s.s1 +
         static_cast<int64_t>(i2) * s.s2;
}

// A per-channel parameter (weight, bias, running or saved statistic) of any float dtype.
struct Param {
  const void* ptr = nullptr;  // nullptr: absent
  int64_t stride = 1;
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;
  __device__ float get(int64_t c, float absent) const {
    return ptr != nullptr ? load_as<float>(ptr, c * stride, dtype) : absent;
  }
};

// Aggregates without initializers (they live in __shared__ arrays): zero them with `{}`.
struct Welford {
  float n, mean, m2;
  __device__ void add(float x) {
    n += 1.f;
    const float d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
  }
  __device__ void merge(const Welford& o) {
    if (o.n == 0.f) return;
    if (n == 0.f) { *this = o; return; }
    const float tot = n + o.n, d = o.mean - mean, f = o.n / tot;
    mean += d * f;
    m2 += o.m2 + d * d * n * f;
    n = tot;
  }
};

__device__ __forceinline__ Welford shfl_down(const Welford& w, int o) {
  Welford r{};
  r.n = __shfl_down_sync(0xffffffffu, w.n, o);
  r.mean = __shfl_down_sync(0xffffffffu, w.mean, o);
  r.m2 = __shfl_down_sync(0xffffffffu, w.m2, o);
  return r;
}

struct Sums2 {  // backward: sum(dy), sum(dy * (x - mean))
  float a, b;
  __device__ void merge(const Sums2& o) { a += o.a; b += o.b; }
};
__device__ __forceinline__ Sums2 shfl_down(const Sums2& s, int o) {
  return Sums2{__shfl_down_sync(0xffffffffu, s.a, o), __shfl_down_sync(0xffffffffu, s.b, o)};
}

// Per-element accumulation: statistics of x, or the backward sums against `mean`.
template <class T>
struct StatsAcc {
  using Acc = Welford;
  const T* x;
  BnStrides sx;
  __device__ void add(Acc& acc, const BnGeom& g, int64_t c, uint32_t m, float) const {
    acc.add(convert<float>(x[bn_offset(g, sx, c, m)]));
  }
  __device__ float channel_value(int64_t) const { return 0.f; }
};
template <class T>
struct BackwardAcc {
  using Acc = Sums2;
  const T* dy;
  BnStrides sdy;
  const T* x;
  BnStrides sx;
  Param mean;
  __device__ void add(Acc& acc, const BnGeom& g, int64_t c, uint32_t m, float mu) const {
    const float d = convert<float>(dy[bn_offset(g, sdy, c, m)]);
    acc.a += d;
    acc.b += d * (convert<float>(x[bn_offset(g, sx, c, m)]) - mu);
  }
  __device__ float channel_value(int64_t c) const { return mean.get(c, 0.f); }
};

// partial[split * C + c]: the accumulation of channel c over chunk `split` of its M elements.
template <class F>
__global__ void bn_reduce_outer(F f, BnGeom g, uint32_t chunk, typename F::Acc* partial) {
  using Acc = typename F::Acc;
  __shared__ Acc shared[kOuterThreads / 32];
  const int64_t c = blockIdx.x;
  const uint32_t m0 = blockIdx.y * chunk;
  const uint32_t m1 = min(g.per_channel, m0 + chunk);
  const float mu = f.channel_value(c);
  Acc acc{};
  for (uint32_t m = m0 + threadIdx.x; m < m1; m += kOuterThreads) f.add(acc, g, c, m, mu);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc.merge(shfl_down(acc, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kOuterThreads / 32; ++w) acc.merge(shared[w]);
    partial[static_cast<int64_t>(blockIdx.y) * g.channels + c] = acc;
  }
}

template <class F>
__global__ void bn_reduce_inner(F f, BnGeom g, uint32_t chunk, typename F::Acc* partial) {
  using Acc = typename F::Acc;
  __shared__ Acc shared[kInnerY][kInnerX];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kInnerX + threadIdx.x;
  const uint32_t m0 = blockIdx.y * chunk;
  const uint32_t m1 = min(g.per_channel, m0 + chunk);
  Acc acc{};
  if (c < g.channels) {
    const float mu = f.channel_value(c);
    for (uint32_t m = m0 + threadIdx.y; m < m1; m += kInnerY) f.add(acc, g, c, m, mu);
  }
  shared[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < g.channels) {
    for (int y = 1; y < kInnerY; ++y) acc.merge(shared[y][threadIdx.x]);
    partial[static_cast<int64_t>(blockIdx.y) * g.channels + c] = acc;
  }
}

// Per-channel coefficients of the apply pass: out = a*u + b*v + d.
struct Coefs {
  float* a;
  float* b;
  float* d;
};

struct ForwardFinalize {
  float momentum, eps;
  bool training;
  Param weight, bias, running_mean, running_var;
  void* save_mean;
  fl_dtype_t save_mean_dt;
  void* save_invstd;
  fl_dtype_t save_invstd_dt;
};

__global__ void bn_forward_finalize(const Welford* partial, int32_t splits, int32_t channels, ForwardFinalize p,
                                    Coefs k) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  float mean, invstd;
  if (p.training) {
    Welford w{};
    for (int32_t s = 0; s < splits; ++s) w.merge(partial[static_cast<int64_t>(s) * channels + c]);
    mean = w.n > 0.f ? w.mean : nanf("");
    const float var = w.n > 0.f ? w.m2 / w.n : nanf("");
    invstd = rsqrtf(var + p.eps);
    if (p.running_mean.ptr != nullptr) {
      void* rm = const_cast<void*>(p.running_mean.ptr);
      const float old = p.running_mean.get(c, 0.f);
      store_as(rm, c * p.running_mean.stride, p.running_mean.dtype, (1.f - p.momentum) * old + p.momentum * mean);
    }
    if (p.running_var.ptr != nullptr) {
      void* rv = const_cast<void*>(p.running_var.ptr);
      const float old = p.running_var.get(c, 0.f);
      const float unbiased = w.m2 / (w.n - 1.f);
      store_as(rv, c * p.running_var.stride, p.running_var.dtype, (1.f - p.momentum) * old + p.momentum * unbiased);
    }
  } else {
    mean = p.running_mean.get(c, 0.f);
    invstd = rsqrtf(p.running_var.get(c, 1.f) + p.eps);
  }
  if (p.save_mean != nullptr) store_as(p.save_mean, c, p.save_mean_dt, mean);
  if (p.save_invstd != nullptr) store_as(p.save_invstd, c, p.save_invstd_dt, invstd);
  const float scale = p.weight.get(c, 1.f) * invstd;
  k.a[c] = scale;
  k.b[c] = 0.f;
  k.d[c] = p.bias.get(c, 0.f) - mean * scale;
}

struct BackwardFinalize {
  bool training;
  float eps;
  float inv_m;  // 1 / M
  Param weight, mean, invstd;  // mean/invstd: saved (training) or running mean / running var
  void* grad_weight;
  fl_dtype_t grad_weight_dt;
  void* grad_bias;
  fl_dtype_t grad_bias_dt;
};

// partial == nullptr: no reduction ran (eval, input gradient only).
__global__ void bn_backward_finalize(const Sums2* partial, int32_t splits, int32_t channels, BackwardFinalize p,
                                     Coefs k) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  Sums2 s{};
  if (partial != nullptr)
    for (int32_t i = 0; i < splits; ++i) s.merge(partial[static_cast<int64_t>(i) * channels + c]);
  const float mean = p.mean.get(c, 0.f);
  const float invstd = p.training ? p.invstd.get(c, 1.f) : rsqrtf(p.invstd.get(c, 1.f) + p.eps);
  const float w = p.weight.get(c, 1.f);
  if (p.grad_weight != nullptr) store_as(p.grad_weight, c, p.grad_weight_dt, s.b * invstd);
  if (p.grad_bias != nullptr) store_as(p.grad_bias, c, p.grad_bias_dt, s.a);
  if (k.a == nullptr) return;
  const float a = w * invstd;
  if (p.training) {
    const float b = -a * invstd * invstd * s.b * p.inv_m;
    k.a[c] = a;
    k.b[c] = b;
    k.d[c] = -a * s.a * p.inv_m - mean * b;
  } else {
    k.a[c] = a;
    k.b[c] = 0.f;
    k.d[c] = 0.f;
  }
}

// out = a[c]*u + b[c]*v + d[c] (v absent: nullptr).
template <class T>
struct ApplyArgs {
  const T* u;
  BnStrides su;
  const T* v;
  BnStrides sv;
  T* out;
  BnStrides so;
  Coefs k;
};

template <class T>
__device__ __forceinline__ void apply_one(const ApplyArgs<T>& p, const BnGeom& g, int64_t c, uint32_t m, float a,
                                          float b, float d) {
  float r = a * convert<float>(p.u[bn_offset(g, p.su, c, m)]) + d;
  if (p.v != nullptr) r += b * convert<float>(p.v[bn_offset(g, p.sv, c, m)]);
  p.out[bn_offset(g, p.so, c, m)] = convert<T>(r);
}

template <class T>
__global__ void bn_apply_outer(ApplyArgs<T> p, BnGeom g) {
  const int64_t c = blockIdx.x;
  const float a = p.k.a[c], b = p.k.b[c], d = p.k.d[c];
  const uint32_t step = gridDim.y * kOuterThreads;
  for (uint32_t m = blockIdx.y * kOuterThreads + threadIdx.x; m < g.per_channel; m += step)
    apply_one(p, g, c, m, a, b, d);
}

template <class T>
__global__ void bn_apply_inner(ApplyArgs<T> p, BnGeom g) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kInnerX + threadIdx.x;
  if (c >= g.channels) return;
  const float a = p.k.a[c], b = p.k.b[c], d = p.k.d[c];
  const uint32_t step = gridDim.y * kInnerY;
  for (uint32_t m = blockIdx.y * kInnerY + threadIdx.y; m < g.per_channel; m += step) apply_one(p, g, c, m, a, b, d);
}

// ---- host side ----------------------------------------------------------------------------

struct Plan {
  BnGeom g;
  std::vector<BnStrides> strides;  // one per tensor, in the order given
  bool inner = false;              // channel stride 1 in the first tensor
  bool rows = false;               // every tensor [M, C] row-major (channels_last packed)
};

// Coalesces the non-channel dims of `ts` (same shape, ndim >= 2) jointly into at most three.
Plan make_plan(const std::vector<const fl_tensor*>& ts, const char* name) {
  const fl_tensor& x = *ts[0];
  if (x.ndim < 2) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": input must have at least 2 dims");
  for (const fl_tensor* t : ts) {
    if (t->ndim != x.ndim) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": shape mismatch");
    for (int d = 0; d < x.ndim; ++d)
      if (t->shape[d] != x.shape[d]) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": shape mismatch");
  }
  const size_t nt = ts.size();
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(nt);
  int64_t m = 1;
  for (int d = 0; d < x.ndim; ++d) {
    if (d == 1) continue;
    const int64_t size = x.shape[d];
    m *= size;
    if (size == 1) continue;
    bool merge = !sizes.empty();
    for (size_t k = 0; k < nt && merge; ++k) merge = strides[k].back() == ts[k]->strides[d] * size;
    if (merge) {
      sizes.back() *= size;
      for (size_t k = 0; k < nt; ++k) strides[k].back() = ts[k]->strides[d];
      continue;
    }
    sizes.push_back(size);
    for (size_t k = 0; k < nt; ++k) strides[k].push_back(ts[k]->strides[d]);
  }
  if (sizes.size() > 3)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": more than 3 non-mergeable non-channel dims");
  if (m > 2147483647LL || x.shape[1] > 2147483647LL)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": more than 2^31-1 elements per channel");
  while (sizes.size() < 3) {  // pad at the front: dim 2 is the innermost
    sizes.insert(sizes.begin(), 1);
    for (auto& s : strides) s.insert(s.begin(), 0);
  }
  Plan p;
  p.g.channels = static_cast<int32_t>(x.shape[1]);
  p.g.per_channel = static_cast<uint32_t>(m);
  p.g.div2 = make_fast_divmod(static_cast<uint32_t>(sizes[2]));
  p.g.div1 = make_fast_divmod(static_cast<uint32_t>(sizes[1]));
  for (size_t k = 0; k < nt; ++k)
    p.strides.push_back(BnStrides{ts[k]->strides[1], strides[k][0], strides[k][1], strides[k][2]});
  p.inner = x.strides[1] == 1 && x.shape[1] > 1;
  p.rows = p.inner && sizes[0] == 1 && sizes[1] == 1;
  for (size_t k = 0; k < nt && p.rows; ++k)
    p.rows = ts[k]->strides[1] == 1 && (sizes[2] == 1 || strides[k][2] == x.shape[1]);
  return p;
}

// ---- the rows fast path ---------------------------------------------------------------------

constexpr int kRowThreads = 512;

// Channels per thread (one 16-byte vector) for a dtype of `bytes` bytes.
int rows_vector(size_t bytes) { return static_cast<int>(16 / bytes); }

// The rows path applies: packed tensors, whole vectors per row, at most kRowThreads vectors
// per row, 16-byte aligned data.
bool rows_path(const Plan& p, fl_dtype_t dt, std::initializer_list<const void*> data) {
  if (!p.rows || p.g.per_channel == 0) return false;
  const int v = rows_vector(plugin::dtype_size(dt));
  if (p.g.channels % v != 0 || p.g.channels / v > kRowThreads) return false;
  for (const void* d : data)
    if (d != nullptr && reinterpret_cast<uintptr_t>(d) % 16 != 0) return false;
  return true;
}

uint32_t rows_splits(const Plan& p, fl_dtype_t dt, const LaunchContext& ctx) {
  const int groups = p.g.channels / rows_vector(plugin::dtype_size(dt));
  const int64_t rows_per_pass = kRowThreads / groups;
  int64_t splits = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 1) * 2;
  const int64_t by_work = (static_cast<int64_t>(p.g.per_channel) + rows_per_pass * 8 - 1) / (rows_per_pass * 8);
  if (splits > by_work) splits = by_work;
  if (splits > 1024) splits = 1024;
  return static_cast<uint32_t>(splits < 1 ? 1 : splits);
}

// partial[split * C + c]: Welford statistics of channel c over the rows of block `split`.
template <class T, int V>
__global__ void __launch_bounds__(kRowThreads) bn_rows_stats(const T* __restrict__ x, int32_t channels, uint32_t rows,
                                                             uint32_t chunk, Welford* partial) {
  extern __shared__ float smem[];  // n[threads], then mean and m2 [V][threads]
  const int groups = channels / V, per_pass = kRowThreads / groups;
  const int t = threadIdx.x, g = t % groups, r = t / groups;
  const uint32_t m0 = blockIdx.x * chunk, m1 = min(rows, m0 + chunk);
  float n = 0.f, mean[V], m2[V];
#pragma unroll
  for (int j = 0; j < V; ++j) mean[j] = m2[j] = 0.f;
  if (r < per_pass) {
    for (uint32_t m = m0 + r; m < m1; m += per_pass) {
      const AlignedVector<T, V> v = reinterpret_cast<const AlignedVector<T, V>*>(x + static_cast<int64_t>(m) * channels)[g];
      n += 1.f;
      const float inv = 1.f / n;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xv = convert<float>(v.v[j]);
        const float d = xv - mean[j];
        mean[j] += d * inv;
        m2[j] += d * (xv - mean[j]);
      }
    }
  }
  float* sn = smem;
  float* smean = sn + kRowThreads;
  float* sm2 = smean + V * kRowThreads;
  sn[t] = n;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    smean[j * kRowThreads + t] = mean[j];
    sm2[j * kRowThreads + t] = m2[j];
  }
  __syncthreads();
  if (r != 0) return;
  for (int k = 1; k < per_pass; ++k) {  // merged in a fixed order: reproducible
    const int o = g + k * groups;
    const float on = sn[o];
    if (on == 0.f) continue;
    const float tot = n + on, f = on / tot;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = smean[j * kRowThreads + o] - mean[j];
      mean[j] += d * f;
      m2[j] += sm2[j * kRowThreads + o] + d * d * n * f;
    }
    n = tot;
  }
#pragma unroll
  for (int j = 0; j < V; ++j)
    partial[static_cast<int64_t>(blockIdx.x) * channels + g * V + j] = Welford{n, mean[j], m2[j]};
}

// partial[split * C + c]: sum(dy) and sum(dy * (x - mean)) of channel c over block `split`.
template <class T, int V>
__global__ void __launch_bounds__(kRowThreads) bn_rows_backward_sums(const T* __restrict__ dy, const T* __restrict__ x,
                                                                     Param mean_param, int32_t channels, uint32_t rows,
                                                                     uint32_t chunk, Sums2* partial) {
  extern __shared__ float smem[];  // a and b [V][threads]
  const int groups = channels / V, per_pass = kRowThreads / groups;
  const int t = threadIdx.x, g = t % groups, r = t / groups;
  const uint32_t m0 = blockIdx.x * chunk, m1 = min(rows, m0 + chunk);
  float a[V], b[V], mu[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    a[j] = b[j] = 0.f;
    mu[j] = mean_param.get(g * V + j, 0.f);
  }
  if (r < per_pass) {
    for (uint32_t m = m0 + r; m < m1; m += per_pass) {
      const int64_t row = static_cast<int64_t>(m) * channels;
      const AlignedVector<T, V> dv = reinterpret_cast<const AlignedVector<T, V>*>(dy + row)[g];
      const AlignedVector<T, V> xv = reinterpret_cast<const AlignedVector<T, V>*>(x + row)[g];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float d = convert<float>(dv.v[j]);
        a[j] += d;
        b[j] += d * (convert<float>(xv.v[j]) - mu[j]);
      }
    }
  }
  float* sa = smem;
  float* sb = sa + V * kRowThreads;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    sa[j * kRowThreads + t] = a[j];
    sb[j * kRowThreads + t] = b[j];
  }
  __syncthreads();
  if (r != 0) return;
  for (int k = 1; k < per_pass; ++k) {
    const int o = g + k * groups;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      a[j] += sa[j * kRowThreads + o];
      b[j] += sb[j * kRowThreads + o];
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) partial[static_cast<int64_t>(blockIdx.x) * channels + g * V + j] = Sums2{a[j], b[j]};
}

// out = a[c]*u + b[c]*v + d[c] over [M, C] row-major tensors, V elements per step.
template <class T, int V>
__global__ void bn_rows_apply(const T* __restrict__ u, const T* __restrict__ v, T* __restrict__ out, Coefs k,
                              int32_t channels, int64_t vectors) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c0 = static_cast<int>((i * V) % channels);
    const AlignedVector<T, V> uv = reinterpret_cast<const AlignedVector<T, V>*>(u)[i];
    AlignedVector<T, V> vv;
    if (v != nullptr) vv = reinterpret_cast<const AlignedVector<T, V>*>(v)[i];
    AlignedVector<T, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float val = k.a[c0 + j] * convert<float>(uv.v[j]) + k.d[c0 + j];
      if (v != nullptr) val += k.b[c0 + j] * convert<float>(vv.v[j]);
      r.v[j] = convert<T>(val);
    }
    reinterpret_cast<AlignedVector<T, V>*>(out)[i] = r;
  }
}

template <class T>
void launch_rows_stats(const T* x, const Plan& p, uint32_t splits, Welford* partial, const LaunchContext& ctx) {
  constexpr int V = 16 / sizeof(T);
  const uint32_t chunk = (p.g.per_channel + splits - 1) / splits;
  const size_t shared = (1 + 2 * V) * kRowThreads * sizeof(float);
  bn_rows_stats<T, V><<<splits, kRowThreads, shared, ctx.stream>>>(x, p.g.channels, p.g.per_channel, chunk, partial);
  check_launch("bn_rows_stats");
}

template <class T>
void launch_rows_backward_sums(const T* dy, const T* x, const Param& mean, const Plan& p, uint32_t splits,
                               Sums2* partial, const LaunchContext& ctx) {
  constexpr int V = 16 / sizeof(T);
  const uint32_t chunk = (p.g.per_channel + splits - 1) / splits;
  const size_t shared = 2 * V * kRowThreads * sizeof(float);
  bn_rows_backward_sums<T, V><<<splits, kRowThreads, shared, ctx.stream>>>(dy, x, mean, p.g.channels,
                                                                            p.g.per_channel, chunk, partial);
  check_launch("bn_rows_backward_sums");
}

template <class T>
void launch_rows_apply(const T* u, const T* v, T* out, const Coefs& k, const Plan& p, const LaunchContext& ctx) {
  constexpr int V = 16 / sizeof(T);
  const int64_t vectors = static_cast<int64_t>(p.g.per_channel) * p.g.channels / V;
  bn_rows_apply<T, V><<<grid_for(vectors, 256, ctx), 256, 0, ctx.stream>>>(u, v, out, k, p.g.channels, vectors);
  check_launch("bn_rows_apply");
}

// Chunks per channel for the reductions: enough blocks to fill the GPU, at least 512
// elements per chunk.
uint32_t reduce_splits(const Plan& p, const LaunchContext& ctx) {
  const int64_t channel_blocks = p.inner ? (p.g.channels + kInnerX - 1) / kInnerX : p.g.channels;
  const int64_t target = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 1) * 4;
  int64_t splits = (target + channel_blocks - 1) / channel_blocks;
  const int64_t by_work = (static_cast<int64_t>(p.g.per_channel) + 511) / 512;
  if (splits > by_work) splits = by_work;
  if (splits > 1024) splits = 1024;
  if (splits < 1) splits = 1;
  return static_cast<uint32_t>(splits);
}

template <class F>
void launch_reduce(const F& f, const Plan& p, uint32_t splits, typename F::Acc* partial, const LaunchContext& ctx) {
  const uint32_t chunk = (p.g.per_channel + splits - 1) / splits;
  if (p.inner) {
    const dim3 grid(static_cast<unsigned>((p.g.channels + kInnerX - 1) / kInnerX), splits);
    bn_reduce_inner<F><<<grid, dim3(kInnerX, kInnerY), 0, ctx.stream>>>(f, p.g, chunk, partial);
  } else {
    bn_reduce_outer<F><<<dim3(static_cast<unsigned>(p.g.channels), splits), kOuterThreads, 0, ctx.stream>>>(
        f, p.g, chunk, partial);
  }
  check_launch("bn_reduce");
}

template <class T>
void launch_apply(const ApplyArgs<T>& args, const Plan& p, const LaunchContext& ctx) {
  if (p.g.per_channel == 0) return;
  const int64_t blocks_wanted = static_cast<int64_t>(ctx.sm_count > 0 ? ctx.sm_count : 1) * 8;
  if (p.inner) {
    const int64_t cx = (p.g.channels + kInnerX - 1) / kInnerX;
    int64_t gy = (blocks_wanted + cx - 1) / cx;
    const int64_t rows = (static_cast<int64_t>(p.g.per_channel) + kInnerY - 1) / kInnerY;
    gy = gy < rows ? gy : rows;
    gy = gy < 65535 ? (gy < 1 ? 1 : gy) : 65535;
    bn_apply_inner<T><<<dim3(static_cast<unsigned>(cx), static_cast<unsigned>(gy)), dim3(kInnerX, kInnerY), 0,
                        ctx.stream>>>(args, p.g);
  } else {
    int64_t gy = (blocks_wanted + p.g.channels - 1) / p.g.channels;
    const int64_t per = (static_cast<int64_t>(p.g.per_channel) + kOuterThreads - 1) / kOuterThreads;
    gy = gy < per ? gy : per;
    gy = gy < 65535 ? (gy < 1 ? 1 : gy) : 65535;
    bn_apply_outer<T><<<dim3(static_cast<unsigned>(p.g.channels), static_cast<unsigned>(gy)), kOuterThreads, 0,
                        ctx.stream>>>(args, p.g);
  }
  check_launch("bn_apply");
}

Param param(const Args& a, int32_t i, int64_t channels, const char* what, const char* name) {
  Param p;
  if (a.is_none(i)) return p;
  const fl_tensor& t = device_tensor(a, i, name);
  if (t.ndim != 1 || t.shape[0] != channels)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": " + what + " must be 1-D of C elements");
  if (!is_floating_dtype(t.dtype)) unsupported_dtype(name, t.dtype);
  p.ptr = plugin::data_ptr<const void>(t);
  p.stride = t.strides[0];
  p.dtype = t.dtype;
  return p;
}

bool wanted(const Args& a, int32_t i) {
  return i < a.num_outputs() && !plugin::is_undefined(a.output(i)) && plugin::numel(a.output(i)) > 0;
}

// Output i as a per-channel vector (written when it has C elements), or nullptr.
void* channel_output(const Args& a, int32_t i, int64_t channels, fl_dtype_t* dtype, const char* name) {
  if (!wanted(a, i)) return nullptr;
  const fl_tensor& t = a.output(i);
  if (plugin::numel(t) != channels) return nullptr;
  if (!is_floating_dtype(t.dtype)) unsupported_dtype(name, t.dtype);
  if (t.ndim == 1 && t.strides[0] != 1) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": strided stat output");
  *dtype = t.dtype;
  return plugin::data_ptr<void>(t);
}

bool supported_data_dtype(fl_dtype_t dt) {
  return dt == FL_DTYPE_FLOAT32 || dt == FL_DTYPE_BFLOAT16 || dt == FL_DTYPE_FLOAT16;
}

template <class F>
bool dispatch_data(fl_dtype_t dt, F&& f) {
  switch (dt) {
    case FL_DTYPE_FLOAT32: f(TypeTag<float>{}); return true;
    case FL_DTYPE_FLOAT16: f(TypeTag<gpu_half>{}); return true;
    case FL_DTYPE_BFLOAT16: f(TypeTag<gpu_bfloat16>{}); return true;
    default: return false;
  }
}

// Where each argument sits in the schema of the overload.
struct ForwardLayout {
  int32_t running_mean, running_var, training, momentum, eps;  // -1: absent from the schema
};

fl_status_t batch_norm_forward(const fl_kernel_call* call, const char* name, ForwardLayout layout) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& x = device_tensor(a, 0, name);
    const fl_tensor& y = a.output(0);
    if (!supported_data_dtype(x.dtype) || y.dtype != x.dtype) unsupported_dtype(name, x.dtype);
    if (x.ndim < 2) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": input must have at least 2 dims");
    const int64_t channels = x.shape[1];
    ForwardFinalize fin{};
    fin.training = layout.training < 0 ? false : a.boolean(layout.training);
    fin.momentum = static_cast<float>(a.number(layout.momentum));
    fin.eps = static_cast<float>(a.number(layout.eps));
    fin.weight = param(a, 1, channels, "weight", name);
    fin.bias = param(a, 2, channels, "bias", name);
    if (layout.running_mean >= 0) fin.running_mean = param(a, layout.running_mean, channels, "running_mean", name);
    if (layout.running_var >= 0) fin.running_var = param(a, layout.running_var, channels, "running_var", name);
    if (!fin.training && (fin.running_mean.ptr == nullptr || fin.running_var.ptr == nullptr))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": eval mode needs running_mean and running_var");
    fin.save_mean = channel_output(a, 1, channels, &fin.save_mean_dt, name);
    fin.save_invstd = channel_output(a, 2, channels, &fin.save_invstd_dt, name);
    const Plan p = make_plan({&x, &y}, name);
    if (channels == 0) return;
    if (p.g.per_channel == 0 && !fin.training) return;

    const bool rows = rows_path(p, x.dtype, {plugin::data_ptr<const void>(x), plugin::data_ptr<const void>(y)});
    const uint32_t splits = fin.training ? (rows ? rows_splits(p, x.dtype, ctx) : reduce_splits(p, ctx)) : 0;
    ScratchBuffer partial(static_cast<size_t>(splits) * static_cast<size_t>(channels) * sizeof(Welford), ctx.stream);
    ScratchBuffer coefs(static_cast<size_t>(channels) * 3 * sizeof(float), ctx.stream);
    const Coefs k{coefs.get<float>(), coefs.get<float>() + channels, coefs.get<float>() + 2 * channels};
    dispatch_data(x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (fin.training && p.g.per_channel > 0) {
        if (rows)
          launch_rows_stats<T>(plugin::data_ptr<const T>(x), p, splits, partial.get<Welford>(), ctx);
        else
          launch_reduce(StatsAcc<T>{plugin::data_ptr<const T>(x), p.strides[0]}, p, splits, partial.get<Welford>(),
                        ctx);
      }
      // With an empty batch there is nothing to reduce: statistics come out NaN, as in ATen.
      bn_forward_finalize<<<static_cast<unsigned>((channels + 255) / 256), 256, 0, ctx.stream>>>(
          partial.get<Welford>(), p.g.per_channel > 0 ? static_cast<int32_t>(splits) : 0,
          static_cast<int32_t>(channels), fin, k);
      check_launch("bn_forward_finalize");
      if (rows) {
        launch_rows_apply<T>(plugin::data_ptr<const T>(x), nullptr, plugin::data_ptr<T>(y), k, p, ctx);
      } else {
        ApplyArgs<T> args{plugin::data_ptr<const T>(x), p.strides[0], nullptr, {}, plugin::data_ptr<T>(y),
                          p.strides[1], k};
        launch_apply(args, p, ctx);
      }
    });
  });
}

}  // namespace

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
//   -> (out, save_mean, save_invstd)
FL_CUDA_KERNEL(k_native_batch_norm) {
  return batch_norm_forward(call, "aten::native_batch_norm", ForwardLayout{3, 4, 5, 6, 7});
}
// _native_batch_norm_legit(input, weight?, bias?, running_mean!, running_var!, training, momentum, eps)
FL_CUDA_KERNEL(k_native_batch_norm_legit) {
  return batch_norm_forward(call, "aten::_native_batch_norm_legit", ForwardLayout{3, 4, 5, 6, 7});
}
// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var, momentum, eps)
FL_CUDA_KERNEL(k_native_batch_norm_legit_no_training) {
  return batch_norm_forward(call, "aten::_native_batch_norm_legit_no_training", ForwardLayout{3, 4, -1, 5, 6});
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
// save_invstd?, train, eps, output_mask[3]) -> (grad_input, grad_weight, grad_bias)
FL_CUDA_KERNEL(k_native_batch_norm_backward) {
  return plugin::guard([&] {
    const char* name = "aten::native_batch_norm_backward";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& dy = device_tensor(a, 0, name);
    const fl_tensor& x = device_tensor(a, 1, name);
    if (!supported_data_dtype(x.dtype) || dy.dtype != x.dtype) unsupported_dtype(name, x.dtype);
    if (x.ndim < 2) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": input must have at least 2 dims");
    const int64_t channels = x.shape[1];
    std::vector<bool> mask = {true, true, true};
    if (!a.is_none(9)) mask = a.bools(9);
    if (mask.size() != 3) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output_mask needs 3 entries");
    const bool want_dx = mask[0] && wanted(a, 0);
    BackwardFinalize fin{};
    fin.training = a.boolean(7);
    fin.eps = static_cast<float>(a.number(8));
    fin.weight = param(a, 2, channels, "weight", name);
    fin.mean = param(a, fin.training ? 5 : 3, channels, "mean", name);
    fin.invstd = param(a, fin.training ? 6 : 4, channels, "invstd/var", name);
    if (fin.mean.ptr == nullptr || fin.invstd.ptr == nullptr)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": saved or running statistics missing");
    if (mask[1]) fin.grad_weight = channel_output(a, 1, channels, &fin.grad_weight_dt, name);
    if (mask[2]) fin.grad_bias = channel_output(a, 2, channels, &fin.grad_bias_dt, name);
    const fl_tensor* dx = want_dx ? &a.output(0) : nullptr;
    if (dx != nullptr && dx->dtype != x.dtype) unsupported_dtype(name, dx->dtype);
    const Plan p = dx != nullptr ? make_plan({&x, &dy, dx}, name) : make_plan({&x, &dy}, name);
    if (channels == 0) return;
    fin.inv_m = p.g.per_channel > 0 ? 1.f / static_cast<float>(p.g.per_channel) : 0.f;

    const bool need_sums = p.g.per_channel > 0 && ((fin.training && want_dx) || fin.grad_weight != nullptr ||
                                                   fin.grad_bias != nullptr);
    const bool rows = rows_path(p, x.dtype, {plugin::data_ptr<const void>(x), plugin::data_ptr<const void>(dy),
                                             dx != nullptr ? plugin::data_ptr<const void>(*dx) : nullptr});
    const uint32_t splits = need_sums ? (rows ? rows_splits(p, x.dtype, ctx) : reduce_splits(p, ctx)) : 0;
    ScratchBuffer partial(static_cast<size_t>(splits) * static_cast<size_t>(channels) * sizeof(Sums2), ctx.stream);
    ScratchBuffer coefs(dx != nullptr ? static_cast<size_t>(channels) * 3 * sizeof(float) : 0, ctx.stream);
    const Coefs k = dx != nullptr ? Coefs{coefs.get<float>(), coefs.get<float>() + channels,
                                          coefs.get<float>() + 2 * channels}
                                  : Coefs{nullptr, nullptr, nullptr};
    dispatch_data(x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (need_sums && rows) {
        launch_rows_backward_sums<T>(plugin::data_ptr<const T>(dy), plugin::data_ptr<const T>(x), fin.mean, p, splits,
                                     partial.get<Sums2>(), ctx);
      } else if (need_sums) {
        const BackwardAcc<T> f{plugin::data_ptr<const T>(dy), p.strides[1], plugin::data_ptr<const T>(x),
                               p.strides[0], fin.mean};
        launch_reduce(f, p, splits, partial.get<Sums2>(), ctx);
      }
      // Without sums (empty batch), grad_weight and grad_bias come out zero.
      bn_backward_finalize<<<static_cast<unsigned>((channels + 255) / 256), 256, 0, ctx.stream>>>(
          need_sums ? partial.get<Sums2>() : nullptr, static_cast<int32_t>(splits), static_cast<int32_t>(channels),
          fin, k);
      check_launch("bn_backward_finalize");
      if (dx != nullptr && rows) {
        launch_rows_apply<T>(plugin::data_ptr<const T>(dy), fin.training ? plugin::data_ptr<const T>(x) : nullptr,
                             plugin::data_ptr<T>(*dx), k, p, ctx);
      } else if (dx != nullptr) {
        ApplyArgs<T> args{plugin::data_ptr<const T>(dy), p.strides[1], fin.training ? plugin::data_ptr<const T>(x) : nullptr,
                          p.strides[0], plugin::data_ptr<T>(*dx), p.strides[2], k};
        launch_apply(args, p, ctx);
      }
    });
  });
}

}  // namespace fl::cuda
