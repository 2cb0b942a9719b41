// gemm_cublas.cpp — mm, addmm, bmm, baddbmm through cublasGemmEx /
// cublasGemmStridedBatchedEx. Row-major C = A·B is computed as column-major Cᵀ = Bᵀ·Aᵀ;
// an operand that is a transposed view (column-major) is passed with CUBLAS_OP_T instead
// of being copied, any other layout is copied dense first. float32 uses TF32 tensor cores
// unless the call has FL_CALL_PRECISE; bf16/fp16 accumulate in float32 (with cuBLAS's
// default math mode, as torch's defaults). The handle is rebound only when the stream changes. One handle per
// device (calls on it serialised by a mutex) and a 32 MiB workspace per stream, so that
// GEMMs on different streams never share scratch memory.
#include "blas_handles.hpp"
#include "copy_kernels.hpp"
#include "device_state.hpp"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "scratch_buffer.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace fl::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

void check_blas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  if (status == CUBLAS_STATUS_ALLOC_FAILED)
    plugin::raise(FL_ERR_OUT_OF_MEMORY, std::string(what) + ": " + cublasGetStatusString(status));
  plugin::raise(FL_ERR_DEVICE, std::string(what) + ": " + cublasGetStatusName(status) + " (" +
                                   cublasGetStatusString(status) + ")");
}

struct BlasDevice {
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
  std::unordered_map<gpuStream_t, void*> workspaces;
  // The stream (and its workspace) the handle is bound to: rebinding only on a change
  // (cublasSetStream resets the workspace, so both are set together).
  bool bound = false;
  gpuStream_t bound_stream = nullptr;
};

std::mutex g_blas_mutex;
std::vector<std::unique_ptr<BlasDevice>> g_blas;

// The device's cuBLAS state, created on first use (the device is current).
BlasDevice& blas_device(int32_t device) {
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  if (g_blas.size() <= static_cast<size_t>(device)) g_blas.resize(static_cast<size_t>(device) + 1);
  auto& slot = g_blas[static_cast<size_t>(device)];
  if (!slot) slot = std::make_unique<BlasDevice>();
  return *slot;
}

// Must hold d.mutex.
void* workspace_for(BlasDevice& d, gpuStream_t stream) {
  auto it = d.workspaces.find(stream);
  if (it != d.workspaces.end()) return it->second;
  void* ws = nullptr;
  check_gpu(gpuMalloc(&ws, kWorkspaceBytes), "cudaMalloc (cuBLAS workspace)");
  d.workspaces.emplace(stream, ws);
  return ws;
}

// One GEMM operand: rows x cols matrices, batch_stride apart (0: broadcast), either
// row-major (stride 1 along cols) or column-major (stride 1 along rows) with leading dim ld.
struct Operand {
  const void* ptr = nullptr;
  int64_t rows = 0, cols = 0, batch_stride = 0, ld = 0;
  bool col_major = false;
};

std::optional<Operand> describe(const fl_tensor& t) {
  const int nd = t.ndim;
  Operand op;
  op.ptr = plugin::data_ptr<const void>(t);
  op.rows = t.shape[nd - 2];
  op.cols = t.shape[nd - 1];
  op.batch_stride = nd == 3 ? t.strides[0] : 0;
  const int64_t s_row = t.strides[nd - 2], s_col = t.strides[nd - 1];
  if ((s_col == 1 || op.cols <= 1) && (op.rows <= 1 || s_row >= std::max<int64_t>(1, op.cols))) {
    op.col_major = false;
    op.ld = op.rows <= 1 ? std::max<int64_t>(1, op.cols) : s_row;
    return op;
  }
  if ((s_row == 1 || op.rows <= 1) && (op.cols <= 1 || s_col >= std::max<int64_t>(1, op.rows))) {
    op.col_major = true;
    op.ld = op.cols <= 1 ? std::max<int64_t>(1, op.rows) : s_col;
    return op;
  }
  return std::nullopt;
}

cudaDataType_t cuda_type(fl_dtype_t dt) {
  switch (dt) {
    case FL_DTYPE_FLOAT32: return CUDA_R_32F;
    case FL_DTYPE_FLOAT64: return CUDA_R_64F;
    case FL_DTYPE_FLOAT16: return CUDA_R_16F;
    case FL_DTYPE_BFLOAT16: return CUDA_R_16BF;
    default: plugin::raise(FL_ERR_NOT_SUPPORTED, std::string("GEMM dtype ") + plugin::dtype_name(dt));
  }
}

