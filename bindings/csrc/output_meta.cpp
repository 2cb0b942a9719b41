#include "output_meta.h"

#include "ivalue_map.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace fl::binding {
namespace {

constexpr size_t kMaxCacheEntries = 16384;

std::shared_mutex& cache_mutex() {
  static std::shared_mutex m;
  return m;
}

std::unordered_map<std::string, OutputMeta>& cache() {
  static std::unordered_map<std::string, OutputMeta> map;
  return map;
}

void put(std::string& key, const void* p, size_t n) { key.append(static_cast<const char*>(p), n); }
template <class T>
void put(std::string& key, const T& v) { put(key, &v, sizeof(T)); }

void put_tensor(std::string& key, const at::Tensor& t) {
  if (!t.defined()) { put(key, 'u'); return; }
  put(key, 't');
  put(key, static_cast<int8_t>(t.scalar_type()));
  put(key, static_cast<int8_t>(t.device().type()));
  put(key, static_cast<int32_t>(t.dim()));
  put(key, t.sizes().data(), sizeof(int64_t) * t.dim());
  put(key, t.strides().data(), sizeof(int64_t) * t.dim());
  if (t.dim() == 0 && t.is_cpu()) put(key, 's');  // wrapped numbers promote differently
}

// False when an argument cannot be part of a key (then no caching). `float_values`: whether
// float arguments enter the key by value or only by type (OpInfo::float_values_size_outputs;
// a learning rate or an optimizer's per-step scalars must not make every call a cache miss).
bool put_ivalue(std::string& key, const c10::IValue& v, bool float_values) {
  if (v.isTensor()) { put_tensor(key, v.toTensor()); return true; }
  if (v.isNone()) { put(key, 'n'); return true; }
  if (v.isInt()) { put(key, 'i'); put(key, v.toInt()); return true; }
  if (v.isDouble()) {
    put(key, 'd');
    if (float_values) put(key, v.toDouble());
    return true;
  }
  if (v.isBool()) { put(key, 'b'); put(key, v.toBool()); return true; }
  if (v.isIntList()) {
    put(key, 'I');
    for (int64_t x : v.toIntList()) put(key, x);
    put(key, 'e');
    return true;
  }
  if (v.isDoubleList()) {
    put(key, 'D');
    if (float_values)
      for (double x : v.toDoubleList()) put(key, x);
    else
      put(key, v.toDoubleList().size());
    put(key, 'e');
    return true;
  }
  if (v.isBoolList()) {
    put(key, 'B');
    for (bool x : v.toBoolList()) put(key, x);
    put(key, 'e');
    return true;
  }
  if (v.isTensorList()) {
    put(key, 'T');
    for (const at::Tensor& t : v.toTensorList()) put_tensor(key, t);
    put(key, 'e');
    return true;
  }
  if (v.isList()) {
    put(key, 'L');
    for (const c10::IValue& e : v.toListRef())
      if (!put_ivalue(key, e, float_values)) return false;
    put(key, 'e');
    return true;
  }
  if (v.isString()) { put(key, 'S'); key += v.toStringRef(); put(key, '\0'); return true; }
  if (v.isDevice()) { put(key, 'v'); put(key, v.toDevice().index()); return true; }
  return false;
}

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined()) return t;
  if (t.is_cpu() && t.dim() == 0) return t;  // wrapped numbers stay CPU scalars
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

TensorMeta describe(const at::Tensor& t) {
  TensorMeta m;
  if (!t.defined()) return m;
  m.defined = true;
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.dtype = t.scalar_type();
  return m;
}

TensorMeta contiguous_meta(std::vector<int64_t> sizes, c10::ScalarType dtype) {
  TensorMeta m;
  m.defined = true;
  m.dtype = dtype;
  m.strides.assign(sizes.size(), 1);
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 2; i >= 0; --i)
    m.strides[i] = m.strides[i + 1] * std::max<int64_t>(sizes[i + 1], 1);
  m.sizes = std::move(sizes);
  return m;
}

