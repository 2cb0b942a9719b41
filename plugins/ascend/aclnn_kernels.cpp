// aclnn_kernels.cpp — ATen operators on Ascend through the aclnn two-phase API. Each kernel
// builds aclTensor views of the call's tensors (strides and offset included, so strided
// inputs need no copy), asks aclnn for the workspace (a refusal there becomes
// FL_ERR_NOT_SUPPORTED and the core falls back), and enqueues on the call's stream.
// Not verified on hardware (no NPU was available): the calls follow the CANN 8.x
// documentation. max_pool2d indices: aclnn produces int32, cast to ATen's int64 with aclnnCast.
#include "aclnn_kernels.hpp"

#include "aclnn_descriptors.hpp"
#include "ascend_runtime.hpp"

#include <plugin_support.hpp>

#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace fl::ascend {
namespace {

using plugin::Args;

struct CallContext {
  int32_t device;
  aclrtStream stream;
};

CallContext begin(const fl_kernel_call* call) {
  if (call == nullptr) plugin::raise(FL_ERR_INVALID_ARGUMENT, "kernel called with a NULL call");
  use_device(call->device);
  return CallContext{call->device, resolve_stream(call->device, call->stream)};
}

// A device tensor input, or nullptr when input `i` is a number (a Scalar, or a 0-dim host
// tensor that a Python number became).
const fl_tensor* device_tensor_or_null(const Args& a, int32_t i) {
  const fl_value& v = a.at(i);
  if (v.kind == FL_VALUE_TENSOR && v.u.tensor != nullptr && v.u.tensor->device != FL_DEVICE_HOST) return v.u.tensor;
  return nullptr;
}

const fl_tensor& device_tensor(const Args& a, int32_t i, const char* op) {
  const fl_tensor* t = device_tensor_or_null(a, i);
  if (t == nullptr) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": input " + std::to_string(i) + " is not a device tensor");
  return *t;
}

// cubeMathType of the matmul/convolution operators: 0 KEEP_DTYPE (IEEE float32) when the call
// asks for precision, else 1 ALLOW_FP32_DOWN_PRECISION (HF32 on A2/A3).
int8_t cube_math(const fl_kernel_call* call) { return (call->flags & FL_CALL_PRECISE) ? 0 : 1; }

enum class Binary { Add, Sub, Mul, Div };

// add.out(self, other, *, alpha, out) / sub.out(...) / mul.out(self, other, *, out) /
// div.out(self, other, *, out). A number `other` uses the aclnnXxxs form.
fl_status_t binary(const fl_kernel_call* call, Binary kind, const char* name) {
  return plugin::guard([&] {
    const CallContext ctx = begin(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const fl_tensor* other = device_tensor_or_null(a, 1);
    const fl_tensor& out = a.output(0);
    const bool has_alpha = kind == Binary::Add || kind == Binary::Sub;
    const double alpha_value = has_alpha && !a.is_none(2) ? a.number(2) : 1.0;
    AclTensor self_t(self), out_t(out);
    AclScalar alpha(alpha_value, out.dtype);
    const AclApi& api = acl();
    if (other != nullptr) {
      AclTensor other_t(*other);
      switch (kind) {
        case Binary::Add:
          launch_aclnn("aclnnAdd", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
            return api.aclnnAddGetWorkspaceSize(self_t.get(), other_t.get(), alpha.get(), out_t.get(), ws, ex); }, api.aclnnAdd);
          break;
        case Binary::Sub:
          launch_aclnn("aclnnSub", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
            return api.aclnnSubGetWorkspaceSize(self_t.get(), other_t.get(), alpha.get(), out_t.get(), ws, ex); }, api.aclnnSub);
          break;
        case Binary::Mul:
          launch_aclnn("aclnnMul", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
            return api.aclnnMulGetWorkspaceSize(self_t.get(), other_t.get(), out_t.get(), ws, ex); }, api.aclnnMul);
          break;
        case Binary::Div:
          launch_aclnn("aclnnDiv", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
            return api.aclnnDivGetWorkspaceSize(self_t.get(), other_t.get(), out_t.get(), ws, ex); }, api.aclnnDiv);
          break;
      }
      return;
    }
    AclScalar other_s(a.number(1), out.dtype);
    switch (kind) {
      case Binary::Add:
        launch_aclnn("aclnnAdds", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
          return api.aclnnAddsGetWorkspaceSize(self_t.get(), other_s.get(), alpha.get(), out_t.get(), ws, ex); }, api.aclnnAdds);
        break;
      case Binary::Sub:
        launch_aclnn("aclnnSubs", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
          return api.aclnnSubsGetWorkspaceSize(self_t.get(), other_s.get(), alpha.get(), out_t.get(), ws, ex); }, api.aclnnSubs);
        break;
      case Binary::Mul:
        launch_aclnn("aclnnMuls", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
          return api.aclnnMulsGetWorkspaceSize(self_t.get(), other_s.get(), out_t.get(), ws, ex); }, api.aclnnMuls);
        break;
      case Binary::Div:
        launch_aclnn("aclnnDivs", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
          return api.aclnnDivsGetWorkspaceSize(self_t.get(), other_s.get(), out_t.get(), ws, ex); }, api.aclnnDivs);
        break;
    }
  });
}

