// attention_cudnn.cpp — the fused-attention entries,
// aten::_scaled_dot_product_fused_attention_overrideable and its _backward (the contract is in
// abi/fl_abi.h), on cuDNN's fused SDPA plans (attention_cudnn_graph.hpp): float16 and bfloat16,
// head sizes E and Ev multiples of 8 up to 256, key/value length 2 and more, an optional
// additive bias, the top-left causal mask, any strides with a unit stride along the head size.
// Everything else is declined with FL_ERR_NOT_SUPPORTED before anything is enqueued, and the
// core computes the same thing with other kernels: dropout, the debug mask, key/value shapes
// other than query's batch and heads, a bias broadcast along keys, the bias gradient,
// operands that are not 16-byte aligned, and every configuration cuDNN offers no plan for
// (remembered per configuration, with cuDNN's reason). A deterministic call
// (FL_CALL_DETERMINISTIC) takes cuDNN's deterministic backward, or is declined where it has none.
// One cuDNN handle per device, bound to the call's stream; plans and workspaces as in
// attention_cudnn_graph.hpp. No host synchronization.
#include "attention_cudnn.hpp"
#include "attention_cudnn_graph.hpp"
#include "device_state.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fl::cuda {
namespace {

constexpr const char* kForwardName = "aten::_scaled_dot_product_fused_attention_overrideable";
constexpr const char* kBackwardName = "aten::_scaled_dot_product_fused_attention_overrideable_backward";

// cuDNN's SDPA kernels take head sizes that are multiples of 8 up to 256 (Hopper; smaller
// limits elsewhere are cuDNN's own to decline at validation).
constexpr int64_t kMaxHeadSize = 256;
constexpr int64_t kHeadSizeMultiple = 8;
// The frontend declares every tensor to cuDNN as 16-byte aligned (cudnn_interface.h), so base
// addresses must be. The strides of q/k/v/o and their gradients are held to 16-byte multiples
// (8 elements) too, which every layout of head sizes that are multiples of 8 meets, rather
// than trusting cuDNN to refuse a stride its vector loads cannot take.
constexpr uintptr_t kAlignBytes = 16;
constexpr int64_t kStrideMultiple = 8;

using Shape = std::array<int64_t, 4>;

[[noreturn]] void decline(const char* op, const std::string& why) {
  plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": " + why);
}

std::string shape_text(const fl_tensor& t) {
  std::string s = "[";
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (d > 0) s += ',';
    s += std::to_string(t.shape[d]);
  }
  s += ']';
  return s;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignBytes == 0; }

// The stride of a dimension of one element is never used, but cuDNN rejects 0 and checks
// alignment on every stride: such a stride that is 0 or not a multiple of `multiple` becomes
// the tensor's extent, as if the dimension were outermost (ATen's fixSizeOneDimStrideSDPA
// replaces the 0 likewise).
void fix_unit_dim_strides(AttentionOperand& t, int64_t multiple) {
  int64_t extent = 1;
  for (int d = 0; d < 4; ++d) extent = std::max(extent, t.dim[d] * t.stride[d]);
  for (int d = 0; d < 4; ++d)
    if (t.dim[d] == 1 && (t.stride[d] == 0 || t.stride[d] % multiple != 0)) t.stride[d] = extent;
}

void check_dtype(const fl_tensor& t, fl_dtype_t dtype, const char* role, const char* op) {
  if (t.dtype != dtype)
    decline(op, std::string(role) + " is " + plugin::dtype_name(t.dtype) + ", query " + plugin::dtype_name(dtype));
}

// q, k, v, out, grad_out and the gradients: a device tensor of the call's dtype shaped
// `shape` ([B,H,L,D]), unit stride along D, the other strides multiples of 16 bytes (after
// size-1 dimensions are given one), 16-byte aligned.
AttentionOperand head_operand(const fl_tensor& t, fl_dtype_t dtype, const Shape& shape, const char* role,
                              const char* op) {
  if (t.device == FL_DEVICE_HOST) decline(op, std::string(role) + " is a host value");
  check_dtype(t, dtype, role, op);
  if (t.ndim != 4) decline(op, std::string(role) + " is " + std::to_string(t.ndim) + "-D");
  AttentionOperand out;
  out.data = plugin::data_ptr<void>(t);
  for (int d = 0; d < 4; ++d) {
    if (t.shape[d] != shape[d])
      decline(op, std::string(role) + " has shape " + shape_text(t) + " (the entry serves [B,H,L,D] operands of "
                                                                      "query's batch and heads)");
    out.dim[d] = t.shape[d];
    out.stride[d] = t.strides[d];
  }
  if (out.stride[3] != 1) decline(op, std::string(role) + ": the head dimension's stride is not 1");
  fix_unit_dim_strides(out, kStrideMultiple);
  for (int d = 0; d < 3; ++d)
    if (out.stride[d] % kStrideMultiple != 0)
      decline(op, std::string(role) + ": stride " + std::to_string(out.stride[d]) + " of dimension " +
                      std::to_string(d) + " is not a multiple of 16 bytes");
  if (!aligned(out.data)) decline(op, std::string(role) + " is not 16-byte aligned");
  return out;
}