bool fits_int(int64_t v) { return v >= 0 && v <= 2147483647LL; }

// out[b] = alpha * a[b] · b[b] + beta * out[b]; out dense row-major (batch, M, N).
void run_gemm(const fl_kernel_call* call, const LaunchContext& ctx, const char* name, const fl_tensor& a,
              const fl_tensor& b, const fl_tensor& out, double alpha, double beta, bool batched,
              const std::function<void()>& before_gemm) {
  const int want = batched ? 3 : 2;
  if (a.ndim != want || b.ndim != want || out.ndim != want)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": operands must be " + std::to_string(want) + "-D");
  if (a.dtype != b.dtype || a.dtype != out.dtype)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes " + plugin::dtype_name(a.dtype) + ", " +
                                            plugin::dtype_name(b.dtype) + " -> " + plugin::dtype_name(out.dtype));
  const cudaDataType_t dtype = cuda_type(a.dtype);
  if (!plugin::is_contiguous(out)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output not dense");
  const int64_t batch = batched ? out.shape[0] : 1;
  const int64_t m = a.shape[want - 2], k = a.shape[want - 1], n = b.shape[want - 1];
  if (b.shape[want - 2] != k || out.shape[want - 2] != m || out.shape[want - 1] != n ||
      (batched && (a.shape[0] != batch || b.shape[0] != batch)))
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": shapes do not multiply");
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(batch))
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": dimension beyond int32");
  if (k == 0 && beta != 0.0)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": empty inner dimension with beta != 0");
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    check_gpu(gpuMemsetAsync(plugin::data_ptr<void>(out), 0,
                             static_cast<size_t>(batch * m * n) * plugin::dtype_size(out.dtype), ctx.stream),
              "cudaMemsetAsync");
    return;
  }

  // Operands in a layout cuBLAS takes; others are copied dense into scratch memory.
  std::optional<Operand> da = describe(a), db = describe(b);
  const size_t esize = plugin::dtype_size(a.dtype);
  ScratchBuffer a_copy(da ? 0 : static_cast<size_t>(plugin::numel(a)) * esize, ctx.stream);
  ScratchBuffer b_copy(db ? 0 : static_cast<size_t>(plugin::numel(b)) * esize, ctx.stream);
  // Everything that may fail before enqueuing has been checked; the bias copy goes first.
  if (before_gemm) before_gemm();
  auto densify = [&](const fl_tensor& t, ScratchBuffer& buf) {
    std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
    DenseTensor dense = make_dense(buf.get(), t.dtype, shape, ctx.device);
    launch_broadcast_copy(t, dense.get(), ctx);
    Operand op;
    op.ptr = buf.get();
    op.rows = t.shape[t.ndim - 2];
    op.cols = t.shape[t.ndim - 1];
    op.batch_stride = t.ndim == 3 ? op.rows * op.cols : 0;
    op.ld = std::max<int64_t>(1, op.cols);
    op.col_major = false;
    return op;
  };
  if (!da) da = densify(a, a_copy);
  if (!db) db = densify(b, b_copy);

  const bool precise = (call->flags & FL_CALL_PRECISE) != 0;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (a.dtype == FL_DTYPE_FLOAT64) compute = CUBLAS_COMPUTE_64F;
  else if (a.dtype == FL_DTYPE_FLOAT32 && !precise) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta) : &beta_f;

  // Column-major view: C^T (n x m) = B^T (n x k) · A^T (k x m).
  const cublasOperation_t op_b = db->col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = da->col_major ? CUBLAS_OP_T : CUBLAS_OP_N;

  BlasDevice& dev = blas_device(ctx.device);
  std::lock_guard<std::mutex> lock(dev.mutex);
  if (dev.handle == nullptr) {
    check_blas(cublasCreate(&dev.handle), "cublasCreate");
    // TF32 is chosen by the compute type above, not the math mode. Half-type GEMMs may use
    // reduced-precision reductions, as torch allows by default
    // (allow_bf16/fp16_reduced_precision_reduction = True).
    check_blas(cublasSetMathMode(dev.handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  if (!dev.bound || dev.bound_stream != ctx.stream) {
    void* ws = workspace_for(dev, ctx.stream);
    dev.bound = false;
    check_blas(cublasSetStream(dev.handle, ctx.stream), "cublasSetStream");
    check_blas(cublasSetWorkspace(dev.handle, ws, kWorkspaceBytes), "cublasSetWorkspace");
    dev.bound = true;
    dev.bound_stream = ctx.stream;
  }
  if (!batched) {
    check_blas(cublasGemmEx(dev.handle, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                            alpha_p, db->ptr, dtype, static_cast<int>(db->ld), da->ptr, dtype,
                            static_cast<int>(da->ld), beta_p, plugin::data_ptr<void>(out), dtype, static_cast<int>(n),
                            compute, CUBLAS_GEMM_DEFAULT),
               name);
  } else {
    check_blas(cublasGemmStridedBatchedEx(dev.handle, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                          static_cast<int>(k), alpha_p, db->ptr, dtype, static_cast<int>(db->ld),
                                          db->batch_stride, da->ptr, dtype, static_cast<int>(da->ld), da->batch_stride,
                                          beta_p, plugin::data_ptr<void>(out), dtype, static_cast<int>(n), m * n,
                                          static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT),
               name);
  }
}

double optional_scalar(const Args& a, int32_t i, double fallback) { return a.is_none(i) ? fallback : a.number(i); }

fl_status_t gemm_entry(const fl_kernel_call* call, const char* name, bool batched, bool with_input) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& out = a.output(0);
    if (!with_input) {
      run_gemm(call, ctx, name, device_tensor(a, 0, name), device_tensor(a, 1, name), out, 1.0, 0.0, batched, {});
      return;
    }
    // addmm/baddbmm(self, m1, m2, beta, alpha): out = beta * self + alpha * (m1 · m2). With
    // beta == 0, self is ignored (NaNs in it do not propagate), as in ATen.
    const ElementwiseInput self = elementwise_input(a, 0);
    const double beta = optional_scalar(a, 3, 1.0);
    const double alpha = optional_scalar(a, 4, 1.0);
    std::function<void()> load_self;
    if (beta != 0.0) {
      load_self = [&] {
        if (self.tensor != nullptr) {
          launch_broadcast_copy(*self.tensor, out, ctx);
        } else {
          plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": self is a host scalar");
        }
      };
      if (self.tensor == nullptr) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": self is a host scalar");
    }
    run_gemm(call, ctx, name, device_tensor(a, 1, name), device_tensor(a, 2, name), out, alpha,
             beta != 0.0 ? beta : 0.0, batched, load_self);
  });
}

}  // namespace

