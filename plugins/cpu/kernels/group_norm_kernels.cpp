// group_norm_kernels.cpp — native_group_norm_backward on contiguous (N, C, HxW) input.
// (The forward runs as ATen's composite, math_group_norm over batch norm.) Everything
// accumulates in double. Per (n, c) the sums ds = sum_hw dy*x and db = sum_hw dy; per (n, g),
// over its D = C/group channels of M = D*HxW elements, with xhat = (x - mean) * rstd:
//   dx     = rstd * (dy*w - sum(dy*w)/M - xhat * sum(dy*w*xhat)/M)
//   dgamma = sum_n (ds - mean*db) * rstd,   dbeta = sum_n db   (per channel)
// mean/rstd ([N, group]), weight and the weight/bias gradients may have any floating dtype
// (float32 beside 16-bit activations); grad_out and grad_input have the input's dtype.
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "tensor_desc.hpp"

#include <optional>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

struct GroupNormShape {
  int64_t n = 0, c = 0, hw = 0, group = 1;
  int64_t channels_per_group() const { return c / group; }
};

// A small floating vector (mean, rstd, weight, a parameter gradient) read or written as double
// on the stream worker.
struct DoubleVector {
  char* data = nullptr;
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;
  int64_t numel = 0;

  explicit operator bool() const { return data != nullptr; }
  std::vector<double> load(int64_t n, double fill) const {
    std::vector<double> v(static_cast<size_t>(n), fill);
    if (data != nullptr && n > 0)
      converter(dtype, FL_DTYPE_FLOAT64)(data, static_cast<int64_t>(plugin::dtype_size(dtype)),
                                         reinterpret_cast<char*>(v.data()), n);
    return v;
  }
  void store(const std::vector<double>& v) const {
    if (data != nullptr && !v.empty())
      converter(FL_DTYPE_FLOAT64, dtype)(reinterpret_cast<const char*>(v.data()), sizeof(double), data,
                                         static_cast<int64_t>(v.size()));
  }
};

DoubleVector vector_of(const TensorDesc& t, int64_t expected, const char* op, const char* what) {
  if (t.numel() != expected)
    invalid(op, std::string(what) + " must have " + std::to_string(expected) + " elements, got " + shape_string(t));
  if (!is_floating(t.dtype)) unsupported(op, std::string(what) + " must be floating");
  if (!t.contiguous()) unsupported(op, std::string("non-contiguous ") + what);
  return DoubleVector{t.data, t.dtype, expected};
}

struct BackwardParams {
  GroupNormShape s;
  const char* dy = nullptr;
  const char* x = nullptr;
  DoubleVector mean, rstd, weight, dgamma, dbeta;
  char* dx = nullptr;
};

template <class T>
void group_norm_backward(const BackwardParams& p) {
  const GroupNormShape& s = p.s;
  const T* dy = reinterpret_cast<const T*>(p.dy);
  const T* x = reinterpret_cast<const T*>(p.x);
  const std::vector<double> mean = p.mean.load(s.n * s.group, 0.0), rstd = p.rstd.load(s.n * s.group, 0.0);
  const std::vector<double> w = p.weight.load(s.c, 1.0);
  const int64_t rows = s.n * s.c, d = s.channels_per_group();
  // Per (n, c) row: ds = sum dy*x, db = sum dy.
  std::vector<double> ds(static_cast<size_t>(rows)), db(static_cast<size_t>(rows));
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s.hw)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* dyr = dy + r * s.hw;
      const T* xr = x + r * s.hw;
      double a = 0, b = 0;
      for (int64_t i = 0; i < s.hw; ++i) {
        const double g = convert<double>(dyr[i]);
        a += g * convert<double>(xr[i]);
        b += g;
      }
      ds[static_cast<size_t>(r)] = a;
      db[static_cast<size_t>(r)] = b;
    }
  });
  if (p.dx != nullptr) {
    T* dx = reinterpret_cast<T*>(p.dx);
    const double inv_m = 1.0 / static_cast<double>(d * s.hw);
    parallel_for(s.n * s.group, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, d * s.hw)),
                 [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        const int64_t n = ng / s.group, g = ng % s.group;
        const double mu = mean[static_cast<size_t>(ng)], rs = rstd[static_cast<size_t>(ng)];
        // sum(dy*w) and sum(dy*w*xhat) over the group, from the per-channel sums.
        double sum_g = 0, sum_gx = 0;
        for (int64_t c = g * d; c < (g + 1) * d; ++c) {
          const auto r = static_cast<size_t>(n * s.c + c);
          sum_g += w[static_cast<size_t>(c)] * db[r];
          sum_gx += w[static_cast<size_t>(c)] * (ds[r] - mu * db[r]) * rs;
        }
        for (int64_t c = g * d; c < (g + 1) * d; ++c) {
          const int64_t base = (n * s.c + c) * s.hw;
          const double wc = w[static_cast<size_t>(c)];
          for (int64_t i = 0; i < s.hw; ++i) {
            const double xhat = (convert<double>(x[base + i]) - mu) * rs;
            dx[base + i] = convert<T>(rs * (convert<double>(dy[base + i]) * wc - sum_g * inv_m - xhat * sum_gx * inv_m));
          }
        }
      }
    });
  }
  if (p.dgamma || p.dbeta) {
    std::vector<double> gw(static_cast<size_t>(s.c), 0.0), gb(static_cast<size_t>(s.c), 0.0);
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t c = 0; c < s.c; ++c) {
        const auto r = static_cast<size_t>(n * s.c + c), ng = static_cast<size_t>(n * s.group + c / d);
        gw[static_cast<size_t>(c)] += (ds[r] - mean[ng] * db[r]) * rstd[ng];
        gb[static_cast<size_t>(c)] += db[r];
      }
    p.dgamma.store(gw);
    p.dbeta.store(gb);
  }
}

