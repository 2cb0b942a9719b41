// attention_ops.cpp — F.scaled_dot_product_attention on fl through PyTorch's hook for
// PrivateUse1 backends: the _fused_sdp_choice stub picks "overrideable" when the device's
// plugin has a fused-attention entry for the dtype and the call is one that entry is specified
// for (abi/fl_abi.h: 4-D, no dropout, the same heads for query, key and value); ATen's math
// path otherwise, over the plugin's other kernels, as before. The overrideable forward and
// backward (their autograd link is PyTorch's) call the plugin's entry — tier native — and, for
// a call it declines, the same computation written as other fl ops — tier generic, counted and
// warned about once as every fallback is (torch_fl.fallback_stats()).
#include "attention_decomposition.h"
#include "device_timer.h"
#include "fl_context.h"
#include "op_info.h"
#include "op_router.h"

#include <error.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace fl::binding {
namespace {

constexpr const char* kForwardName = "_scaled_dot_product_fused_attention_overrideable";
constexpr const char* kBackwardName = "_scaled_dot_product_fused_attention_overrideable_backward";

OpInfo& info_of(const char* name) {
  // Resolved once each; the handles live as long as the dispatcher.
  const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow((std::string("aten::") + name).c_str(), "");
  return op_info(handle);
}
OpInfo& forward_info() {
  static OpInfo& info = info_of(kForwardName);
  return info;
}
OpInfo& backward_info() {
  static OpInfo& info = info_of(kBackwardName);
  return info;
}

bool on_fl(const at::Tensor& t, c10::DeviceIndex device) {
  return t.device().type() == c10::DeviceType::PrivateUse1 && t.device().index() == device;
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool /*is_causal*/,
                         std::optional<double> /*scale*/, bool /*enable_gqa*/) {
  const auto math = static_cast<int64_t>(sdp::SDPBackend::math);
  // sdpa_kernel(SDPBackend.MATH) and torch._C._set_sdp_use_overrideable(False) turn it off.
  if (!at::globalContext().userEnabledOverrideableSDP()) return math;
  if (query.dim() != 4 || key.dim() != 4 || value.dim() != 4) return math;
  if (dropout_p != 0.0) return math;
  const c10::DeviceIndex device = query.device().index();
  if (!on_fl(key, device) || !on_fl(value, device)) return math;
  if (key.scalar_type() != query.scalar_type() || value.scalar_type() != query.scalar_type()) return math;
  if (key.size(0) != query.size(0) || value.size(0) != query.size(0)) return math;
  if (key.size(1) != query.size(1) || value.size(1) != query.size(1)) return math;  // GQA: math repeats heads
  if (query.is_nested() || key.is_nested() || value.is_nested()) return math;
  // A head size of 0 scales by 1/sqrt(0): ATen's math path multiplies q and k by sqrt(scale)
  // first and averages V; the fused contract would give NaN.
  if (query.size(3) == 0) return math;
  if (attn_mask && attn_mask->defined()) {
    const at::Tensor& m = *attn_mask;
    if (!on_fl(m, device) || m.dim() > 4) return math;
    // A bool mask arrives converted to query's dtype; a floating one of another dtype (ATen
    // accepts a float32 mask with any query) would be a bias the entries do not take.
    if (m.scalar_type() != at::kBool && m.scalar_type() != query.scalar_type()) return math;
    // Broadcastable to [B, H, Lq, Lk] (the forward expands it).
    const std::array<int64_t, 4> full{query.size(0), query.size(1), query.size(2), key.size(2)};
    for (int64_t d = 1; d <= m.dim(); ++d)
      if (m.size(-d) != 1 && m.size(-d) != full[4 - d]) return math;
  }
  if (!has_native_entry(forward_info(), device, query.scalar_type())) return math;
  return static_cast<int64_t>(sdp::SDPBackend::overrideable);
}

// The bias as the kernels take it: [B,H,Lq,Lk], stride 0 where broadcast; undefined if none.
at::Tensor expanded_bias(const std::optional<at::Tensor>& bias, const at::Tensor& query, const at::Tensor& key) {
  if (!bias || !bias->defined()) return {};
  return bias->expand({query.size(0), query.size(1), query.size(2), key.size(2)});
}

double scale_value(const std::optional<double>& scale, const at::Tensor& query) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
}

// An empty tensor of `shape` laid out in `like`'s dimension order (as the Meta kernel's
// alloc_with_matching_layout: a transposed [B,Lq,H,E] query gives a [B,Lq,H,Ev] output).
// Dimensions of size 1 or stride 0 (a query expanded over the batch) go outermost, so the head
// dimension stays innermost.
at::Tensor empty_in_layout_of(const at::Tensor& like, at::IntArrayRef shape) {
  std::vector<int64_t> order(static_cast<size_t>(like.dim()));
  std::iota(order.begin(), order.end(), 0);
  auto degenerate = [&](int64_t d) { return like.size(d) == 1 || like.stride(d) == 0; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (degenerate(a) != degenerate(b)) return degenerate(a);
    return like.stride(a) > like.stride(b);
  });
  std::vector<int64_t> permuted_shape, inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    permuted_shape.push_back(shape[static_cast<size_t>(order[i])]);
    inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  }
  return at::empty(permuted_shape, like.options()).permute(inverse);
}

c10::IValue optional_double(const std::optional<double>& v) { return v ? c10::IValue(*v) : c10::IValue(); }
c10::IValue tensor_or_none(const at::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }

