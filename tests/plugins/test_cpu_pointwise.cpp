// Elementwise kernels of the CPU plugin against scalar references written here.
#include "cpu_plugin_fixture.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace fl::test;
using Catch::Detail::Approx;

namespace {

void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel = 1e-5,
                 double abs = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << " want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else {
      CHECK(got[i] == Approx(want[i]).epsilon(rel).margin(abs));
    }
  }
}

std::vector<float> transpose(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
  return t;
}

void check_unary(const std::string& op, const std::function<float(float)>& ref, float lo, float hi) {
  INFO("op " << op);
  const int64_t rows = 7, cols = 33;
  std::vector<float> in = random_floats(rows * cols, 11, lo, hi);
  Tensor x = Tensor::from<float>(FL_DTYPE_FLOAT32, {rows, cols}, in);
  Tensor out(FL_DTYPE_FLOAT32, {rows, cols});
  run_kernel(op, Inputs().tensor(x), outs({&out}));
  std::vector<float> want(in.size());
  for (size_t i = 0; i < in.size(); ++i) want[i] = ref(in[i]);
  check_close(out.values<float>(), want, 1e-5, 1e-6);

  // A transposed (strided) input.
  Tensor xt = x.view({cols, rows}, {1, cols});
  Tensor out_t(FL_DTYPE_FLOAT32, {cols, rows});
  run_kernel(op, Inputs().tensor(xt), outs({&out_t}));
  check_close(out_t.values<float>(), transpose(want, rows, cols), 1e-5, 1e-6);

  // In place: out is the input.
  run_kernel(op, Inputs().tensor(x), outs({&x}));
  check_close(x.values<float>(), want, 1e-5, 1e-6);

  // float64 too.
  std::vector<double> in64(in.begin(), in.end());
  Tensor x64 = Tensor::from<double>(FL_DTYPE_FLOAT64, {rows * cols}, in64);
  Tensor out64(FL_DTYPE_FLOAT64, {rows * cols});
  run_kernel(op, Inputs().tensor(x64), outs({&out64}));
  std::vector<double> got64 = out64.values<double>();
  for (size_t i = 0; i < in.size(); ++i)
    if (!std::isnan(want[i])) CHECK(got64[i] == Approx(want[i]).epsilon(1e-5).margin(1e-6));
}

float gelu_ref(float x) { return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f))); }
float gelu_tanh_ref(float x) {
  const float k = std::sqrt(2.0f / static_cast<float>(M_PI));
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

}  // namespace

TEST_CASE("pointwise: unary float ops match scalar references") {
  check_unary("aten::sqrt.out", [](float v) { return std::sqrt(v); }, 0.0f, 4.0f);
  check_unary("aten::rsqrt.out", [](float v) { return 1.0f / std::sqrt(v); }, 0.1f, 4.0f);
  check_unary("aten::neg.out", [](float v) { return -v; }, -3, 3);
  check_unary("aten::exp.out", [](float v) { return std::exp(v); }, -3, 3);
  check_unary("aten::log.out", [](float v) { return std::log(v); }, 0.01f, 5);
  check_unary("aten::abs.out", [](float v) { return std::fabs(v); }, -3, 3);
  check_unary("aten::tanh.out", [](float v) { return std::tanh(v); }, -3, 3);
  check_unary("aten::sigmoid.out", [](float v) { return 1.0f / (1.0f + std::exp(-v)); }, -5, 5);
  check_unary("aten::relu.out", [](float v) { return v > 0 ? v : 0.0f; }, -3, 3);
  check_unary("aten::reciprocal.out", [](float v) { return 1.0f / v; }, 0.5f, 3);
  check_unary("aten::silu.out", [](float v) { return v / (1.0f + std::exp(-v)); }, -5, 5);
  check_unary("aten::gelu.out", gelu_ref, -4, 4);
}

