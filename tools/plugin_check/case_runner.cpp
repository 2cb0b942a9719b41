// case_runner.cpp — moving a case's tensors to a device, calling a kernel, comparing results.
#include "case_runner.h"

#include "error.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>

namespace fl::check {
namespace {

// A block of device memory freed on scope exit.
class DeviceBlock {
 public:
  DeviceBlock(const PluginLibrary& plugin, int32_t device, size_t bytes) : plugin_(plugin), device_(device) {
    if (bytes > 0) plugin.check(plugin.ops().fl_malloc(device, bytes, &ptr_), "fl_malloc(" + std::to_string(bytes) + ")");
  }
  ~DeviceBlock() {
    if (ptr_ != nullptr) plugin_.ops().fl_free(device_, ptr_);
  }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  void* get() const { return ptr_; }

 private:
  const PluginLibrary& plugin_;
  int32_t device_;
  void* ptr_ = nullptr;
};

struct TensorSlot {
  Shape shape, strides;
  std::unique_ptr<DeviceBlock> block;
  fl_tensor desc{};
};

HostTensor contiguous(const HostTensor& t) {
  if (t.host_scalar) return t;
  HostTensor c = HostTensor::from_values(t.dtype, t.shape, t.values());
  return c;
}

}  // namespace

CaseRun run_case(const PluginLibrary& plugin, const fl_kernel_entry& entry, const KernelCase& c, int32_t device,
                 const RngPair* rng) {
  const bool strided_ok = (entry.flags & FL_KERNEL_STRIDED_INPUTS) != 0;
  std::vector<HostTensor> hosts;  // inputs as passed (contiguous copies when needed)
  hosts.reserve(c.inputs.size());
  for (const CaseArg& a : c.inputs) hosts.push_back(a.kind == CaseArg::Kind::Tensor && !strided_ok ? contiguous(a.tensor) : a.tensor);

  std::vector<std::unique_ptr<TensorSlot>> slots;
  auto make_slot = [&](const HostTensor* host, const OutputSpec* spec) {
    auto slot = std::make_unique<TensorSlot>();
    fl_tensor& d = slot->desc;
    d.struct_size = sizeof(fl_tensor);
    if (spec != nullptr && !spec->requested) {
      d.ndim = -1;
      d.dtype = spec->dtype;
      slots.push_back(std::move(slot));
      return &slots.back()->desc;
    }
    slot->shape = host != nullptr ? host->shape : spec->shape;
    slot->strides = host != nullptr ? host->strides : contiguous_strides(spec->shape);
    d.dtype = host != nullptr ? host->dtype : spec->dtype;
    d.ndim = static_cast<int32_t>(slot->shape.size());
    d.shape = slot->shape.data();
    d.strides = slot->strides.data();
    if (host != nullptr && host->host_scalar) {
      d.device = FL_DEVICE_HOST;
      d.data = const_cast<uint8_t*>(host->storage.data());
    } else {
      d.device = device;
      size_t bytes = host != nullptr ? host->storage_bytes() : static_cast<size_t>(shape_numel(spec->shape)) * dtype_bytes(spec->dtype);
      slot->block = std::make_unique<DeviceBlock>(plugin, device, bytes);
      d.data = slot->block->get();
      if (bytes > 0 && host != nullptr)
        plugin.check(plugin.ops().fl_memcpy_async(device, d.data, host->storage.data(), bytes, FL_MEMCPY_HOST_TO_DEVICE, nullptr),
                     "fl_memcpy_async(H2D)");
      if (bytes > 0 && host == nullptr)  // a recognisable pattern, so unwritten outputs show up
        plugin.check(plugin.ops().fl_memset_async(device, d.data, 0x7f, bytes, nullptr), "fl_memset_async");
    }
    slots.push_back(std::move(slot));
    return &slots.back()->desc;
  };

  std::vector<fl_value> values(c.inputs.size());
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const CaseArg& a = c.inputs[k];
    fl_value& v = values[k];
    switch (a.kind) {
      case CaseArg::Kind::None: v.kind = FL_VALUE_NONE; break;
      case CaseArg::Kind::Tensor: v.kind = FL_VALUE_TENSOR; v.u.tensor = make_slot(&hosts[k], nullptr); break;
      case CaseArg::Kind::Int: v.kind = FL_VALUE_INT; v.u.i = a.i; break;
      case CaseArg::Kind::Double: v.kind = FL_VALUE_DOUBLE; v.u.d = a.d; break;
      case CaseArg::Kind::Bool: v.kind = FL_VALUE_BOOL; v.u.b = a.b ? 1 : 0; break;
      case CaseArg::Kind::IntList: v.kind = FL_VALUE_INT_LIST; v.u.ints.data = a.ints.data(); v.u.ints.len = static_cast<int64_t>(a.ints.size()); break;
      case CaseArg::Kind::BoolList: v.kind = FL_VALUE_BOOL_LIST; v.u.bools.data = a.bools.data(); v.u.bools.len = static_cast<int64_t>(a.bools.size()); break;
      case CaseArg::Kind::String: v.kind = FL_VALUE_STRING; v.u.str = a.str.c_str(); break;
    }
  }
  std::vector<fl_tensor> outputs;
  for (const OutputSpec& spec : c.outputs) outputs.push_back(*make_slot(nullptr, &spec));

