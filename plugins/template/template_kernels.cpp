// template_kernels.cpp — two kernels, aten::add.out and aten::mul.out for float32, written
// the way every Torch-FL kernel is: read the inputs in schema order, check what is handled
// and answer FL_ERR_NOT_SUPPORTED *before* doing any work otherwise (the core then falls
// back to the CPU for that call), broadcast the inputs to the output's shape like ATen.
//
// To add a kernel: write a function of type fl_kernel_fn, add one row to kTable naming the
// ATen out= overload (see docs/plugin_author_guide.md), rebuild this plugin only.
#include "template_kernels.hpp"

#include <plugin_support.hpp>

#include <cmath>
#include <iterator>
#include <string>
#include <vector>

namespace fl::template_plugin {
namespace {

using plugin::Args;

// One operand of an elementwise op: a float32 tensor read through strides aligned to the
// output's dims (0 where it broadcasts), or a number (a Scalar, or a 0-dim host tensor that
// a Python number became).
struct Operand {
  const float* data = nullptr;  // nullptr: use `value`
  float value = 0.0f;
  std::vector<int64_t> strides;
};

Operand operand(const Args& a, int32_t i, const fl_tensor& out, const char* op) {
  Operand o;
  const fl_value& v = a.at(i);
  if (v.kind != FL_VALUE_TENSOR || v.u.tensor->device == FL_DEVICE_HOST) {
    o.value = static_cast<float>(a.number(i));
    return o;
  }
  const fl_tensor& t = *v.u.tensor;
  if (t.dtype != FL_DTYPE_FLOAT32)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": input " + std::to_string(i) + " is " +
                                            plugin::dtype_name(t.dtype) + ", only float32 is handled");
  if (t.ndim > out.ndim) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": input has more dims than out");
  o.data = plugin::data_ptr<const float>(t);
  o.strides.assign(static_cast<size_t>(out.ndim), 0);
  const int32_t lead = out.ndim - t.ndim;  // ATen aligns shapes on the right
  for (int32_t d = 0; d < t.ndim; ++d) {
    const int64_t size = t.shape[d], want = out.shape[lead + d];
    if (size != want && size != 1)
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(op) + ": cannot broadcast input " + std::to_string(i));
    o.strides[static_cast<size_t>(lead + d)] = size == 1 ? 0 : t.strides[d];
  }
  return o;
}

// out[i] = combine(x[i], y[i]) over the output's elements, in row-major order. `out` is
// contiguous (the entry does not declare FL_KERNEL_STRIDED_OUTPUTS); when it is the same
// memory as an input (in-place add_), element i is read before it is written.
template <class Combine>
void binary(const fl_tensor& out, const Operand& x, const Operand& y, Combine combine) {
  float* dst = plugin::data_ptr<float>(out);
  const int64_t n = plugin::numel(out);
  std::vector<int64_t> index(static_cast<size_t>(out.ndim), 0);
  int64_t off_x = 0, off_y = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = x.data ? x.data[off_x] : x.value;
    const float b = y.data ? y.data[off_y] : y.value;
    dst[i] = combine(a, b);
    // Advance the multi-index (last dim fastest) and the input offsets with it.
    for (int32_t d = out.ndim - 1; d >= 0; --d) {
      const size_t k = static_cast<size_t>(d);
      if (x.data) off_x += x.strides[k];
      if (y.data) off_y += y.strides[k];
      if (++index[k] < out.shape[d]) break;
      if (x.data) off_x -= x.strides[k] * out.shape[d];
      if (y.data) off_y -= y.strides[k] * out.shape[d];
      index[k] = 0;
    }
  }
}

const fl_tensor& float_output(const Args& a, const char* op) {
  const fl_tensor& out = a.output(0);
  if (out.dtype != FL_DTYPE_FLOAT32)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(op) + ": out is " + plugin::dtype_name(out.dtype));
  return out;
}

// aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out)
// inputs: 0 self, 1 other, 2 alpha; outputs: 0 out.
fl_status_t add_out(const fl_kernel_call* call) {
  return plugin::guard([&] {
    Args a(call);
    const fl_tensor& out = float_output(a, "aten::add.out");
    const Operand x = operand(a, 0, out, "aten::add.out");
    const Operand y = operand(a, 1, out, "aten::add.out");
    const float alpha = a.is_none(2) ? 1.0f : static_cast<float>(a.number(2));
    // VENDOR: enqueue a device kernel on call->stream instead, copying what it needs. Round
    // p + alpha * q once (a fused multiply-add), as ATen and the CPU and CUDA plugins do: DDP
    // replicas on ranks of your plugin and theirs then take the same SGD steps, bit for bit
    // (fl-plugin-check counts the cases equal to the reference value for value).
    binary(out, x, y, [alpha](float p, float q) { return std::fma(alpha, q, p); });
  });
}

// aten::mul.out(Tensor self, Tensor other, *, Tensor(a!) out)
fl_status_t mul_out(const fl_kernel_call* call) {
  return plugin::guard([&] {
    Args a(call);
    const fl_tensor& out = float_output(a, "aten::mul.out");
    const Operand x = operand(a, 0, out, "aten::mul.out");
    const Operand y = operand(a, 1, out, "aten::mul.out");
    binary(out, x, y, [](float p, float q) { return p * q; });
  });
}

// Inputs may be strided or broadcast (we read through their strides); out may be one of the
// inputs (in-place forms). Float32 arithmetic, in a fixed order: precise and deterministic.
constexpr uint32_t kFlags = FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_ALIASING_OK | FL_KERNEL_PRECISE |
                            FL_KERNEL_DETERMINISTIC;

const fl_kernel_entry kTable[] = {
    {sizeof(fl_kernel_entry), "aten::add.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), kFlags, 0u, add_out, nullptr},
    {sizeof(fl_kernel_entry), "aten::mul.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), kFlags, 0u, mul_out, nullptr},
};

}  // namespace

fl_status_t kernels_get(const fl_kernel_entry** entries, size_t* count) {
  return plugin::guard([&] {
    if (entries == nullptr || count == nullptr) plugin::raise(FL_ERR_INVALID_ARGUMENT, "kernels_get: NULL output");
    *entries = kTable;
    *count = std::size(kTable);
  });
}

}  // namespace fl::template_plugin
