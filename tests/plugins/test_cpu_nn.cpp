// NN kernels of the CPU plugin (softmax, nll_loss, convolution, max pooling, layer norm,
// embedding backward, index_select, dropout) against naive references written here.
#include "cpu_plugin_fixture.hpp"

#include <chrono>
#include <cmath>
#include <vector>

using namespace fl::test;
using Catch::Detail::Approx;

namespace {

void check_close(const std::vector<float>& got, const std::vector<float>& want, double eps = 1e-4,
                 double margin = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(eps).margin(margin));
  }
}

struct Conv2d {
  int64_t n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  int64_t oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
  // Calls f(n, oc, oy, ox, ic, ky, kx, iy, ix) for every in-range term of the convolution sum.
  template <class F>
  void each_term(F f) const {
    int64_t cgi = ci / groups, cgo = co / groups;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t oc = 0; oc < co; ++oc)
        for (int64_t oy = 0; oy < oh(); ++oy)
          for (int64_t ox = 0; ox < ow(); ++ox)
            for (int64_t c = 0; c < cgi; ++c)
              for (int64_t ky = 0; ky < kh; ++ky)
                for (int64_t kx = 0; kx < kw; ++kx) {
                  int64_t iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
                  if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                  f(b, oc, oy, ox, (oc / cgo) * cgi + c, c, ky, kx, iy, ix);
                }
  }
};

}  // namespace

TEST_CASE("nn: softmax and log_softmax over every dim, with backward") {
  const int64_t a = 3, b = 4, c = 5;
  std::vector<float> x = random_floats(a * b * c, 31, -3, 3), g = random_floats(a * b * c, 32);
  Tensor tx = Tensor::from<float>(FL_DTYPE_FLOAT32, {a, b, c}, x);
  Tensor tg = Tensor::from<float>(FL_DTYPE_FLOAT32, {a, b, c}, g);
  const int64_t shape[3] = {a, b, c};
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    Tensor sm(FL_DTYPE_FLOAT32, {a, b, c}), lsm(FL_DTYPE_FLOAT32, {a, b, c});
    run_kernel("aten::_softmax.out", Inputs().tensor(tx).integer(dim).boolean(false), outs({&sm}));
    run_kernel("aten::_log_softmax.out", Inputs().tensor(tx).integer(dim - 3).boolean(false), outs({&lsm}));
    Tensor gsm(FL_DTYPE_FLOAT32, {a, b, c}), glsm(FL_DTYPE_FLOAT32, {a, b, c});
    run_kernel("aten::_softmax_backward_data.out", Inputs().tensor(tg).tensor(sm).integer(dim).integer(6), outs({&gsm}));
    run_kernel("aten::_log_softmax_backward_data.out", Inputs().tensor(tg).tensor(lsm).integer(dim).integer(6), outs({&glsm}));
    std::vector<float> want(x.size()), want_log(x.size()), want_g(x.size()), want_lg(x.size());
    int64_t stride = 1;
    for (int64_t d = dim + 1; d < 3; ++d) stride *= shape[d];
    for (size_t base = 0; base < x.size(); ++base) {
      if ((static_cast<int64_t>(base) / stride) % shape[dim] != 0) continue;  // first of each slice
      double mx = -1e30, sum = 0, dot = 0, gsum = 0;
      for (int64_t k = 0; k < shape[dim]; ++k) mx = std::max<double>(mx, x[base + k * stride]);
      for (int64_t k = 0; k < shape[dim]; ++k) sum += std::exp(x[base + k * stride] - mx);
      for (int64_t k = 0; k < shape[dim]; ++k) {
        size_t i = base + k * stride;
        want[i] = static_cast<float>(std::exp(x[i] - mx) / sum);
        want_log[i] = static_cast<float>(x[i] - mx - std::log(sum));
        dot += g[i] * want[i];
        gsum += g[i];
      }
      for (int64_t k = 0; k < shape[dim]; ++k) {
        size_t i = base + k * stride;
        want_g[i] = static_cast<float>(want[i] * (g[i] - dot));
        want_lg[i] = static_cast<float>(g[i] - std::exp(want_log[i]) * gsum);
      }
    }
    check_close(sm.values<float>(), want);
    check_close(lsm.values<float>(), want_log);
    check_close(gsm.values<float>(), want_g);
    check_close(glsm.values<float>(), want_lg);
  }
}