  fl_kernel_call call{};
  call.struct_size = sizeof(call);
  call.device = device;
  call.flags = static_cast<uint32_t>(FL_CALL_PRECISE) | (rng != nullptr ? static_cast<uint32_t>(FL_CALL_RNG) : 0u);
  if (rng != nullptr) {
    call.rng_seed = rng->seed;
    call.rng_offset = rng->offset;
  }
  call.stream = nullptr;
  call.num_inputs = static_cast<int32_t>(values.size());
  call.num_outputs = static_cast<int32_t>(outputs.size());
  call.inputs = values.data();
  call.outputs = outputs.data();
  call.kernel_data = entry.kernel_data;

  CaseRun run;
  try {
    run.status = entry.fn(&call);
    if (run.status != FL_OK) run.error = std::string(status_name(run.status)) + ": " + plugin.last_error();
  } catch (const std::exception& e) {
    run.status = FL_ERR_INTERNAL;
    run.error = std::string("C++ exception escaped the kernel: ") + e.what();
  } catch (...) {
    run.status = FL_ERR_INTERNAL;
    run.error = "C++ exception escaped the kernel";
  }
  // A failure only the device could see (an index out of range) is reported by this wait.
  const fl_status_t synced = plugin.ops().stream_synchronize(device, nullptr);
  if (run.status == FL_OK && synced != FL_OK) {
    run.status = synced;
    run.error = std::string(status_name(synced)) + " at the stream_synchronize after the kernel: " + plugin.last_error();
    run.reported_by_synchronize = true;
  }
  if (run.status != FL_OK) return run;
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const OutputSpec& spec = c.outputs[k];
    if (!spec.requested) {
      run.outputs.emplace_back();
      continue;
    }
    HostTensor out = HostTensor::zeros(spec.dtype, spec.shape);
    if (out.storage_bytes() > 0) {
      plugin.check(plugin.ops().fl_memcpy_async(device, out.storage.data(), outputs[k].data, out.storage_bytes(),
                                                FL_MEMCPY_DEVICE_TO_HOST, nullptr), "fl_memcpy_async(D2H)");
      plugin.check(plugin.ops().stream_synchronize(device, nullptr), "stream_synchronize");
    }
    run.outputs.push_back(std::move(out));
  }
  return run;
}

std::pair<double, double> base_tolerance(fl_dtype_t dtype) {
  switch (dtype) {
    case FL_DTYPE_FLOAT32: return {1e-5, 1e-5};
    case FL_DTYPE_FLOAT64: return {1e-9, 1e-9};
    case FL_DTYPE_BFLOAT16: return {1e-2, 1e-2};
    case FL_DTYPE_FLOAT16: return {1e-3, 1e-3};
    default: return {0, 0};
  }
}

std::optional<std::string> compare_outputs(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected,
                                           const std::vector<OutputSpec>& specs, double tolerance_scale) {
  for (size_t k = 0; k < specs.size(); ++k) {
    if (!specs[k].requested) continue;
    auto [rtol, atol] = base_tolerance(specs[k].dtype);
    rtol *= tolerance_scale;
    atol *= tolerance_scale;
    const std::vector<double> a = actual.at(k).values(), e = expected.at(k).values();
    for (size_t i = 0; i < e.size(); ++i) {
      const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
      if (both_nan || a[i] == e[i] || std::fabs(a[i] - e[i]) <= atol + rtol * std::fabs(e[i])) continue;
      std::ostringstream msg;
      msg.precision(9);
      msg << "output " << k << " " << dtype_label(specs[k].dtype) << shape_string(specs[k].shape) << " element " << i
          << ": got " << a[i] << ", expected " << e[i] << " (rtol " << rtol << ", atol " << atol << ")";
      return msg.str();
    }
  }
  return std::nullopt;
}

bool identical_outputs(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected,
                       const std::vector<OutputSpec>& specs) {
  for (size_t k = 0; k < specs.size(); ++k) {
    if (!specs[k].requested) continue;
    const std::vector<double> a = actual.at(k).values(), e = expected.at(k).values();
    for (size_t i = 0; i < e.size(); ++i)
      if (!(a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i])))) return false;
  }
  return true;
}

}  // namespace fl::check
