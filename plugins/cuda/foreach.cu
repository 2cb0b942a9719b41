// foreach.cu — the _foreach_* multi-tensor kernels (optimizer steps, gradient clipping): one
// launch covers up to kMaxTensors tensors and kMaxBlocks chunks of kChunk elements, with the
// table of pointers, sizes and per-tensor scalars passed as the kernel's parameter (under the
// portable 4 KiB). Outputs are the out lists flattened (for in-place calls, `self` itself);
// inputs are the non-out arguments. Every tensor must be dense (the entries take no strided
// tensors, so the core passes dense ones) and of one dtype: float32, bfloat16 or float16,
// computed in float. 16-byte vector loads when every pointer of a chunk is 16-byte aligned.
// Not handled (FL_ERR_NOT_SUPPORTED): mixed dtypes, float64, the Tensor-scalars overloads of
// addcmul/addcdiv.
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "elementwise.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "scratch_buffer.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace fl::cuda {
namespace {

constexpr int kMaxTensors = 32;
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunk = 65536;
constexpr int kThreads = 512;

// D pointer lists: the inputs, then the output (last).
template <int D>
struct Table {
  void* ptr[D][kMaxTensors];
  int64_t numel[kMaxTensors];
  double scalar[kMaxTensors];          // the per-tensor scalar (ScalarList overloads)
  int64_t partial_offset[kMaxTensors];  // _foreach_norm: first partial slot of the tensor
  uint8_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};

// Op: float operator()(const float* in, float scalar) const, `in` holding D - 1 values.
template <class T, int D, class Op>
__global__ void __launch_bounds__(kThreads) multi_tensor_apply(Table<D> tab, Op op) {
  constexpr int kIn = D - 1;
  constexpr int V = 16 / sizeof(T);
  const int t = tab.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(tab.block_chunk[blockIdx.x]) * kChunk;
  const int64_t n = tab.numel[t];
  const int64_t end = n < begin + kChunk ? n : begin + kChunk;
  const float s = static_cast<float>(tab.scalar[t]);
  T* out = static_cast<T*>(tab.ptr[D - 1][t]) + begin;
  const T* in[kIn > 0 ? kIn : 1];
  uintptr_t bits = reinterpret_cast<uintptr_t>(out);
#pragma unroll
  for (int k = 0; k < kIn; ++k) {
    in[k] = static_cast<const T*>(tab.ptr[k][t]) + begin;
    bits |= reinterpret_cast<uintptr_t>(in[k]);
  }
  const int64_t count = end - begin;
  int64_t done = 0;
  if (bits % 16 == 0) {
    const int64_t nvec = count / V;
    for (int64_t i = threadIdx.x; i < nvec; i += kThreads) {
      AlignedVector<T, V> a[kIn > 0 ? kIn : 1];
#pragma unroll
      for (int k = 0; k < kIn; ++k) a[k] = reinterpret_cast<const AlignedVector<T, V>*>(in[k])[i];
      AlignedVector<T, V> r;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float v[kIn > 0 ? kIn : 1];
#pragma unroll
        for (int k = 0; k < kIn; ++k) v[k] = convert<float>(a[k].v[j]);
        r.v[j] = convert<T>(op(v, s));
      }
      reinterpret_cast<AlignedVector<T, V>*>(out)[i] = r;
    }
    done = nvec * V;
  }
  for (int64_t i = done + threadIdx.x; i < count; i += kThreads) {
    float v[kIn > 0 ? kIn : 1];
#pragma unroll
    for (int k = 0; k < kIn; ++k) v[k] = convert<float>(in[k][i]);
    out[i] = convert<T>(op(v, s));
  }
}

// ---- the functors ----------------------------------------------------------------------------

struct AddScaled {  // self + alpha * other, alpha the scalar
  __device__ float operator()(const float* v, float s) const { return fmaf(s, v[1], v[0]); }
};
struct AddScalar {  // self + scalar
  __device__ float operator()(const float* v, float s) const { return v[0] + s; }
};
struct MulScalar {
  __device__ float operator()(const float* v, float s) const { return v[0] * s; }
};
struct DivScalar {
  __device__ float operator()(const float* v, float s) const { return v[0] / s; }
};
struct MulList {
  __device__ float operator()(const float* v, float) const { return v[0] * v[1]; }
};
struct DivList {
  __device__ float operator()(const float* v, float) const { return v[0] / v[1]; }
};
// self * (or /) a one-element device tensor, read by every thread (cached).
struct ByDeviceScalar {
  const void* ptr;
  fl_dtype_t dtype;
  bool divide;
  __device__ float operator()(const float* v, float) const {
    const float o = load_as<float>(ptr, 0, dtype);
    return divide ? v[0] / o : v[0] * o;
  }
};
struct Sqrt {
  __device__ float operator()(const float* v, float) const { return sqrtf(v[0]); }
};
struct Neg {
  __device__ float operator()(const float* v, float) const { return -v[0]; }
};
__device__ __forceinline__ float lerp(float self, float end, float w) {
  const float diff = end - self;
  return fabsf(w) < 0.5f ? fmaf(w, diff, self) : fmaf(-diff, 1.f - w, end);
}
struct LerpScalar {  // weight: the scalar
  __device__ float operator()(const float* v, float s) const { return lerp(v[0], v[1], s); }
};
struct LerpList {  // weight: the third list
  __device__ float operator()(const float* v, float) const { return lerp(v[0], v[1], v[2]); }
};
struct Addcmul {  // self + value * t1 * t2
  __device__ float operator()(const float* v, float s) const { return fmaf(s * v[1], v[2], v[0]); }
};
struct Addcdiv {  // self + value * t1 / t2
  __device__ float operator()(const float* v, float s) const { return fmaf(s, v[1] / v[2], v[0]); }
};
struct Copy {
  __device__ float operator()(const float* v, float) const { return v[0]; }
};
struct Zero {
  __device__ float operator()(const float*, float) const { return 0.f; }
};

// ---- host side -------------------------------------------------------------------------------

struct TensorList {
  const fl_tensor* data = nullptr;
  int64_t len = 0;
};

TensorList tensor_list(const Args& a, int32_t i, const char* name) {
  const fl_value& v = a.at(i);
  if (v.kind != FL_VALUE_TENSOR_LIST)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": input " + std::to_string(i) + " is not a tensor list");
  return TensorList{v.u.tensors.data, v.u.tensors.len};
}

