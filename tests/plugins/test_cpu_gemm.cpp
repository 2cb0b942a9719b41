// GEMM kernels of the CPU plugin against naive loops, including strided operands.
#include "cpu_plugin_fixture.hpp"

#include <chrono>
#include <vector>

using namespace fl::test;
using Catch::Detail::Approx;

namespace {

// c[m][n] = sum_k a(m, k) * b(k, n) with element accessors.
template <class A, class B>
std::vector<float> naive_mm(int64_t m, int64_t k, int64_t n, A a, B b) {
  std::vector<float> c(static_cast<size_t>(m * n), 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += static_cast<double>(a(i, p)) * b(p, j);
      c[static_cast<size_t>(i * n + j)] = static_cast<float>(s);
    }
  return c;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-4).margin(1e-4));
  }
}

}  // namespace

TEST_CASE("gemm: mm with contiguous, transposed and expanded operands") {
  const int64_t m = 13, k = 17, n = 11;
  std::vector<float> av = random_floats(m * k, 1), bv = random_floats(k * n, 2);
  Tensor a = Tensor::from<float>(FL_DTYPE_FLOAT32, {m, k}, av);
  Tensor b = Tensor::from<float>(FL_DTYPE_FLOAT32, {k, n}, bv);
  Tensor out(FL_DTYPE_FLOAT32, {m, n});
  auto A = [&](int64_t i, int64_t p) { return av[static_cast<size_t>(i * k + p)]; };
  auto B = [&](int64_t p, int64_t j) { return bv[static_cast<size_t>(p * n + j)]; };
  run_kernel("aten::mm.out", Inputs().tensor(a).tensor(b), outs({&out}));
  check_close(out.values<float>(), naive_mm(m, k, n, A, B));

  // a^T viewed from a [k, m] buffer, b^T from an [n, k] buffer: no copies needed.
  std::vector<float> at(m * k), bt(k * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) at[static_cast<size_t>(p * m + i)] = A(i, p);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j) bt[static_cast<size_t>(j * k + p)] = B(p, j);
  Tensor at_buf = Tensor::from<float>(FL_DTYPE_FLOAT32, {k, m}, at);
  Tensor bt_buf = Tensor::from<float>(FL_DTYPE_FLOAT32, {n, k}, bt);
  run_kernel("aten::mm.out", Inputs().tensor(at_buf.view({m, k}, {1, m})).tensor(bt_buf.view({k, n}, {1, k})),
             outs({&out}));
  check_close(out.values<float>(), naive_mm(m, k, n, A, B));

  // An expanded (stride 0) operand is copied on the worker.
  std::vector<float> row = random_floats(k, 3);
  Tensor r = Tensor::from<float>(FL_DTYPE_FLOAT32, {k}, row);
  run_kernel("aten::mm.out", Inputs().tensor(r.view({m, k}, {0, 1})).tensor(b), outs({&out}));
  check_close(out.values<float>(), naive_mm(m, k, n, [&](int64_t, int64_t p) { return row[p]; }, B));

  // Every non-unit stride: an every-other-column view.
  std::vector<float> wide = random_floats(m * 2 * k, 4);
  Tensor w = Tensor::from<float>(FL_DTYPE_FLOAT32, {m, 2 * k}, wide);
  run_kernel("aten::mm.out", Inputs().tensor(w.view({m, k}, {2 * k, 2})).tensor(b), outs({&out}));
  check_close(out.values<float>(),
              naive_mm(m, k, n, [&](int64_t i, int64_t p) { return wide[static_cast<size_t>(i * 2 * k + 2 * p)]; }, B));
}

