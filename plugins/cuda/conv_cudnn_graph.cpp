// conv_cudnn_graph.cpp — see conv_cudnn_graph.hpp.
#include "conv_cudnn_graph.hpp"

#include <cudnn.h>

#include "gpu_check.hpp"
#include "scratch_buffer.hpp"

#include <plugin_support.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#if FL_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace fl::cuda {

#if FL_HAVE_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;

// Tensor uids in a plan's variant pack.
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;

struct ConvPlan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN offered no plan for this key
  int64_t workspace_bytes = 0;
};

std::mutex g_mutex;
std::unordered_map<std::string, std::shared_ptr<const ConvPlan>> g_plans;

bool legacy_forced() {
  static const bool forced = [] {
    const char* v = std::getenv("FL_CUDA_CONV_API");
    return v != nullptr && std::strcmp(v, "legacy") == 0;
  }();
  return forced;
}

void put(std::string& key, int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); }

void put_tensor(std::string& key, const fl_tensor& t) {
  put(key, t.dtype);
  for (int d = 0; d < 4; ++d) {
    put(key, t.shape[d]);
    put(key, t.strides[d]);
  }
}

std::string make_key(ConvGraphPass pass, int32_t device, const ConvGraphOperands& ops, const ConvGraphParams& p) {
  std::string key;
  put(key, static_cast<int64_t>(pass));
  put(key, device);
  put_tensor(key, *ops.x);
  put_tensor(key, *ops.w);
  put_tensor(key, *ops.y);
  for (int i = 0; i < 2; ++i) {
    put(key, p.pad[i]);
    put(key, p.stride[i]);
    put(key, p.dilation[i]);
  }
  put(key, (p.precise ? 1 : 0) | (p.deterministic ? 2 : 0));
  return key;
}

fe::DataType_t fe_type(fl_dtype_t dt) {
  switch (dt) {
    case FL_DTYPE_FLOAT32: return fe::DataType_t::FLOAT;
    case FL_DTYPE_FLOAT64: return fe::DataType_t::DOUBLE;
    case FL_DTYPE_FLOAT16: return fe::DataType_t::HALF;
    case FL_DTYPE_BFLOAT16: return fe::DataType_t::BFLOAT16;
    default: return fe::DataType_t::NOT_SET;
  }
}

std::vector<int64_t> dims_of(const fl_tensor& t) { return {t.shape[0], t.shape[1], t.shape[2], t.shape[3]}; }
std::vector<int64_t> strides_of(const fl_tensor& t) { return {t.strides[0], t.strides[1], t.strides[2], t.strides[3]}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, int64_t uid,
                                                    const fl_tensor& t) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(dims_of(t))
                      .set_stride(strides_of(t))
                      .set_data_type(fe_type(t.dtype)));
}

void mark_output(const std::shared_ptr<fe::graph::Tensor_attributes>& out, int64_t uid, const fl_tensor& t) {
  out->set_output(true).set_uid(uid).set_dim(dims_of(t)).set_stride(strides_of(t)).set_data_type(fe_type(t.dtype));
}