// A Scalar[] argument: doubles, ints, bools, or a list of host scalars.
std::vector<double> scalar_list(const Args& a, int32_t i, const char* name) {
  const fl_value& v = a.at(i);
  std::vector<double> out;
  switch (v.kind) {
    case FL_VALUE_DOUBLE_LIST: out.assign(v.u.doubles.data, v.u.doubles.data + v.u.doubles.len); break;
    case FL_VALUE_INT_LIST:
      for (int64_t k = 0; k < v.u.ints.len; ++k) out.push_back(static_cast<double>(v.u.ints.data[k]));
      break;
    case FL_VALUE_BOOL_LIST:
      for (int64_t k = 0; k < v.u.bools.len; ++k) out.push_back(v.u.bools.data[k] ? 1.0 : 0.0);
      break;
    case FL_VALUE_TENSOR_LIST:
      for (int64_t k = 0; k < v.u.tensors.len; ++k) {
        const fl_tensor& t = v.u.tensors.data[k];
        if (t.device != FL_DEVICE_HOST) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": device scalars");
        out.push_back(plugin::read_host_scalar(t));
      }
      break;
    default:
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": input " + std::to_string(i) + " is not a scalar list");
  }
  return out;
}

bool supported_dtype(fl_dtype_t dt) {
  return dt == FL_DTYPE_FLOAT32 || dt == FL_DTYPE_BFLOAT16 || dt == FL_DTYPE_FLOAT16;
}

// The call's lists, checked: `lists` (inputs, then the outputs as the last list) all of one
// length, every tensor dense, of the first tensor's dtype and the first list's shapes.
template <int D>
struct Lists {
  const fl_tensor* t[D];  // list k starts at t[k]
  int64_t len = 0;
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;
};

