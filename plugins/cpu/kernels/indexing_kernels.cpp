// indexing_kernels.cpp — index_select, embedding_dense_backward and native_dropout.
// Index values live in device memory, so bounds are checked on the worker (an out-of-range
// index is an asynchronous error, like ATen's IndexError).
//
// native_dropout keys a std::mt19937_64 per call with the call's RNG pair, which a 1.2 core
// draws from the fl device's torch generator (FL_KERNEL_CALL_HAS_RNG): torch.manual_seed then
// makes dropout repeat. From an older core it takes a 64-bit seed per call from the device's
// own std::mt19937_64, seeded with the init option `seed=` (default 0) plus the device index,
// so results depend only on the order of calls on that device. Either way the stream of
// numbers differs from ATen's CPU generator.
#include "../cpu_runtime.hpp"
#include "kernel_table.hpp"
#include "tensor_desc.hpp"

#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// splitmix64's finaliser (Steele, Lea, Flood 2014): a bijection of 64-bit words that mixes
// every input bit into every output bit.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int64_t load_index(const char* base, fl_dtype_t dtype, int64_t i) {
  if (dtype == FL_DTYPE_INT64) return reinterpret_cast<const int64_t*>(base)[i];
  return reinterpret_cast<const int32_t*>(base)[i];
}

void check_index_dtype(const char* op, const TensorDesc& index) {
  if (index.dtype != FL_DTYPE_INT64 && index.dtype != FL_DTYPE_INT32)
    invalid(op, std::string("indices must be int64 or int32, got ") + plugin::dtype_name(index.dtype));
}

// index_select.out(self, int dim, Tensor index): contiguous self and out.
void index_select_out(const fl_kernel_call* call) {
  const char* op = "aten::index_select.out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  int64_t dim = wrap_dim(args.integer(1), self.ndim, op);
  TensorDesc index = describe(args.tensor(2), op);
  TensorDesc out = describe(args.output(0), op);
  check_index_dtype(op, index);
  if (index.ndim > 1) invalid(op, "index must be 0-D or 1-D");
  if (out.dtype != self.dtype) unsupported(op, "output dtype differs from self");
  if (self.dtype >= FL_DTYPE_COMPLEX64) unsupported(op, "complex");
  int64_t outer = 1, size = self.ndim ? self.shape[dim] : 1, inner = 1;
  for (int d = 0; d < self.ndim; ++d) {
    if (d < dim) outer *= self.shape[d];
    if (d > dim) inner *= self.shape[d];
  }
  const int64_t count = index.numel();
  if (out.numel() != outer * count * inner) invalid(op, "output has the wrong size");
  if (out.numel() == 0) return;
  const size_t elem = plugin::dtype_size(self.dtype);
  const char* src = self.data;
  const char* idx = index.data;
  const fl_dtype_t idx_dtype = index.dtype;
  char* dst = out.data;
  submit(call, [=] {
    const size_t row = static_cast<size_t>(inner) * elem;
    for (int64_t i = 0; i < count; ++i) {
      // No wrapping: ATen's index_select refuses a negative index too.
      const int64_t k = load_index(idx, idx_dtype, i);
      if (k < 0 || k >= size)
        throw std::runtime_error("index_select: index " + std::to_string(k) + " is out of bounds for dimension " +
                                 std::to_string(dim) + " with size " + std::to_string(size));
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + static_cast<size_t>((o * count + i) * inner) * elem,
                    src + static_cast<size_t>((o * size + k) * inner) * elem, row);
    }
  });
}

