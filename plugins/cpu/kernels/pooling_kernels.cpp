// pooling_kernels.cpp — max_pool2d_with_indices (forward and backward) on [N, C, H, W] or
// [C, H, W] inputs, floating dtypes. Indices are flat offsets into each H*W input plane, as
// ATen's; a NaN in a window is the maximum (ATen).
#include "kernel_table.hpp"
#include "tensor_desc.hpp"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

struct PoolGeometry {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

int64_t pair_at(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  if (v.empty()) return fallback;
  return v.size() == 1 ? v[0] : v[i];
}

// Reads (kernel_size, stride, padding, dilation, ceil_mode) from positions 1..5 of `args`;
// the output size is taken from `out` (the core allocated it with ATen's formula).
PoolGeometry pool_geometry(const char* op, const Args& args, const TensorDesc& in, const TensorDesc& out) {
  if (in.ndim != 3 && in.ndim != 4) invalid(op, "input must be 3-D or 4-D");
  if (out.ndim != in.ndim) invalid(op, "output rank differs from input");
  std::vector<int64_t> k = args.ints(1), s = args.ints(2), p = args.ints(3), d = args.ints(4);
  PoolGeometry g;
  g.planes = 1;
  for (int i = 0; i < in.ndim - 2; ++i) {
    g.planes *= in.shape[i];
    if (out.shape[i] != in.shape[i]) invalid(op, "batch/channel sizes differ");
  }
  g.h = in.shape[in.ndim - 2];
  g.w = in.shape[in.ndim - 1];
  g.oh = out.shape[out.ndim - 2];
  g.ow = out.shape[out.ndim - 1];
  g.kh = pair_at(k, 0, 1);
  g.kw = pair_at(k, 1, 1);
  g.sh = pair_at(s, 0, g.kh);
  g.sw = pair_at(s, 1, g.kw);
  g.ph = pair_at(p, 0, 0);
  g.pw = pair_at(p, 1, 0);
  g.dh = pair_at(d, 0, 1);
  g.dw = pair_at(d, 1, 1);
  if (g.kh <= 0 || g.kw <= 0 || g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0) invalid(op, "bad pooling parameters");
  return g;
}

template <class T>
void max_pool_forward(const PoolGeometry& g, const T* in, T* out, int64_t* indices) {
  using C = opmath_t<T>;
  for (int64_t pl = 0; pl < g.planes; ++pl) {
    const T* src = in + pl * g.h * g.w;
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        int64_t y1 = std::min(y0 + (g.kh - 1) * g.dh + 1, g.h), x1 = std::min(x0 + (g.kw - 1) * g.dw + 1, g.w);
        while (y0 < 0) y0 += g.dh;
        while (x0 < 0) x0 += g.dw;
        int64_t best_index = y0 * g.w + x0;
        C best = -INFINITY;
        for (int64_t y = y0; y < y1; y += g.dh)
          for (int64_t x = x0; x < x1; x += g.dw) {
            C v = convert<C>(src[y * g.w + x]);
            if (v > best || std::isnan(v)) {  // ATen: a later NaN replaces an earlier one
              best = v;
              best_index = y * g.w + x;
            }
          }
        int64_t o = (pl * g.oh + oy) * g.ow + ox;
        out[o] = convert<T>(best);
        indices[o] = best_index;
      }
  }
}

template <class T>
void max_pool_backward(const PoolGeometry& g, const T* grad_out, const int64_t* indices, T* grad_in) {
  using C = opmath_t<T>;
  std::vector<C> acc(static_cast<size_t>(g.h * g.w));
  for (int64_t pl = 0; pl < g.planes; ++pl) {
    std::fill(acc.begin(), acc.end(), C(0));
    for (int64_t o = 0; o < g.oh * g.ow; ++o) {
      int64_t idx = indices[pl * g.oh * g.ow + o];
      if (idx < 0 || idx >= g.h * g.w) throw std::runtime_error("max_pool2d backward: index out of range");
      acc[static_cast<size_t>(idx)] += convert<C>(grad_out[pl * g.oh * g.ow + o]);
    }
    T* dst = grad_in + pl * g.h * g.w;
    for (int64_t i = 0; i < g.h * g.w; ++i) dst[i] = convert<T>(acc[static_cast<size_t>(i)]);
  }
}

// max_pool2d_with_indices.out(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
void max_pool2d_with_indices_out(const fl_kernel_call* call) {
  const char* op = "aten::max_pool2d_with_indices.out";
  Args args(call);
  TensorDesc in = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  TensorDesc indices = describe(args.output(1), op);
  PoolGeometry g = pool_geometry(op, args, in, out);
  if (indices.dtype != FL_DTYPE_INT64 || indices.numel() != out.numel()) invalid(op, "indices must be int64 like out");
  if (out.dtype != in.dtype) unsupported(op, "mixed dtypes");
  if (in.numel() == 0 && out.numel() > 0) invalid(op, "empty input");
  using Fn = void (*)(const PoolGeometry&, const char*, char*, int64_t*);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](const PoolGeometry& pg, const char* i, char* o, int64_t* idx) {
      max_pool_forward<T>(pg, reinterpret_cast<const T*>(i), reinterpret_cast<T*>(o), idx);
    };
  });
  if (out.numel() == 0) return;
  const char* i = in.data;
  char* o = out.data;
  int64_t* idx = indices.ptr<int64_t>();
  submit(call, [=] { fn(g, i, o, idx); });
}

// max_pool2d_with_indices_backward.grad_input(grad_output, self, kernel_size, stride, padding,
//                                             dilation, ceil_mode, indices) -> grad_input
void max_pool2d_with_indices_backward_out(const fl_kernel_call* call) {
  const char* op = "aten::max_pool2d_with_indices_backward.grad_input";
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc self = describe(args.tensor(1), op);
  TensorDesc indices = describe(args.tensor(7), op);
  TensorDesc gi = describe(args.output(0), op);
  // Geometry args sit at 2..6 here: shift by one through a view of the call.
  fl_kernel_call shifted = plugin::copy_call(call);
  shifted.inputs = call->inputs + 1;
  shifted.num_inputs = call->num_inputs - 1;
  PoolGeometry g = pool_geometry(op, Args(&shifted), self, grad);
  if (indices.dtype != FL_DTYPE_INT64 || indices.numel() != grad.numel()) invalid(op, "indices must be int64 like grad_output");
  if (grad.dtype != self.dtype || gi.dtype != self.dtype) unsupported(op, "mixed dtypes");
  if (gi.numel() != self.numel()) invalid(op, "grad_input size");
  using Fn = void (*)(const PoolGeometry&, const char*, const int64_t*, char*);
  Fn fn = dispatch<kFloatingMask>(self.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](const PoolGeometry& pg, const char* go, const int64_t* idx, char* o) {
      max_pool_backward<T>(pg, reinterpret_cast<const T*>(go), idx, reinterpret_cast<T*>(o));
    };
  });
  if (gi.numel() == 0) return;
  const char* go = grad.data;
  const int64_t* idx = indices.ptr<const int64_t>();
  char* o = gi.data;
  submit(call, [=] { fn(g, go, idx, o); });
}

}  // namespace

void register_pooling_kernels(KernelRegistry& r) {
  r.add("aten::max_pool2d_with_indices.out", kFloatingMask, 0, guarded<max_pool2d_with_indices_out>);
  r.add("aten::max_pool2d_with_indices_backward.grad_input", kFloatingMask, 0,
        guarded<max_pool2d_with_indices_backward_out>);
}

}  // namespace fl::cpu::kernels