// The layout ATen's cuDNN convolution gives its outputs (cudnn_conv_suggest_memory_format):
// channels_last when a 4-D input or weight suggests it, else contiguous.
bool conv_channels_last(const at::Tensor& input, const at::Tensor& weight) {
  return input.dim() == 4 && (input.suggest_memory_format() == at::MemoryFormat::ChannelsLast ||
                              weight.suggest_memory_format() == at::MemoryFormat::ChannelsLast);
}

// A 4-D or 5-D meta in channels_last (channels_last_3d) strides, `sizes` in NC(D)HW order:
// the channels vary fastest, then the spatial dims from the last, then the batch.
TensorMeta channels_last_meta(std::vector<int64_t> sizes, c10::ScalarType dtype) {
  TensorMeta m;
  m.defined = true;
  m.dtype = dtype;
  m.strides.assign(sizes.size(), 1);
  int64_t stride = std::max<int64_t>(sizes[1], 1);
  for (size_t d = sizes.size() - 1; d >= 2; --d) {
    m.strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  m.strides[0] = stride;
  m.sizes = std::move(sizes);
  return m;
}

// `t`'s sizes and dtype in the memory format ATen's empty_like(t, t.suggest_memory_format())
// gives: channels_last (4-D), channels_last_3d (5-D), else contiguous.
TensorMeta meta_in_suggested_format(const at::Tensor& t) {
  const auto format = t.suggest_memory_format();
  if ((t.dim() == 4 && format == at::MemoryFormat::ChannelsLast) ||
      (t.dim() == 5 && format == at::MemoryFormat::ChannelsLast3d))
    return channels_last_meta(t.sizes().vec(), t.scalar_type());
  return contiguous_meta(t.sizes().vec(), t.scalar_type());
}

std::vector<int64_t> expand_param(const c10::IValue& v, size_t n, int64_t dflt) {
  std::vector<int64_t> p = v.isIntList() ? v.toIntVector() : std::vector<int64_t>{};
  if (p.empty()) p.assign(n, dflt);
  if (p.size() == 1 && n > 1) p.assign(n, p[0]);
  return p;
}

// Shape rules for the ops PyTorch gives no Meta kernel on every version.
std::optional<std::vector<TensorMeta>> shape_rule(const std::string& name, c10::ArrayRef<c10::IValue> a) {
  if (name == "aten::convolution_overrideable") {
    const at::Tensor& input = a[0].toTensor();
    const at::Tensor& weight = a[1].toTensor();
    const size_t spatial = static_cast<size_t>(input.dim() - 2);
    auto stride = expand_param(a[3], spatial, 1), padding = expand_param(a[4], spatial, 0),
         dilation = expand_param(a[5], spatial, 1), output_padding = expand_param(a[7], spatial, 0);
    const bool transposed = a[6].toBool();
    const int64_t groups = a[8].toInt();
    std::vector<int64_t> out{input.size(0), transposed ? weight.size(1) * groups : weight.size(0)};
    for (size_t d = 0; d < spatial; ++d) {
      const int64_t in = input.size(static_cast<int64_t>(d) + 2), k = weight.size(static_cast<int64_t>(d) + 2);
      out.push_back(transposed ? (in - 1) * stride[d] - 2 * padding[d] + dilation[d] * (k - 1) + output_padding[d] + 1
                               : (in + 2 * padding[d] - dilation[d] * (k - 1) - 1) / stride[d] + 1);
    }
    if (conv_channels_last(input, weight)) return std::vector<TensorMeta>{channels_last_meta(out, input.scalar_type())};
    return std::vector<TensorMeta>{contiguous_meta(out, input.scalar_type())};
  }
  // SyncBatchNorm's ops (CUDA-only in PyTorch, no Meta kernel; generic_kernels.cpp runs them):
  // per-channel statistics in the accumulation type (float for the 16-bit floats), as ATen's
  // CUDA kernels give them, and elementwise outputs shaped and typed as the input.
  if (name == "aten::batch_norm_stats") {
    const at::Tensor& input = a[0].toTensor();
    const auto acc = at::toOpMathType(input.scalar_type());
    return std::vector<TensorMeta>{contiguous_meta({input.size(1)}, acc), contiguous_meta({input.size(1)}, acc)};
  }
  if (name == "aten::batch_norm_gather_stats_with_counts") {
    const at::Tensor& mean = a[1].toTensor();
    const auto acc = at::toOpMathType(mean.scalar_type());
    return std::vector<TensorMeta>{contiguous_meta({mean.size(-1)}, acc), contiguous_meta({mean.size(-1)}, acc)};
  }
  if (name == "aten::batch_norm_elemt" || name == "aten::batch_norm_backward_elemt") {
    const at::Tensor& like = a[name == "aten::batch_norm_elemt" ? 0 : 1].toTensor();
    return std::vector<TensorMeta>{meta_in_suggested_format(like)};
  }
  if (name == "aten::batch_norm_backward_reduce") {
    const at::Tensor& mean = a[2].toTensor();
    const c10::ScalarType param_dtype = a[4].isTensor() ? a[4].toTensor().scalar_type() : mean.scalar_type();
    const std::vector<int64_t> c{mean.size(0)};
    std::vector<TensorMeta> outs(4);
    if (a[5].toBool()) outs[0] = outs[1] = contiguous_meta(c, mean.scalar_type());
    if (a[6].toBool()) outs[2] = contiguous_meta(c, param_dtype);
    if (a[7].toBool()) outs[3] = contiguous_meta(c, param_dtype);
    return outs;
  }
  // The fused LSTM cell: its Meta kernel (torch/_meta_registrations.py) reads .device of a
  // bias that is None, so an LSTM without biases failed there; as cuda/RNN.cu allocates them.
  if (name == "aten::_thnn_fused_lstm_cell") {
    const at::Tensor& gates = a[0].toTensor();
    const at::Tensor& cx = a[2].toTensor();
    return std::vector<TensorMeta>{contiguous_meta(cx.sizes().vec(), cx.scalar_type()),
                                   contiguous_meta(cx.sizes().vec(), cx.scalar_type()),
                                   contiguous_meta(gates.sizes().vec(), gates.scalar_type())};
  }
  // The fused GRU cell (CUDA-only in PyTorch, no Meta kernel; generic_kernels.cpp runs it):
  // as cuda/RNN.cu allocates them, hy like hx, a workspace of 5 hidden widths, and gradients
  // of 3 (the biases' only when asked for).
  if (name == "aten::_thnn_fused_gru_cell") {
    const at::Tensor& hx = a[2].toTensor();
    return std::vector<TensorMeta>{contiguous_meta(hx.sizes().vec(), hx.scalar_type()),
                                   contiguous_meta({hx.size(0), hx.size(1) * 5}, hx.scalar_type())};
  }
  if (name == "aten::_thnn_fused_gru_cell_backward") {
    const at::Tensor& grad_hy = a[0].toTensor();
    const int64_t rows = grad_hy.size(0), gates = grad_hy.size(1) * 3;
    const c10::ScalarType dtype = grad_hy.scalar_type();
    std::vector<TensorMeta> outs{contiguous_meta({rows, gates}, dtype), contiguous_meta({rows, gates}, dtype),
                                 contiguous_meta(grad_hy.sizes().vec(), dtype), TensorMeta{}, TensorMeta{}};
    if (a[2].toBool()) outs[3] = outs[4] = contiguous_meta({gates}, dtype);
    return outs;
  }
  if (name == "aten::convolution_backward_overrideable") {
    const at::Tensor& input = a[1].toTensor();
    const at::Tensor& weight = a[2].toTensor();
    const bool transposed = a[6].toBool();
    const int64_t groups = a[8].toInt();
    auto mask = a[9].toBoolList();
    std::vector<TensorMeta> outs(3);
    auto layout = conv_channels_last(input, weight) ? channels_last_meta : contiguous_meta;
    if (mask[0]) outs[0] = layout(input.sizes().vec(), input.scalar_type());
    if (mask[1]) outs[1] = layout(weight.sizes().vec(), weight.scalar_type());
    if (mask[2]) outs[2] = contiguous_meta({transposed ? weight.size(1) * groups : weight.size(0)}, weight.scalar_type());
    return outs;
  }
  return std::nullopt;
}

}  // namespace