TEST_CASE("gemm: addmm with broadcast bias, beta and alpha; in place") {
  const int64_t m = 5, k = 7, n = 6;
  std::vector<float> av = random_floats(m * k, 5), bv = random_floats(k * n, 6), biasv = random_floats(n, 7);
  Tensor a = Tensor::from<float>(FL_DTYPE_FLOAT32, {m, k}, av);
  Tensor b = Tensor::from<float>(FL_DTYPE_FLOAT32, {k, n}, bv);
  Tensor bias = Tensor::from<float>(FL_DTYPE_FLOAT32, {n}, biasv);
  Tensor out(FL_DTYPE_FLOAT32, {m, n});
  auto prod = naive_mm(m, k, n, [&](int64_t i, int64_t p) { return av[i * k + p]; },
                       [&](int64_t p, int64_t j) { return bv[p * n + j]; });
  run_kernel("aten::addmm.out", Inputs().tensor(bias).tensor(a).tensor(b).real(0.5).real(2.0), outs({&out}));
  std::vector<float> want(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want[i * n + j] = 0.5f * biasv[j] + 2.0f * prod[i * n + j];
  check_close(out.values<float>(), want);

  // beta = 0 ignores a NaN bias.
  Tensor nan_bias = Tensor::from<float>(FL_DTYPE_FLOAT32, {n}, std::vector<float>(n, NAN));
  run_kernel("aten::addmm.out", Inputs().tensor(nan_bias).tensor(a).tensor(b).integer(0).integer(1), outs({&out}));
  check_close(out.values<float>(), prod);

  // addmm_: out is self.
  Tensor self = Tensor::from<float>(FL_DTYPE_FLOAT32, {m, n}, std::vector<float>(m * n, 1.0f));
  run_kernel("aten::addmm.out", Inputs().tensor(self).tensor(a).tensor(b).integer(1).integer(1), outs({&self}));
  for (size_t i = 0; i < want.size(); ++i) want[i] = 1.0f + prod[i];
  check_close(self.values<float>(), want);
}

TEST_CASE("gemm: bmm and baddbmm, float64") {
  const int64_t batch = 3, m = 4, k = 5, n = 2;
  std::vector<double> av(batch * m * k), bv(batch * k * n);
  for (size_t i = 0; i < av.size(); ++i) av[i] = std::sin(static_cast<double>(i));
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(static_cast<double>(i));
  Tensor a = Tensor::from<double>(FL_DTYPE_FLOAT64, {batch, m, k}, av);
  Tensor b = Tensor::from<double>(FL_DTYPE_FLOAT64, {batch, k, n}, bv);
  Tensor out(FL_DTYPE_FLOAT64, {batch, m, n});
  run_kernel("aten::bmm.out", Inputs().tensor(a).tensor(b), outs({&out}));
  std::vector<double> got = out.values<double>();
  Tensor bias = Tensor::from<double>(FL_DTYPE_FLOAT64, {1, n}, {10.0, 20.0});
  Tensor out2(FL_DTYPE_FLOAT64, {batch, m, n});
  run_kernel("aten::baddbmm.out", Inputs().tensor(bias).tensor(a).tensor(b).real(1.0).real(-1.0), outs({&out2}));
  std::vector<double> got2 = out2.values<double>();
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[(q * m + i) * k + p] * bv[(q * k + p) * n + j];
        CHECK(got[(q * m + i) * n + j] == Approx(s).epsilon(1e-12));
        CHECK(got2[(q * m + i) * n + j] == Approx((j == 0 ? 10.0 : 20.0) - s).epsilon(1e-12));
      }
  // float16 is refused (the core falls back).
  Tensor h(FL_DTYPE_FLOAT16, {2, 2});
  Tensor ho(FL_DTYPE_FLOAT16, {2, 2});
  CHECK(call_kernel("aten::mm.out", Inputs().tensor(h).tensor(h), outs({&ho})) == FL_ERR_NOT_SUPPORTED);
  // K == 0 gives zeros.
  Tensor ek(FL_DTYPE_FLOAT32, {2, 0});
  Tensor ek2(FL_DTYPE_FLOAT32, {0, 3});
  Tensor eo = Tensor::from<float>(FL_DTYPE_FLOAT32, {2, 3}, std::vector<float>(6, 5.0f));
  run_kernel("aten::mm.out", Inputs().tensor(ek).tensor(ek2), outs({&eo}));
  CHECK(eo.values<float>() == std::vector<float>(6, 0.0f));
}

TEST_CASE("gemm: 256x256 sgemm speed sanity") {
  const int64_t s = 256;
  Tensor a = Tensor::from<float>(FL_DTYPE_FLOAT32, {s, s}, random_floats(s * s, 8));
  Tensor out(FL_DTYPE_FLOAT32, {s, s});
  run_kernel("aten::mm.out", Inputs().tensor(a).tensor(a), outs({&out}));
  const int iters = 20;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) REQUIRE(call_kernel("aten::mm.out", Inputs().tensor(a).tensor(a), outs({&out})) == FL_OK);
  FL_REQUIRE_OK(cpu_ops().stream_synchronize(0, nullptr));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
  WARN("256x256x256 sgemm: " << ms << " ms (" << 2.0 * s * s * s / ms / 1e6 << " GFLOP/s)");
  CHECK(ms < 1000.0);
}