template <int D>
Lists<D> check_lists(const std::vector<TensorList>& in, const fl_kernel_call* call, const char* name,
                     bool outputs_any_shape = false) {
  Lists<D> l;
  const int64_t len = call->num_outputs;
  if (static_cast<int>(in.size()) != D - 1) plugin::raise(FL_ERR_INTERNAL, std::string(name) + ": list count");
  for (int k = 0; k < D - 1; ++k) {
    if (in[static_cast<size_t>(k)].len != len)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": lists of different lengths");
    l.t[k] = in[static_cast<size_t>(k)].data;
  }
  l.t[D - 1] = call->outputs;
  l.len = len;
  if (len == 0) return l;
  l.dtype = l.t[0][0].dtype;
  if (!supported_dtype(l.dtype)) unsupported_dtype(name, l.dtype);
  for (int64_t i = 0; i < len; ++i) {
    const fl_tensor& ref = l.t[0][i];
    for (int k = 0; k < D; ++k) {
      const fl_tensor& x = l.t[k][i];
      if (x.ndim < 0) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": undefined tensor in a list");
      if (x.device == FL_DEVICE_HOST) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": host tensor in a list");
      // Walked in memory order: dense tensors (channels_last ones too) laid out as the first.
      if (!plugin::is_dense(x)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": non-dense tensor");
      if (k == D - 1 && outputs_any_shape) continue;
      if (k > 0 && !plugin::same_layout(x, ref))
        plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": tensors of one index laid out differently");
      if (x.dtype != l.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes");
      if (plugin::numel(x) != plugin::numel(ref))
        plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": tensors of different sizes at index " +
                                                   std::to_string(i));
    }
  }
  return l;
}

// Fills tables and launches: `on_full(table, blocks)` for each.
template <int D, class Launch>
void for_each_table(const Lists<D>& l, const std::vector<double>& scalars, const int64_t* partial_offsets,
                    Launch&& launch) {
  Table<D> tab;
  int tensors = 0, blocks = 0;
  for (int64_t i = 0; i < l.len; ++i) {
    const int64_t n = plugin::numel(l.t[0][i]);
    if (n == 0) continue;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || tensors == 0) {  // (re)register tensor i in this table
        for (int k = 0; k < D; ++k) tab.ptr[k][tensors] = plugin::data_ptr<void>(l.t[k][i]);
        tab.numel[tensors] = n;
        tab.scalar[tensors] = scalars.empty() ? 0.0 : scalars[static_cast<size_t>(i)];
        tab.partial_offset[tensors] = partial_offsets != nullptr ? partial_offsets[i] : 0;
        ++tensors;
      }
      tab.block_tensor[blocks] = static_cast<uint8_t>(tensors - 1);
      tab.block_chunk[blocks] = static_cast<int32_t>(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      if (blocks == kMaxBlocks || (tensors == kMaxTensors && last_chunk)) {
        launch(tab, blocks);
        blocks = 0;
        tensors = 0;  // a tensor with chunks left is registered again at slot 0
      }
    }
  }
  if (blocks > 0) launch(tab, blocks);
}

template <int D, class Op>
void run_apply(const Lists<D>& l, const std::vector<double>& scalars, const Op& op, const LaunchContext& ctx) {
  dispatch_float(l.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      plugin::raise(FL_ERR_NOT_SUPPORTED, "foreach: float64");
    } else {
      for_each_table<D>(l, scalars, nullptr, [&](const Table<D>& tab, int blocks) {
        multi_tensor_apply<T, D, Op><<<blocks, kThreads, 0, ctx.stream>>>(tab, op);
        check_launch("multi_tensor_apply");
      });
    }
  });
}

// Where the per-tensor scalar of an op comes from.
struct ScalarSource {
  enum Kind { None, One, List, Value } kind = None;
  int32_t input = -1;    // One: a Scalar input (absent: `value`); List: a Scalar[] input
  double value = 0.0;    // Value: this; One: the default
  double sign = 1.0;     // applied to the scalar (sub as add)
};
ScalarSource from_scalar(int32_t input, double fallback = 0.0, double sign = 1.0) {
  return ScalarSource{ScalarSource::One, input, fallback, sign};
}
ScalarSource from_list(int32_t input) { return ScalarSource{ScalarSource::List, input, 0.0, 1.0}; }
ScalarSource from_value(double v) { return ScalarSource{ScalarSource::Value, -1, v, 1.0}; }

