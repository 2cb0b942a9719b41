// conv_cudnn.cpp — convolution_overrideable and convolution_backward_overrideable for 2-D
// convolutions (4-D tensors, groups, stride, padding, dilation) through cuDNN's convolution
// API. Transposed convolutions and 1-D/3-D ones answer FL_ERR_NOT_SUPPORTED.
// Layouts: a call runs in NHWC when its input or weight is channels_last (ATen's
// cudnn_conv_suggest_memory_format rule), else in NCHW; operands in another layout are packed
// into scratch memory first, outputs in another layout are computed in scratch and copied into
// place, so the entries take any strides.
// Each pass first tries cuDNN's graph API with a cached plan (conv_cudnn_graph.hpp); where that
// is unavailable, the legacy API runs it. Legacy algorithms come from cuDNN's heuristics
// (cudnnGet*_v7, no benchmarking runs), the first
// one that runs is cached per shape and layout with its workspace size; a call with
// FL_CALL_DETERMINISTIC only takes deterministic algorithms, FL_CALL_PRECISE disables TF32.
// Workspaces are stream-ordered allocations. Bias add and bias gradient use the plugin's own
// elementwise/reduction kernels.
#include "conv_cudnn.hpp"
#include "conv_cudnn_graph.hpp"
#include "copy_kernels.hpp"
#include "device_state.hpp"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "reduce.hpp"
#include "scratch_buffer.hpp"

#include <cudnn.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace fl::cuda {

// elementwise_arith.cu: out += addend (broadcast), in place.
void launch_add_inplace(const fl_tensor& out, const fl_tensor& addend, const LaunchContext& ctx);

namespace {

// cuDNN refusing a configuration (NOT_SUPPORTED) becomes FL_ERR_NOT_SUPPORTED: the core then
// falls back for the call (outputs are rewritten entirely by the fallback).
void check_dnn(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  if (status == CUDNN_STATUS_NOT_SUPPORTED)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(what) + ": " + cudnnGetErrorString(status));
  if (status == CUDNN_STATUS_ALLOC_FAILED)
    plugin::raise(FL_ERR_OUT_OF_MEMORY, std::string(what) + ": " + cudnnGetErrorString(status));
  plugin::raise(FL_ERR_DEVICE, std::string(what) + ": " + cudnnGetErrorString(status));
}

// Everything an algorithm choice depends on.
using ConvKey = std::tuple<int, int, std::array<int64_t, 4>, std::array<int64_t, 4>, std::array<int, 6>, int, int>;

// An algorithm and the math type cuDNN's heuristics paired with it.
struct AlgoChoice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

// ---- memory layouts ----------------------------------------------------------------------------

enum class Layout { Nchw = 0, Nhwc = 1 };

std::array<int64_t, 4> packed_strides(const int64_t* shape, Layout layout) {
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  if (layout == Layout::Nchw) return {c * h * w, h * w, w, 1};
  return {h * w * c, 1, w * c, c};
}

// Packed in `layout` (strides of size-1 dims do not matter).
bool is_packed(const fl_tensor& t, Layout layout) {
  const auto st = packed_strides(t.shape, layout);
  for (int d = 0; d < 4; ++d)
    if (t.shape[d] != 1 && t.strides[d] != st[d]) return false;
  return true;
}

Layout call_layout(const fl_tensor& x, const fl_tensor& w) {
  if (x.dtype == FL_DTYPE_FLOAT64) return Layout::Nchw;  // cuDNN has no float64 NHWC kernels
  auto channels_last = [](const fl_tensor& t) { return !is_packed(t, Layout::Nchw) && is_packed(t, Layout::Nhwc); };
  return channels_last(x) || channels_last(w) ? Layout::Nhwc : Layout::Nchw;
}

// One 4-D operand as cuDNN is given it: the tensor itself when packed in the call's layout
// (described with canonical strides), else packed scratch memory — filled from the tensor for
// an input, copied back into the tensor by finish() for an output.
class PackedOperand {
 public:
  PackedOperand(const fl_tensor& t, Layout layout, bool is_output, const LaunchContext& ctx)
      : original_(t), ctx_(ctx), is_output_(is_output) {
    view_ = t;
    for (int d = 0; d < 4; ++d) shape_[d] = t.shape[d];
    strides_ = packed_strides(t.shape, layout);
    view_.shape = shape_;
    view_.strides = strides_.data();
    if (is_packed(t, layout)) return;
    scratch_ = std::make_unique<ScratchBuffer>(
        static_cast<size_t>(plugin::numel(t)) * plugin::dtype_size(t.dtype), ctx.stream);
    view_.data = scratch_->get();
    view_.byte_offset = 0;
    if (!is_output_) launch_broadcast_copy(t, view_, ctx);
  }
  PackedOperand(const PackedOperand&) = delete;
  PackedOperand& operator=(const PackedOperand&) = delete;

