// upsample_kernels.cpp — nearest-neighbour upsampling of [N, C, H, W] inputs, forward and
// backward, in ATen's two modes: "nearest" (upsample_nearest2d: source floor(dst * scale),
// exact shortcuts for the same size and for 2x) and "nearest-exact" (_upsample_nearest_exact2d:
// floor((dst + 0.5) * scale)), the index arithmetic written as ATen's CPU kernels write it
// (aten/src/ATen/native/UpSample.h), so every output reads the same source pixel.
// The forward copies elements of any dtype; the backward sums, per input pixel, the gradients
// of the outputs that read it, in output order, in the compute type (float for 16-bit floats).
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

enum class NearestMode { kFloor, kExact };

// ATen's compute_scales_value<float>: 1 / scale when the caller gave one, else in / out.
float source_scale(const Args& args, int32_t index, int64_t in_size, int64_t out_size) {
  if (!args.is_none(index)) {
    const double s = args.number(index);
    if (s > 0.) return static_cast<float>(1.0 / s);
  }
  return static_cast<float>(in_size) / static_cast<float>(out_size);
}

// ATen's nearest_idx / nearest_exact_idx.
int64_t source_index(int64_t dst, int64_t in_size, int64_t out_size, float scale, NearestMode mode) {
  if (mode == NearestMode::kFloor) {
    if (out_size == in_size) return dst;
    if (out_size == 2 * in_size) return dst >> 1;
    return std::min(static_cast<int64_t>(std::floor(static_cast<float>(dst) * scale)), in_size - 1);
  }
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(dst) + 0.5) * scale))),
                  in_size - 1);
}

std::vector<int64_t> source_indices(int64_t in_size, int64_t out_size, float scale, NearestMode mode) {
  std::vector<int64_t> map(static_cast<size_t>(out_size));
  for (int64_t o = 0; o < out_size; ++o) map[static_cast<size_t>(o)] = source_index(o, in_size, out_size, scale, mode);
  return map;
}

struct Geometry {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  std::vector<int64_t> rows, cols;  // the source row of each output row, column of each column
};

Geometry geometry(const char* op, const Args& args, const TensorDesc& in, const TensorDesc& out, int32_t scales_at,
                  NearestMode mode) {
  if (in.ndim != 4 || out.ndim != 4) invalid(op, "input and output must be 4-D");
  if (in.shape[0] != out.shape[0] || in.shape[1] != out.shape[1]) invalid(op, "batch/channel sizes differ");
  if (!in.contiguous() || !out.contiguous()) unsupported(op, "non-contiguous tensors");
  Geometry g;
  g.planes = in.shape[0] * in.shape[1];
  g.h = in.shape[2];
  g.w = in.shape[3];
  g.oh = out.shape[2];
  g.ow = out.shape[3];
  if ((g.h == 0 || g.w == 0) && g.oh * g.ow > 0) invalid(op, "empty input, non-empty output");
  g.rows = source_indices(g.h, g.oh, source_scale(args, scales_at, g.h, g.oh), mode);
  g.cols = source_indices(g.w, g.ow, source_scale(args, scales_at + 1, g.w, g.ow), mode);
  return g;
}

void forward(const Geometry& g, const char* in, char* out, size_t elem) {
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, g.oh * g.ow));
  parallel_for(g.planes, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const char* src = in + static_cast<size_t>(p * g.h * g.w) * elem;
      char* dst = out + static_cast<size_t>(p * g.oh * g.ow) * elem;
      for (int64_t y = 0; y < g.oh; ++y) {
        const char* row = src + static_cast<size_t>(g.rows[static_cast<size_t>(y)] * g.w) * elem;
        for (int64_t x = 0; x < g.ow; ++x, dst += elem)
          std::memcpy(dst, row + static_cast<size_t>(g.cols[static_cast<size_t>(x)]) * elem, elem);
      }
    }
  });
}

