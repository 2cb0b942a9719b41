// attention_cudnn_graph.cpp — see attention_cudnn_graph.hpp.
#include "attention_cudnn_graph.hpp"

#include <cudnn.h>

#include "attention_masked_rows.hpp"
#include "scratch_buffer.hpp"

#include <plugin_support.hpp>

#include <iterator>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#if FL_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace fl::cuda {

#if FL_HAVE_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;

// Tensor uids in a plan's variant pack.
constexpr int64_t kUidQ = 1, kUidK = 2, kUidV = 3, kUidO = 4, kUidStats = 5, kUidBias = 6, kUidScale = 7,
                  kUidDO = 8, kUidDQ = 9, kUidDK = 10, kUidDV = 11;

struct AttentionPlan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN offered no plan for this key
  int64_t workspace_bytes = 0;
  std::string why_not;                      // for a null graph: the step that failed and cuDNN's message
};

// The plans, least recently used first in g_order. Bounded: a decode loop whose key length
// grows by one per token would otherwise build and keep one plan per length for good. A plan
// evicted while a call still executes it lives on in that call's shared_ptr.
constexpr size_t kMaxPlans = 256;
std::mutex g_mutex;
std::list<std::string> g_order;
struct CachedPlan {
  std::shared_ptr<const AttentionPlan> plan;
  std::list<std::string>::iterator position;
};
std::unordered_map<std::string, CachedPlan> g_plans;

// The cached plan for `key`, marked most recently used; nullptr when there is none.
std::shared_ptr<const AttentionPlan> find_plan(const std::string& key) {
  auto it = g_plans.find(key);
  if (it == g_plans.end()) return nullptr;
  g_order.splice(g_order.end(), g_order, it->second.position);
  return it->second.plan;
}

void keep_plan(const std::string& key, std::shared_ptr<const AttentionPlan> plan) {
  g_order.push_back(key);
  g_plans[key] = CachedPlan{std::move(plan), std::prev(g_order.end())};
  while (g_plans.size() > kMaxPlans) {
    g_plans.erase(g_order.front());
    g_order.pop_front();
  }
}

// Whether the forward plan writes the logsumexp: when the caller wants it, and with a bias,
// whose fully masked rows are found from it (attention_masked_rows.hpp).
bool forward_stats(const AttentionGraphCall& c) { return c.stats != nullptr || c.has_bias; }

void put(std::string& key, int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); }

void put_operand(std::string& key, const AttentionOperand& t) {
  for (int d = 0; d < 4; ++d) {
    put(key, t.dim[d]);
    put(key, t.stride[d]);
  }
}

// Everything that shapes a plan. The scale is not in it: the plan takes it by value at
// execution. The addresses are not either: every operand is 16-byte aligned (the caller
// checks), which is all the plan assumes of them.
std::string make_key(int32_t device, const AttentionGraphCall& c) {
  std::string key;
  put(key, static_cast<int64_t>(c.pass));
  put(key, device);
  put(key, c.dtype);
  put(key, (c.causal ? 1 : 0) | (c.deterministic ? 2 : 0) | (c.has_bias ? 4 : 0) | (forward_stats(c) ? 8 : 0));
  put_operand(key, c.q);
  put_operand(key, c.k);
  put_operand(key, c.v);
  put_operand(key, c.o);
  if (c.has_bias) put_operand(key, c.bias);
  if (c.pass == AttentionGraphPass::Backward) {
    put_operand(key, c.d_o);
    put_operand(key, c.d_q);
    put_operand(key, c.d_k);
    put_operand(key, c.d_v);
  }
  return key;
}