void release_stream_blas_workspace(int32_t device, gpuStream_t stream) {
  BlasDevice* d = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_blas_mutex);
    if (device < 0 || static_cast<size_t>(device) >= g_blas.size() || !g_blas[static_cast<size_t>(device)]) return;
    d = g_blas[static_cast<size_t>(device)].get();
  }
  std::lock_guard<std::mutex> lock(d->mutex);
  if (d->bound && d->bound_stream == stream) d->bound = false;  // the next GEMM rebinds
  auto it = d->workspaces.find(stream);
  if (it == d->workspaces.end()) return;
  (void)gpuFree(it->second);
  d->workspaces.erase(it);
}

void shutdown_blas() {
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  for (size_t i = 0; i < g_blas.size(); ++i) {
    if (!g_blas[i]) continue;
    (void)gpuSetDevice(static_cast<int>(i));
    if (g_blas[i]->handle != nullptr) (void)cublasDestroy(g_blas[i]->handle);
    for (auto& [stream, ws] : g_blas[i]->workspaces) (void)gpuFree(ws);
  }
  g_blas.clear();
}

FL_CUDA_KERNEL(k_mm_out) { return gemm_entry(call, "aten::mm", false, false); }
FL_CUDA_KERNEL(k_bmm_out) { return gemm_entry(call, "aten::bmm", true, false); }
FL_CUDA_KERNEL(k_addmm_out) { return gemm_entry(call, "aten::addmm", false, true); }
FL_CUDA_KERNEL(k_baddbmm_out) { return gemm_entry(call, "aten::baddbmm", true, true); }

}  // namespace fl::cuda