TEST_CASE("nn: nll_loss forward and backward, all reductions, weights, ignore_index") {
  const int64_t n = 6, c = 4;
  std::vector<float> x = random_floats(n * c, 41, -3, 0);
  std::vector<int64_t> t = {0, 3, 2, -100, 1, 3};
  std::vector<float> wv = {0.5f, 1.0f, 2.0f, 1.5f};
  Tensor tx = Tensor::from<float>(FL_DTYPE_FLOAT32, {n, c}, x);
  Tensor tt = Tensor::from<int64_t>(FL_DTYPE_INT64, {n}, t);
  Tensor tw = Tensor::from<float>(FL_DTYPE_FLOAT32, {c}, wv);
  for (int use_weight = 0; use_weight < 2; ++use_weight)
    for (int64_t reduction = 0; reduction < 3; ++reduction) {
      INFO("reduction " << reduction << " weight " << use_weight);
      Tensor out = reduction == 0 ? Tensor(FL_DTYPE_FLOAT32, {n}) : Tensor(FL_DTYPE_FLOAT32, {});
      Tensor total(FL_DTYPE_FLOAT32, {});
      Inputs in;
      in.tensor(tx).tensor(tt);
      if (use_weight) in.tensor(tw); else in.none();
      in.integer(reduction).integer(-100);
      run_kernel("aten::nll_loss_forward.output", in, outs({&out, &total}));
      std::vector<float> per(n, 0.0f);
      double sum = 0, wsum = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (t[i] == -100) continue;
        double w = use_weight ? wv[t[i]] : 1.0;
        per[i] = static_cast<float>(-w * x[i * c + t[i]]);
        sum += per[i];
        wsum += w;
      }
      if (reduction == 0) check_close(out.values<float>(), per);
      if (reduction == 1) CHECK(out.values<float>()[0] == Approx(sum / wsum).epsilon(1e-5));
      if (reduction == 2) CHECK(out.values<float>()[0] == Approx(sum).epsilon(1e-5));
      if (reduction != 0) CHECK(total.values<float>()[0] == Approx(wsum));

      std::vector<float> go = random_floats(reduction == 0 ? n : 1, 42);
      Tensor tgo = reduction == 0 ? Tensor::from<float>(FL_DTYPE_FLOAT32, {n}, go)
                                  : Tensor::from<float>(FL_DTYPE_FLOAT32, {}, go);
      Tensor gi(FL_DTYPE_FLOAT32, {n, c});
      Inputs bin;
      bin.tensor(tgo).tensor(tx).tensor(tt);
      if (use_weight) bin.tensor(tw); else bin.none();
      bin.integer(reduction).integer(-100).tensor(total);
      run_kernel("aten::nll_loss_backward.grad_input", bin, outs({&gi}));
      std::vector<float> want(n * c, 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        if (t[i] == -100) continue;
        double w = use_weight ? wv[t[i]] : 1.0;
        double gg = reduction == 0 ? go[i] : reduction == 1 ? go[0] / wsum : go[0];
        want[i * c + t[i]] = static_cast<float>(-w * gg);
      }
      check_close(gi.values<float>(), want);
    }
  // An out-of-range target is an asynchronous error.
  Tensor bad = Tensor::from<int64_t>(FL_DTYPE_INT64, {n}, {0, 1, 2, 9, 1, 0});
  Tensor out(FL_DTYPE_FLOAT32, {}), total(FL_DTYPE_FLOAT32, {});
  REQUIRE(call_kernel("aten::nll_loss_forward.output", Inputs().tensor(tx).tensor(bad).none().integer(1).integer(-100),
                      outs({&out, &total})) == FL_OK);
  CHECK(cpu_ops().stream_synchronize(0, nullptr) == FL_ERR_DEVICE);
  CHECK(std::string(cpu_ops().last_error()).find("out of bounds") != std::string::npos);
}