// Runs Op over lists: inputs `list_inputs` (D - 1 lists) and the outputs.
template <int D, class Op>
fl_status_t foreach_entry(const fl_kernel_call* call, const char* name, const std::vector<int32_t>& list_inputs,
                          const Op& op, ScalarSource src = {}) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    std::vector<TensorList> in;
    for (int32_t i : list_inputs) in.push_back(tensor_list(a, i, name));
    const Lists<D> l = check_lists<D>(in, call, name);
    std::vector<double> scalars;
    if (src.kind == ScalarSource::List) {
      scalars = scalar_list(a, src.input, name);
      if (static_cast<int64_t>(scalars.size()) != l.len)
        plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": scalar list of the wrong length");
    } else {
      double v = src.value;
      if (src.kind == ScalarSource::One && !a.is_none(src.input)) v = a.number(src.input);
      scalars.assign(static_cast<size_t>(l.len), v * src.sign);
    }
    if (l.len == 0) return;
    run_apply<D>(l, scalars, op, ctx);
  });
}

// ---- _foreach_norm ---------------------------------------------------------------------------

enum class NormKind { L1 = 1, L2 = 2, Inf = 3 };

template <class T>
__global__ void __launch_bounds__(kThreads) multi_tensor_norm_partial(Table<1> tab, NormKind kind, float* partial) {
  __shared__ float shared[kThreads / 32];
  const int t = tab.block_tensor[blockIdx.x];
  const int64_t chunk = tab.block_chunk[blockIdx.x];
  const int64_t begin = chunk * kChunk;
  const int64_t n = tab.numel[t];
  const int64_t end = n < begin + kChunk ? n : begin + kChunk;
  const T* x = static_cast<const T*>(tab.ptr[0][t]);
  float acc = 0.f;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float v = fabsf(convert<float>(x[i]));
    if (kind == NormKind::L2) acc += v * v;
    else if (kind == NormKind::L1) acc += v;
    else acc = (v > acc || v != v) ? v : acc;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float other = __shfl_down_sync(0xffffffffu, acc, o);
    acc = kind == NormKind::Inf ? ((other > acc || other != other) ? other : acc) : acc + other;
  }
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      acc = kind == NormKind::Inf ? ((shared[w] > acc || shared[w] != shared[w]) ? shared[w] : acc) : acc + shared[w];
    partial[tab.partial_offset[t] + chunk] = acc;
  }
}

struct NormFinalize {
  void* out[kMaxTensors];
  fl_dtype_t out_dtype[kMaxTensors];
  int64_t offset[kMaxTensors];
  int64_t chunks[kMaxTensors];
  int32_t count;
};

__global__ void multi_tensor_norm_finalize(NormFinalize f, NormKind kind, const float* partial) {
  const int t = threadIdx.x;
  if (t >= f.count) return;
  float acc = 0.f;
  for (int64_t c = 0; c < f.chunks[t]; ++c) {
    const float v = partial[f.offset[t] + c];
    acc = kind == NormKind::Inf ? ((v > acc || v != v) ? v : acc) : acc + v;
  }
  store_as(f.out[t], 0, f.out_dtype[t], kind == NormKind::L2 ? sqrtf(acc) : acc);
}

}  // namespace

