// pointwise_extra_kernels.cpp — ternary, masked, fill and copy entries on the elementwise
// engine: lerp, addcmul, addcdiv, where, clamp, masked_fill, fill, zero, copy, cat and
// native_dropout_backward.
#include "kernel_table.hpp"
#include "pointwise_common.hpp"
#include "pointwise_functors.hpp"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// Copies n elements unchanged: inputs are converted to the output dtype while gathered, so
// copy and fill need no arithmetic.
template <size_t Size>
void raw_copy_kernel(char* out, char* const* in, int64_t n, const Param*) {
  std::memmove(out, in[0], static_cast<size_t>(n) * Size);
}

ContigFn select_raw_copy(fl_dtype_t dtype, const char* op) {
  switch (plugin::dtype_size(dtype)) {
    case 1: return &raw_copy_kernel<1>;
    case 2: return &raw_copy_kernel<2>;
    case 4: return &raw_copy_kernel<4>;
    case 8: return &raw_copy_kernel<8>;
    default: unsupported(op, std::string("dtype ") + plugin::dtype_name(dtype));
  }
}

void lerp_scalar_out(const fl_kernel_call* call) {
  const char* op = "aten::lerp.Scalar_out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc end = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&self, &end}, {&self, &end},
                   &select_kernel<fn::LerpScalar, 2, kFloatingMask>, Promotion::kSame,
                   {param_arg(args, 2)});
}