TEST_CASE("nn: conv2d forward and backward against naive loops") {
  auto geometry = GENERATE(Conv2d{2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},   // 3x3 same padding
                           Conv2d{2, 4, 9, 8, 6, 3, 2, 2, 1, 0, 1, 2, 1, 2},   // stride, dilation, groups
                           Conv2d{1, 4, 5, 5, 4, 1, 1, 1, 1, 0, 0, 1, 1, 4},   // depthwise 1x1
                           Conv2d{3, 5, 4, 4, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1});  // pointwise
  const Conv2d g = geometry;
  const int64_t oh = g.oh(), ow = g.ow(), cgi = g.ci / g.groups;
  std::vector<float> x = random_floats(g.n * g.ci * g.h * g.w, 51), w = random_floats(g.co * cgi * g.kh * g.kw, 52),
                     b = random_floats(g.co, 53), go = random_floats(g.n * g.co * oh * ow, 54);
  Tensor tx = Tensor::from<float>(FL_DTYPE_FLOAT32, {g.n, g.ci, g.h, g.w}, x);
  Tensor tw = Tensor::from<float>(FL_DTYPE_FLOAT32, {g.co, cgi, g.kh, g.kw}, w);
  Tensor tb = Tensor::from<float>(FL_DTYPE_FLOAT32, {g.co}, b);
  Tensor tgo = Tensor::from<float>(FL_DTYPE_FLOAT32, {g.n, g.co, oh, ow}, go);
  auto X = [&](int64_t bb, int64_t c, int64_t y, int64_t xx) { return x[((bb * g.ci + c) * g.h + y) * g.w + xx]; };
  auto W = [&](int64_t oc, int64_t c, int64_t ky, int64_t kx) { return w[((oc * cgi + c) * g.kh + ky) * g.kw + kx]; };
  auto O = [&](int64_t bb, int64_t oc, int64_t y, int64_t xx) { return ((bb * g.co + oc) * oh + y) * ow + xx; };

  std::vector<double> want(g.n * g.co * oh * ow, 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i) want[i] = b[(i / (oh * ow)) % g.co];
  std::vector<double> gi(x.size(), 0.0), gw(w.size(), 0.0), gb(g.co, 0.0);
  g.each_term([&](int64_t bb, int64_t oc, int64_t oy, int64_t ox, int64_t ic, int64_t c, int64_t ky, int64_t kx,
                  int64_t iy, int64_t ix) {
    want[O(bb, oc, oy, ox)] += static_cast<double>(X(bb, ic, iy, ix)) * W(oc, c, ky, kx);
    gi[((bb * g.ci + ic) * g.h + iy) * g.w + ix] += static_cast<double>(go[O(bb, oc, oy, ox)]) * W(oc, c, ky, kx);
    gw[((oc * cgi + c) * g.kh + ky) * g.kw + kx] += static_cast<double>(go[O(bb, oc, oy, ox)]) * X(bb, ic, iy, ix);
  });
  for (int64_t i = 0; i < static_cast<int64_t>(go.size()); ++i) gb[(i / (oh * ow)) % g.co] += go[i];

  Tensor out(FL_DTYPE_FLOAT32, {g.n, g.co, oh, ow});
  run_kernel("aten::convolution_overrideable",
             Inputs().tensor(tx).tensor(tw).tensor(tb).ints({g.sh, g.sw}).ints({g.ph, g.pw}).ints({g.dh, g.dw})
                 .boolean(false).ints({0, 0}).integer(g.groups),
             outs({&out}));
  check_close(out.values<float>(), std::vector<float>(want.begin(), want.end()));

  Tensor tgi(FL_DTYPE_FLOAT32, {g.n, g.ci, g.h, g.w}), tgw(FL_DTYPE_FLOAT32, {g.co, cgi, g.kh, g.kw}), tgb(FL_DTYPE_FLOAT32, {g.co});
  run_kernel("aten::convolution_backward_overrideable",
             Inputs().tensor(tgo).tensor(tx).tensor(tw).ints({g.sh, g.sw}).ints({g.ph, g.pw}).ints({g.dh, g.dw})
                 .boolean(false).ints({0, 0}).integer(g.groups).bools({1, 1, 1}),
             outs({&tgi, &tgw, &tgb}));
  check_close(tgi.values<float>(), std::vector<float>(gi.begin(), gi.end()));
  check_close(tgw.values<float>(), std::vector<float>(gw.begin(), gw.end()));
  check_close(tgb.values<float>(), std::vector<float>(gb.begin(), gb.end()));

  // Masked outputs are skipped (ndim == -1).
  Tensor only_w(FL_DTYPE_FLOAT32, {g.co, cgi, g.kh, g.kw});
  run_kernel("aten::convolution_backward_overrideable",
             Inputs().tensor(tgo).tensor(tx).tensor(tw).ints({g.sh, g.sw}).ints({g.ph, g.pw}).ints({g.dh, g.dw})
                 .boolean(false).ints({0, 0}).integer(g.groups).bools({0, 1, 0}),
             {undefined_tensor(), only_w.desc(), undefined_tensor()});
  check_close(only_w.values<float>(), std::vector<float>(gw.begin(), gw.end()));
}