// Output i as a tensor to write, when output_mask asks for it and the core passed one.
std::optional<TensorDesc> wanted_output(const Args& args, const std::vector<bool>& mask, int32_t i, const char* op) {
  if (!mask[static_cast<size_t>(i)] || i >= args.num_outputs() || plugin::is_undefined(args.output(i)))
    return std::nullopt;
  return describe(args.output(i), op);
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group,
//                            bool[3] output_mask) -> (grad_input, grad_weight, grad_bias)
void native_group_norm_backward(const fl_kernel_call* call) {
  const char* op = "aten::native_group_norm_backward";
  Args args(call);
  const TensorDesc dy = describe(args.tensor(0), op);
  const TensorDesc in = describe(args.tensor(1), op);
  const TensorDesc mean = describe(args.tensor(2), op);
  const TensorDesc rstd = describe(args.tensor(3), op);
  BackwardParams p;
  GroupNormShape& s = p.s;
  s.n = args.integer(5);
  s.c = args.integer(6);
  s.hw = args.integer(7);
  s.group = args.integer(8);
  if (s.n < 0 || s.c < 0 || s.hw < 0 || s.group <= 0 || s.c % s.group != 0)
    invalid(op, "bad N, C, HxW or group");
  if (in.numel() != s.n * s.c * s.hw || dy.numel() != in.numel())
    invalid(op, "input " + shape_string(in) + " / grad_out " + shape_string(dy) + " do not hold N*C*HxW elements");
  if (!in.contiguous() || !dy.contiguous()) unsupported(op, "non-contiguous input");
  if (dy.dtype != in.dtype) unsupported(op, "grad_out dtype differs from input");
  const std::vector<bool> mask = args.is_none(9) ? std::vector<bool>{true, true, true} : args.bools(9);
  if (mask.size() != 3) invalid(op, "output_mask must have 3 entries");
  p.mean = vector_of(mean, s.n * s.group, op, "mean");
  p.rstd = vector_of(rstd, s.n * s.group, op, "rstd");
  if (!args.is_none(4)) p.weight = vector_of(describe(args.tensor(4), op), s.c, op, "weight");
  if (auto dx = wanted_output(args, mask, 0, op)) {
    if (dx->dtype != in.dtype || dx->numel() != in.numel() || !dx->contiguous())
      unsupported(op, "grad_input must be a contiguous tensor of the input's dtype and size");
    p.dx = dx->data;
  }
  if (auto dw = wanted_output(args, mask, 1, op)) p.dgamma = vector_of(*dw, s.c, op, "grad_weight");
  if (auto db = wanted_output(args, mask, 2, op)) p.dbeta = vector_of(*db, s.c, op, "grad_bias");
  using Fn = void (*)(const BackwardParams&);
  Fn fn = dispatch<kFloatingMask>(in.dtype, op, [](auto tag) -> Fn { return &group_norm_backward<typename decltype(tag)::type>; });
  p.dy = dy.data;
  p.x = in.data;
  if (p.dx == nullptr && !p.dgamma && !p.dbeta) return;
  submit(call, [p, fn] { fn(p); });
}

}  // namespace

void register_group_norm_kernels(KernelRegistry& r) {
  // ATen 2.13 has a generated .out overload; both names, as for native_layer_norm_backward.
  r.add("aten::native_group_norm_backward", kFloatingMask, FL_KERNEL_DETERMINISTIC, guarded<native_group_norm_backward>);
  r.add("aten::native_group_norm_backward.out", kFloatingMask, FL_KERNEL_DETERMINISTIC,
        guarded<native_group_norm_backward>);
}

}  // namespace fl::cpu::kernels