template <class T>
void embedding_backward(const T* grad, const char* idx, fl_dtype_t idx_dtype, int64_t count, int64_t dim,
                        int64_t num_weights, int64_t padding_idx, bool scale_by_freq, T* out) {
  using C = opmath_t<T>;
  std::vector<C> acc(static_cast<size_t>(num_weights * dim), C(0));
  std::vector<int64_t> freq;
  if (scale_by_freq) {
    freq.assign(static_cast<size_t>(num_weights), 0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t k = load_index(idx, idx_dtype, i);
      if (k >= 0 && k < num_weights) ++freq[static_cast<size_t>(k)];
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    int64_t k = load_index(idx, idx_dtype, i);
    if (k == padding_idx) continue;
    if (k < 0 || k >= num_weights)
      throw std::runtime_error("embedding_dense_backward: index " + std::to_string(k) + " out of range");
    C scale = scale_by_freq ? C(1) / static_cast<C>(freq[static_cast<size_t>(k)]) : C(1);
    C* row = acc.data() + k * dim;
    const T* g = grad + i * dim;
    for (int64_t j = 0; j < dim; ++j) row[j] += convert<C>(g[j]) * scale;
  }
  for (size_t j = 0; j < acc.size(); ++j) out[j] = convert<T>(acc[j]);
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
void embedding_dense_backward(const fl_kernel_call* call) {
  const char* op = "aten::embedding_dense_backward";
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc index = describe(args.tensor(1), op);
  int64_t num_weights = args.integer(2);
  int64_t padding_idx = args.integer(3);
  bool scale = args.boolean(4);
  TensorDesc out = describe(args.output(0), op);
  check_index_dtype(op, index);
  if (grad.dtype != out.dtype) unsupported(op, "mixed dtypes");
  int64_t count = index.numel();
  int64_t dim = out.ndim == 2 ? out.shape[1] : 0;
  if (out.ndim != 2 || out.shape[0] != num_weights) invalid(op, "output must be [num_weights, D]");
  if (grad.numel() != count * dim) invalid(op, "grad_output must be indices.shape + [D]");
  using Fn = void (*)(const char*, const char*, fl_dtype_t, int64_t, int64_t, int64_t, int64_t, bool, char*);
  Fn fn = dispatch<kFloatingMask>(grad.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](const char* g, const char* i, fl_dtype_t idt, int64_t n, int64_t d, int64_t nw, int64_t pad,
              bool sc, char* o) {
      embedding_backward<T>(reinterpret_cast<const T*>(g), i, idt, n, d, nw, pad, sc, reinterpret_cast<T*>(o));
    };
  });
  if (out.numel() == 0) return;
  const char* g = grad.data;
  const char* i = index.data;
  fl_dtype_t idt = index.dtype;
  char* o = out.data;
  submit(call, [=] { fn(g, i, idt, count, dim, num_weights, padding_idx, scale, o); });
}

template <class T>
void dropout(const T* in, T* out, bool* mask, int64_t n, double p, bool train, uint64_t seed) {
  if (!train) {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = in[i];
      mask[i] = true;
    }
    return;
  }
  using C = opmath_t<T>;
  const double keep = 1.0 - p;
  const C scale = keep == 0.0 ? C(0) : static_cast<C>(1.0 / keep);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    bool kept = uniform(rng) < keep;
    mask[i] = kept;
    out[i] = convert<T>(kept ? convert<C>(in[i]) * scale : C(0));
  }
}

// native_dropout(input, float p, bool? train) -> (output, mask bool)
void native_dropout(const fl_kernel_call* call) {
  const char* op = "aten::native_dropout";
  Args args(call);
  TensorDesc in = describe(args.tensor(0), op);
  double p = args.number(1);
  bool train = args.is_none(2) ? true : args.boolean(2);
  TensorDesc out = describe(args.output(0), op);
  TensorDesc mask = describe(args.output(1), op);
  if (p < 0.0 || p > 1.0) invalid(op, "p must be in [0, 1]");
  if (out.dtype != in.dtype || mask.dtype != FL_DTYPE_BOOL) unsupported(op, "output dtypes");
  if (out.numel() != in.numel() || mask.numel() != in.numel()) invalid(op, "output sizes");
  using Fn = void (*)(const char*, char*, bool*, int64_t, double, bool, uint64_t);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](const char* i, char* o, bool* m, int64_t n, double pp, bool tr, uint64_t seed) {
      dropout<T>(reinterpret_cast<const T*>(i), reinterpret_cast<T*>(o), m, n, pp, tr, seed);
    };
  });
  int64_t n = in.numel();
  if (n == 0) return;
  uint64_t seed;
  if (FL_KERNEL_CALL_HAS_RNG(call)) {
    // One seed from the pair, through splitmix64's finaliser: distinct pairs give unrelated seeds.
    seed = splitmix64(call->rng_seed + splitmix64(call->rng_offset));
  } else {
    Device& device = Runtime::get().device(call->device);
    std::lock_guard<std::mutex> lock(device.rng_mutex);
    seed = device.rng();
  }
  const char* i = in.data;
  char* o = out.data;
  bool* m = mask.ptr<bool>();
  submit(call, [=] { fn(i, o, m, n, p, train, seed); });
}

}  // namespace

void register_indexing_kernels(KernelRegistry& r) {
  r.add("aten::index_select.out", kAllMask, 0, guarded<index_select_out>);
  r.add("aten::embedding_dense_backward", kFloatingMask, 0, guarded<embedding_dense_backward>);
  r.add("aten::embedding_dense_backward.out", kFloatingMask, 0, guarded<embedding_dense_backward>);
  r.add("aten::native_dropout", kFloatingMask, 0, guarded<native_dropout>);
  r.add("aten::native_dropout.out", kFloatingMask, 0, guarded<native_dropout>);
}

}  // namespace fl::cpu::kernels