  const fl_tensor& get() const { return view_; }
  template <class T = void>
  T* data() const { return plugin::data_ptr<T>(view_); }
  // For an output computed in scratch: copies it into the real tensor (enqueued on the stream).
  void finish() const {
    if (is_output_ && scratch_) launch_broadcast_copy(view_, original_, ctx_);
  }

 private:
  fl_tensor original_;
  LaunchContext ctx_;
  bool is_output_;
  fl_tensor view_{};
  int64_t shape_[4] = {};
  std::array<int64_t, 4> strides_{};
  std::unique_ptr<ScratchBuffer> scratch_;
};

struct ConvDevice {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  std::map<ConvKey, AlgoChoice> algos;
};

std::mutex g_conv_mutex;
std::vector<std::unique_ptr<ConvDevice>> g_conv;

ConvDevice& conv_device(int32_t device) {
  std::lock_guard<std::mutex> lock(g_conv_mutex);
  if (g_conv.size() <= static_cast<size_t>(device)) g_conv.resize(static_cast<size_t>(device) + 1);
  auto& slot = g_conv[static_cast<size_t>(device)];
  if (!slot) slot = std::make_unique<ConvDevice>();
  return *slot;
}

// RAII holders for cuDNN descriptors.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { check_dnn(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor"); }
  ~TensorDesc() { (void)cudnnDestroyTensorDescriptor(d); }
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { check_dnn(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor"); }
  ~FilterDesc() { (void)cudnnDestroyFilterDescriptor(d); }
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { check_dnn(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor"); }
  ~ConvDesc() { (void)cudnnDestroyConvolutionDescriptor(d); }
};

cudnnDataType_t dnn_type(fl_dtype_t dt) {
  switch (dt) {
    case FL_DTYPE_FLOAT32: return CUDNN_DATA_FLOAT;
    case FL_DTYPE_FLOAT64: return CUDNN_DATA_DOUBLE;
    case FL_DTYPE_FLOAT16: return CUDNN_DATA_HALF;
    case FL_DTYPE_BFLOAT16: return CUDNN_DATA_BFLOAT16;
    default: plugin::raise(FL_ERR_NOT_SUPPORTED, std::string("convolution dtype ") + plugin::dtype_name(dt));
  }
}

void set_tensor(TensorDesc& desc, const fl_tensor& t) {
  int dims[4], strides[4];
  for (int i = 0; i < 4; ++i) {
    dims[i] = static_cast<int>(t.shape[i]);
    strides[i] = static_cast<int>(t.strides[i]);
  }
  check_dnn(cudnnSetTensorNdDescriptor(desc.d, dnn_type(t.dtype), 4, dims, strides), "cudnnSetTensorNdDescriptor");
}

void set_filter(FilterDesc& desc, const fl_tensor& w, Layout layout) {
  const cudnnTensorFormat_t format = layout == Layout::Nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  check_dnn(cudnnSetFilter4dDescriptor(desc.d, dnn_type(w.dtype), format, static_cast<int>(w.shape[0]),
                                       static_cast<int>(w.shape[1]), static_cast<int>(w.shape[2]),
                                       static_cast<int>(w.shape[3])),
            "cudnnSetFilter4dDescriptor");
}

struct ConvParams {
  int stride[2] = {1, 1};
  int pad[2] = {0, 0};
  int dilation[2] = {1, 1};
  int groups = 1;
};

int pick(const std::vector<int64_t>& v, size_t i, int fallback) {
  if (v.empty()) return fallback;
  return static_cast<int>(v.size() == 1 ? v[0] : v[i]);
}

// Reads (stride, padding, dilation, transposed, output_padding, groups) at inputs first..first+5.
ConvParams conv_params(const Args& a, int32_t first, const char* name) {
  ConvParams p;
  const std::vector<int64_t> s = a.ints(first), pd = a.ints(first + 1), d = a.ints(first + 2);
  if (s.size() > 2 || pd.size() > 2 || d.size() > 2)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": only 2-D convolutions are handled");
  if (a.boolean(first + 3)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": transposed convolution");
  for (size_t i = 0; i < 2; ++i) {
    p.stride[i] = pick(s, i, 1);
    p.pad[i] = pick(pd, i, 0);
    p.dilation[i] = pick(d, i, 1);
  }
  p.groups = static_cast<int>(a.integer(first + 5));
  if (p.groups < 1 || p.stride[0] < 1 || p.stride[1] < 1 || p.dilation[0] < 1 || p.dilation[1] < 1 ||
      p.pad[0] < 0 || p.pad[1] < 0)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": bad stride/padding/dilation/groups");
  return p;
}

void set_conv(ConvDesc& desc, const ConvParams& p, fl_dtype_t dt, bool precise) {
  const cudnnDataType_t compute = dt == FL_DTYPE_FLOAT64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  check_dnn(cudnnSetConvolution2dDescriptor(desc.d, p.pad[0], p.pad[1], p.stride[0], p.stride[1], p.dilation[0],
                                            p.dilation[1], CUDNN_CROSS_CORRELATION, compute),
            "cudnnSetConvolution2dDescriptor");
  check_dnn(cudnnSetConvolutionGroupCount(desc.d, p.groups), "cudnnSetConvolutionGroupCount");
  cudnnMathType_t math = CUDNN_TENSOR_OP_MATH;
  if (dt == FL_DTYPE_FLOAT64) math = CUDNN_DEFAULT_MATH;
  else if (dt == FL_DTYPE_FLOAT32 && precise) math = CUDNN_FMA_MATH;
  check_dnn(cudnnSetConvolutionMathType(desc.d, math), "cudnnSetConvolutionMathType");
}

void check_4d(const fl_tensor& t, const char* what, const char* name) {
  if (t.ndim != 4)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": " + what + " is " + std::to_string(t.ndim) +
                                            "-D (only 2-D convolutions, 4-D tensors, are handled)");
  for (int i = 0; i < 4; ++i)
    if (t.shape[i] > 2147483647LL || t.strides[i] > 2147483647LL)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": dimension beyond int32");
}

