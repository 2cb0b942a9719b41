// python_module.cpp — torch_fl._C: what the Python package needs from the runtime.
#include "call_flags.h"
#include "device_allocator.h"
#include "pinned_allocator.h"
#include "device_timer.h"
#include "fl_context.h"
#include "host_view.h"
#include "generator.h"
#include "generic_kernels.h"
#include "op_info.h"
#include "op_router.h"
#include "output_meta.h"
#include "staging_pool.h"

#include <plugin_library.h>

#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

namespace py = pybind11;

namespace fl::binding {
namespace {

std::string dtype_list(uint64_t mask) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16", "int64", "int32",
                                "int16", "int8", "uint8", "bool", "complex64", "complex128"};
  std::string out;
  for (int i = 0; i < FL_DTYPE_COUNT; ++i) {
    if (mask & FL_DTYPE_BIT(i)) {
      if (!out.empty()) out += ",";
      out += names[i];
    }
  }
  return out;
}

// The "fl." extras of a device's plugin (fl_abi.h, get_proc_address): the vendor runtime's
// ordinal and stream handle behind an fl device and stream, for native collective libraries.
// None when the plugin does not offer them.
py::object native_device(int device) {
  const auto& d = runtime().device(device);
  auto fn = reinterpret_cast<fl_native_device_fn>(d.plugin->extra(FL_EXTRA_NATIVE_DEVICE));
  if (fn == nullptr) return py::none();
  int32_t ordinal = -1;
  d.plugin->check(fn(d.local, &ordinal), FL_EXTRA_NATIVE_DEVICE);
  return py::int_(ordinal);
}

py::object native_stream(int device, int64_t stream_id) {
  const auto& d = runtime().device(device);
  auto fn = reinterpret_cast<fl_native_stream_fn>(d.plugin->extra(FL_EXTRA_NATIVE_STREAM));
  if (fn == nullptr) return py::none();
  void* handle = nullptr;
  d.plugin->check(fn(d.local, runtime().streams(device).handle(stream_id), &handle), FL_EXTRA_NATIVE_STREAM);
  return py::int_(reinterpret_cast<uintptr_t>(handle));
}

py::list list_devices() {
  py::list out;
  auto& rt = runtime();
  for (int i = 0; i < rt.device_count(); ++i) {
    const auto& d = rt.device(i);
    py::dict e;
    e["index"] = i;
    e["device"] = "fl:" + std::to_string(i);
    e["vendor"] = std::string(d.props.vendor);
    e["name"] = std::string(d.props.name);
    e["stable_id"] = std::string(d.props.stable_id);
    e["plugin"] = d.plugin->name();
    e["plugin_version"] = d.plugin->version();
    e["plugin_file"] = d.plugin->path().string();
    e["local_index"] = d.local;
    e["total_memory"] = d.props.total_memory;
    e["compute_units"] = d.props.compute_units;
    e["alignment"] = d.props.alignment;
    e["dtypes"] = dtype_list(d.props.dtype_mask);
    e["host_accessible"] = d.props.host_accessible != 0;
    e["host_pointers_usable"] = d.props.host_pointers_usable != 0;
    e["pinned_host_memory"] = d.props.supports_pinned_host != 0;
    e["pci_bus_id"] = d.props.pci_bus_id;
    e["kernels"] = rt.dispatch(i).size();
    e["memory_fraction"] = rt.allocator(i).memory_fraction();
    out.append(e);
  }
  return out;
}

py::list skipped_plugins() {
  py::list out;
  for (const auto& s : runtime().skipped_plugins()) {
    py::dict e;
    e["path"] = s.path;
    e["origin"] = s.origin;
    e["step"] = s.step;
    e["reason"] = s.reason;
    out.append(e);
  }
  return out;
}

py::list loaded_plugins() {
  py::list out;
  for (const auto& p : runtime().plugins()) {
    py::dict e;
    e["name"] = p->name();
    e["version"] = p->version();
    e["path"] = p->path().string();
    e["abi"] = std::to_string(p->abi_major()) + "." + std::to_string(p->abi_minor());
    e["build_id"] = p->build_id();
    e["devices"] = p->device_count();
    e["kernels"] = p->kernels().size();
    out.append(e);
  }
  return out;
}

py::dict memory_stats(int device) {
  const fl::AllocatorStats s = runtime().allocator(device).stats();
  py::dict d;
  d["allocated_bytes.all.current"] = s.allocated_bytes;
  d["allocated_bytes.all.peak"] = s.peak_allocated_bytes;
  d["reserved_bytes.all.current"] = s.reserved_bytes;
  d["reserved_bytes.all.peak"] = s.peak_reserved_bytes;
  d["requested_bytes.all.current"] = s.requested_bytes;
  d["allocation.all.allocated"] = s.num_allocs;
  d["allocation.all.freed"] = s.num_frees;
  d["segment.all.current"] = s.num_segments;
  d["num_device_alloc"] = s.num_device_mallocs;
  d["num_device_free"] = s.num_device_frees;
  d["num_alloc_retries"] = s.num_cache_flushes;
  d["num_ooms"] = s.num_ooms;
  d["limit_bytes"] = s.limit_bytes;
  return d;
}