fe::DataType_t fe_type(fl_dtype_t dt) {
  return dt == FL_DTYPE_BFLOAT16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

std::vector<int64_t> dims_of(const AttentionOperand& t) { return {t.dim[0], t.dim[1], t.dim[2], t.dim[3]}; }
std::vector<int64_t> strides_of(const AttentionOperand& t) {
  return {t.stride[0], t.stride[1], t.stride[2], t.stride[3]};
}

constexpr size_t kScratchAlign = 256;
size_t round_up(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// Bytes of a packed float16/bfloat16 operand.
size_t packed_bytes(const AttentionOperand& t) {
  return static_cast<size_t>(t.dim[0] * t.dim[1] * t.dim[2] * t.dim[3]) * 2;
}

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

TensorPtr input(fe::graph::Graph& g, const char* name, int64_t uid, const AttentionOperand& t, fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(dims_of(t))
                      .set_stride(strides_of(t))
                      .set_data_type(type));
}

void mark_output(const TensorPtr& out, int64_t uid, const AttentionOperand& t, fe::DataType_t type) {
  out->set_output(true).set_uid(uid).set_dim(dims_of(t)).set_stride(strides_of(t)).set_data_type(type);
}

// The logsumexp as cuDNN's Stats tensor: [B,H,Lq,1] float32, packed [B,H,Lq].
std::vector<int64_t> stats_dims(const AttentionGraphCall& c) { return {c.q.dim[0], c.q.dim[1], c.q.dim[2], 1}; }
std::vector<int64_t> stats_strides(const AttentionGraphCall& c) {
  return {c.q.dim[1] * c.q.dim[2], c.q.dim[2], 1, 1};
}

// The scale, a float taken by value at execution (so one plan serves every scale).
TensorPtr scale_tensor(fe::graph::Graph& g) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name("attn_scale")
                      .set_uid(kUidScale)
                      .set_dim({1, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_is_pass_by_value(true)
                      .set_data_type(fe::DataType_t::FLOAT));
}

// The settings both passes share, on the pass's attribute type. The causal mask is cuDNN's
// top-left diagonal band with right bound 0: key j is kept for query i when j <= i (what
// set_causal_mask sets; ATen's is_causal, not the bottom-right variant).
template <class Attributes>
Attributes common_attributes(Attributes a, fe::graph::Graph& g, const AttentionGraphCall& c, const TensorPtr& bias) {
  a.set_attn_scale(scale_tensor(g));
  if (c.causal) a.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  if (bias) a.set_bias(bias);
  return a;
}

void build_forward(fe::graph::Graph& g, const AttentionGraphCall& c, fe::DataType_t io) {
  const TensorPtr q = input(g, "q", kUidQ, c.q, io), k = input(g, "k", kUidK, c.k, io),
                  v = input(g, "v", kUidV, c.v, io);
  const TensorPtr bias = c.has_bias ? input(g, "bias", kUidBias, c.bias, io) : nullptr;
  auto attributes = common_attributes(fe::graph::SDPA_attributes(), g, c, bias);
  attributes.set_name("sdpa").set_generate_stats(forward_stats(c));
  auto [o, stats] = g.sdpa(q, k, v, attributes);
  mark_output(o, kUidO, c.o, io);
  if (forward_stats(c))
    stats->set_output(true)
        .set_uid(kUidStats)
        .set_dim(stats_dims(c))
        .set_stride(stats_strides(c))
        .set_data_type(fe::DataType_t::FLOAT);
}

void build_backward(fe::graph::Graph& g, const AttentionGraphCall& c, fe::DataType_t io) {
  const TensorPtr q = input(g, "q", kUidQ, c.q, io), k = input(g, "k", kUidK, c.k, io),
                  v = input(g, "v", kUidV, c.v, io), o = input(g, "o", kUidO, c.o, io),
                  d_o = input(g, "d_o", kUidDO, c.d_o, io);
  const TensorPtr stats = g.tensor(fe::graph::Tensor_attributes()
                                       .set_name("stats")
                                       .set_uid(kUidStats)
                                       .set_dim(stats_dims(c))
                                       .set_stride(stats_strides(c))
                                       .set_data_type(fe::DataType_t::FLOAT));
  const TensorPtr bias = c.has_bias ? input(g, "bias", kUidBias, c.bias, io) : nullptr;
  auto attributes = common_attributes(fe::graph::SDPA_backward_attributes(), g, c, bias);
  // cuDNN's default backward accumulates dQ with atomics; its deterministic variant (a dP
  // workspace) is asked for when the call wants bitwise reproducible results.
  attributes.set_name("sdpa_backward").set_deterministic_algorithm(c.deterministic);
  auto [d_q, d_k, d_v] = g.sdpa_backward(q, k, v, o, d_o, stats, attributes);
  mark_output(d_q, kUidDQ, c.d_q, io);
  mark_output(d_k, kUidDK, c.d_k, io);
  mark_output(d_v, kUidDV, c.d_v, io);
}

// Builds the plan for one configuration; a null graph, with the reason, when cuDNN has none.
std::shared_ptr<const AttentionPlan> build_plan(cudnnHandle_t handle, const AttentionGraphCall& c) {
  auto plan = std::make_shared<AttentionPlan>();
  auto g = std::make_shared<fe::graph::Graph>();
  const fe::DataType_t io = fe_type(c.dtype);
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  if (c.pass == AttentionGraphPass::Forward)
    build_forward(*g, c, io);
  else
    build_backward(*g, c, io);
  // The frontend's build steps in order; the first that fails says why there is no plan.
  auto failed = [&](const char* step, const fe::error_t& status) {
    if (status.is_good()) return false;
    plan->why_not = std::string("cuDNN ") + step + ": " + status.err_msg;
    return true;
  };
  if (failed("validate", g->validate()) || failed("build_operation_graph", g->build_operation_graph(handle)) ||
      failed("create_execution_plans", g->create_execution_plans({fe::HeurMode_t::A})))
    return plan;
  // A deterministic call leaves out engines with a non-deterministic note (as convolutions
  // do); the filter works on the candidate plans, so it comes after create_execution_plans.
  if (c.deterministic) g->deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  int64_t workspace = 0;
  if (failed("check_support", g->check_support(handle)) ||
      failed("build_plans", g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE)) ||
      failed("get_workspace_size", g->get_workspace_size(workspace)))
    return plan;
  plan->graph = std::move(g);
  plan->workspace_bytes = workspace;
  return plan;
}

}  // namespace