TEST_CASE("nn: conv1d and unsupported convolutions") {
  // [1, 2, 5] * [1, 2, 3], padding 1
  std::vector<float> x = {1, 2, 3, 4, 5, -1, 0, 1, 0, -1}, w = {1, 0, -1, 0.5f, 0.5f, 0.5f};
  Tensor tx = Tensor::from<float>(FL_DTYPE_FLOAT32, {1, 2, 5}, x);
  Tensor tw = Tensor::from<float>(FL_DTYPE_FLOAT32, {1, 2, 3}, w);
  Tensor out(FL_DTYPE_FLOAT32, {1, 1, 5});
  run_kernel("aten::convolution_overrideable",
             Inputs().tensor(tx).tensor(tw).none().ints({1}).ints({1}).ints({1}).boolean(false).ints({0}).integer(1),
             outs({&out}));
  std::vector<float> want(5);
  for (int o = 0; o < 5; ++o) {
    double s = 0;
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < 3; ++k) {
        int i = o - 1 + k;
        if (i >= 0 && i < 5) s += x[c * 5 + i] * w[c * 3 + k];
      }
    want[o] = static_cast<float>(s);
  }
  check_close(out.values<float>(), want);
  CHECK(call_kernel("aten::convolution_overrideable",
                    Inputs().tensor(tx).tensor(tw).none().ints({1}).ints({1}).ints({1}).boolean(true).ints({0}).integer(1),
                    outs({&out})) == FL_ERR_NOT_SUPPORTED);
}