fl_status_t k_add(const fl_kernel_call* c) { return binary(c, Binary::Add, "aten::add.out"); }
fl_status_t k_sub(const fl_kernel_call* c) { return binary(c, Binary::Sub, "aten::sub.out"); }
fl_status_t k_mul(const fl_kernel_call* c) { return binary(c, Binary::Mul, "aten::mul.out"); }
fl_status_t k_div(const fl_kernel_call* c) { return binary(c, Binary::Div, "aten::div.out"); }

// mm.out(self, mat2, *, out) and bmm.out(self, mat2, *, out).
fl_status_t matmul(const fl_kernel_call* call, bool batched) {
  const char* name = batched ? "aten::bmm.out" : "aten::mm.out";
  return plugin::guard([&] {
    const CallContext ctx = begin(call);
    Args a(call);
    AclTensor self(device_tensor(a, 0, name)), mat2(device_tensor(a, 1, name)), out(a.output(0));
    const int8_t cube = cube_math(call);
    const AclApi& api = acl();
    if (batched)
      launch_aclnn("aclnnBatchMatMul", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
        return api.aclnnBatchMatMulGetWorkspaceSize(self.get(), mat2.get(), out.get(), cube, ws, ex); }, api.aclnnBatchMatMul);
    else
      launch_aclnn("aclnnMm", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
        return api.aclnnMmGetWorkspaceSize(self.get(), mat2.get(), out.get(), cube, ws, ex); }, api.aclnnMm);
  });
}

fl_status_t k_mm(const fl_kernel_call* c) { return matmul(c, false); }
fl_status_t k_bmm(const fl_kernel_call* c) { return matmul(c, true); }

// addmm.out(self, mat1, mat2, *, beta=1, alpha=1, out)
fl_status_t k_addmm(const fl_kernel_call* call) {
  constexpr const char* name = "aten::addmm.out";
  return plugin::guard([&] {
    const CallContext ctx = begin(call);
    Args a(call);
    const fl_tensor& out_desc = a.output(0);
    AclTensor self(device_tensor(a, 0, name)), mat1(device_tensor(a, 1, name)), mat2(device_tensor(a, 2, name)),
        out(out_desc);
    AclScalar beta(a.is_none(3) ? 1.0 : a.number(3), out_desc.dtype);
    AclScalar alpha(a.is_none(4) ? 1.0 : a.number(4), out_desc.dtype);
    const int8_t cube = cube_math(call);
    const AclApi& api = acl();
    launch_aclnn("aclnnAddmm", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
      return api.aclnnAddmmGetWorkspaceSize(self.get(), mat1.get(), mat2.get(), beta.get(), alpha.get(), out.get(), cube,
                                            ws, ex); }, api.aclnnAddmm);
  });
}

