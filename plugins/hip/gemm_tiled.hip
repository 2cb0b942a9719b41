// gemm_tiled.hip — mm, addmm, bmm, baddbmm for the HIP plugin without a BLAS library (Debian's
// ROCm has no rocBLAS/hipBLAS): a shared-memory tiled kernel, 16x16 output tile per block,
// operands read through their strides (so transposed and broadcast views need no copy),
// accumulation in float (double for float64) in a fixed order: deterministic. The output is
// dense row-major (the entries do not declare FL_KERNEL_STRIDED_OUTPUTS).
// Not done: no matrix cores (MFMA/WMMA), no split-K; throughput is far below rocBLAS.
#include "copy_kernels.hpp"
#include "device_state.hpp"
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

#include <algorithm>
#include <string>

namespace fl::cuda {
namespace {

constexpr int kTile = 16;

// Strides (in elements) of one operand viewed as [batch, rows, cols]; batch stride 0 for 2-D.
struct MatrixView {
  const void* data;
  int64_t batch_stride, row_stride, col_stride;
};

// out[b, i, j] = alpha * sum_k a[b, i, k] * bm[b, k, j] + beta * out[b, i, j] (beta == 0: out
// is only written). One block computes a kTile x kTile tile of one batch entry at a time.
template <class T>
__global__ void gemm_tiled_kernel(MatrixView a, MatrixView bm, T* out, int64_t batch, int64_t m, int64_t n,
                                  int64_t k, acc_type_t<T> alpha, acc_type_t<T> beta) {
  using Acc = acc_type_t<T>;
  __shared__ Acc a_tile[kTile][kTile + 1];
  __shared__ Acc b_tile[kTile][kTile + 1];
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(bm.data);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + ty;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + tx;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    Acc acc = Acc(0);
    for (int64_t k0 = 0; k0 < k; k0 += kTile) {
      const int64_t ka = k0 + tx, kb = k0 + ty;
      a_tile[ty][tx] = (row < m && ka < k)
                           ? convert<Acc>(pa[b * a.batch_stride + row * a.row_stride + ka * a.col_stride])
                           : Acc(0);
      b_tile[ty][tx] = (kb < k && col < n)
                           ? convert<Acc>(pb[b * bm.batch_stride + kb * bm.row_stride + col * bm.col_stride])
                           : Acc(0);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTile; ++kk) acc += a_tile[ty][kk] * b_tile[kk][tx];
      __syncthreads();
    }
    if (row < m && col < n) {
      T* dst = out + (b * m + row) * n + col;
      Acc v = alpha * acc;
      if (beta != Acc(0)) v += beta * convert<Acc>(*dst);
      *dst = convert<T>(v);
    }
  }
}

MatrixView view_of(const fl_tensor& t) {
  const int nd = t.ndim;
  return MatrixView{plugin::data_ptr<const void>(t), nd == 3 ? t.strides[0] : 0, t.strides[nd - 2], t.strides[nd - 1]};
}

// Checks shapes and dtypes, then (after `before`, which may enqueue the bias copy) launches.
// Everything that can fail is checked before anything is enqueued.
void run_gemm(const LaunchContext& ctx, const char* name, const fl_tensor& a, const fl_tensor& b,
              const fl_tensor& out, double alpha, double beta, bool batched, const fl_tensor* bias) {
  const int want = batched ? 3 : 2;
  if (a.ndim != want || b.ndim != want || out.ndim != want)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": operands must be " + std::to_string(want) + "-D");
  if (a.dtype != b.dtype || a.dtype != out.dtype)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes " + plugin::dtype_name(a.dtype) + ", " +
                                            plugin::dtype_name(b.dtype) + " -> " + plugin::dtype_name(out.dtype));
  if (!plugin::is_contiguous(out)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output not dense");
  const int64_t batch = batched ? out.shape[0] : 1;
  const int64_t m = a.shape[want - 2], k = a.shape[want - 1], n = b.shape[want - 1];
  if (b.shape[want - 2] != k || out.shape[want - 2] != m || out.shape[want - 1] != n ||
      (batched && (a.shape[0] != batch || b.shape[0] != batch)))
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": shapes do not multiply");
  const int64_t grid_x = (n + kTile - 1) / kTile, grid_y = (m + kTile - 1) / kTile;
  if (grid_x > 0x7fffffff || grid_y > 65535)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": matrix too large for one launch");
  bool launched = false;
  const bool ok = dispatch_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_type_t<T>;
    if (bias != nullptr) launch_broadcast_copy(*bias, out, ctx);  // out = self, then beta * out
    if (m == 0 || n == 0 || batch == 0) return;
    const dim3 block(kTile, kTile, 1);
    const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y),
                    static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
    gemm_tiled_kernel<T><<<grid, block, 0, ctx.stream>>>(view_of(a), view_of(b), plugin::data_ptr<T>(out), batch, m,
                                                          n, k, static_cast<Acc>(alpha),
                                                          static_cast<Acc>(bias != nullptr ? beta : 0.0));
    launched = true;
  });
  if (!ok) unsupported_dtype(name, a.dtype);
  if (launched) check_launch(name);
}

double optional_scalar(const Args& a, int32_t i, double fallback) { return a.is_none(i) ? fallback : a.number(i); }

fl_status_t gemm_entry(const fl_kernel_call* call, const char* name, bool batched, bool with_input) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& out = a.output(0);
    if (!with_input) {
      run_gemm(ctx, name, device_tensor(a, 0, name), device_tensor(a, 1, name), out, 1.0, 0.0, batched, nullptr);
      return;
    }
    // addmm/baddbmm(self, m1, m2, *, beta=1, alpha=1): out = beta * self + alpha * (m1 · m2).
    // With beta == 0, self is not read (NaNs in it do not propagate), as in ATen.
    const double beta = optional_scalar(a, 3, 1.0);
    const double alpha = optional_scalar(a, 4, 1.0);
    const fl_tensor* bias = nullptr;
    if (beta != 0.0) {
      const ElementwiseInput self = elementwise_input(a, 0);
      if (self.tensor == nullptr) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": self is a host scalar");
      bias = self.tensor;
    }
    run_gemm(ctx, name, device_tensor(a, 1, name), device_tensor(a, 2, name), out, alpha, beta, batched, bias);
  });
}

}  // namespace

FL_CUDA_KERNEL(k_mm_out) { return gemm_entry(call, "aten::mm", false, false); }
FL_CUDA_KERNEL(k_bmm_out) { return gemm_entry(call, "aten::bmm", true, false); }
FL_CUDA_KERNEL(k_addmm_out) { return gemm_entry(call, "aten::addmm", false, true); }
FL_CUDA_KERNEL(k_baddbmm_out) { return gemm_entry(call, "aten::baddbmm", true, true); }

}  // namespace fl::cuda