TEST_CASE("nn: max_pool2d_with_indices forward and backward") {
  // One 4x4 plane, 2x2 windows, stride 2.
  std::vector<float> x = {1, 5, 2, 0,  3, 4, 8, 1,  0, 0, 1, 1,  9, 2, 1, 7};
  Tensor tx = Tensor::from<float>(FL_DTYPE_FLOAT32, {1, 1, 4, 4}, x);
  Tensor out(FL_DTYPE_FLOAT32, {1, 1, 2, 2});
  Tensor idx(FL_DTYPE_INT64, {1, 1, 2, 2});
  run_kernel("aten::max_pool2d_with_indices.out",
             Inputs().tensor(tx).ints({2, 2}).ints({}).ints({0}).ints({1}).boolean(false), outs({&out, &idx}));
  CHECK(out.values<float>() == std::vector<float>{5, 8, 9, 7});
  CHECK(idx.values<int64_t>() == std::vector<int64_t>{1, 6, 12, 15});
  Tensor go = Tensor::from<float>(FL_DTYPE_FLOAT32, {1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor gi(FL_DTYPE_FLOAT32, {1, 1, 4, 4});
  run_kernel("aten::max_pool2d_with_indices_backward.grad_input",
             Inputs().tensor(go).tensor(tx).ints({2, 2}).ints({2, 2}).ints({0, 0}).ints({1, 1}).boolean(false).tensor(idx),
             outs({&gi}));
  std::vector<float> want(16, 0);
  want[1] = 1; want[6] = 2; want[12] = 3; want[15] = 4;
  CHECK(gi.values<float>() == want);

  // Randomized: 3x3 windows, stride 2, padding 1 on [2, 3, 7, 6], against a naive loop.
  const int64_t n = 2, c = 3, h = 7, w = 6, oh = 4, ow = 3;
  std::vector<float> r = random_floats(n * c * h * w, 61);
  Tensor tr = Tensor::from<float>(FL_DTYPE_FLOAT32, {n, c, h, w}, r);
  Tensor ro(FL_DTYPE_FLOAT32, {n, c, oh, ow});
  Tensor ri(FL_DTYPE_INT64, {n, c, oh, ow});
  run_kernel("aten::max_pool2d_with_indices.out",
             Inputs().tensor(tr).ints({3}).ints({2}).ints({1}).ints({1}).boolean(false), outs({&ro, &ri}));
  std::vector<float> got = ro.values<float>();
  std::vector<int64_t> got_i = ri.values<int64_t>();
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        float best = -INFINITY;
        int64_t bi = -1;
        for (int64_t y = oy * 2 - 1; y < oy * 2 + 2; ++y)
          for (int64_t xx = ox * 2 - 1; xx < ox * 2 + 2; ++xx)
            if (y >= 0 && y < h && xx >= 0 && xx < w && r[p * h * w + y * w + xx] > best) {
              best = r[p * h * w + y * w + xx];
              bi = y * w + xx;
            }
        size_t o = static_cast<size_t>((p * oh + oy) * ow + ox);
        CHECK(got[o] == best);
        CHECK(got_i[o] == bi);
      }
}

TEST_CASE("nn: native_layer_norm forward and backward") {
  const int64_t rows = 6, cols = 10;
  std::vector<float> x = random_floats(rows * cols, 71, -2, 2), w = random_floats(cols, 72), b = random_floats(cols, 73),
                     dy = random_floats(rows * cols, 74);
  Tensor tx = Tensor::from<float>(FL_DTYPE_FLOAT32, {2, 3, cols}, x);
  Tensor tw = Tensor::from<float>(FL_DTYPE_FLOAT32, {cols}, w);
  Tensor tb = Tensor::from<float>(FL_DTYPE_FLOAT32, {cols}, b);
  Tensor out(FL_DTYPE_FLOAT32, {2, 3, cols}), mean(FL_DTYPE_FLOAT32, {2, 3, 1}), rstd(FL_DTYPE_FLOAT32, {2, 3, 1});
  const double eps = 1e-5;
  run_kernel("aten::native_layer_norm", Inputs().tensor(tx).ints({cols}).tensor(tw).tensor(tb).real(eps),
             outs({&out, &mean, &rstd}));
  std::vector<float> want(rows * cols), want_dx(rows * cols), want_dw(cols, 0), want_db(cols, 0);
  std::vector<float> got_mean = mean.values<float>(), got_rstd = rstd.values<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) m += x[r * cols + c];
    m /= cols;
    for (int64_t c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
    v /= cols;
    double rs = 1.0 / std::sqrt(v + eps);
    CHECK(got_mean[r] == Approx(m).margin(1e-6));
    CHECK(got_rstd[r] == Approx(rs).epsilon(1e-5));
    double sg = 0, sgx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      double xh = (x[r * cols + c] - m) * rs;
      want[r * cols + c] = static_cast<float>(xh * w[c] + b[c]);
      sg += dy[r * cols + c] * w[c];
      sgx += dy[r * cols + c] * w[c] * xh;
      want_dw[c] += static_cast<float>(dy[r * cols + c] * xh);
      want_db[c] += dy[r * cols + c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      double xh = (x[r * cols + c] - m) * rs;
      want_dx[r * cols + c] = static_cast<float>(rs * (dy[r * cols + c] * w[c] - sg / cols - xh * sgx / cols));
    }
  }
  check_close(out.values<float>(), want);
  Tensor tdy = Tensor::from<float>(FL_DTYPE_FLOAT32, {2, 3, cols}, dy);
  Tensor dx(FL_DTYPE_FLOAT32, {2, 3, cols}), dw(FL_DTYPE_FLOAT32, {cols}), db(FL_DTYPE_FLOAT32, {cols});
  run_kernel("aten::native_layer_norm_backward",
             Inputs().tensor(tdy).tensor(tx).ints({cols}).tensor(mean).tensor(rstd).tensor(tw).tensor(tb).bools({1, 1, 1}),
             outs({&dx, &dw, &db}));
  check_close(dx.values<float>(), want_dx, 1e-3, 1e-4);
  check_close(dw.values<float>(), want_dw, 1e-4, 1e-4);
  check_close(db.values<float>(), want_db, 1e-4, 1e-4);
}