// relu.out(self, *, out)
fl_status_t k_relu(const fl_kernel_call* call) {
  return plugin::guard([&] {
    const CallContext ctx = begin(call);
    Args a(call);
    AclTensor self(device_tensor(a, 0, "aten::relu.out")), out(a.output(0));
    const AclApi& api = acl();
    launch_aclnn("aclnnRelu", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
      return api.aclnnReluGetWorkspaceSize(self.get(), out.get(), ws, ex); }, api.aclnnRelu);
  });
}

// _softmax.out(self, dim, half_to_float, *, out) and _log_softmax.out(...).
fl_status_t softmax(const fl_kernel_call* call, bool log) {
  const char* name = log ? "aten::_log_softmax.out" : "aten::_softmax.out";
  return plugin::guard([&] {
    const CallContext ctx = begin(call);
    Args a(call);
    const fl_tensor& self_desc = device_tensor(a, 0, name);
    const fl_tensor& out_desc = a.output(0);
    if (self_desc.dtype != out_desc.dtype)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": half_to_float (output dtype differs from input)");
    const int64_t dim = a.integer(1);
    AclTensor self(self_desc), out(out_desc);
    const AclApi& api = acl();
    if (log)
      launch_aclnn("aclnnLogSoftmax", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
        return api.aclnnLogSoftmaxGetWorkspaceSize(self.get(), dim, out.get(), ws, ex); }, api.aclnnLogSoftmax);
    else
      launch_aclnn("aclnnSoftmax", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
        return api.aclnnSoftmaxGetWorkspaceSize(self.get(), dim, out.get(), ws, ex); }, api.aclnnSoftmax);
  });
}

fl_status_t k_softmax(const fl_kernel_call* c) { return softmax(c, false); }
fl_status_t k_log_softmax(const fl_kernel_call* c) { return softmax(c, true); }

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
//                          output_padding, groups) -> out
fl_status_t k_convolution(const fl_kernel_call* call) {
  constexpr const char* name = "aten::convolution_overrideable";
  return plugin::guard([&] {
    const CallContext ctx = begin(call);
    Args a(call);
    AclTensor input(device_tensor(a, 0, name)), weight(device_tensor(a, 1, name)), out(a.output(0));
    std::unique_ptr<AclTensor> bias;
    if (!a.is_none(2)) bias = std::make_unique<AclTensor>(device_tensor(a, 2, name));
    AclIntArray stride(a.ints(3)), padding(a.ints(4)), dilation(a.ints(5)), output_padding(a.ints(7));
    const bool transposed = a.boolean(6);
    const int64_t groups = a.integer(8);
    const int8_t cube = cube_math(call);
    const AclApi& api = acl();
    launch_aclnn("aclnnConvolution", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
      return api.aclnnConvolutionGetWorkspaceSize(input.get(), weight.get(), bias ? bias->get() : nullptr, stride.get(),
                                                  padding.get(), dilation.get(), transposed, output_padding.get(),
                                                  groups, out.get(), cube, ws, ex); }, api.aclnnConvolution);
  });
}