// The native entry, else the decomposition; raises where the config forbids the generic tier.
template <class Native, class Generic>
void serve(OpInfo& info, c10::DeviceIndex device, const std::vector<c10::IValue>& inputs, Native&& native,
           Generic&& generic) {
  const DeviceTimedScope timed(info, device);
  std::string why_not;
  if (native(why_not)) {
    count_call(info, Tier::Native, device, inputs, why_not);
    return;
  }
  // Neither fallback.strict nor a disabled generic tier refuses it: the decomposition is what
  // ATen's math path would have run had the choice not picked the fused entry (matmuls and a
  // softmax, each through the router, where strict mode still applies op by op). It is
  // counted and warned about as the generic tier, so the decline is visible.
  generic();
  count_call(info, Tier::Generic, device, inputs, why_not);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
fused_attention_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                        const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                        bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4, "torch_fl: ", kForwardName,
              " takes 4-D query, key and value [B, H, L, E]; got ", query.sizes(), ", ", key.sizes(), ", ",
              value.sizes());
  TORCH_CHECK(dropout_p == 0.0, "torch_fl: ", kForwardName, " has no dropout (dropout_p=", std::to_string(dropout_p),
              "); F.scaled_dot_product_attention takes ATen's math path for it");
  TORCH_CHECK(!return_debug_mask, "torch_fl: ", kForwardName, " returns no debug mask");
  const c10::DeviceIndex device = query.device().index();
  const int64_t lq = query.size(2), lk = key.size(2);
  AttentionCall call{query, key, value, expanded_bias(attn_bias, query, key), is_causal, scale_value(scale, query)};
  at::Tensor output = empty_in_layout_of(query, {query.size(0), query.size(1), lq, value.size(3)});
  at::Tensor logsumexp = at::empty({query.size(0), query.size(1), lq}, query.options().dtype(at::kFloat));
  const std::vector<c10::IValue> inputs{query, key, value, tensor_or_none(call.bias), dropout_p, is_causal,
                                        return_debug_mask, optional_double(scale)};
  serve(
      forward_info(), device, inputs,
      [&](std::string& why_not) { return call_native_entry(forward_info(), device, inputs, {output, logsumexp}, why_not); },
      [&] { attention_forward_decomposed(call, output, logsumexp); });
  // No dropout, so no RNG state: the seed and offset are placeholders the backward ignores.
  const auto rng_placeholder = [&] { return at::empty({}, query.options().dtype(at::kLong)); };
  return {output, logsumexp, at::Tensor(), at::Tensor(), c10::SymInt(lq), c10::SymInt(lk),
          rng_placeholder(), rng_placeholder(), at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, c10::SymInt max_q,
    c10::SymInt max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "torch_fl: ", kBackwardName, " has no dropout");
  const c10::DeviceIndex device = query.device().index();
  const std::optional<at::Tensor> bias_opt = attn_bias.defined() ? std::optional<at::Tensor>(attn_bias) : std::nullopt;
  AttentionCall call{query, key, value, expanded_bias(bias_opt, query, key), is_causal, scale_value(scale, query)};
  const bool want_bias = grad_input_mask[3] && attn_bias.defined();
  at::Tensor grad_q = grad_input_mask[0] ? at::empty_like(query) : at::Tensor();
  at::Tensor grad_k = grad_input_mask[1] ? at::empty_like(key) : at::Tensor();
  at::Tensor grad_v = grad_input_mask[2] ? at::empty_like(value) : at::Tensor();
  at::Tensor grad_bias_full =
      want_bias ? at::empty({query.size(0), query.size(1), query.size(2), key.size(2)}, attn_bias.options())
                : at::Tensor();
  c10::List<bool> mask;
  for (bool b : grad_input_mask) mask.push_back(b);
  const std::vector<c10::IValue> inputs{grad_out, query, key, value, tensor_or_none(call.bias), mask, out, logsumexp,
                                        tensor_or_none(cum_seq_q), tensor_or_none(cum_seq_k),
                                        max_q.guard_int(__FILE__, __LINE__), max_k.guard_int(__FILE__, __LINE__),
                                        dropout_p, is_causal, tensor_or_none(philox_seed),
                                        tensor_or_none(philox_offset), optional_double(scale)};
  serve(
      backward_info(), device, inputs,
      [&](std::string& why_not) {
        return call_native_entry(backward_info(), device, inputs, {grad_q, grad_k, grad_v, grad_bias_full}, why_not);
      },
      [&] {
        attention_backward_decomposed(call, grad_out, out, logsumexp, grad_q, grad_k, grad_v, grad_bias_full);
      });
  at::Tensor grad_bias = want_bias ? at::sum_to(grad_bias_full, attn_bias.sizes()) : at::Tensor();
  return {grad_q, grad_k, grad_v, grad_bias};
}

int64_t fused_sdp_choice_op(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                            const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                            std::optional<double> scale, bool enable_gqa) {
  return fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice_op));
  m.impl(kForwardName, TORCH_FN(fused_attention_forward));
  m.impl(kBackwardName, TORCH_FN(fused_attention_backward));
}

}  // namespace
}  // namespace fl::binding

namespace at::native {
// scaled_dot_product_attention asks this stub (by device type) which backend to run.
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &fl::binding::fused_sdp_choice);
}  // namespace at::native