TEST_CASE("nn: embedding_dense_backward and index_select") {
  const int64_t d = 3;
  std::vector<int64_t> idx = {2, 0, 2, 4, 1};
  std::vector<float> g = random_floats(idx.size() * d, 81);
  Tensor ti = Tensor::from<int64_t>(FL_DTYPE_INT64, {5}, idx);
  Tensor tg = Tensor::from<float>(FL_DTYPE_FLOAT32, {5, d}, g);
  for (bool scale : {false, true}) {
    Tensor out(FL_DTYPE_FLOAT32, {6, d});
    run_kernel("aten::embedding_dense_backward", Inputs().tensor(tg).tensor(ti).integer(6).integer(4).boolean(scale),
               outs({&out}));
    std::vector<float> want(6 * d, 0);
    for (size_t i = 0; i < idx.size(); ++i) {
      if (idx[i] == 4) continue;  // padding_idx
      float s = scale ? (idx[i] == 2 ? 0.5f : 1.0f) : 1.0f;
      for (int64_t j = 0; j < d; ++j) want[idx[i] * d + j] += g[i * d + j] * s;
    }
    check_close(out.values<float>(), want);
  }

  std::vector<float> src = random_floats(4 * 5, 82);
  Tensor ts = Tensor::from<float>(FL_DTYPE_FLOAT32, {4, 5}, src);
  Tensor sel = Tensor::from<int64_t>(FL_DTYPE_INT64, {3}, {3, 0, 3});
  Tensor rows(FL_DTYPE_FLOAT32, {3, 5}), cols(FL_DTYPE_FLOAT32, {4, 3});
  run_kernel("aten::index_select.out", Inputs().tensor(ts).integer(0).tensor(sel), outs({&rows}));
  run_kernel("aten::index_select.out", Inputs().tensor(ts).integer(-1).tensor(sel), outs({&cols}));
  std::vector<float> want_rows, want_cols;
  for (int64_t k : {3, 0, 3})
    for (int64_t j = 0; j < 5; ++j) want_rows.push_back(src[k * 5 + j]);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t k : {3, 0, 3}) want_cols.push_back(src[i * 5 + k]);
  CHECK(rows.values<float>() == want_rows);
  CHECK(cols.values<float>() == want_cols);
  Tensor bad = Tensor::from<int64_t>(FL_DTYPE_INT64, {1}, {7});
  Tensor one(FL_DTYPE_FLOAT32, {1, 5});
  REQUIRE(call_kernel("aten::index_select.out", Inputs().tensor(ts).integer(0).tensor(bad), outs({&one})) == FL_OK);
  CHECK(cpu_ops().stream_synchronize(0, nullptr) == FL_ERR_DEVICE);
}