// max_pool2d_with_indices.out(self, kernel_size, stride=[], padding=0, dilation=1,
//                             ceil_mode=False, *, out, indices)
fl_status_t k_max_pool2d_with_indices(const fl_kernel_call* call) {
  constexpr const char* name = "aten::max_pool2d_with_indices.out";
  return plugin::guard([&] {
    const CallContext ctx = begin(call);
    Args a(call);
    const fl_tensor& indices_desc = a.output(1);
    if (indices_desc.dtype != FL_DTYPE_INT64 || !plugin::is_contiguous(indices_desc))
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": indices must be dense int64");
    const std::vector<int64_t> kernel = a.ints(1);
    std::vector<int64_t> stride = a.is_none(2) ? std::vector<int64_t>{} : a.ints(2);
    if (stride.empty()) stride = kernel;  // ATen: an empty stride means stride = kernel_size
    AclTensor self(device_tensor(a, 0, name)), out(a.output(0));
    AclIntArray kernel_a(kernel), stride_a(stride), padding_a(a.is_none(3) ? std::vector<int64_t>{0} : a.ints(3)),
        dilation_a(a.is_none(4) ? std::vector<int64_t>{1} : a.ints(4));
    const bool ceil_mode = !a.is_none(5) && a.boolean(5);
    // aclnn writes int32 indices: into slot-1 scratch of this stream, then cast into `indices`.
    const std::vector<int64_t> shape(indices_desc.shape, indices_desc.shape + indices_desc.ndim);
    void* idx32 = stream_scratch(ctx.device, ctx.stream, 1, static_cast<uint64_t>(plugin::numel(indices_desc)) * 4);
    AclTensor indices32(idx32, FL_DTYPE_INT32, shape), indices64(indices_desc);
    const AclApi& api = acl();
    launch_aclnn("aclnnMaxPool2dWithIndices", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
      return api.aclnnMaxPool2dWithIndicesGetWorkspaceSize(self.get(), kernel_a.get(), stride_a.get(), padding_a.get(),
                                                           dilation_a.get(), ceil_mode, out.get(), indices32.get(), ws,
                                                           ex); }, api.aclnnMaxPool2dWithIndices);
    launch_aclnn("aclnnCast", ctx.device, ctx.stream, [&](uint64_t* ws, aclOpExecutor** ex) {
      return api.aclnnCastGetWorkspaceSize(indices32.get(), ACL_INT64, indices64.get(), ws, ex); }, api.aclnnCast);
  });
}

constexpr uint64_t bit(fl_dtype_t d) { return FL_DTYPE_BIT(d); }
constexpr uint64_t kFloat = bit(FL_DTYPE_FLOAT32) | bit(FL_DTYPE_FLOAT16) | bit(FL_DTYPE_BFLOAT16);
constexpr uint64_t kArith = kFloat | bit(FL_DTYPE_INT32) | bit(FL_DTYPE_INT64);
constexpr uint32_t kStridedIn = FL_KERNEL_STRIDED_INPUTS;

constexpr fl_kernel_entry entry(const char* op, uint64_t mask, uint32_t flags, fl_kernel_fn fn) {
  return fl_kernel_entry{sizeof(fl_kernel_entry), op, mask, flags, 0u, fn, nullptr};
}

const fl_kernel_entry kTable[] = {
    entry("aten::add.out", kArith, kStridedIn, k_add),
    entry("aten::sub.out", kArith, kStridedIn, k_sub),
    entry("aten::mul.out", kArith, kStridedIn, k_mul),
    entry("aten::div.out", kFloat, kStridedIn, k_div),
    entry("aten::mm.out", kFloat, kStridedIn, k_mm),
    entry("aten::bmm.out", kFloat, kStridedIn, k_bmm),
    entry("aten::addmm.out", kFloat, kStridedIn, k_addmm),
    entry("aten::relu.out", kFloat, kStridedIn, k_relu),
    entry("aten::_softmax.out", kFloat, 0u, k_softmax),
    entry("aten::_log_softmax.out", kFloat, 0u, k_log_softmax),
    entry("aten::convolution_overrideable", kFloat, 0u, k_convolution),
    entry("aten::convolution_overrideable.out", kFloat, 0u, k_convolution),
    entry("aten::max_pool2d_with_indices.out", bit(FL_DTYPE_FLOAT32) | bit(FL_DTYPE_FLOAT16), 0u,
          k_max_pool2d_with_indices),
};

}  // namespace

fl_status_t kernels_get(const fl_kernel_entry** entries, size_t* count) {
  return plugin::guard([&] {
    if (entries == nullptr || count == nullptr) plugin::raise(FL_ERR_INVALID_ARGUMENT, "kernels_get: NULL output");
    *entries = kTable;
    *count = std::size(kTable);
  });
}

}  // namespace fl::ascend