TEST_CASE("pointwise: relu and maximum keep NaN") {
  Tensor x = Tensor::from<float>(FL_DTYPE_FLOAT32, {3}, {NAN, -1.0f, 2.0f});
  Tensor out(FL_DTYPE_FLOAT32, {3});
  run_kernel("aten::relu.out", Inputs().tensor(x), outs({&out}));
  std::vector<float> v = out.values<float>();
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 0.0f);
  CHECK(v[2] == 2.0f);
  Tensor y = Tensor::from<float>(FL_DTYPE_FLOAT32, {3}, {1.0f, NAN, 0.0f});
  run_kernel("aten::maximum.out", Inputs().tensor(x).tensor(y), outs({&out}));
  v = out.values<float>();
  CHECK(std::isnan(v[0]));
  CHECK(std::isnan(v[1]));
  CHECK(v[2] == 2.0f);
}

TEST_CASE("pointwise: gelu tanh, pow and scalar-parameter ops") {
  std::vector<float> in = random_floats(50, 3, -3, 3);
  Tensor x = Tensor::from<float>(FL_DTYPE_FLOAT32, {50}, in);
  Tensor out(FL_DTYPE_FLOAT32, {50});
  run_kernel("aten::gelu.out", Inputs().tensor(x).str("tanh"), outs({&out}));
  std::vector<float> want(50);
  for (size_t i = 0; i < 50; ++i) want[i] = gelu_tanh_ref(in[i]);
  check_close(out.values<float>(), want);

  run_kernel("aten::pow.Tensor_Scalar_out", Inputs().tensor(x).real(3.0), outs({&out}));
  for (size_t i = 0; i < 50; ++i) want[i] = in[i] * in[i] * in[i];
  check_close(out.values<float>(), want, 1e-5, 1e-5);
  run_kernel("aten::pow.Tensor_Scalar_out", Inputs().tensor(x).integer(2), outs({&out}));
  for (size_t i = 0; i < 50; ++i) want[i] = in[i] * in[i];
  check_close(out.values<float>(), want);

  run_kernel("aten::clamp.out", Inputs().tensor(x).real(-0.5).real(1.5), outs({&out}));
  for (size_t i = 0; i < 50; ++i) want[i] = std::min(std::max(in[i], -0.5f), 1.5f);
  check_close(out.values<float>(), want);
  run_kernel("aten::clamp.out", Inputs().tensor(x).none().integer(0), outs({&out}));
  for (size_t i = 0; i < 50; ++i) want[i] = std::min(in[i], 0.0f);
  check_close(out.values<float>(), want);

  run_kernel("aten::threshold_backward.grad_input", Inputs().tensor(x).tensor(x).real(0.25), outs({&out}));
  for (size_t i = 0; i < 50; ++i) want[i] = in[i] <= 0.25f ? 0.0f : in[i];
  check_close(out.values<float>(), want);
}

TEST_CASE("pointwise: binary ops with alpha, broadcasting and host scalars") {
  // a: [4, 3], b: [3] broadcast over rows, c: [4, 1] broadcast over columns.
  std::vector<float> av = random_floats(12, 1), bv = random_floats(3, 2), cv = random_floats(4, 3);
  Tensor a = Tensor::from<float>(FL_DTYPE_FLOAT32, {4, 3}, av);
  Tensor b = Tensor::from<float>(FL_DTYPE_FLOAT32, {3}, bv);
  Tensor c = Tensor::from<float>(FL_DTYPE_FLOAT32, {4, 1}, cv);
  Tensor out(FL_DTYPE_FLOAT32, {4, 3});
  std::vector<float> want(12);

  run_kernel("aten::add.out", Inputs().tensor(a).tensor(b).real(2.5), outs({&out}));
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 3; ++k) want[r * 3 + k] = av[r * 3 + k] + 2.5f * bv[k];
  check_close(out.values<float>(), want);

  run_kernel("aten::sub.out", Inputs().tensor(c).tensor(b).integer(1), outs({&out}));
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 3; ++k) want[r * 3 + k] = cv[r] - bv[k];
  check_close(out.values<float>(), want);

  run_kernel("aten::mul.out", Inputs().tensor(a).tensor(c), outs({&out}));
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 3; ++k) want[r * 3 + k] = av[r * 3 + k] * cv[r];
  check_close(out.values<float>(), want);

  run_kernel("aten::div.out", Inputs().tensor(a).tensor(b), outs({&out}));
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 3; ++k) want[r * 3 + k] = av[r * 3 + k] / bv[k];
  check_close(out.values<float>(), want);

  HostScalar half(0.5);
  run_kernel("aten::mul.out", Inputs().tensor(a).host(half), outs({&out}));
  for (int i = 0; i < 12; ++i) want[i] = av[i] * 0.5f;
  check_close(out.values<float>(), want);

  run_kernel("aten::add.Scalar_out", Inputs().tensor(a).real(1.0).real(3.0), outs({&out}));
  for (int i = 0; i < 12; ++i) want[i] = av[i] + 3.0f;
  check_close(out.values<float>(), want);

  // Expanded input (stride 0) and a transposed one.
  Tensor expanded = b.view({4, 3}, {0, 1});
  Tensor at_storage = Tensor::from<float>(FL_DTYPE_FLOAT32, {3, 4}, transpose(av, 4, 3));
  Tensor a_t = at_storage.view({4, 3}, {1, 4});
  run_kernel("aten::maximum.out", Inputs().tensor(a_t).tensor(expanded), outs({&out}));
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 3; ++k) want[r * 3 + k] = std::max(av[r * 3 + k], bv[k]);
  check_close(out.values<float>(), want);

  run_kernel("aten::minimum.out", Inputs().tensor(a_t).tensor(expanded), outs({&out}));
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 3; ++k) want[r * 3 + k] = std::min(av[r * 3 + k], bv[k]);
  check_close(out.values<float>(), want);
}