template <class T>
void backward(const Geometry& g, const T* grad_out, T* grad_in) {
  using C = opmath_t<T>;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, g.oh * g.ow));
  parallel_for(g.planes, grain, [&](int64_t begin, int64_t end) {
    std::vector<C> acc(static_cast<size_t>(g.h * g.w));
    for (int64_t p = begin; p < end; ++p) {
      std::fill(acc.begin(), acc.end(), C(0));
      const T* go = grad_out + p * g.oh * g.ow;
      for (int64_t y = 0; y < g.oh; ++y)
        for (int64_t x = 0; x < g.ow; ++x)
          acc[static_cast<size_t>(g.rows[static_cast<size_t>(y)] * g.w + g.cols[static_cast<size_t>(x)])] +=
              convert<C>(go[y * g.ow + x]);
      T* gi = grad_in + p * g.h * g.w;
      for (int64_t i = 0; i < g.h * g.w; ++i) gi[i] = convert<T>(acc[static_cast<size_t>(i)]);
    }
  });
}

// upsample_nearest2d.out / _upsample_nearest_exact2d.out(self, output_size, scales_h?, scales_w?)
template <NearestMode Mode>
void upsample_out(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc in = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  if (out.dtype != in.dtype) unsupported(op, "output dtype differs from input");
  Geometry g = geometry(op, args, in, out, 2, Mode);
  if (out.numel() == 0) return;
  const size_t elem = plugin::dtype_size(in.dtype);
  const char* src = in.data;
  char* dst = out.data;
  submit(call, [g = std::move(g), src, dst, elem] { forward(g, src, dst, elem); });
}

// upsample_nearest2d_backward.grad_input / _upsample_nearest_exact2d_backward.grad_input
//   (grad_output, output_size, input_size, scales_h?, scales_w?)
template <NearestMode Mode>
void upsample_backward_out(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc gi = describe(args.output(0), op);
  if (grad.dtype != gi.dtype) unsupported(op, "mixed dtypes");
  const std::vector<int64_t> input_size = args.ints(2);
  if (input_size.size() != 4 || gi.ndim != 4 || !std::equal(input_size.begin(), input_size.end(), gi.shape))
    invalid(op, "grad_input does not have input_size");
  Geometry g = geometry(op, args, gi, grad, 3, Mode);
  using Fn = void (*)(const Geometry&, const char*, char*);
  Fn fn = dispatch<kFloatingMask>(grad.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](const Geometry& geo, const char* go, char* out) {
      backward<T>(geo, reinterpret_cast<const T*>(go), reinterpret_cast<T*>(out));
    };
  });
  if (gi.numel() == 0) return;
  const char* go = grad.data;
  char* dst = gi.data;
  submit(call, [g = std::move(g), fn, go, dst] { fn(g, go, dst); });
}

void upsample_nearest2d_out(const fl_kernel_call* c) {
  upsample_out<NearestMode::kFloor>(c, "aten::upsample_nearest2d.out");
}
void upsample_nearest_exact2d_out(const fl_kernel_call* c) {
  upsample_out<NearestMode::kExact>(c, "aten::_upsample_nearest_exact2d.out");
}
void upsample_nearest2d_backward_out(const fl_kernel_call* c) {
  upsample_backward_out<NearestMode::kFloor>(c, "aten::upsample_nearest2d_backward.grad_input");
}
void upsample_nearest_exact2d_backward_out(const fl_kernel_call* c) {
  upsample_backward_out<NearestMode::kExact>(c, "aten::_upsample_nearest_exact2d_backward.grad_input");
}

}  // namespace

void register_upsample_kernels(KernelRegistry& r) {
  r.add("aten::upsample_nearest2d.out", storable_dtype_mask(), 0, guarded<upsample_nearest2d_out>);
  r.add("aten::_upsample_nearest_exact2d.out", storable_dtype_mask(), 0, guarded<upsample_nearest_exact2d_out>);
  r.add("aten::upsample_nearest2d_backward.grad_input", kFloatingMask, 0, guarded<upsample_nearest2d_backward_out>);
  r.add("aten::_upsample_nearest_exact2d_backward.grad_input", kFloatingMask, 0,
        guarded<upsample_nearest_exact2d_backward_out>);
}

}  // namespace fl::cpu::kernels
