// convolution_kernels.cpp — convolution_overrideable and convolution_backward_overrideable for
// 1-D and 2-D non-transposed convolutions (float32/float64), groups, stride, padding and
// dilation, via im2col + BLAS GEMM per sample and group. A 1x1 kernel with unit stride and no
// padding skips im2col. Transposed and 3-D convolutions return FL_ERR_NOT_SUPPORTED.
#include "kernel_table.hpp"
#include "tensor_desc.hpp"

#include "blas_library.hpp"

#include <cstring>
#include <optional>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

struct ConvGeometry {
  int64_t batch = 0, c_in = 0, h = 1, w = 0, c_out = 0, kh = 1, kw = 0, oh = 1, ow = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  int64_t cg_in() const { return c_in / groups; }
  int64_t cg_out() const { return c_out / groups; }
  int64_t col_rows() const { return cg_in() * kh * kw; }
  int64_t out_plane() const { return oh * ow; }
  int64_t in_plane() const { return h * w; }
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

int64_t list_at(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  if (v.empty()) return fallback;
  return v.size() == 1 ? v[0] : v[i];
}

// Reads input/weight shapes and the convolution arguments at positions
// (stride, padding, dilation, transposed, output_padding, groups) = first..first+5.
ConvGeometry conv_geometry(const char* op, const Args& args, const TensorDesc& input, const TensorDesc& weight,
                           int32_t first) {
  if (args.boolean(first + 3)) unsupported(op, "transposed convolution");
  if (input.ndim != 3 && input.ndim != 4) unsupported(op, std::to_string(input.ndim - 2) + "-D convolution");
  if (weight.ndim != input.ndim) invalid(op, "weight and input ranks differ");
  const bool two_d = input.ndim == 4;
  std::vector<int64_t> stride = args.ints(first), padding = args.ints(first + 1), dilation = args.ints(first + 2);
  ConvGeometry g;
  g.groups = args.integer(first + 5);
  g.batch = input.shape[0];
  g.c_in = input.shape[1];
  g.c_out = weight.shape[0];
  if (two_d) {
    g.h = input.shape[2];
    g.w = input.shape[3];
    g.kh = weight.shape[2];
    g.kw = weight.shape[3];
    g.sh = list_at(stride, 0, 1);
    g.sw = list_at(stride, 1, 1);
    g.ph = list_at(padding, 0, 0);
    g.pw = list_at(padding, 1, 0);
    g.dh = list_at(dilation, 0, 1);
    g.dw = list_at(dilation, 1, 1);
  } else {
    g.w = input.shape[2];
    g.kw = weight.shape[2];
    g.sw = list_at(stride, 0, 1);
    g.pw = list_at(padding, 0, 0);
    g.dw = list_at(dilation, 0, 1);
  }
  if (g.groups <= 0 || g.c_in % g.groups != 0 || g.c_out % g.groups != 0)
    invalid(op, "channels are not divisible by groups");
  if (weight.shape[1] != g.cg_in()) invalid(op, "weight " + shape_string(weight) + " does not match input " + shape_string(input));
  if (g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0 || g.ph < 0 || g.pw < 0) invalid(op, "bad stride/padding/dilation");
  g.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  if (g.oh <= 0 || g.ow <= 0) invalid(op, "the kernel is larger than the padded input");
  return g;
}

// col[(c*kh + i)*kw + j][oy*ow + ox] = img[c][oy*sh - ph + i*dh][ox*sw - pw + j*dw] (0 outside)
template <class T>
void im2col(const ConvGeometry& g, const T* img, T* col) {
  for (int64_t c = 0; c < g.cg_in(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * g.out_plane();
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          int64_t iy = oy * g.sh - g.ph + i * g.dh;
          T* dst = row + oy * g.ow;
          if (iy < 0 || iy >= g.h) {
            std::memset(dst, 0, sizeof(T) * static_cast<size_t>(g.ow));
            continue;
          }
          const T* src = img + (c * g.h + iy) * g.w;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            int64_t ix = ox * g.sw - g.pw + j * g.dw;
            dst[ox] = (ix >= 0 && ix < g.w) ? src[ix] : T(0);
          }
        }
      }
}