TEST_CASE("pointwise: large randomized broadcast against the reference") {
  // [5, 1, 37] + [6, 1] -> [5, 6, 37] with a permuted (non-contiguous) first operand.
  std::vector<float> av = random_floats(5 * 37, 21), bv = random_floats(6, 22);
  Tensor a_storage = Tensor::from<float>(FL_DTYPE_FLOAT32, {37, 5}, av);  // [37, 5] storage
  Tensor a = a_storage.view({5, 1, 37}, {1, 0, 5});
  Tensor b = Tensor::from<float>(FL_DTYPE_FLOAT32, {6, 1}, bv);
  Tensor out(FL_DTYPE_FLOAT32, {5, 6, 37});
  run_kernel("aten::sub.out", Inputs().tensor(a).tensor(b).real(0.5), outs({&out}));
  std::vector<float> want(5 * 6 * 37);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j)
      for (int k = 0; k < 37; ++k) want[(i * 6 + j) * 37 + k] = av[k * 5 + i] - 0.5f * bv[j];
  check_close(out.values<float>(), want);
}

TEST_CASE("pointwise: dtype promotion and unsupported mixes") {
  Tensor f = Tensor::from<float>(FL_DTYPE_FLOAT32, {3}, {1.5f, 2.5f, -3.0f});
  Tensor i = Tensor::from<int64_t>(FL_DTYPE_INT64, {3}, {1, 2, 3});
  Tensor out(FL_DTYPE_FLOAT32, {3});
  run_kernel("aten::add.out", Inputs().tensor(f).tensor(i).integer(1), outs({&out}));
  check_close(out.values<float>(), {2.5f, 4.5f, 0.0f});

  // int64 / int64 true division computes in float.
  Tensor j = Tensor::from<int64_t>(FL_DTYPE_INT64, {3}, {2, 4, 4});
  run_kernel("aten::div.out", Inputs().tensor(i).tensor(j), outs({&out}));
  check_close(out.values<float>(), {0.5f, 0.5f, 0.75f});

  // int64 + wrapped float -> float32.
  HostScalar h(0.25);
  run_kernel("aten::add.out", Inputs().tensor(i).host(h).integer(1), outs({&out}));
  check_close(out.values<float>(), {1.25f, 2.25f, 3.25f});

  // An output dtype ATen would not produce is refused before anything is enqueued.
  Tensor out_i32(FL_DTYPE_INT32, {3});
  CHECK(call_kernel("aten::add.out", Inputs().tensor(f).tensor(f).integer(1), outs({&out_i32})) == FL_ERR_NOT_SUPPORTED);
  CHECK(std::string(cpu_ops().last_error()).find("aten::add.out") != std::string::npos);
  // sqrt of float16 computes in float.
  Tensor h16(FL_DTYPE_FLOAT16, {2});
  uint16_t bits[2] = {0x4400, 0x4200};  // 4.0, 3.0
  h16.write_storage(bits, 4);
  Tensor h16_out(FL_DTYPE_FLOAT16, {2});
  run_kernel("aten::sqrt.out", Inputs().tensor(h16), outs({&h16_out}));
  std::vector<uint16_t> r = h16_out.values<uint16_t>();
  CHECK(r[0] == 0x4000);  // 2.0
  CHECK(r[1] == 0x3eee);  // 1.732 rounded to half
}