// _foreach_add.List_out(self, other, *, alpha) / _foreach_sub.List_out
FL_CUDA_KERNEL(k_foreach_add_list) { return foreach_entry<3>(call, "aten::_foreach_add.List", {0, 1}, AddScaled{}, from_scalar(2, 1.0)); }
FL_CUDA_KERNEL(k_foreach_sub_list) {
  return foreach_entry<3>(call, "aten::_foreach_sub.List", {0, 1}, AddScaled{}, from_scalar(2, 1.0, -1.0));
}
FL_CUDA_KERNEL(k_foreach_add_scalar) { return foreach_entry<2>(call, "aten::_foreach_add.Scalar", {0}, AddScalar{}, from_scalar(1)); }
FL_CUDA_KERNEL(k_foreach_sub_scalar) {
  return foreach_entry<2>(call, "aten::_foreach_sub.Scalar", {0}, AddScalar{}, from_scalar(1, 0.0, -1.0));
}
FL_CUDA_KERNEL(k_foreach_add_scalar_list) {
  return foreach_entry<2>(call, "aten::_foreach_add.ScalarList", {0}, AddScalar{}, from_list(1));
}
FL_CUDA_KERNEL(k_foreach_mul_scalar) { return foreach_entry<2>(call, "aten::_foreach_mul.Scalar", {0}, MulScalar{}, from_scalar(1)); }
FL_CUDA_KERNEL(k_foreach_mul_scalar_list) {
  return foreach_entry<2>(call, "aten::_foreach_mul.ScalarList", {0}, MulScalar{}, from_list(1));
}
FL_CUDA_KERNEL(k_foreach_mul_list) { return foreach_entry<3>(call, "aten::_foreach_mul.List", {0, 1}, MulList{}); }
FL_CUDA_KERNEL(k_foreach_div_scalar) { return foreach_entry<2>(call, "aten::_foreach_div.Scalar", {0}, DivScalar{}, from_scalar(1)); }
FL_CUDA_KERNEL(k_foreach_div_scalar_list) {
  return foreach_entry<2>(call, "aten::_foreach_div.ScalarList", {0}, DivScalar{}, from_list(1));
}
FL_CUDA_KERNEL(k_foreach_div_list) { return foreach_entry<3>(call, "aten::_foreach_div.List", {0, 1}, DivList{}); }

namespace {
// _foreach_mul.Tensor_out / _foreach_div.Tensor_out(self, other): other is one element, on
// the device (read by the kernel) or a host scalar (read now).
fl_status_t by_tensor_entry(const fl_kernel_call* call, const char* name, bool divide) {
  return plugin::guard([&]() -> fl_status_t {
    Args a(call);
    const fl_tensor& other = a.tensor(1);
    if (plugin::numel(other) != 1)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": the tensor scalar must have one element");
    if (other.device == FL_DEVICE_HOST) {
      const double v = plugin::read_host_scalar(other);
      return divide ? foreach_entry<2>(call, name, {0}, DivScalar{}, from_value(v))
                    : foreach_entry<2>(call, name, {0}, MulScalar{}, from_value(v));
    }
    if (!is_floating_dtype(other.dtype) && other.dtype != FL_DTYPE_INT64 && other.dtype != FL_DTYPE_INT32)
      unsupported_dtype(name, other.dtype);
    return foreach_entry<2>(call, name, {0}, ByDeviceScalar{plugin::data_ptr<const void>(other), other.dtype, divide});
  });
}
}  // namespace

FL_CUDA_KERNEL(k_foreach_mul_tensor) { return by_tensor_entry(call, "aten::_foreach_mul.Tensor", false); }
FL_CUDA_KERNEL(k_foreach_div_tensor) { return by_tensor_entry(call, "aten::_foreach_div.Tensor", true); }
FL_CUDA_KERNEL(k_foreach_sqrt) { return foreach_entry<2>(call, "aten::_foreach_sqrt", {0}, Sqrt{}); }
FL_CUDA_KERNEL(k_foreach_neg) { return foreach_entry<2>(call, "aten::_foreach_neg", {0}, Neg{}); }
// _foreach_lerp.Scalar_out(self, tensors1, weight) / .List_out(self, tensors1, weights)
FL_CUDA_KERNEL(k_foreach_lerp_scalar) {
  return foreach_entry<3>(call, "aten::_foreach_lerp.Scalar", {0, 1}, LerpScalar{}, from_scalar(2));
}
FL_CUDA_KERNEL(k_foreach_lerp_list) {
  return foreach_entry<4>(call, "aten::_foreach_lerp.List", {0, 1, 2}, LerpList{});
}
// _foreach_addcmul/addcdiv.Scalar_out(self, tensor1, tensor2, value=1) / .ScalarList_out(..., scalars)
FL_CUDA_KERNEL(k_foreach_addcmul_scalar) {
  return foreach_entry<4>(call, "aten::_foreach_addcmul.Scalar", {0, 1, 2}, Addcmul{}, from_scalar(3, 1.0));
}
FL_CUDA_KERNEL(k_foreach_addcmul_scalar_list) {
  return foreach_entry<4>(call, "aten::_foreach_addcmul.ScalarList", {0, 1, 2}, Addcmul{}, from_list(3));
}
FL_CUDA_KERNEL(k_foreach_addcdiv_scalar) {
  return foreach_entry<4>(call, "aten::_foreach_addcdiv.Scalar", {0, 1, 2}, Addcdiv{}, from_scalar(3, 1.0));
}
FL_CUDA_KERNEL(k_foreach_addcdiv_scalar_list) {
  return foreach_entry<4>(call, "aten::_foreach_addcdiv.ScalarList", {0, 1, 2}, Addcdiv{}, from_list(3));
}
// _foreach_copy.out(self, src, non_blocking): out = src (of self's dtype and shape).
FL_CUDA_KERNEL(k_foreach_copy) { return foreach_entry<2>(call, "aten::_foreach_copy", {1}, Copy{}); }
// _foreach_zero.out(self)
FL_CUDA_KERNEL(k_foreach_zero) {
  return plugin::guard([&]() -> fl_status_t {
    Args a(call);
    const TensorList self = tensor_list(a, 0, "aten::_foreach_zero");
    if (self.len != call->num_outputs)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, "aten::_foreach_zero: list lengths differ");
    return foreach_entry<1>(call, "aten::_foreach_zero", {}, Zero{});
  });
}

