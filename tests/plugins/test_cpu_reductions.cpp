// Reduction kernels of the CPU plugin against naive loops written here.
#include "cpu_plugin_fixture.hpp"

#include <cmath>
#include <vector>

using namespace fl::test;
using Catch::Detail::Approx;

namespace {
// x[i][j][k] with shape [2, 3, 4], values 0..23 shuffled a little.
std::vector<float> cube() {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>((i * 7) % 24) - 11.5f;
  return v;
}
}  // namespace

TEST_CASE("reductions: sum over dims, keepdim, all, dtype") {
  std::vector<float> v = cube();
  Tensor x = Tensor::from<float>(FL_DTYPE_FLOAT32, {2, 3, 4}, v);

  Tensor s1(FL_DTYPE_FLOAT32, {2, 4});
  run_kernel("aten::sum.IntList_out", Inputs().tensor(x).ints({1}).boolean(false).none(), outs({&s1}));
  std::vector<float> want(8, 0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want[i * 4 + k] += v[(i * 3 + j) * 4 + k];
  CHECK(s1.values<float>() == want);

  Tensor s02(FL_DTYPE_FLOAT32, {1, 3, 1});
  run_kernel("aten::sum.IntList_out", Inputs().tensor(x).ints({0, -1}).boolean(true).none(), outs({&s02}));
  std::vector<float> want02(3, 0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want02[j] += v[(i * 3 + j) * 4 + k];
  CHECK(s02.values<float>() == want02);

  Tensor all(FL_DTYPE_FLOAT32, {});
  run_kernel("aten::sum.IntList_out", Inputs().tensor(x).none().boolean(false).none(), outs({&all}));
  float total = 0;
  for (float f : v) total += f;
  CHECK(all.values<float>()[0] == Approx(total));
  run_kernel("aten::sum.IntList_out", Inputs().tensor(x).ints({}).boolean(false).none(), outs({&all}));
  CHECK(all.values<float>()[0] == Approx(total));

  // Strided (transposed) input, reduced along the non-contiguous dim.
  Tensor m = Tensor::from<float>(FL_DTYPE_FLOAT32, {3, 4}, std::vector<float>(v.begin(), v.begin() + 12));
  Tensor mt = m.view({4, 3}, {1, 4});
  Tensor col(FL_DTYPE_FLOAT32, {4});
  run_kernel("aten::sum.IntList_out", Inputs().tensor(mt).ints({1}).boolean(false).none(), outs({&col}));
  for (int k = 0; k < 4; ++k) CHECK(col.values<float>()[k] == v[k] + v[4 + k] + v[8 + k]);

  // Bool and int inputs sum into int64.
  Tensor b = Tensor::from<uint8_t>(FL_DTYPE_BOOL, {5}, {1, 0, 1, 1, 0});
  Tensor bs(FL_DTYPE_INT64, {});
  run_kernel("aten::sum.IntList_out", Inputs().tensor(b).none().boolean(false).none(), outs({&bs}));
  CHECK(bs.values<int64_t>()[0] == 3);
  // float16 output with dtype=float64 accumulation requested.
  Tensor sd(FL_DTYPE_FLOAT64, {2, 4});
  run_kernel("aten::sum.IntList_out", Inputs().tensor(x).ints({1}).boolean(false).integer(7), outs({&sd}));
  for (int i = 0; i < 8; ++i) CHECK(sd.values<double>()[i] == want[i]);

  // Empty reduction gives zeros.
  Tensor e(FL_DTYPE_FLOAT32, {0, 3});
  Tensor es(FL_DTYPE_FLOAT32, {3});
  run_kernel("aten::sum.IntList_out", Inputs().tensor(e).ints({0}).boolean(false).none(), outs({&es}));
  CHECK(es.values<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE("reductions: mean, amax, amin") {
  std::vector<float> v = cube();
  Tensor x = Tensor::from<float>(FL_DTYPE_FLOAT32, {2, 3, 4}, v);
  Tensor m(FL_DTYPE_FLOAT32, {2, 3});
  run_kernel("aten::mean.out", Inputs().tensor(x).ints({2}).boolean(false).none(), outs({&m}));
  Tensor mx(FL_DTYPE_FLOAT32, {2, 3});
  run_kernel("aten::amax.out", Inputs().tensor(x).ints({2}).boolean(false), outs({&mx}));
  Tensor mn(FL_DTYPE_FLOAT32, {2, 3, 1});
  run_kernel("aten::amin.out", Inputs().tensor(x).ints({-1}).boolean(true), outs({&mn}));
  for (int r = 0; r < 6; ++r) {
    float s = 0, hi = -1e30f, lo = 1e30f;
    for (int k = 0; k < 4; ++k) {
      s += v[r * 4 + k];
      hi = std::max(hi, v[r * 4 + k]);
      lo = std::min(lo, v[r * 4 + k]);
    }
    CHECK(m.values<float>()[r] == Approx(s / 4));
    CHECK(mx.values<float>()[r] == hi);
    CHECK(mn.values<float>()[r] == lo);
  }
  Tensor nan_in = Tensor::from<float>(FL_DTYPE_FLOAT32, {3}, {1.0f, NAN, 2.0f});
  Tensor one(FL_DTYPE_FLOAT32, {});
  run_kernel("aten::amax.out", Inputs().tensor(nan_in).ints({}).boolean(false), outs({&one}));
  CHECK(std::isnan(one.values<float>()[0]));
  // mean of an int tensor into int64 is not handled (ATen refuses it too).
  Tensor i = Tensor::from<int64_t>(FL_DTYPE_INT64, {2}, {1, 2});
  Tensor io(FL_DTYPE_INT64, {});
  CHECK(call_kernel("aten::mean.out", Inputs().tensor(i).none().boolean(false).none(), outs({&io})) == FL_ERR_NOT_SUPPORTED);
}

TEST_CASE("reductions: argmax, argmin, max.dim, min.dim") {
  Tensor x = Tensor::from<float>(FL_DTYPE_FLOAT32, {2, 4}, {3, 9, 9, 1, 5, -2, 7, -2});
  Tensor idx(FL_DTYPE_INT64, {2});
  run_kernel("aten::argmax.out", Inputs().tensor(x).integer(1).boolean(false), outs({&idx}));
  CHECK(idx.values<int64_t>() == std::vector<int64_t>{1, 2});  // first of ties
  run_kernel("aten::argmin.out", Inputs().tensor(x).integer(1).boolean(false), outs({&idx}));
  CHECK(idx.values<int64_t>() == std::vector<int64_t>{3, 1});
  Tensor flat(FL_DTYPE_INT64, {});
  run_kernel("aten::argmax.out", Inputs().tensor(x).none().boolean(false), outs({&flat}));
  CHECK(flat.values<int64_t>()[0] == 1);
  run_kernel("aten::argmin.out", Inputs().tensor(x).none().boolean(false), outs({&flat}));
  CHECK(flat.values<int64_t>()[0] == 5);

  Tensor col_idx(FL_DTYPE_INT64, {1, 4});
  Tensor col_val(FL_DTYPE_FLOAT32, {1, 4});
  run_kernel("aten::max.dim_max", Inputs().tensor(x).integer(0).boolean(true), outs({&col_val, &col_idx}));
  CHECK(col_val.values<float>() == std::vector<float>{5, 9, 9, 1});
  CHECK(col_idx.values<int64_t>() == std::vector<int64_t>{1, 0, 0, 0});
  run_kernel("aten::min.dim_min", Inputs().tensor(x).integer(0).boolean(true), outs({&col_val, &col_idx}));
  CHECK(col_val.values<float>() == std::vector<float>{3, -2, 7, -2});
  CHECK(col_idx.values<int64_t>() == std::vector<int64_t>{0, 1, 1, 1});

  // NaN wins argmax.
  Tensor n = Tensor::from<float>(FL_DTYPE_FLOAT32, {3}, {1, NAN, 5});
  run_kernel("aten::argmax.out", Inputs().tensor(n).none().boolean(false), outs({&flat}));
  CHECK(flat.values<int64_t>()[0] == 1);
}