TEST_CASE("pointwise: integer arithmetic and rounding division") {
  Tensor a = Tensor::from<int64_t>(FL_DTYPE_INT64, {4}, {7, -7, 7, -7});
  Tensor b = Tensor::from<int64_t>(FL_DTYPE_INT64, {4}, {2, 2, -2, -2});
  Tensor out(FL_DTYPE_INT64, {4});
  run_kernel("aten::div.out_mode", Inputs().tensor(a).tensor(b).str("trunc"), outs({&out}));
  CHECK(out.values<int64_t>() == std::vector<int64_t>{3, -3, -3, 3});
  run_kernel("aten::div.out_mode", Inputs().tensor(a).tensor(b).str("floor"), outs({&out}));
  CHECK(out.values<int64_t>() == std::vector<int64_t>{3, -4, -4, 3});
  run_kernel("aten::mul.out", Inputs().tensor(a).tensor(b), outs({&out}));
  CHECK(out.values<int64_t>() == std::vector<int64_t>{14, -14, -14, 14});
  run_kernel("aten::sub.out", Inputs().tensor(a).tensor(b).integer(3), outs({&out}));
  CHECK(out.values<int64_t>() == std::vector<int64_t>{1, -13, 13, -1});

  Tensor fa = Tensor::from<float>(FL_DTYPE_FLOAT32, {4}, {7.5f, -7.5f, 7.5f, -7.5f});
  Tensor fb = Tensor::from<float>(FL_DTYPE_FLOAT32, {4}, {2.f, 2.f, -2.f, -2.f});
  Tensor fo(FL_DTYPE_FLOAT32, {4});
  run_kernel("aten::div.out_mode", Inputs().tensor(fa).tensor(fb).str("floor"), outs({&fo}));
  CHECK(fo.values<float>() == std::vector<float>{3.f, -4.f, -4.f, 3.f});
  run_kernel("aten::div.out_mode", Inputs().tensor(fa).tensor(fb).none(), outs({&fo}));
  CHECK(fo.values<float>() == std::vector<float>{3.75f, -3.75f, -3.75f, 3.75f});
}

TEST_CASE("pointwise: comparisons produce bool") {
  Tensor a = Tensor::from<float>(FL_DTYPE_FLOAT32, {5}, {1, 2, 3, NAN, 5});
  Tensor b = Tensor::from<float>(FL_DTYPE_FLOAT32, {5}, {1, 3, 2, 4, 5});
  Tensor out(FL_DTYPE_BOOL, {5});
  struct Case { const char* op; std::vector<uint8_t> want; };
  for (const Case& c : {Case{"aten::eq.Tensor_out", {1, 0, 0, 0, 1}}, Case{"aten::ne.Tensor_out", {0, 1, 1, 1, 0}},
                        Case{"aten::lt.Tensor_out", {0, 1, 0, 0, 0}}, Case{"aten::le.Tensor_out", {1, 1, 0, 0, 1}},
                        Case{"aten::gt.Tensor_out", {0, 0, 1, 0, 0}}, Case{"aten::ge.Tensor_out", {1, 0, 1, 0, 1}}}) {
    INFO(c.op);
    run_kernel(c.op, Inputs().tensor(a).tensor(b), outs({&out}));
    CHECK(out.values<uint8_t>() == c.want);
  }
  // int tensor vs float scalar compares in float.
  Tensor i = Tensor::from<int64_t>(FL_DTYPE_INT64, {3}, {1, 2, 3});
  Tensor out3(FL_DTYPE_BOOL, {3});
  run_kernel("aten::gt.Scalar_out", Inputs().tensor(i).real(1.5), outs({&out3}));
  CHECK(out3.values<uint8_t>() == std::vector<uint8_t>{0, 1, 1});
  run_kernel("aten::eq.Scalar_out", Inputs().tensor(i).integer(2), outs({&out3}));
  CHECK(out3.values<uint8_t>() == std::vector<uint8_t>{0, 1, 0});
}