// _foreach_norm.Scalar_out(self, ord=2, dtype?) -> one 0-dim tensor per input.
FL_CUDA_KERNEL(k_foreach_norm) {
  return plugin::guard([&] {
    const char* name = "aten::_foreach_norm";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const TensorList self = tensor_list(a, 0, name);
    const double ord = a.is_none(1) ? 2.0 : a.number(1);
    NormKind kind;
    if (ord == 2.0) kind = NormKind::L2;
    else if (ord == 1.0) kind = NormKind::L1;
    else if (std::isinf(ord) && ord > 0) kind = NormKind::Inf;
    else plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": ord " + std::to_string(ord));
    const Lists<2> l = check_lists<2>({self}, call, name, /*outputs_any_shape=*/true);
    for (int64_t i = 0; i < l.len; ++i) {
      const fl_tensor& o = l.t[1][i];
      if (plugin::numel(o) != 1) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output size");
      if (!is_floating_dtype(o.dtype) || o.dtype == FL_DTYPE_FLOAT64) unsupported_dtype(name, o.dtype);
    }
    if (l.len == 0) return;
    // Inputs of one dtype; outputs may be another float dtype (the dtype argument).
    std::vector<int64_t> offsets(static_cast<size_t>(l.len)), chunks(static_cast<size_t>(l.len));
    int64_t total = 0;
    for (int64_t i = 0; i < l.len; ++i) {
      offsets[static_cast<size_t>(i)] = total;
      chunks[static_cast<size_t>(i)] = (plugin::numel(l.t[0][i]) + kChunk - 1) / kChunk;
      total += chunks[static_cast<size_t>(i)];
    }
    ScratchBuffer partial(static_cast<size_t>(total > 0 ? total : 1) * sizeof(float), ctx.stream);
    Lists<1> in1;
    in1.t[0] = l.t[0];
    in1.len = l.len;
    in1.dtype = l.dtype;
    dispatch_float(l.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, double>) {
        plugin::raise(FL_ERR_NOT_SUPPORTED, "foreach_norm: float64");
      } else {
        for_each_table<1>(in1, {}, offsets.data(), [&](const Table<1>& tab, int blocks) {
          multi_tensor_norm_partial<T><<<blocks, kThreads, 0, ctx.stream>>>(tab, kind, partial.get<float>());
          check_launch("multi_tensor_norm_partial");
        });
      }
    });
    for (int64_t first = 0; first < l.len; first += kMaxTensors) {
      NormFinalize f{};
      f.count = static_cast<int32_t>(l.len - first < kMaxTensors ? l.len - first : kMaxTensors);
      for (int32_t k = 0; k < f.count; ++k) {
        const fl_tensor& o = l.t[1][first + k];
        f.out[k] = plugin::data_ptr<void>(o);
        f.out_dtype[k] = o.dtype;
        f.offset[k] = offsets[static_cast<size_t>(first + k)];
        f.chunks[k] = chunks[static_cast<size_t>(first + k)];
      }
      multi_tensor_norm_finalize<<<1, kMaxTensors, 0, ctx.stream>>>(f, kind, partial.get<float>());
      check_launch("multi_tensor_norm_finalize");
    }
  });
}

}  // namespace fl::cuda
