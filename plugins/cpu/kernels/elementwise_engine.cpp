#include "elementwise_engine.hpp"

#include "parallel_loop.hpp"

#include <algorithm>
#include <cstring>

namespace fl::cpu::kernels {

Param param_arg(const plugin::Args& args, int32_t index) {
  const fl_value& v = args.at(index);
  switch (v.kind) {
    case FL_VALUE_INT: return param_int(v.u.i);
    case FL_VALUE_BOOL: return param_int(v.u.b ? 1 : 0);
    case FL_VALUE_DOUBLE: return param_of(v.u.d);
    case FL_VALUE_TENSOR: {
      const fl_tensor& t = *v.u.tensor;
      if (t.dtype == FL_DTYPE_INT64 || t.dtype == FL_DTYPE_INT32 || t.dtype == FL_DTYPE_BOOL ||
          t.dtype == FL_DTYPE_INT16 || t.dtype == FL_DTYPE_INT8 || t.dtype == FL_DTYPE_UINT8) {
        if (t.dtype == FL_DTYPE_INT64) {
          plugin::require_host_tensor(t, "scalar parameter");
          return param_int(*plugin::data_ptr<const int64_t>(t));
        }
        return param_int(static_cast<int64_t>(plugin::read_host_scalar(t)));
      }
      return param_of(plugin::read_host_scalar(t));
    }
    default:
      plugin::raise(FL_ERR_INVALID_ARGUMENT,
                    "kernel input " + std::to_string(index) + " is not a scalar");
  }
}

namespace {

template <class From, class To>
void convert_strided(const char* src, int64_t stride, char* dst, int64_t n) {
  To* out = reinterpret_cast<To*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, src + i * stride, sizeof(From));
    out[i] = convert<To>(v);
  }
}

template <class From>
ConvertFn converter_from(fl_dtype_t to) {
  return dispatch<kAllMask>(to, "dtype conversion", [](auto tag) -> ConvertFn {
    return &convert_strided<From, typename decltype(tag)::type>;
  });
}

void gather(const char* src, int64_t stride, char* dst, int64_t n, int64_t elem) {
  switch (elem) {
    case 1: for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride]; break;
    case 2: for (int64_t i = 0; i < n; ++i) std::memcpy(dst + 2 * i, src + i * stride, 2); break;
    case 4: for (int64_t i = 0; i < n; ++i) std::memcpy(dst + 4 * i, src + i * stride, 4); break;
    default: for (int64_t i = 0; i < n; ++i) std::memcpy(dst + 8 * i, src + i * stride, 8); break;
  }
}

void scatter(const char* src, char* dst, int64_t stride, int64_t n, int64_t elem) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * stride, src + i * elem, static_cast<size_t>(elem));
}

// One innermost row: n elements, per-operand byte strides s[k].
void run_row(const ElementwisePlan& p, char* const* ptrs, const int64_t* s, int64_t n) {
  const int nin = p.num_inputs;
  bool direct = s[0] == p.elem_size[0];
  for (int k = 1; k <= nin && direct; ++k) direct = p.convert[k] == nullptr && s[k] == p.elem_size[k];
  if (direct) {
    p.kernel(ptrs[0], ptrs + 1, n, p.params);
    return;
  }
  alignas(64) char buffers[kMaxOperands][kChunk * 8];
  char* in[kMaxOperands - 1];
  bool filled[kMaxOperands] = {};
  for (int64_t start = 0; start < n; start += kChunk) {
    int64_t m = std::min(kChunk, n - start);
    for (int k = 1; k <= nin; ++k) {
      const char* src = ptrs[k] + start * s[k];
      if (p.convert[k] == nullptr && s[k] == p.elem_size[k]) {
        in[k - 1] = const_cast<char*>(src);
        continue;
      }
      in[k - 1] = buffers[k];
      if (s[k] == 0) {  // broadcast: the buffer holds the same value for every chunk
        if (filled[k]) continue;
        filled[k] = true;
        m = std::min(kChunk, n - start);
        int64_t fill = std::min(kChunk, n);
        if (p.convert[k]) p.convert[k](src, 0, buffers[k], fill);
        else gather(src, 0, buffers[k], fill, p.elem_size[k]);
      } else if (p.convert[k]) {
        p.convert[k](src, s[k], buffers[k], m);
      } else {
        gather(src, s[k], buffers[k], m, p.elem_size[k]);
      }
    }
    char* dst = ptrs[0] + start * s[0];
    if (s[0] == p.elem_size[0]) {
      p.kernel(dst, in, m, p.params);
    } else {
      p.kernel(buffers[0], in, m, p.params);
      scatter(buffers[0], dst, s[0], m, p.elem_size[0]);
    }
  }
}

}  // namespace

ConvertFn converter(fl_dtype_t from, fl_dtype_t to) {
  return dispatch<kAllMask>(from, "dtype conversion", [&](auto tag) -> ConvertFn {
    return converter_from<typename decltype(tag)::type>(to);
  });
}