TEST_CASE("pointwise: where, masked_fill, lerp, addcmul, addcdiv") {
  Tensor cond = Tensor::from<uint8_t>(FL_DTYPE_BOOL, {4}, {1, 0, 0, 1});
  std::vector<float> av = {1, 2, 3, 4}, bv = {10, 20, 30, 40};
  Tensor a = Tensor::from<float>(FL_DTYPE_FLOAT32, {4}, av);
  Tensor b = Tensor::from<float>(FL_DTYPE_FLOAT32, {4}, bv);
  Tensor out(FL_DTYPE_FLOAT32, {4});
  run_kernel("aten::where.self_out", Inputs().tensor(cond).tensor(a).tensor(b), outs({&out}));
  CHECK(out.values<float>() == std::vector<float>{1, 20, 30, 4});

  run_kernel("aten::masked_fill.Scalar_out", Inputs().tensor(a).tensor(cond).real(-1.0), outs({&out}));
  CHECK(out.values<float>() == std::vector<float>{-1, 2, 3, -1});

  run_kernel("aten::lerp.Scalar_out", Inputs().tensor(a).tensor(b).real(0.25), outs({&out}));
  check_close(out.values<float>(), {1 + 0.25f * 9, 2 + 0.25f * 18, 3 + 0.25f * 27, 4 + 0.25f * 36});
  Tensor w = Tensor::from<float>(FL_DTYPE_FLOAT32, {4}, {0.f, 1.f, 0.5f, 0.75f});
  run_kernel("aten::lerp.Tensor_out", Inputs().tensor(a).tensor(b).tensor(w), outs({&out}));
  check_close(out.values<float>(), {1, 20, 16.5f, 31});

  run_kernel("aten::addcmul.out", Inputs().tensor(a).tensor(a).tensor(b).real(0.5), outs({&out}));
  check_close(out.values<float>(), {1 + 5, 2 + 20, 3 + 45, 4 + 80});
  run_kernel("aten::addcdiv.out", Inputs().tensor(a).tensor(b).tensor(a).integer(2), outs({&out}));
  check_close(out.values<float>(), {21, 22, 23, 24});
  // In place addcmul_ (out aliases self).
  run_kernel("aten::addcmul.out", Inputs().tensor(a).tensor(a).tensor(b).real(1.0), outs({&a}));
  check_close(a.values<float>(), {11, 42, 93, 164});
}