// attn_bias: [B,H,Lq,Lk] of query's dtype, stride 0 on broadcast dimensions. A heads broadcast
// goes to cuDNN as a dimension of 1; batch and query broadcasts keep their stride 0 (both as
// ATen's cuDNN attention passes a bias); a broadcast along keys is declined.
AttentionOperand bias_operand(const fl_tensor& t, fl_dtype_t dtype, const Shape& shape, const char* op) {
  if (t.device == FL_DEVICE_HOST) decline(op, "attn_bias is a host value");
  check_dtype(t, dtype, "attn_bias", op);
  if (t.ndim != 4) decline(op, "attn_bias is " + std::to_string(t.ndim) + "-D (the core passes it 4-D)");
  AttentionOperand out;
  out.data = plugin::data_ptr<void>(t);
  for (int d = 0; d < 4; ++d) {
    if (t.shape[d] != shape[d]) decline(op, "attn_bias has shape " + shape_text(t) + ", not [B,H,Lq,Lk]");
    out.dim[d] = t.shape[d];
    out.stride[d] = t.strides[d];
  }
  if (out.stride[3] != 1) decline(op, "attn_bias: the key dimension's stride is not 1 (a broadcast along keys)");
  if (out.stride[1] == 0) out.dim[1] = 1;
  fix_unit_dim_strides(out, 1);
  if (!aligned(out.data)) decline(op, "attn_bias is not 16-byte aligned");
  return out;
}

// logsumexp: [B,H,Lq] float32, contiguous, 16-byte aligned (cuDNN's Stats tensor).
void* stats_operand(const fl_tensor& t, const Shape& q_shape, const char* role, const char* op) {
  if (t.device == FL_DEVICE_HOST) decline(op, std::string(role) + " is a host value");
  if (t.dtype != FL_DTYPE_FLOAT32) decline(op, std::string(role) + " is not float32");
  if (t.ndim != 3 || t.shape[0] != q_shape[0] || t.shape[1] != q_shape[1] || t.shape[2] != q_shape[2])
    decline(op, std::string(role) + " has shape " + shape_text(t) + ", not [B,H,Lq]");
  if (!plugin::is_contiguous(t)) decline(op, std::string(role) + " is not contiguous");
  void* p = plugin::data_ptr<void>(t);
  if (!aligned(p)) decline(op, std::string(role) + " is not 16-byte aligned");
  return p;
}

void check_head_sizes(int64_t e, int64_t ev, const char* op) {
  for (const int64_t d : {e, ev})
    if (d < kHeadSizeMultiple || d > kMaxHeadSize || d % kHeadSizeMultiple != 0)
      decline(op, "head size " + std::to_string(d) + " (cuDNN takes multiples of 8 up to 256)");
}

// The scale of q·k: the argument, or 1/sqrt(E) when it is None.
float attention_scale(const Args& a, int32_t i, int64_t e) {
  return a.is_none(i) ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(e)))
                      : static_cast<float>(a.number(i));
}

bool requested(const Args& a, int32_t i) {
  return i < a.num_outputs() && !plugin::is_undefined(a.output(i)) && a.output(i).data != nullptr;
}

// ---- per-device cuDNN handle ---------------------------------------------------------------

struct AttentionDevice {
  std::mutex mutex;  // serialises the handle, and with it each of this device's plans
  cudnnHandle_t handle = nullptr;
};

std::mutex g_devices_mutex;
std::vector<std::unique_ptr<AttentionDevice>> g_devices;

AttentionDevice& attention_device(int32_t device) {
  std::lock_guard<std::mutex> lock(g_devices_mutex);
  if (g_devices.size() <= static_cast<size_t>(device)) g_devices.resize(static_cast<size_t>(device) + 1);
  auto& slot = g_devices[static_cast<size_t>(device)];
  if (!slot) slot = std::make_unique<AttentionDevice>();
  return *slot;
}