// Builds the plan for one configuration; a null graph when cuDNN has none.
std::shared_ptr<const ConvPlan> build_plan(ConvGraphPass pass, cudnnHandle_t handle, const ConvGraphOperands& ops,
                                           const ConvGraphParams& p) {
  auto plan = std::make_shared<ConvPlan>();
  const fl_dtype_t dt = ops.x->dtype;
  if (fe_type(dt) == fe::DataType_t::NOT_SET) return plan;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(dt))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(dt == FL_DTYPE_FLOAT64 ? fe::DataType_t::DOUBLE : fe::DataType_t::FLOAT);
  const std::vector<int64_t> pad = {p.pad[0], p.pad[1]}, stride = {p.stride[0], p.stride[1]},
                             dilation = {p.dilation[0], p.dilation[1]};
  // The settings every pass shares, on the pass's attribute type.
  auto attributes = [&](auto a) {
    return a.set_convolution_mode(fe::ConvolutionMode_t::CROSS_CORRELATION)
        .set_padding(pad)
        .set_stride(stride)
        .set_dilation(dilation);
  };
  switch (pass) {
    case ConvGraphPass::Forward: {
      auto x = input(*g, "x", kUidX, *ops.x);
      auto w = input(*g, "w", kUidW, *ops.w);
      mark_output(g->conv_fprop(x, w, attributes(fe::graph::Conv_fprop_attributes())), kUidY, *ops.y);
      break;
    }
    case ConvGraphPass::BackwardData: {
      auto dy = input(*g, "dy", kUidY, *ops.y);
      auto w = input(*g, "w", kUidW, *ops.w);
      mark_output(g->conv_dgrad(dy, w, attributes(fe::graph::Conv_dgrad_attributes())), kUidX, *ops.x);
      break;
    }
    case ConvGraphPass::BackwardFilter: {
      auto dy = input(*g, "dy", kUidY, *ops.y);
      auto x = input(*g, "x", kUidX, *ops.x);
      mark_output(g->conv_wgrad(dy, x, attributes(fe::graph::Conv_wgrad_attributes())), kUidW, *ops.w);
      break;
    }
  }
  if (g->validate().is_bad() || g->build_operation_graph(handle).is_bad() ||
      g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}).is_bad())
    return plan;
  // Engines PyTorch also leaves out (filterEngineConfigs in ATen's Conv_v8.cpp): those that
  // down-convert their inputs, always; tensor-core (TF32) engines for a precise float32 call;
  // non-deterministic ones for a deterministic call. (The filter works on the candidate
  // plans, so it comes after create_execution_plans.)
  std::vector<fe::NumericalNote_t> excluded = {fe::NumericalNote_t::DOWN_CONVERT_INPUTS};
  if (p.precise && dt == FL_DTYPE_FLOAT32) excluded.push_back(fe::NumericalNote_t::TENSOR_CORE);
  if (p.deterministic) excluded.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
  g->deselect_numeric_notes(excluded);
  if (g->check_support(handle).is_bad() ||
      g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE).is_bad())
    return plan;
  int64_t workspace = 0;
  if (g->get_workspace_size(workspace).is_bad()) return plan;
  plan->graph = std::move(g);
  plan->workspace_bytes = workspace;
  return plan;
}

}  // namespace

bool run_conv_graph(ConvGraphPass pass, int32_t device, cudnnHandle_t handle, const ConvGraphOperands& ops,
                    const ConvGraphParams& params, gpuStream_t stream) {
  if (legacy_forced()) return false;
  const std::string key = make_key(pass, device, ops, params);
  std::shared_ptr<const ConvPlan> plan;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) {
      plan = it->second;
    } else {
      plan = build_plan(pass, handle, ops, params);
      g_plans.emplace(key, plan);
    }
  }
  if (!plan->graph) return false;
  std::unordered_map<int64_t, void*> pack = {{kUidX, plugin::data_ptr<void>(*ops.x)},
                                             {kUidW, plugin::data_ptr<void>(*ops.w)},
                                             {kUidY, plugin::data_ptr<void>(*ops.y)}};
  ScratchBuffer workspace(static_cast<size_t>(plan->workspace_bytes), stream);
  auto status = plan->graph->execute(handle, pack, workspace.get());
  if (status.is_bad())
    plugin::raise(FL_ERR_DEVICE, std::string("cuDNN graph convolution: ") + status.get_message());
  return true;
}

void clear_conv_graphs() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_plans.clear();
}

#else  // no cudnn-frontend headers at build time: the legacy path serves every call

bool run_conv_graph(ConvGraphPass, int32_t, cudnnHandle_t, const ConvGraphOperands&, const ConvGraphParams&,
                    gpuStream_t) {
  return false;
}

void clear_conv_graphs() {}

#endif

}  // namespace fl::cuda