TEST_CASE("pointwise: fill, zero and copy with conversion and broadcasting") {
  Tensor x(FL_DTYPE_FLOAT32, {3, 5});
  run_kernel("aten::fill.Scalar_out", Inputs().tensor(x).real(2.5), outs({&x}));
  for (float v : x.values<float>()) CHECK(v == 2.5f);
  run_kernel("aten::zero.out", Inputs().tensor(x), outs({&x}));
  for (float v : x.values<float>()) CHECK(v == 0.0f);
  Tensor xi(FL_DTYPE_INT64, {4});
  run_kernel("aten::fill.Scalar_out", Inputs().tensor(xi).integer((int64_t{1} << 60) + 1), outs({&xi}));
  for (int64_t v : xi.values<int64_t>()) CHECK(v == (int64_t{1} << 60) + 1);

  // copy: int64 [3] broadcast into float32 [2, 3].
  Tensor src = Tensor::from<int64_t>(FL_DTYPE_INT64, {3}, {-1, 0, 7});
  Tensor dst(FL_DTYPE_FLOAT32, {2, 3});
  run_kernel("aten::copy.out", Inputs().tensor(dst).tensor(src).boolean(false), outs({&dst}));
  CHECK(dst.values<float>() == std::vector<float>{-1, 0, 7, -1, 0, 7});

  // float32 -> bfloat16 -> float32 round trip (exact for these values), -> bool.
  Tensor f = Tensor::from<float>(FL_DTYPE_FLOAT32, {4}, {1.0f, -2.5f, 0.0f, 3.0e10f});
  Tensor bf(FL_DTYPE_BFLOAT16, {4});
  run_kernel("aten::copy.out", Inputs().tensor(bf).tensor(f).boolean(false), outs({&bf}));
  Tensor back(FL_DTYPE_FLOAT32, {4});
  run_kernel("aten::copy.out", Inputs().tensor(back).tensor(bf).boolean(false), outs({&back}));
  std::vector<float> r = back.values<float>();
  CHECK(r[0] == 1.0f);
  CHECK(r[1] == -2.5f);
  CHECK(r[2] == 0.0f);
  CHECK(r[3] == Approx(3.0e10f).epsilon(1e-2));
  Tensor bo(FL_DTYPE_BOOL, {4});
  run_kernel("aten::copy.out", Inputs().tensor(bo).tensor(f).boolean(false), outs({&bo}));
  CHECK(bo.values<uint8_t>() == std::vector<uint8_t>{1, 1, 0, 1});

  // A transposed source into a contiguous float16 destination.
  Tensor m = Tensor::from<float>(FL_DTYPE_FLOAT32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor mt = m.view({3, 2}, {1, 3});
  Tensor h(FL_DTYPE_FLOAT16, {3, 2});
  run_kernel("aten::copy.out", Inputs().tensor(h).tensor(mt).boolean(false), outs({&h}));
  Tensor hf(FL_DTYPE_FLOAT32, {3, 2});
  run_kernel("aten::copy.out", Inputs().tensor(hf).tensor(h).boolean(false), outs({&hf}));
  CHECK(hf.values<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("pointwise: zero-size tensors are a no-op") {
  Tensor a(FL_DTYPE_FLOAT32, {0, 3});
  Tensor out(FL_DTYPE_FLOAT32, {0, 3});
  run_kernel("aten::add.out", Inputs().tensor(a).tensor(a).integer(1), outs({&out}));
  run_kernel("aten::exp.out", Inputs().tensor(a), outs({&out}));
  CHECK(out.numel() == 0);
}

TEST_CASE("pointwise: activation backward ops") {
  std::vector<float> g = random_floats(40, 5), x = random_floats(40, 6, -3, 3);
  Tensor tg = Tensor::from<float>(FL_DTYPE_FLOAT32, {40}, g);
  Tensor tx = Tensor::from<float>(FL_DTYPE_FLOAT32, {40}, x);
  Tensor out(FL_DTYPE_FLOAT32, {40});
  std::vector<float> want(40);
  auto sig = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };

  run_kernel("aten::tanh_backward.grad_input", Inputs().tensor(tg).tensor(tx), outs({&out}));
  for (int i = 0; i < 40; ++i) want[i] = g[i] * (1 - x[i] * x[i]);
  check_close(out.values<float>(), want);
  run_kernel("aten::sigmoid_backward.grad_input", Inputs().tensor(tg).tensor(tx), outs({&out}));
  for (int i = 0; i < 40; ++i) want[i] = g[i] * (1 - x[i]) * x[i];
  check_close(out.values<float>(), want);
  run_kernel("aten::silu_backward.grad_input", Inputs().tensor(tg).tensor(tx), outs({&out}));
  for (int i = 0; i < 40; ++i) want[i] = g[i] * sig(x[i]) * (1 + x[i] * (1 - sig(x[i])));
  check_close(out.values<float>(), want, 1e-4, 1e-5);
  // gelu backward against a central difference of the forward.
  for (const char* mode : {"none", "tanh"}) {
    run_kernel("aten::gelu_backward.grad_input", Inputs().tensor(tg).tensor(tx).str(mode), outs({&out}));
    std::vector<float> got = out.values<float>();
    for (int i = 0; i < 40; ++i) {
      double h = 1e-3;
      auto f = [&](double v) {
        return std::string(mode) == "none" ? 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))
                                           : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      };
      double d = (f(x[i] + h) - f(x[i] - h)) / (2 * h);
      CHECK(got[i] == Approx(g[i] * d).epsilon(1e-3).margin(1e-4));
    }
  }
}