OutputMeta output_meta(const c10::OperatorHandle& op, OpInfo& info, c10::ArrayRef<c10::IValue> args,
                       std::exception_ptr* meta_error) {
  thread_local std::string key;
  key.clear();
  put(key, &op.schema());
  bool cacheable = true;
  for (const auto& v : args)
    if (!put_ivalue(key, v, info.float_values_size_outputs)) { cacheable = false; break; }
  if (cacheable) {
    std::shared_lock lock(cache_mutex());
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }

  std::optional<std::vector<TensorMeta>> result = shape_rule(info.name, args);
  // An out= overload takes its functional form's rule (the rules read only the leading,
  // non-out arguments): aten::batch_norm_elemt.out has no Meta kernel either.
  if (!result && info.form == OpForm::Out && info.name.size() > 4 &&
      info.name.compare(info.name.size() - 4, 4, ".out") == 0)
    result = shape_rule(info.name.substr(0, info.name.size() - 4), args);
  if (!result) {
    if (info.meta_unavailable.load(std::memory_order_relaxed)) return nullptr;
    torch::jit::Stack stack;
    stack.reserve(args.size());
    for (const auto& v : args)
      stack.push_back(map_tensors(v, [](const at::Tensor& t) { return to_meta(t); }, c10::Device(c10::kMeta)));
    try {
      c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
    } catch (const c10::NotImplementedError&) {
      info.meta_unavailable = true;
      return nullptr;
    } catch (const c10::Error& e) {
      const std::string what = e.what();
      if (what.find("Meta") != std::string::npos && (what.find("not implemented") != std::string::npos ||
                                                     what.find("could not run") != std::string::npos ||
                                                     what.find("Could not run") != std::string::npos)) {
        info.meta_unavailable = true;
        return nullptr;
      }
      // An error in the user's call (shapes, dtypes), or one of the Meta kernel alone: some
      // are Python decompositions that fail where the backends' kernels do not
      // (mse_loss_backward of an empty input divides by its numel). Not served natively: the
      // lower tiers run ATen's own kernel, which raises the real error as ATen would (or,
      // where none will run, the router raises this one: `meta_error`).
      if (meta_error != nullptr) *meta_error = std::current_exception();
      return nullptr;
    } catch (const std::exception&) {  // a Python Meta kernel's exception (torch's python_error)
      if (meta_error != nullptr) *meta_error = std::current_exception();
      return nullptr;
    }
    std::vector<TensorMeta> outs;
    for (const auto& r : stack) {
      if (r.isTensor()) {
        outs.push_back(describe(r.toTensor()));
      } else if (r.isTensorList()) {
        for (const at::Tensor& t : r.toTensorList()) outs.push_back(describe(t));
      } else if (r.isNone()) {
        outs.emplace_back();
      } else {
        return nullptr;  // non-tensor returns (e.g. ints) are not served natively
      }
    }
    result = std::move(outs);
  }
  auto shared = std::make_shared<const std::vector<TensorMeta>>(std::move(*result));
  if (cacheable) {
    std::unique_lock lock(cache_mutex());
    if (cache().size() >= kMaxCacheEntries) cache().clear();
    cache().emplace(key, shared);
  }
  return shared;
}

size_t output_meta_cache_size() {
  std::shared_lock lock(cache_mutex());
  return cache().size();
}

size_t output_meta_cache_entries() {
  std::shared_lock lock(cache_mutex());
  return cache().size();
}

}  // namespace fl::binding