TEST_CASE("nn: native_dropout and its backward") {
  const int64_t n = 4000;
  std::vector<float> x = random_floats(n, 91, 0.5f, 1.5f);
  Tensor tx = Tensor::from<float>(FL_DTYPE_FLOAT32, {n}, x);
  Tensor out(FL_DTYPE_FLOAT32, {n}), mask(FL_DTYPE_BOOL, {n});
  run_kernel("aten::native_dropout", Inputs().tensor(tx).real(0.25).boolean(true), outs({&out, &mask}));
  std::vector<float> o = out.values<float>();
  std::vector<uint8_t> m = mask.values<uint8_t>();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += m[i];
    CHECK(o[i] == Approx(m[i] ? x[i] / 0.75f : 0.0f));
  }
  CHECK(kept > n * 0.7);
  CHECK(kept < n * 0.8);
  // A second call draws a different mask.
  Tensor mask2(FL_DTYPE_BOOL, {n});
  run_kernel("aten::native_dropout", Inputs().tensor(tx).real(0.25).boolean(true), outs({&out, &mask2}));
  CHECK(mask2.values<uint8_t>() != m);
  // train = false: identity, all kept.
  run_kernel("aten::native_dropout", Inputs().tensor(tx).real(0.25).boolean(false), outs({&out, &mask}));
  CHECK(out.values<float>() == x);
  for (uint8_t v : mask.values<uint8_t>()) CHECK(v == 1);
  // backward: grad * mask * scale
  Tensor g = Tensor::from<float>(FL_DTYPE_FLOAT32, {n}, std::vector<float>(n, 2.0f));
  Tensor gi(FL_DTYPE_FLOAT32, {n});
  run_kernel("aten::native_dropout_backward.out", Inputs().tensor(g).tensor(mask2).real(1.0 / 0.75), outs({&gi}));
  std::vector<uint8_t> m2 = mask2.values<uint8_t>();
  std::vector<float> got = gi.values<float>();
  for (int64_t i = 0; i < n; ++i) CHECK(got[i] == Approx(m2[i] ? 2.0f / 0.75f : 0.0f));
}

TEST_CASE("nn: conv2d forward speed sanity (64x16x28x28, 3x3, 16->32)") {
  const int64_t n = 64, ci = 16, co = 32, h = 28, w = 28;
  Tensor x = Tensor::from<float>(FL_DTYPE_FLOAT32, {n, ci, h, w}, random_floats(n * ci * h * w, 101));
  Tensor wt = Tensor::from<float>(FL_DTYPE_FLOAT32, {co, ci, 3, 3}, random_floats(co * ci * 9, 102));
  Tensor out(FL_DTYPE_FLOAT32, {n, co, h, w});
  Inputs in;
  in.tensor(x).tensor(wt).none().ints({1, 1}).ints({1, 1}).ints({1, 1}).boolean(false).ints({0, 0}).integer(1);
  run_kernel("aten::convolution_overrideable", in, outs({&out}));
  const int iters = 5;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) REQUIRE(call_kernel("aten::convolution_overrideable", in, outs({&out})) == FL_OK);
  FL_REQUIRE_OK(cpu_ops().stream_synchronize(0, nullptr));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
  double gflop = 2.0 * n * co * h * w * ci * 9 / 1e9;
  WARN("conv2d forward 64x16x28x28 -> 32 (3x3): " << ms << " ms (" << gflop / ms * 1e3 << " GFLOP/s)");
  CHECK(ms < 5000.0);
}