void check_dnn(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  if (status == CUDNN_STATUS_ALLOC_FAILED)
    plugin::raise(FL_ERR_OUT_OF_MEMORY, std::string(what) + ": " + cudnnGetErrorString(status));
  plugin::raise(FL_ERR_DEVICE, std::string(what) + ": " + cudnnGetErrorString(status));
}

// The device's handle (created at first use), bound to `stream`. Call with dev.mutex held.
cudnnHandle_t handle_for(AttentionDevice& dev, gpuStream_t stream) {
  if (dev.handle == nullptr) check_dnn(cudnnCreate(&dev.handle), "cudnnCreate");
  check_dnn(cudnnSetStream(dev.handle, stream), "cudnnSetStream");
  return dev.handle;
}

// Runs the pass on the device's handle, or declines with cuDNN's reason.
void run_pass(const AttentionGraphCall& c, const LaunchContext& ctx, const char* op) {
  AttentionDevice& dev = attention_device(ctx.device);
  std::string why_not;
  std::lock_guard<std::mutex> lock(dev.mutex);
  if (!run_attention_graph(ctx.device, handle_for(dev, ctx.stream), c, ctx.stream, &why_not)) decline(op, why_not);
}

// The query's dtype, if the entry serves it.
fl_dtype_t call_dtype(const fl_tensor& q, const char* op) {
  if (q.dtype != FL_DTYPE_FLOAT16 && q.dtype != FL_DTYPE_BFLOAT16)
    decline(op, std::string("dtype ") + plugin::dtype_name(q.dtype) + " (cuDNN attention takes float16 and bfloat16)");
  return q.dtype;
}

// Query, key and value shapes: [B,H,Lq,E], [B,H,Lk,E], [B,H,Lk,Ev].
struct AttentionShapes {
  Shape q, k, v, o;
};

AttentionShapes attention_shapes(const fl_tensor& q, const fl_tensor& k, const fl_tensor& v, const char* op) {
  if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4) decline(op, "query, key and value must be 4-D");
  const int64_t b = q.shape[0], h = q.shape[1], lq = q.shape[2], e = q.shape[3];
  const int64_t lk = k.shape[2], ev = v.shape[3];
  return AttentionShapes{{b, h, lq, e}, {b, h, lk, e}, {b, h, lk, ev}, {b, h, lq, ev}};
}

}  // namespace

void shutdown_attention() {
  clear_attention_graphs();
  std::lock_guard<std::mutex> lock(g_devices_mutex);
  for (size_t i = 0; i < g_devices.size(); ++i) {
    if (!g_devices[i]) continue;
    (void)gpuSetDevice(static_cast<int>(i));
    if (g_devices[i]->handle != nullptr) (void)cudnnDestroy(g_devices[i]->handle);
  }
  g_devices.clear();
}