// The adjoint of im2col: img += scatter(col).
template <class T>
void col2im(const ConvGeometry& g, const T* col, T* img) {
  for (int64_t c = 0; c < g.cg_in(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * g.out_plane();
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          int64_t iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          T* dst = img + (c * g.h + iy) * g.w;
          const T* src = row + oy * g.ow;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            int64_t ix = ox * g.sw - g.pw + j * g.dw;
            if (ix >= 0 && ix < g.w) dst[ix] += src[ox];
          }
        }
      }
}

template <class T>
void conv_forward(const ConvGeometry& g, const T* input, const T* weight, const T* bias, T* out) {
  std::vector<T> col;
  if (!g.pointwise()) col.resize(static_cast<size_t>(g.col_rows() * g.out_plane()));
  const int64_t cgo = g.cg_out(), cgi = g.cg_in();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* img = input + (n * g.c_in + grp * cgi) * g.in_plane();
      const T* cols = img;
      if (!g.pointwise()) {
        im2col(g, img, col.data());
        cols = col.data();
      }
      T* dst = out + (n * g.c_out + grp * cgo) * g.out_plane();
      T beta = T(0);
      if (bias) {
        for (int64_t c = 0; c < cgo; ++c)
          for (int64_t p = 0; p < g.out_plane(); ++p) dst[c * g.out_plane() + p] = bias[grp * cgo + c];
        beta = T(1);
      }
      blas::gemm<T>(CblasNoTrans, CblasNoTrans, cgo, g.out_plane(), g.col_rows(), T(1), weight + grp * cgo * g.col_rows(),
              g.col_rows(), cols, g.out_plane(), beta, dst, g.out_plane());
    }
}

template <class T>
void conv_backward(const ConvGeometry& g, const T* grad_out, const T* input, const T* weight, T* grad_in,
                   T* grad_w, T* grad_b) {
  const int64_t cgo = g.cg_out(), cgi = g.cg_in(), rows = g.col_rows(), plane = g.out_plane();
  std::vector<T> col(g.pointwise() ? 0 : static_cast<size_t>(rows * plane));
  if (grad_in) std::memset(grad_in, 0, sizeof(T) * static_cast<size_t>(g.batch * g.c_in * g.in_plane()));
  if (grad_w) std::memset(grad_w, 0, sizeof(T) * static_cast<size_t>(g.c_out * rows));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* gout = grad_out + (n * g.c_out + grp * cgo) * plane;
      const T* w = weight + grp * cgo * rows;
      if (grad_in) {
        T* gin = grad_in + (n * g.c_in + grp * cgi) * g.in_plane();
        if (g.pointwise()) {
          blas::gemm<T>(CblasTrans, CblasNoTrans, rows, plane, cgo, T(1), w, rows, gout, plane, T(0), gin, plane);
        } else {
          blas::gemm<T>(CblasTrans, CblasNoTrans, rows, plane, cgo, T(1), w, rows, gout, plane, T(0), col.data(), plane);
          col2im(g, col.data(), gin);
        }
      }
      if (grad_w) {
        const T* img = input + (n * g.c_in + grp * cgi) * g.in_plane();
        const T* cols = img;
        if (!g.pointwise()) {
          im2col(g, img, col.data());
          cols = col.data();
        }
        blas::gemm<T>(CblasNoTrans, CblasTrans, cgo, rows, plane, T(1), gout, plane, cols, plane, T(1),
                grad_w + grp * cgo * rows, rows);
      }
    }
  if (grad_b) {
    for (int64_t c = 0; c < g.c_out; ++c) {
      double s = 0;
      for (int64_t n = 0; n < g.batch; ++n) {
        const T* gout = grad_out + (n * g.c_out + c) * plane;
        for (int64_t p = 0; p < plane; ++p) s += gout[p];
      }
      grad_b[c] = static_cast<T>(s);
    }
  }
}

void check_conv_dtypes(const char* op, std::initializer_list<const TensorDesc*> tensors) {
  fl_dtype_t d = (*tensors.begin())->dtype;
  for (const TensorDesc* t : tensors)
    if (t && t->dtype != d) unsupported(op, "mixed dtypes");
  if (d != FL_DTYPE_FLOAT32 && d != FL_DTYPE_FLOAT64)
    unsupported(op, std::string("dtype ") + plugin::dtype_name(d) + " (float32/float64 only)");
}