void lerp_tensor_out(const fl_kernel_call* call) {
  const char* op = "aten::lerp.Tensor_out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc end = describe(args.tensor(1), op);
  TensorDesc weight = describe(args.tensor(2), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise(call, op, out, {&self, &end, &weight}, {&self, &end, &weight},
                   &select_kernel<fn::LerpTensor, 3, kFloatingMask>, Promotion::kSame);
}

template <template <class> class Op, uint64_t Mask>
void addc_body(const fl_kernel_call* call, const char* op) {
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc t1 = describe(args.tensor(1), op);
  TensorDesc t2 = describe(args.tensor(2), op);
  TensorDesc out = describe(args.output(0), op);
  Param value = args.is_none(3) ? param_int(1) : param_arg(args, 3);
  launch_pointwise(call, op, out, {&self, &t1, &t2}, {&self, &t1, &t2},
                   &select_kernel<Op, 3, Mask>, Promotion::kSame, {value});
}
void addcmul_out(const fl_kernel_call* call) { addc_body<fn::Addcmul, kArithmeticMask>(call, "aten::addcmul.out"); }
void addcdiv_out(const fl_kernel_call* call) { addc_body<fn::Addcdiv, kFloatingMask>(call, "aten::addcdiv.out"); }

void where_self_out(const fl_kernel_call* call) {
  const char* op = "aten::where.self_out";
  Args args(call);
  TensorDesc cond = describe(args.tensor(0), op);
  TensorDesc self = describe(args.tensor(1), op);
  TensorDesc other = describe(args.tensor(2), op);
  TensorDesc out = describe(args.output(0), op);
  if (cond.dtype != FL_DTYPE_BOOL && cond.dtype != FL_DTYPE_UINT8)
    invalid(op, std::string("condition must be bool, got ") + plugin::dtype_name(cond.dtype));
  launch_pointwise(call, op, out, {&self, &other}, {&cond, &self, &other},
                   &select_kernel<fn::Where, 3, kAllMask>, Promotion::kSame);
}

// clamp.out(self, Scalar? min, Scalar? max)
void clamp_out(const fl_kernel_call* call) {
  const char* op = "aten::clamp.out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  bool has_min = !args.is_none(1), has_max = !args.is_none(2);
  if (!has_min && !has_max) invalid(op, "at least one of min and max must be given");
  std::optional<ScalarOperand> lo, hi;
  if (has_min) lo.emplace(args, 1, op);
  if (has_max) hi.emplace(args, 2, op);
  Param pmin = has_min ? param_arg(args, 1) : Param{};
  Param pmax = has_max ? param_arg(args, 2) : Param{};
  launch_pointwise(call, op, out, {&self, lo ? &lo->desc() : nullptr, hi ? &hi->desc() : nullptr},
                   {&self}, &select_kernel<fn::Clamp, 1, kArithmeticMask>, Promotion::kSame,
                   {pmin, pmax, param_int((has_min ? 1 : 0) | (has_max ? 2 : 0))});
}

// clamp.Tensor_out(self, Tensor? min, Tensor? max): an absent bound is replaced by self.
void clamp_tensor_out(const fl_kernel_call* call) {
  const char* op = "aten::clamp.Tensor_out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc out = describe(args.output(0), op);
  bool has_min = !args.is_none(1), has_max = !args.is_none(2);
  if (!has_min && !has_max) invalid(op, "at least one of min and max must be given");
  TensorDesc lo = has_min ? describe(args.tensor(1), op) : self;
  TensorDesc hi = has_max ? describe(args.tensor(2), op) : self;
  launch_pointwise(call, op, out, {&self, has_min ? &lo : nullptr, has_max ? &hi : nullptr},
                   {&self, &lo, &hi}, &select_kernel<fn::ClampTensor, 3, kArithmeticMask>,
                   Promotion::kSame);
}

void masked_fill_scalar_out(const fl_kernel_call* call) {
  const char* op = "aten::masked_fill.Scalar_out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc mask = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  if (mask.dtype != FL_DTYPE_BOOL) invalid(op, "mask must be bool");
  if (out.dtype != self.dtype) unsupported(op, "output dtype differs from self");
  launch_pointwise_as(call, op, out, self.dtype, {&self, &mask},
                      &select_kernel<fn::MaskedFillScalar, 2, kAllMask>, {param_arg(args, 2)});
}

void masked_fill_tensor_out(const fl_kernel_call* call) {
  const char* op = "aten::masked_fill.Tensor_out";
  Args args(call);
  TensorDesc self = describe(args.tensor(0), op);
  TensorDesc mask = describe(args.tensor(1), op);
  TensorDesc value = describe(args.tensor(2), op);
  TensorDesc out = describe(args.output(0), op);
  if (mask.dtype != FL_DTYPE_BOOL) invalid(op, "mask must be bool");
  if (value.ndim != 0) invalid(op, "value must be a 0-dim tensor");
  if (out.dtype != self.dtype) unsupported(op, "output dtype differs from self");
  launch_pointwise_as(call, op, out, self.dtype, {&self, &mask, &value},
                      &select_kernel<fn::MaskedFillTensor, 3, kAllMask>);
}

// fill.Scalar_out(self, Scalar value): out = value (converted to out's dtype).
void fill_scalar_out(const fl_kernel_call* call) {
  const char* op = "aten::fill.Scalar_out";
  Args args(call);
  TensorDesc out = describe(args.output(0), op);
  ScalarOperand value(args, 1, op);
  launch_pointwise_as(call, op, out, out.dtype, {&value.desc()}, &select_raw_copy);
}

// fill.Tensor_out(self, Tensor value): value is 0-dim (host or device).
void fill_tensor_out(const fl_kernel_call* call) {
  const char* op = "aten::fill.Tensor_out";
  Args args(call);
  TensorDesc out = describe(args.output(0), op);
  TensorDesc value = describe(args.tensor(1), op);
  if (value.ndim != 0) invalid(op, "value must be a 0-dim tensor");
  launch_pointwise_as(call, op, out, out.dtype, {&value}, &select_raw_copy);
}

void zero_out(const fl_kernel_call* call) {
  const char* op = "aten::zero.out";
  Args args(call);
  TensorDesc out = describe(args.output(0), op);
  TensorDesc zero;
  alignas(8) int64_t storage = 0;
  zero.dtype = FL_DTYPE_INT64;
  zero.host_scalar = true;
  zero.data = reinterpret_cast<char*>(&storage);
  launch_pointwise_as(call, op, out, out.dtype, {&zero}, &select_raw_copy);
}

// copy.out(self, src, non_blocking): out = src cast to out's dtype, broadcast to out's shape.
void copy_out(const fl_kernel_call* call) {
  const char* op = "aten::copy.out";
  Args args(call);
  TensorDesc src = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  launch_pointwise_as(call, op, out, out.dtype, {&src}, &select_raw_copy);
}

// native_dropout_backward.out(grad_output, mask, float scale) = grad * mask * scale
void native_dropout_backward_out(const fl_kernel_call* call) {
  const char* op = "aten::native_dropout_backward.out";
  Args args(call);
  TensorDesc grad = describe(args.tensor(0), op);
  TensorDesc mask = describe(args.tensor(1), op);
  TensorDesc out = describe(args.output(0), op);
  if (out.dtype != grad.dtype) unsupported(op, "output dtype differs from grad_output");
  launch_pointwise_as(call, op, out, grad.dtype, {&grad, &mask},
                      &select_kernel<fn::ScaledMask, 2, kFloatingMask>, {param_of(args.number(2))});
}

// cat.out(Tensor[] tensors, int dim=0, *, out): each input copied (converted to out's dtype,
// which ATen computes as the inputs' result type) into its slice of out along `dim`. A 1-D
// input of 0 elements is skipped, as in ATen (the legacy empty tensor).
void cat_out(const fl_kernel_call* call) {
  const char* op = "aten::cat.out";
  Args args(call);
  const fl_value& list = args.at(0);
  if (list.kind != FL_VALUE_TENSOR_LIST) invalid(op, "tensors is not a tensor list");
  TensorDesc out = describe(args.output(0), op);
  std::vector<TensorDesc> parts;
  for (int64_t i = 0; i < list.u.tensors.len; ++i) {
    TensorDesc t = describe(list.u.tensors.data[i], op);
    if (t.ndim == 1 && t.shape[0] == 0) continue;
    if (t.ndim == 0) invalid(op, "zero-dimensional tensor (at position " + std::to_string(i) + ") cannot be concatenated");
    if (t.dtype >= FL_DTYPE_COMPLEX64) unsupported(op, "complex");
    parts.push_back(t);
  }
  if (parts.empty()) return;  // out is the legacy empty tensor too
  const int64_t dim = wrap_dim(args.integer(1), parts.front().ndim, op);
  if (out.ndim != parts.front().ndim) invalid(op, "output " + shape_string(out) + " has another number of dims");
  int64_t offset = 0;
  for (const TensorDesc& t : parts) {
    if (t.ndim != out.ndim) invalid(op, "tensors must have the same number of dimensions");
    for (int d = 0; d < t.ndim; ++d)
      if (d != dim && t.shape[d] != out.shape[d])
        invalid(op, "sizes of tensors must match except in dimension " + std::to_string(dim) + ": " +
                        shape_string(t) + " against " + shape_string(out));
    offset += t.shape[dim];
  }
  if (offset != out.shape[dim])
    invalid(op, "output " + shape_string(out) + " does not hold " + std::to_string(offset) + " along dim " +
                    std::to_string(dim));
  const int64_t elem = static_cast<int64_t>(plugin::dtype_size(out.dtype));
  offset = 0;
  for (const TensorDesc& t : parts) {
    TensorDesc slice = out;
    slice.data += offset * out.strides[dim] * elem;
    slice.shape[dim] = t.shape[dim];
    offset += t.shape[dim];
    if (slice.numel() > 0) launch_pointwise_as(call, op, slice, out.dtype, {&t}, &select_raw_copy);
  }
}

}  // namespace