// _scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias?, dropout_p,
// is_causal, return_debug_mask, scale?) -> (output, logsumexp)
FL_CUDA_KERNEL(k_scaled_dot_product_fused_attention) {
  return plugin::guard([&] {
    const char* name = kForwardName;
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& q = device_tensor(a, 0, name);
    const fl_tensor& k = device_tensor(a, 1, name);
    const fl_tensor& v = device_tensor(a, 2, name);
    const fl_dtype_t dtype = call_dtype(q, name);
    const AttentionShapes s = attention_shapes(q, k, v, name);
    if (a.number(4) > 0.0) decline(name, "dropout_p > 0 (cuDNN's dropout is not used here)");
    if (a.boolean(6)) decline(name, "return_debug_mask");
    check_head_sizes(s.q[3], s.v[3], name);
    if (a.num_outputs() < 2 || plugin::is_undefined(a.output(0)))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": expects outputs (output, logsumexp)");
    if (s.q[0] * s.q[1] * s.q[2] == 0) return;  // no query rows: nothing to write
    if (s.k[2] < 2) decline(name, "key/value length " + std::to_string(s.k[2]) + " (cuDNN needs 2 or more)");

    AttentionGraphCall c;
    c.pass = AttentionGraphPass::Forward;
    c.dtype = dtype;
    c.scale = attention_scale(a, 7, s.q[3]);
    c.causal = a.boolean(5);
    c.deterministic = (call->flags & FL_CALL_DETERMINISTIC) != 0;
    c.q = head_operand(q, dtype, s.q, "query", name);
    c.k = head_operand(k, dtype, s.k, "key", name);
    c.v = head_operand(v, dtype, s.v, "value", name);
    c.o = head_operand(a.output(0), dtype, s.o, "output", name);
    c.has_bias = !a.is_none(3);
    if (c.has_bias) c.bias = bias_operand(device_tensor(a, 3, name), dtype, {s.q[0], s.q[1], s.q[2], s.k[2]}, name);
    // Without a wanted logsumexp (and without a bias, attention_masked_rows.hpp) the plan is
    // cuDNN's inference variant, with no Stats output.
    c.stats = requested(a, 1) ? stats_operand(a.output(1), s.q, "logsumexp", name) : nullptr;
    run_pass(c, ctx, name);
  });
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query, key, value,
// attn_bias?, grad_input_mask[4], out, logsumexp, cum_seq_q?, cum_seq_k?, max_q, max_k,
// dropout_p, is_causal, philox_seed, philox_offset, scale?)
// -> (grad_query, grad_key, grad_value, grad_attn_bias)
FL_CUDA_KERNEL(k_scaled_dot_product_fused_attention_backward) {
  return plugin::guard([&] {
    const char* name = kBackwardName;
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& q = device_tensor(a, 1, name);
    const fl_tensor& k = device_tensor(a, 2, name);
    const fl_tensor& v = device_tensor(a, 3, name);
    const fl_dtype_t dtype = call_dtype(q, name);
    const AttentionShapes s = attention_shapes(q, k, v, name);
    std::vector<bool> mask = {true, true, true, true};
    if (!a.is_none(5)) mask = a.bools(5);
    if (mask.size() != 4)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": grad_input_mask must have 4 entries");
    const bool has_bias = !a.is_none(4);
    if (has_bias && mask[3] && requested(a, 3))
      decline(name, "grad_attn_bias is wanted (cuDNN's dBias is not used here)");
    const bool want[3] = {mask[0] && requested(a, 0), mask[1] && requested(a, 1), mask[2] && requested(a, 2)};
    if (!want[0] && !want[1] && !want[2]) return;  // nothing wanted
    if (!a.is_none(8) || !a.is_none(9)) decline(name, "nested inputs (cum_seq_q/cum_seq_k)");
    if (a.number(12) > 0.0) decline(name, "dropout_p > 0 (cuDNN's dropout is not used here)");
    check_head_sizes(s.q[3], s.v[3], name);
    if (s.q[0] * s.q[1] * s.q[2] == 0 || s.k[2] < 2)
      decline(name, "empty query or a key/value length below 2");

    AttentionGraphCall c;
    c.pass = AttentionGraphPass::Backward;
    c.dtype = dtype;
    c.scale = attention_scale(a, 16, s.q[3]);
    c.causal = a.boolean(13);
    c.deterministic = (call->flags & FL_CALL_DETERMINISTIC) != 0;
    c.q = head_operand(q, dtype, s.q, "query", name);
    c.k = head_operand(k, dtype, s.k, "key", name);
    c.v = head_operand(v, dtype, s.v, "value", name);
    c.o = head_operand(device_tensor(a, 6, name), dtype, s.o, "out", name);
    c.d_o = head_operand(device_tensor(a, 0, name), dtype, s.o, "grad_out", name);
    c.stats = stats_operand(device_tensor(a, 7, name), s.q, "logsumexp", name);
    c.has_bias = has_bias;
    if (has_bias) c.bias = bias_operand(device_tensor(a, 4, name), dtype, {s.q[0], s.q[1], s.q[2], s.k[2]}, name);
    // cuDNN writes all three gradients: an unwanted one is described packed, with no address,
    // and run_attention_graph puts it in scratch memory.
    const Shape* shapes[3] = {&s.q, &s.k, &s.v};
    AttentionOperand* grads[3] = {&c.d_q, &c.d_k, &c.d_v};
    const char* roles[3] = {"grad_query", "grad_key", "grad_value"};
    for (int i = 0; i < 3; ++i) {
      if (want[i]) {
        *grads[i] = head_operand(a.output(i), dtype, *shapes[i], roles[i], name);
        continue;
      }
      const Shape& sh = *shapes[i];
      const int64_t packed[4] = {sh[1] * sh[2] * sh[3], sh[2] * sh[3], sh[3], 1};
      for (int d = 0; d < 4; ++d) {
        grads[i]->dim[d] = sh[d];
        grads[i]->stride[d] = packed[d];
      }
    }
    run_pass(c, ctx, name);
  });
}

}  // namespace fl::cuda