bool run_attention_graph(int32_t device, cudnnHandle_t handle, const AttentionGraphCall& call, gpuStream_t stream,
                         std::string* why_not) {
  const std::string key = make_key(device, call);
  std::shared_ptr<const AttentionPlan> plan;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    plan = find_plan(key);
    if (!plan) {
      plan = build_plan(handle, call);
      keep_plan(key, plan);
    }
  }
  if (!plan->graph) {
    if (why_not != nullptr) *why_not = plan->why_not;
    return false;
  }
  const bool backward = call.pass == AttentionGraphPass::Backward;
  const int64_t rows = call.q.dim[0] * call.q.dim[1] * call.q.dim[2];
  // One scratch allocation, carved at 256-byte offsets (cudaMallocAsync aligns the base): the
  // plan's workspace; each unwanted gradient; with a bias, the logsumexp the forward writes
  // when the caller wants none, or the backward's copy of it (attention_masked_rows.hpp).
  size_t scratch_bytes = 0;
  auto carve = [&](size_t bytes) {
    const size_t at = scratch_bytes;
    scratch_bytes += round_up(bytes);
    return at;
  };
  carve(static_cast<size_t>(plan->workspace_bytes));
  const AttentionOperand* grads[3] = {&call.d_q, &call.d_k, &call.d_v};
  size_t grad_at[3] = {};
  if (backward)
    for (int i = 0; i < 3; ++i)
      if (grads[i]->data == nullptr) grad_at[i] = carve(packed_bytes(*grads[i]));
  const bool stats_in_scratch = call.has_bias && (backward || call.stats == nullptr);
  const size_t stats_at = stats_in_scratch ? carve(static_cast<size_t>(rows) * sizeof(float)) : 0;
  ScratchBuffer scratch(scratch_bytes, stream);
  char* base = scratch.get<char>();
  float* stats = stats_in_scratch ? reinterpret_cast<float*>(base + stats_at) : static_cast<float*>(call.stats);
  if (backward && call.has_bias)
    launch_attention_backward_stats(static_cast<const float*>(call.stats), stats, rows, stream);
  // cuDNN reads the by-value scale during execute(), so a local is enough.
  float scale = call.scale;
  std::unordered_map<int64_t, void*> pack = {{kUidQ, call.q.data}, {kUidK, call.k.data}, {kUidV, call.v.data},
                                             {kUidO, call.o.data}, {kUidScale, &scale}};
  if (call.has_bias) pack.emplace(kUidBias, call.bias.data);
  if (stats != nullptr) pack.emplace(kUidStats, stats);
  if (backward) {
    pack.emplace(kUidDO, call.d_o.data);
    const int64_t grad_uids[3] = {kUidDQ, kUidDK, kUidDV};
    for (int i = 0; i < 3; ++i)
      pack.emplace(grad_uids[i], grads[i]->data != nullptr ? grads[i]->data : base + grad_at[i]);
  }
  auto status = plan->graph->execute(handle, pack, base);
  if (status.is_bad())
    plugin::raise(FL_ERR_DEVICE, std::string("cuDNN graph attention: ") + status.err_msg);
  if (!backward && call.has_bias) {
    AttentionOutputRows out;
    out.data = call.o.data;
    out.heads = call.o.dim[1];
    out.queries = call.o.dim[2];
    out.head_size = call.o.dim[3];
    for (int d = 0; d < 3; ++d) out.stride[d] = call.o.stride[d];
    launch_attention_clear_masked_rows(stats, out, rows, stream);
  }
  return true;
}

void clear_attention_graphs() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_plans.clear();
  g_order.clear();
}

#else  // no cudnn-frontend headers at build time: every pass is declined

bool run_attention_graph(int32_t, cudnnHandle_t, const AttentionGraphCall&, gpuStream_t, std::string* why_not) {
  if (why_not != nullptr) *why_not = "the cuda plugin was built without the cudnn-frontend headers";
  return false;
}

void clear_attention_graphs() {}

#endif

}  // namespace fl::cuda