ConvKey make_key(ConvGraphPass pass, const fl_tensor& x, const fl_tensor& w, const ConvParams& p, uint32_t flags,
                 Layout layout) {
  return ConvKey{static_cast<int>(pass), static_cast<int>(x.dtype),
                 {x.shape[0], x.shape[1], x.shape[2], x.shape[3]},
                 {w.shape[0], w.shape[1], w.shape[2], w.shape[3]},
                 {p.stride[0], p.stride[1], p.pad[0], p.pad[1], p.dilation[0], p.dilation[1]},
                 p.groups,
                 static_cast<int>(flags & (FL_CALL_PRECISE | FL_CALL_DETERMINISTIC)) | (static_cast<int>(layout) << 16)};
}

// Candidate algorithms for one pass, best first, filtered by status, determinism and (for a
// precise float32 call) tensor-op math, which would mean TF32.
template <class Perf, class GetFn>
std::vector<AlgoChoice> candidates(GetFn get, bool deterministic, bool no_tensor_ops, const char* what) {
  constexpr int kMax = 16;
  Perf perf[kMax];
  int returned = 0;
  check_dnn(get(kMax, &returned, perf), what);
  std::vector<AlgoChoice> out;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (no_tensor_ops && (perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                          perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    out.push_back(AlgoChoice{static_cast<int>(perf[i].algo), perf[i].mathType});
  }
  return out;
}

// Runs `run(algo)` with the cached choice, or tries the candidates in order until one is
// accepted (cuDNN refuses an unsupported configuration before launching anything). The
// convolution descriptor takes each candidate's math type before it runs.
template <class Candidates, class Run>
void run_with_algo(ConvDevice& dev, cudnnConvolutionDescriptor_t conv, const ConvKey& key, Candidates&& list,
                   Run&& run, const char* name) {
  auto it = dev.algos.find(key);
  if (it != dev.algos.end()) {
    check_dnn(cudnnSetConvolutionMathType(conv, it->second.math), "cudnnSetConvolutionMathType");
    check_dnn(run(it->second.algo), name);
    return;
  }
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (const AlgoChoice& choice : list()) {
    check_dnn(cudnnSetConvolutionMathType(conv, choice.math), "cudnnSetConvolutionMathType");
    last = run(choice.algo);
    if (last == CUDNN_STATUS_SUCCESS) {
      dev.algos[key] = choice;
      return;
    }
    if (last != CUDNN_STATUS_NOT_SUPPORTED) break;
  }
  check_dnn(last, name);
}

cudnnHandle_t handle_for(ConvDevice& dev, gpuStream_t stream) {
  if (dev.handle == nullptr) check_dnn(cudnnCreate(&dev.handle), "cudnnCreate");
  check_dnn(cudnnSetStream(dev.handle, stream), "cudnnSetStream");
  return dev.handle;
}

struct Scalars {
  float f_one = 1.0f, f_zero = 0.0f;
  double d_one = 1.0, d_zero = 0.0;
  const void* one(fl_dtype_t dt) const { return dt == FL_DTYPE_FLOAT64 ? static_cast<const void*>(&d_one) : &f_one; }
  const void* zero(fl_dtype_t dt) const { return dt == FL_DTYPE_FLOAT64 ? static_cast<const void*>(&d_zero) : &f_zero; }
};

// y += bias, the bias (C) viewed as (C, 1, 1) and broadcast over (N, C, H, W).
void add_bias(const fl_tensor& y, const fl_tensor& bias, const LaunchContext& ctx) {
  const int64_t shape[3] = {bias.shape[0], 1, 1};
  const int64_t strides[3] = {bias.strides[0], 0, 0};
  fl_tensor view = bias;
  view.ndim = 3;
  view.shape = shape;
  view.strides = strides;
  launch_add_inplace(y, view, ctx);
}

ConvGraphParams graph_params(const ConvParams& p, bool precise, bool deterministic) {
  return ConvGraphParams{{p.pad[0], p.pad[1]}, {p.stride[0], p.stride[1]}, {p.dilation[0], p.dilation[1]},
                         precise, deterministic};
}

// The legacy API of each pass. All three passes' functions take their operands in one order:
// first input, second input, convolution, output.
template <ConvGraphPass P>
struct LegacyPass;
template <>
struct LegacyPass<ConvGraphPass::Forward> {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr auto get = cudnnGetConvolutionForwardAlgorithm_v7;
  static constexpr auto workspace = cudnnGetConvolutionForwardWorkspaceSize;
  static constexpr auto run = cudnnConvolutionForward;
  static constexpr const char* get_name = "cudnnGetConvolutionForwardAlgorithm_v7";
  static constexpr const char* name = "cudnnConvolutionForward";
};
template <>
struct LegacyPass<ConvGraphPass::BackwardData> {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr auto get = cudnnGetConvolutionBackwardDataAlgorithm_v7;
  static constexpr auto workspace = cudnnGetConvolutionBackwardDataWorkspaceSize;
  static constexpr auto run = cudnnConvolutionBackwardData;
  static constexpr const char* get_name = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
  static constexpr const char* name = "cudnnConvolutionBackwardData";
};
template <>
struct LegacyPass<ConvGraphPass::BackwardFilter> {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr auto get = cudnnGetConvolutionBackwardFilterAlgorithm_v7;
  static constexpr auto workspace = cudnnGetConvolutionBackwardFilterWorkspaceSize;
  static constexpr auto run = cudnnConvolutionBackwardFilter;
  static constexpr const char* get_name = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
  static constexpr const char* name = "cudnnConvolutionBackwardFilter";
};

// What the passes of one call share. x and w are the call's input and weight (they key the
// algorithm cache).
struct ConvCall {
  ConvDevice& dev;
  cudnnHandle_t handle;
  const ConvDesc& conv;
  const LaunchContext& ctx;
  const fl_tensor& x;
  const fl_tensor& w;
  const ConvParams& p;
  uint32_t flags;
  Layout layout;
  bool no_tf32;
  bool deterministic;
};

// Runs pass P: through a graph plan when there is one, else through the legacy API with
// run_with_algo. `graph` holds the operands in their forward roles; (d1, in1), (d2, in2) and
// (dout, out) are the legacy API's inputs and output in its argument order.
template <ConvGraphPass P, class D1, class D2, class DOut>
void run_pass(const ConvCall& c, const ConvGraphOperands& graph, const D1& d1, const PackedOperand& in1,
              const D2& d2, const PackedOperand& in2, const DOut& dout, const PackedOperand& out) {
  using Api = LegacyPass<P>;
  if (run_conv_graph(P, c.ctx.device, c.handle, graph, graph_params(c.p, c.no_tf32, c.deterministic), c.ctx.stream))
    return;
  const cudnnHandle_t h = c.handle;
  const fl_dtype_t dt = c.x.dtype;
  const Scalars sc;
  auto list = [&] {
    return candidates<typename Api::Perf>(
        [&](int n, int* got, typename Api::Perf* perf) {
          return Api::get(h, d1.d, d2.d, c.conv.d, dout.d, n, got, perf);
        },
        c.deterministic, c.no_tf32, Api::get_name);
  };
  auto run = [&](int algo) -> cudnnStatus_t {
    const auto alg = static_cast<typename Api::Algo>(algo);
    size_t ws_bytes = 0;
    cudnnStatus_t st = Api::workspace(h, d1.d, d2.d, c.conv.d, dout.d, alg, &ws_bytes);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    ScratchBuffer ws(ws_bytes, c.ctx.stream);
    return Api::run(h, sc.one(dt), d1.d, in1.data<const void>(), d2.d, in2.data<const void>(), c.conv.d, alg,
                    ws.get(), ws_bytes, sc.zero(dt), dout.d, out.data());
  };
  run_with_algo(c.dev, c.conv.d, make_key(P, c.x, c.w, c.p, c.flags, c.layout), list, run, Api::name);
}

bool requested(const Args& a, int32_t i) {
  return i < a.num_outputs() && !plugin::is_undefined(a.output(i)) && a.output(i).data != nullptr;
}

}  // namespace