py::dict fallback_stats() {
  py::dict out;
  for (const OpInfo* info : all_op_infos()) {
    const uint64_t native = info->calls[0], generic = info->calls[1], cpu = info->calls[2];
    if (native + generic + cpu == 0) continue;
    py::dict e;
    e["kernel"] = info->kernel_name;
    e["native"] = native;
    e["generic"] = generic;
    e["cpu_fallback"] = cpu;
    e["seconds"] = static_cast<double>(info->nanoseconds.load()) * 1e-9;
    e["device_seconds"] = static_cast<double>(info->device_nanoseconds.load()) * 1e-9;
    out[py::str(info->name)] = e;
  }
  return out;
}

void reset_fallback_stats() {
  for (const OpInfo* info : all_op_infos()) {
    auto* m = const_cast<OpInfo*>(info);
    for (auto& c : m->calls) c = 0;
    m->nanoseconds = 0;
    m->device_nanoseconds = 0;
  }
}

py::dict config_dict() {
  const auto& c = runtime().config();
  py::dict d;
  d["source"] = c.source;
  d["enable_cpu_fallback"] = c.fallback.enable_cpu_fallback;
  d["enable_generic_kernel"] = c.fallback.enable_generic_kernel;
  d["strict"] = c.fallback.strict;
  d["log_level"] = c.logging.level;
  d["log_path"] = c.logging.path;
  d["matmul_precision"] = c.precision.matmul;
  d["deterministic"] = c.precision.deterministic;
  return d;
}

}  // namespace
}  // namespace fl::binding

PYBIND11_MODULE(_C, m) {
  using namespace fl::binding;
  m.doc() = "Torch-FL runtime binding";
  m.def("device_count", [] { return device_count_noexcept(); });
  m.def("init", [] { return runtime().device_count(); });
  m.def("in_bad_fork", [] { return in_bad_fork(); });
  m.def("was_used", [] { return was_used(); });
  m.def("list_devices", &list_devices);
  m.def("skipped_plugins", &skipped_plugins);
  m.def("loaded_plugins", &loaded_plugins);
  m.def("current_device", [] { return static_cast<int>(current_device()); });
  m.def("set_device", [](int d) { set_current_device(static_cast<c10::DeviceIndex>(d)); });
  m.def("synchronize", [](int d) {
    py::gil_scoped_release no_gil;  // other Python threads run while the device drains
    translate_errors("synchronize: ", [&] { runtime().streams(d).synchronize_all(); });
    release_finished_host_views();  // the views dropped before it have nothing left queued
  });
  m.def("memory_stats", &memory_stats);
  m.def("empty_cache", [] { device_allocator().emptyCache(); });
  m.def("reset_peak_memory_stats", [](int d) { runtime().allocator(d).reset_peak_stats(); });
  m.def("set_memory_fraction", [](double f, int d) {
    translate_errors("set_per_process_memory_fraction: ", [&] { runtime().allocator(d).set_memory_fraction(f); });
  });
  m.def("memory_fraction", [](int d) { return runtime().allocator(d).memory_fraction(); });
  m.def("mem_get_info", [](int d) { return device_allocator().getMemoryInfo(static_cast<c10::DeviceIndex>(d)); });
  m.def("kernel_table", [](int d) { return runtime().dispatch(d).op_names(); });
  m.def("kernel_name_for", &kernel_name_for);
  m.def("call_flags_for", &call_flags_for,
        "The FL_CALL_* flags (\"precise\", \"deterministic\") a kernel call of the operator \"aten::name.overload\" would carry now.");
  m.def("op_support", [](const std::string& op, int d, py::object dtype) {
    c10::ScalarType st = c10::ScalarType::Float;
    if (!dtype.is_none()) st = torch::python::detail::py_object_to_dtype(dtype);
    return predict_tier(op, d, st);
  });
  m.def("generic_kernels", &generic_kernel_names);
  m.def("fallback_stats", &fallback_stats);
  m.def("reset_fallback_stats", &reset_fallback_stats);
  m.def("set_profiling", &set_profiling);
  m.def("profiling", &profiling);
  m.def("output_meta_cache_entries", &output_meta_cache_entries);
  m.def("set_device_timing", &set_device_timing);
  m.def("device_timing", &device_timing);
  m.def("flush_device_times", &flush_device_times, py::call_guard<py::gil_scoped_release>());
  // Bytes of host staging buffers kept for copies between plugins (copy_engine.cpp).
  m.def("staging_cached_bytes", &staging_pool_cached_bytes);
  // Bytes of freed pinned host blocks kept for reuse (pinned_allocator.cpp).
  m.def("pinned_cached_bytes", &pinned_cached_bytes);
  // An fl tensor using a host tensor's memory in place, on a device whose plugin takes host
  // pointers (host_view.h); HeteroDataParallel feeds such devices this way.
  m.def("device_view_of_host", [](const at::Tensor& host, int device) {
    return device_view_of_host(host, static_cast<c10::DeviceIndex>(device));
  });
  // Gives back the host memory of dropped views whose device work has run; returns how many
  // dropped views still hold theirs.
  m.def("release_finished_host_views", &release_finished_host_views);
  m.def("output_meta_cache_size", &output_meta_cache_size);
  m.def("config", &config_dict);
  m.def("default_generator", [](int d) {
    return py::reinterpret_borrow<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(d))));
  });
  m.def("native_device", &native_device, py::arg("device"));
  m.def("native_stream", &native_stream, py::arg("device"), py::arg("stream_id"));
  m.def("abi_version", [] { return std::to_string(FL_ABI_MAJOR) + "." + std::to_string(FL_ABI_MINOR); });
}