ElementwisePlan plan_elementwise(const char* op, const TensorDesc& out,
                                 std::initializer_list<PlanInput> inputs, ContigFn kernel) {
  ElementwisePlan p;
  p.kernel = kernel;
  p.num_inputs = static_cast<int>(inputs.size());
  if (p.num_inputs + 1 > kMaxOperands) invalid(op, "too many operands");
  const int nd = out.ndim;
  p.numel = out.numel();
  // Full-rank (row-major, outermost first) byte strides of every operand.
  int64_t full[kMaxOperands][kMaxDims] = {};
  p.elem_size[0] = static_cast<int64_t>(plugin::dtype_size(out.dtype));
  p.base[0] = out.data;
  for (int d = 0; d < nd; ++d) full[0][d] = out.strides[d] * p.elem_size[0];
  int k = 1;
  for (const PlanInput& in : inputs) {
    const TensorDesc& t = *in.tensor;
    p.elem_size[k] = static_cast<int64_t>(plugin::dtype_size(in.kernel_dtype));
    int64_t src_elem = static_cast<int64_t>(plugin::dtype_size(t.dtype));
    if (t.dtype != in.kernel_dtype) p.convert[k] = converter(t.dtype, in.kernel_dtype);
    if (t.ndim > nd)
      invalid(op, "input " + shape_string(t) + " does not broadcast to output " + shape_string(out));
    if (t.host_scalar) {
      // Read the host value now, converted to the kernel's dtype; the worker points at it.
      if (t.numel() != 1) invalid(op, "host tensor argument with more than one element");
      ConvertFn c = converter(t.dtype, in.kernel_dtype);
      c(t.data, 0, reinterpret_cast<char*>(p.scalar_bytes[k]), 1);
      p.host_scalar[k] = true;
      p.convert[k] = nullptr;
      p.base[k] = nullptr;
    } else {
      p.base[k] = t.data;
      int offset = nd - t.ndim;
      for (int d = 0; d < t.ndim; ++d) {
        int64_t size = t.shape[d], target = out.shape[d + offset];
        if (size == target) full[k][d + offset] = t.strides[d] * src_elem;
        else if (size == 1) full[k][d + offset] = 0;
        else
          invalid(op, "input " + shape_string(t) + " does not broadcast to output " + shape_string(out));
      }
    }
    ++k;
  }
  // Innermost first, dropping size-1 dims and merging dims that are contiguous for all.
  int m = 0;
  for (int d = nd - 1; d >= 0; --d) {
    int64_t size = out.shape[d];
    if (size == 1) continue;
    if (m > 0) {
      bool mergeable = true;
      for (int o = 0; o <= p.num_inputs; ++o)
        if (full[o][d] != p.strides[o][m - 1] * p.shape[m - 1]) mergeable = false;
      if (mergeable) {
        p.shape[m - 1] *= size;
        continue;
      }
    }
    p.shape[m] = size;
    for (int o = 0; o <= p.num_inputs; ++o) p.strides[o][m] = full[o][d];
    ++m;
  }
  if (m == 0) {  // a single element
    p.shape[0] = 1;
    for (int o = 0; o <= p.num_inputs; ++o) p.strides[o][0] = p.elem_size[o];
    m = 1;
  }
  p.ndim = m;
  for (int o = 1; o <= p.num_inputs; ++o)
    if (p.host_scalar[o])
      for (int d = 0; d < m; ++d) p.strides[o][d] = 0;
  if (p.numel == 0) return p;
  if (out.data == nullptr) invalid(op, "output has no storage");
  for (int o = 1; o <= p.num_inputs; ++o)
    if (!p.host_scalar[o] && p.base[o] == nullptr) invalid(op, "input has no storage");
  return p;
}

void run_elementwise(const ElementwisePlan& p) {
  if (p.numel == 0) return;
  char* base[kMaxOperands];
  for (int o = 0; o <= p.num_inputs; ++o)
    base[o] = p.host_scalar[o] ? const_cast<char*>(reinterpret_cast<const char*>(p.scalar_bytes[o]))
                               : p.base[o];
  // Single element host scalars with a 1-element output have stride elem_size from the m==0
  // case; a host scalar never advances.
  int64_t row_strides[kMaxOperands];
  for (int o = 0; o <= p.num_inputs; ++o) row_strides[o] = p.host_scalar[o] ? 0 : p.strides[o][0];
  const int64_t rows = p.numel / p.shape[0];
  if (rows == 1) {
    // One row (every contiguous operand coalesces to one): split it.
    parallel_for(p.shape[0], kParallelGrain, [&](int64_t begin, int64_t end) {
      char* ptrs[kMaxOperands];
      for (int o = 0; o <= p.num_inputs; ++o) ptrs[o] = base[o] + begin * row_strides[o];
      run_row(p, ptrs, row_strides, end - begin);
    });
    return;
  }
  // Several rows: split the rows, each part walking its own from the index of its first.
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / p.shape[0]), [&](int64_t begin, int64_t end) {
    int64_t index[kMaxDims] = {};
    for (int64_t r = begin, d = 1; d < p.ndim; ++d) {
      index[d] = r % p.shape[d];
      r /= p.shape[d];
    }
    char* ptrs[kMaxOperands];
    for (int64_t r = begin; r < end; ++r) {
      for (int o = 0; o <= p.num_inputs; ++o) {
        char* ptr = base[o];
        for (int d = 1; d < p.ndim; ++d) ptr += index[d] * p.strides[o][d];
        ptrs[o] = ptr;
      }
      run_row(p, ptrs, row_strides, p.shape[0]);
      for (int d = 1; d < p.ndim; ++d) {
        if (++index[d] < p.shape[d]) break;
        index[d] = 0;
      }
    }
  });
}

void submit_elementwise(const fl_kernel_call* call, const ElementwisePlan& plan) {
  if (plan.numel == 0) return;
  submit(call, [plan] { run_elementwise(plan); });
}

}  // namespace fl::cpu::kernels
