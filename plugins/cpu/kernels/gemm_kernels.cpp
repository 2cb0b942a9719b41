// gemm_kernels.cpp — mm, addmm, bmm, baddbmm (float32/float64) through OpenBLAS cblas
// (blas_library.hpp: loaded at first use, with kernels for this CPU).
// Inputs may be strided: a matrix with a unit column stride (row-major) or a unit row stride
// (transposed) goes to BLAS as is; any other layout (e.g. expanded, stride 0) is copied to a
// contiguous buffer on the worker first. Outputs arrive contiguous. float16/bfloat16 are
// not handled here (FL_ERR_NOT_SUPPORTED: the core falls back).
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "pointwise_common.hpp"
#include "pointwise_functors.hpp"

#include <optional>
#include <utility>

#include "blas_library.hpp"

#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// A 2-D matrix view: element (r, c) at data + (r * rs + c * cs) elements.
struct MatrixView {
  char* data = nullptr;
  int64_t rows = 0, cols = 0, rs = 0, cs = 0;
};

// A batch of matrices: matrix b starts at data + b * batch_stride elements.
struct BatchView {
  MatrixView m;
  int64_t batch = 1;
  int64_t batch_stride = 0;
};

// How BLAS reads a matrix: as is (NoTrans, ld = row stride), transposed (Trans, ld = column
// stride), or not at all (needs a contiguous copy).
struct BlasOperand {
  const void* data;
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

// dst[r * cols + c] = src[r * rs + c * cs]: the matrix `v` laid out at `src`, copied row-major.
template <class T>
void gather_matrix(const MatrixView& v, const T* src, T* dst) {
  for (int64_t r = 0; r < v.rows; ++r)
    for (int64_t c = 0; c < v.cols; ++c) dst[r * v.cols + c] = src[r * v.rs + c * v.cs];
}

template <class T>
BlasOperand blas_operand(const MatrixView& v, std::vector<T>& scratch) {
  int64_t rows = v.rows, cols = v.cols;
  if (v.cs == 1 && (rows <= 1 || v.rs >= std::max<int64_t>(1, cols)))
    return {v.data, CblasNoTrans, rows <= 1 ? std::max<int64_t>(1, cols) : v.rs};
  if (v.rs == 1 && (cols <= 1 || v.cs >= std::max<int64_t>(1, rows)))
    return {v.data, CblasTrans, cols <= 1 ? std::max<int64_t>(1, rows) : v.cs};
  scratch.resize(static_cast<size_t>(rows * cols));
  gather_matrix(v, reinterpret_cast<const T*>(v.data), scratch.data());
  return {scratch.data(), CblasNoTrans, std::max<int64_t>(1, cols)};
}

// A contiguous copy of every matrix of `v` in `store`, and the view of it: for an operand the
// output overlaps (x.addmm_(x, w), addmm(b, x, w, out=x)), read before the output is written.
template <class T>
BatchView snapshot(const BatchView& v, std::vector<T>& store) {
  const int64_t rows = v.m.rows, cols = v.m.cols;
  store.resize(static_cast<size_t>(v.batch * rows * cols));
  for (int64_t i = 0; i < v.batch; ++i)
    gather_matrix(v.m, reinterpret_cast<const T*>(v.m.data) + i * v.batch_stride, store.data() + i * rows * cols);
  BatchView copy = v;
  copy.m.data = reinterpret_cast<char*>(store.data());
  copy.m.rs = cols;
  copy.m.cs = 1;
  copy.batch_stride = rows * cols;
  return copy;
}

// out[b] = alpha * a[b] @ b[b] + beta * out[b], for every batch; out contiguous [B, M, N].
template <class T>
void batched_gemm(const BatchView& a, const BatchView& b, char* out, int64_t batch, T alpha, T beta) {
  const int64_t m = a.m.rows, k = a.m.cols, n = b.m.cols;
  if (m == 0 || n == 0) return;
  T* c = reinterpret_cast<T*>(out);
  std::vector<T> scratch_a, scratch_b;
  for (int64_t i = 0; i < batch; ++i) {
    T* ci = c + i * m * n;
    if (k == 0) {
      for (int64_t j = 0; j < m * n; ++j) ci[j] = beta == T(0) ? T(0) : beta * ci[j];
      continue;
    }
    MatrixView ma = a.m, mb = b.m;
    ma.data += static_cast<int64_t>(sizeof(T)) * i * a.batch_stride;
    mb.data += static_cast<int64_t>(sizeof(T)) * i * b.batch_stride;
    BlasOperand oa = blas_operand<T>(ma, scratch_a);
    BlasOperand ob = blas_operand<T>(mb, scratch_b);
    blas::gemm<T>(oa.trans, ob.trans, m, n, k, alpha, static_cast<const T*>(oa.data), oa.ld,
                 static_cast<const T*>(ob.data), ob.ld, beta, ci, n);
  }
}

MatrixView matrix_of(const TensorDesc& t, int first_dim) {
  MatrixView v;
  v.data = t.data;
  v.rows = t.shape[first_dim];
  v.cols = t.shape[first_dim + 1];
  v.rs = t.strides[first_dim];
  v.cs = t.strides[first_dim + 1];
  return v;
}

void check_blas_dtype(const char* op, std::initializer_list<const TensorDesc*> tensors) {
  fl_dtype_t d = (*tensors.begin())->dtype;
  for (const TensorDesc* t : tensors)
    if (t->dtype != d) unsupported(op, "mixed dtypes");
  if (d != FL_DTYPE_FLOAT32 && d != FL_DTYPE_FLOAT64)
    unsupported(op, std::string("dtype ") + plugin::dtype_name(d) + " (float32/float64 only)");
}

// (Batched) matrix product with an optional broadcast bias: out = beta * bias + alpha * a @ b.
// `batched`: 3-D operands. With beta == 0 the bias is ignored (ATen does not propagate NaN).
void launch_gemm(const fl_kernel_call* call, const char* op, const TensorDesc& a,
                 const TensorDesc& b, const TensorDesc& out, const TensorDesc* bias, Param beta,
                 Param alpha, bool batched) {
  const int rank = batched ? 3 : 2;
  if (a.ndim != rank || b.ndim != rank || out.ndim != rank)
    invalid(op, "expected " + std::to_string(rank) + "-D operands");
  check_blas_dtype(op, {&a, &b, &out});
  if (bias) check_blas_dtype(op, {&a, bias});
  const int f = batched ? 1 : 0;
  const int64_t batch = batched ? a.shape[0] : 1;
  if (batched && (b.shape[0] != batch || out.shape[0] != batch)) invalid(op, "batch sizes differ");
  if (a.shape[f + 1] != b.shape[f] || out.shape[f] != a.shape[f] || out.shape[f + 1] != b.shape[f + 1])
    invalid(op, "shapes " + shape_string(a) + " @ " + shape_string(b) + " -> " + shape_string(out) +
                    " do not match");
  if (!out.contiguous()) unsupported(op, "non-contiguous output");
  BatchView va{matrix_of(a, f), batch, batched ? a.strides[0] : 0};
  BatchView vb{matrix_of(b, f), batch, batched ? b.strides[0] : 0};
  bool use_bias = bias != nullptr && (beta.is_int ? beta.i != 0 : beta.d != 0.0);
  std::optional<ElementwisePlan> bias_copy;
  if (use_bias) {
    bias_copy = plan_elementwise(op, out, {PlanInput{bias, out.dtype}},
                                 select_kernel<fn::Identity, 1, kBlasMask>(out.dtype, op));
  }
  if (out.numel() == 0) return;
  char* out_data = out.data;
  fl_dtype_t dtype = out.dtype;
  // An operand in the output's memory is copied before the output is written (by the bias
  // copy, then by BLAS, which reads its operands while it writes); so is a bias that shares
  // it other than as the output itself (addmm(x.t(), a, w, out=x)): the bias copy would read
  // elements it has already written.
  const bool copy_a = overlaps(out, a), copy_b = overlaps(out, b);
  const bool copy_bias = bias_copy && !bias->host_scalar && overlaps(out, *bias) && !same_elements(out, *bias);
  const auto bias_span = copy_bias ? byte_span(*bias) : std::pair<const char*, const char*>{};
  submit(call, [=] {
    auto run = [&](auto zero) {
      using T = decltype(zero);
      std::vector<T> store_a, store_b;
      BatchView ra = copy_a ? snapshot<T>(va, store_a) : va;
      BatchView rb = copy_b ? snapshot<T>(vb, store_b) : vb;
      if (copy_bias) {
        // The bias's bytes as they are, read through the plan's own strides.
        std::vector<char> store(bias_span.first, bias_span.second);
        ElementwisePlan plan = *bias_copy;
        plan.base[1] = store.data();
        run_elementwise(plan);
      } else if (bias_copy) {
        run_elementwise(*bias_copy);
      }
      batched_gemm<T>(ra, rb, out_data, batch, param_as<T>(alpha), use_bias ? param_as<T>(beta) : zero);
    };
    if (dtype == FL_DTYPE_FLOAT32) run(0.0f);
    else run(0.0);
  });
}

void mm_out(const fl_kernel_call* call) {
  const char* op = "aten::mm.out";
  Args args(call);
  TensorDesc a = describe(args.tensor(0), op), b = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  launch_gemm(call, op, a, b, out, nullptr, param_int(0), param_int(1), false);
}

void bmm_out(const fl_kernel_call* call) {
  const char* op = "aten::bmm.out";
  Args args(call);
  TensorDesc a = describe(args.tensor(0), op), b = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  launch_gemm(call, op, a, b, out, nullptr, param_int(0), param_int(1), true);
}

// addmm.out(self, mat1, mat2, *, beta, alpha); baddbmm.out(self, batch1, batch2, *, beta, alpha)
template <bool Batched>
void addmm_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc bias = describe(args.tensor(0), op);
  TensorDesc a = describe(args.tensor(1), op), b = describe(args.tensor(2), op);
  TensorDesc out = describe(args.output(0), op);
  Param beta = args.is_none(3) ? param_int(1) : param_arg(args, 3);
  Param alpha = args.is_none(4) ? param_int(1) : param_arg(args, 4);
  launch_gemm(call, op, a, b, out, &bias, beta, alpha, Batched);
}
void addmm_out(const fl_kernel_call* call) { addmm_body<false>(call, "aten::addmm.out"); }
void baddbmm_out(const fl_kernel_call* call) { addmm_body<true>(call, "aten::baddbmm.out"); }

}  // namespace

void register_gemm_kernels(KernelRegistry& r) {
  r.add("aten::mm.out", kBlasMask, FL_KERNEL_STRIDED_INPUTS, guarded<mm_out>);
  r.add("aten::bmm.out", kBlasMask, FL_KERNEL_STRIDED_INPUTS, guarded<bmm_out>);
  // In place (addmm_) the output is `self`, which is only read before the product.
  r.add("aten::addmm.out", kBlasMask, FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_ALIASING_OK, guarded<addmm_out>);
  r.add("aten::baddbmm.out", kBlasMask, FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_ALIASING_OK,
        guarded<baddbmm_out>);
}

}  // namespace fl::cpu::kernels