TEST_CASE("pointwise: a device tensor in a Scalar slot is refused, not read on the host") {
  // alpha of add.out is a Scalar: a host value (FL_DEVICE_HOST) or a number. A one-element
  // device tensor there would be read on the host at call time (a GPU's memory, and before
  // queued work on it ran); the kernel says so instead.
  Tensor a = Tensor::from<float>(FL_DTYPE_FLOAT32, {3}, std::vector<float>{1, 2, 3});
  Tensor alpha = Tensor::from<float>(FL_DTYPE_FLOAT32, {}, std::vector<float>{2});
  Tensor alpha_int = Tensor::from<int64_t>(FL_DTYPE_INT64, {}, std::vector<int64_t>{2});
  Tensor out(FL_DTYPE_FLOAT32, {3});
  CHECK(call_kernel("aten::add.out", Inputs().tensor(a).tensor(a).tensor(alpha), outs({&out})) ==
        FL_ERR_NOT_SUPPORTED);
  CHECK(std::string(cpu_ops().last_error()).find("a device tensor where a host scalar is expected") !=
        std::string::npos);
  CHECK(call_kernel("aten::add.out", Inputs().tensor(a).tensor(a).tensor(alpha_int), outs({&out})) ==
        FL_ERR_NOT_SUPPORTED);
  HostScalar two(2.0);
  run_kernel("aten::add.out", Inputs().tensor(a).tensor(a).host(two), outs({&out}));
  check_close(out.values<float>(), {3, 6, 9});
}

// The index of the first element that differs in its bits, or -1 (a short failure message for
// vectors of a few hundred thousand elements).
static int64_t first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      UNSCOPED_INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
      return static_cast<int64_t>(i);
    }
  return -1;
}

TEST_CASE("pointwise: large tensors split over the plugin's threads, every element computed once") {
  // Sizes past the plugin's grain (32768 elements a chunk), so that its loops run in chunks on
  // its threads (two or more on any CI machine; TSan watches them in the sanitizer builds).
  const int64_t rows = 300, cols = 1001;  // odd sizes: uneven chunks
  std::vector<float> av = random_floats(rows * cols, 5, -2.0f, 2.0f);
  std::vector<float> bv = random_floats(rows * cols, 6, -2.0f, 2.0f);
  Tensor a = Tensor::from<float>(FL_DTYPE_FLOAT32, {rows, cols}, av);
  Tensor b = Tensor::from<float>(FL_DTYPE_FLOAT32, {rows, cols}, bv);
  Tensor out(FL_DTYPE_FLOAT32, {rows, cols});
  run_kernel("aten::add.out", Inputs().tensor(a).tensor(b).real(2.5), outs({&out}));
  std::vector<float> want(av.size());
  for (size_t i = 0; i < av.size(); ++i) want[i] = std::fma(2.5f, bv[i], av[i]);  // one rounding, as the plugin
  CHECK(first_difference(out.values<float>(), want) == -1);

  // Strided rows (a transposed input): the split is over rows, each walked from its own index.
  Tensor at = a.view({cols, rows}, {1, cols});
  Tensor out_t(FL_DTYPE_FLOAT32, {cols, rows});
  run_kernel("aten::add.out", Inputs().tensor(at).tensor(at).real(1.0), outs({&out_t}));
  std::vector<float> twice(av.size());
  for (size_t i = 0; i < av.size(); ++i) twice[i] = av[i] + av[i];
  CHECK(first_difference(out_t.values<float>(), transpose(twice, rows, cols)) == -1);

  // A sum over the rows: split over the columns (the kept, innermost dim).
  Tensor sums(FL_DTYPE_FLOAT32, {cols});
  run_kernel("aten::sum.IntList_out", Inputs().tensor(a).ints({0}).boolean(false).none(), outs({&sums}));
  std::vector<float> col_sums(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += av[static_cast<size_t>(r * cols + c)];
    col_sums[static_cast<size_t>(c)] = static_cast<float>(s);
  }
  CHECK(first_difference(sums.values<float>(), col_sums) == -1);
}