void shutdown_conv() {
  clear_conv_graphs();
  std::lock_guard<std::mutex> lock(g_conv_mutex);
  for (size_t i = 0; i < g_conv.size(); ++i) {
    if (!g_conv[i]) continue;
    (void)gpuSetDevice(static_cast<int>(i));
    if (g_conv[i]->handle != nullptr) (void)cudnnDestroy(g_conv[i]->handle);
  }
  g_conv.clear();
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups) -> out
FL_CUDA_KERNEL(k_convolution) {
  return plugin::guard([&] {
    const char* name = "aten::convolution_overrideable";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& x = device_tensor(a, 0, name);
    const fl_tensor& w = device_tensor(a, 1, name);
    const ConvParams p = conv_params(a, 3, name);
    const fl_tensor& y = a.output(0);
    check_4d(x, "input", name);
    check_4d(w, "weight", name);
    check_4d(y, "output", name);
    if (x.dtype != w.dtype || y.dtype != x.dtype)
      plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes");
    const fl_tensor* bias = a.is_none(2) ? nullptr : &device_tensor(a, 2, name);
    if (bias != nullptr && (bias->ndim != 1 || bias->shape[0] != y.shape[1]))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": bias must be 1-D of out_channels");
    if (plugin::numel(y) == 0) return;
    const bool precise = (call->flags & FL_CALL_PRECISE) != 0;
    const bool deterministic = (call->flags & FL_CALL_DETERMINISTIC) != 0;
    const bool no_tf32 = precise && x.dtype == FL_DTYPE_FLOAT32;
    // A sum over an empty set (no input channels, or an empty kernel window): y = 0 (+ bias).
    // cuDNN rejects descriptors with a zero dimension.
    if (plugin::numel(x) == 0 || plugin::numel(w) == 0) {
      if (!plugin::is_dense(y)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": empty sum into a non-dense output");
      check_gpu(gpuMemsetAsync(plugin::data_ptr<void>(y), 0,
                               static_cast<size_t>(plugin::numel(y)) * plugin::dtype_size(y.dtype), ctx.stream),
                "cudaMemsetAsync");
      if (bias != nullptr) add_bias(y, *bias, ctx);
      return;
    }

    const Layout layout = call_layout(x, w);
    const PackedOperand px(x, layout, false, ctx), pw(w, layout, false, ctx), py(y, layout, true, ctx);
    TensorDesc xd, yd;
    FilterDesc wd;
    ConvDesc cd;
    set_tensor(xd, px.get());
    set_tensor(yd, py.get());
    set_filter(wd, pw.get(), layout);
    set_conv(cd, p, x.dtype, precise);
    ConvDevice& dev = conv_device(ctx.device);
    {
      std::lock_guard<std::mutex> lock(dev.mutex);
      const ConvCall c{dev, handle_for(dev, ctx.stream), cd, ctx, x, w, p, call->flags, layout, no_tf32, deterministic};
      run_pass<ConvGraphPass::Forward>(c, {&px.get(), &pw.get(), &py.get()}, xd, px, wd, pw, yd, py);
    }
    py.finish();
    if (bias != nullptr) add_bias(y, *bias, ctx);
  });
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask[3]) -> (grad_input, grad_weight, grad_bias)
FL_CUDA_KERNEL(k_convolution_backward) {
  return plugin::guard([&] {
    const char* name = "aten::convolution_backward_overrideable";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& dy = device_tensor(a, 0, name);
    const fl_tensor& x = device_tensor(a, 1, name);
    const fl_tensor& w = device_tensor(a, 2, name);
    const ConvParams p = conv_params(a, 3, name);
    std::vector<bool> mask = {true, true, true};
    if (!a.is_none(9)) mask = a.bools(9);
    if (mask.size() != 3) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output_mask must have 3 entries");
    const bool want_dx = mask[0] && requested(a, 0);
    const bool want_dw = mask[1] && requested(a, 1);
    const bool want_db = mask[2] && requested(a, 2);
    check_4d(dy, "grad_output", name);
    check_4d(x, "input", name);
    check_4d(w, "weight", name);
    if (dy.dtype != x.dtype || w.dtype != x.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": mixed dtypes");
    if (want_dx) {
      check_4d(a.output(0), "grad_input", name);
      if (a.output(0).dtype != x.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": grad_input dtype");
    }
    if (want_dw) {
      check_4d(a.output(1), "grad_weight", name);
      if (a.output(1).dtype != x.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": grad_weight dtype");
    }
    if (want_db && (a.output(2).ndim != 1 || a.output(2).shape[0] != dy.shape[1]))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": grad_bias must be 1-D of out_channels");
    const bool precise = (call->flags & FL_CALL_PRECISE) != 0;
    const bool deterministic = (call->flags & FL_CALL_DETERMINISTIC) != 0;
    const bool no_tf32 = precise && x.dtype == FL_DTYPE_FLOAT32;
    const bool empty = plugin::numel(dy) == 0 || plugin::numel(x) == 0 || plugin::numel(w) == 0;

    // Empty operands (a zero-size batch, no channels): every requested gradient is a sum over
    // an empty set, so zero-filled (grad_bias by the sum below); cuDNN descriptors with a
    // zero dimension are rejected, so none is built.
    if (empty) {
      for (int i = 0; i < 2; ++i) {
        const bool want = i == 0 ? want_dx : want_dw;
        const int64_t n = want ? plugin::numel(a.output(i)) : 0;
        if (n > 0 && !plugin::is_dense(a.output(i)))
          plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": empty sum into a non-dense output");
        if (n > 0)
          check_gpu(gpuMemsetAsync(plugin::data_ptr<void>(a.output(i)), 0,
                                   static_cast<size_t>(n) * plugin::dtype_size(x.dtype), ctx.stream),
                    "cudaMemsetAsync");
      }
    } else {
      const Layout layout = call_layout(x, w);
      const PackedOperand px(x, layout, false, ctx), pw(w, layout, false, ctx), pdy(dy, layout, false, ctx);
      TensorDesc xd, dyd;
      FilterDesc wd;
      ConvDesc cd;
      set_tensor(xd, px.get());
      set_tensor(dyd, pdy.get());
      set_filter(wd, pw.get(), layout);
      set_conv(cd, p, x.dtype, precise);
      ConvDevice& dev = conv_device(ctx.device);
      std::lock_guard<std::mutex> lock(dev.mutex);
      const ConvCall c{dev, handle_for(dev, ctx.stream), cd, ctx, x, w, p, call->flags, layout, no_tf32, deterministic};
      if (want_dx) {
        const PackedOperand pdx(a.output(0), layout, true, ctx);
        TensorDesc dxd;
        set_tensor(dxd, pdx.get());
        run_pass<ConvGraphPass::BackwardData>(c, {&pdx.get(), &pw.get(), &pdy.get()}, wd, pw, dyd, pdy, dxd, pdx);
        pdx.finish();
      }
      if (want_dw) {
        const PackedOperand pdw(a.output(1), layout, true, ctx);
        FilterDesc dwd;
        set_filter(dwd, pdw.get(), layout);
        run_pass<ConvGraphPass::BackwardFilter>(c, {&px.get(), &pdw.get(), &pdy.get()}, xd, px, dyd, pdy, dwd, pdw);
        pdw.finish();
      }
    }
    if (want_db) launch_sum(dy, {0, 2, 3}, a.output(2), ctx);
  });
}

}  // namespace fl::cuda