void check_shape(const char* op, const TensorDesc& t, std::initializer_list<int64_t> shape, const char* what) {
  bool ok = t.ndim == static_cast<int32_t>(shape.size());
  int d = 0;
  for (int64_t s : shape) ok = ok && t.shape[d++] == s;
  if (!ok) invalid(op, std::string(what) + " has shape " + shape_string(t));
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
//                          output_padding, groups) -> out
void convolution(const fl_kernel_call* call) {
  const char* op = "aten::convolution_overrideable";
  Args args(call);
  TensorDesc input = describe(args.tensor(0), op);
  TensorDesc weight = describe(args.tensor(1), op);
  std::optional<TensorDesc> bias;
  if (!args.is_none(2)) bias = describe(args.tensor(2), op);
  TensorDesc out = describe(args.output(0), op);
  check_conv_dtypes(op, {&input, &weight, &out, bias ? &*bias : nullptr});
  ConvGeometry g = conv_geometry(op, args, input, weight, 3);
  if (input.ndim == 4) check_shape(op, out, {g.batch, g.c_out, g.oh, g.ow}, "output");
  else check_shape(op, out, {g.batch, g.c_out, g.ow}, "output");
  if (bias && bias->numel() != g.c_out) invalid(op, "bias must have C_out elements");
  if (out.numel() == 0) return;
  const char* in = input.data;
  const char* w = weight.data;
  const char* b = bias ? bias->data : nullptr;
  char* o = out.data;
  if (input.dtype == FL_DTYPE_FLOAT32)
    submit(call, [=] { conv_forward<float>(g, (const float*)in, (const float*)w, (const float*)b, (float*)o); });
  else
    submit(call, [=] { conv_forward<double>(g, (const double*)in, (const double*)w, (const double*)b, (double*)o); });
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
//     transposed, output_padding, groups, bool[3] output_mask) -> (grad_input, grad_weight, grad_bias)
void convolution_backward(const fl_kernel_call* call) {
  const char* op = "aten::convolution_backward_overrideable";
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc input = describe(args.tensor(1), op);
  TensorDesc weight = describe(args.tensor(2), op);
  ConvGeometry g = conv_geometry(op, args, input, weight, 3);
  std::vector<bool> mask = args.bools(9);
  if (mask.size() != 3) invalid(op, "output_mask must have 3 entries");
  std::optional<TensorDesc> gi, gw, gb;
  if (mask[0] && !plugin::is_undefined(args.output(0))) gi = describe(args.output(0), op);
  if (mask[1] && !plugin::is_undefined(args.output(1))) gw = describe(args.output(1), op);
  if (mask[2] && !plugin::is_undefined(args.output(2))) gb = describe(args.output(2), op);
  check_conv_dtypes(op, {&grad, &input, &weight, gi ? &*gi : nullptr, gw ? &*gw : nullptr, gb ? &*gb : nullptr});
  if (input.ndim == 4) check_shape(op, grad, {g.batch, g.c_out, g.oh, g.ow}, "grad_output");
  else check_shape(op, grad, {g.batch, g.c_out, g.ow}, "grad_output");
  if (gi && gi->numel() != input.numel()) invalid(op, "grad_input size");
  if (gw && gw->numel() != weight.numel()) invalid(op, "grad_weight size");
  if (gb && gb->numel() != g.c_out) invalid(op, "grad_bias size");
  const char* go = grad.data;
  const char* in = input.data;
  const char* w = weight.data;
  char* pi = gi && gi->numel() ? gi->data : nullptr;
  char* pw = gw && gw->numel() ? gw->data : nullptr;
  char* pb = gb && gb->numel() ? gb->data : nullptr;
  if (!pi && !pw && !pb) return;
  if (input.dtype == FL_DTYPE_FLOAT32)
    submit(call, [=] {
      conv_backward<float>(g, (const float*)go, (const float*)in, (const float*)w, (float*)pi, (float*)pw, (float*)pb);
    });
  else
    submit(call, [=] {
      conv_backward<double>(g, (const double*)go, (const double*)in, (const double*)w, (double*)pi, (double*)pw,
                            (double*)pb);
    });
}

}  // namespace

void register_convolution_kernels(KernelRegistry& r) {
  // Both the operator and its generated .out overload (same inputs and outputs).
  r.add("aten::convolution_overrideable", kBlasMask, 0, guarded<convolution>);
  r.add("aten::convolution_overrideable.out", kBlasMask, 0, guarded<convolution>);
  r.add("aten::convolution_backward_overrideable", kBlasMask, 0, guarded<convolution_backward>);
  r.add("aten::convolution_backward_overrideable.out", kBlasMask, 0, guarded<convolution_backward>);
}

}  // namespace fl::cpu::kernels