void register_pointwise_extra_kernels(KernelRegistry& r) {
  constexpr uint32_t f = kPointwiseFlags;
  r.add("aten::lerp.Scalar_out", kFloatingMask, f, guarded<lerp_scalar_out>);
  r.add("aten::lerp.Tensor_out", kFloatingMask, f, guarded<lerp_tensor_out>);
  r.add("aten::addcmul.out", kArithmeticMask, f, guarded<addcmul_out>);
  r.add("aten::addcdiv.out", kFloatingMask, f, guarded<addcdiv_out>);
  r.add("aten::where.self_out", bit(FL_DTYPE_BOOL) | bit(FL_DTYPE_UINT8), f, guarded<where_self_out>);
  r.add("aten::clamp.out", kArithmeticMask, f, guarded<clamp_out>);
  r.add("aten::clamp.Tensor_out", kArithmeticMask, f, guarded<clamp_tensor_out>);
  r.add("aten::masked_fill.Scalar_out", kAllMask, f, guarded<masked_fill_scalar_out>);
  r.add("aten::masked_fill.Tensor_out", kAllMask, f, guarded<masked_fill_tensor_out>);
  r.add("aten::fill.Scalar_out", kAllMask, f, guarded<fill_scalar_out>);
  r.add("aten::fill.Tensor_out", kAllMask, f, guarded<fill_tensor_out>);
  r.add("aten::zero.out", kAllMask, f, guarded<zero_out>);
  r.add("aten::copy.out", kAllMask, f, guarded<copy_out>);
  // Strided inputs and output (slices of out are strided anyway); out never aliases an input.
  r.add("aten::cat.out", kAllMask, FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_STRIDED_OUTPUTS | FL_KERNEL_DETERMINISTIC,
        guarded<cat_out>);
  r.add("aten::native_dropout_backward.out", kFloatingMask, f, guarded<native_dropout_backward_out>);
}

}  // namespace fl::cpu::kernels
