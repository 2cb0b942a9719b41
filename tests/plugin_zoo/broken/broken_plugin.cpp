// broken_plugin.cpp — the broken-plugin zoo: the stub's complete table (stub_plugin.cpp
// compiled with FL_STUB_NO_ENTRY) with exactly one thing wrong, chosen by one -D switch.
// Each switch names the loader step (or the conformance check) that must catch it.
//
//   ZOO_MISSING_ENTRY     exports "fl_plugin_get_ops_v0" instead of the entry symbol
//   ZOO_NULL_TABLE        the entry returns NULL
//   ZOO_WRONG_MAJOR       abi_major = FL_ABI_MAJOR + 1
//   ZOO_NEWER_MINOR       abi_minor + 1 and a longer table (appended fields): loads fine
//   ZOO_OLDER_MINOR       ABI 1.0: struct_size = FL_DEVICE_OPS_MIN_SIZE; get_proc_address lies
//                         beyond it (set to a function that aborts, so reading it is caught);
//                         device properties filled up to 1.0's end: loads fine
//   ZOO_SHORT_STRUCT      struct_size below FL_DEVICE_OPS_MIN_SIZE
//   ZOO_NULL_REQUIRED     fl_malloc is NULL
//   ZOO_EMPTY_NAME        plugin_name is ""
//   ZOO_INIT_ERROR        init fails with FL_ERR_DEVICE "zoo: the driver refused to start"
//   ZOO_INIT_THROWS       init throws a C++ exception out of an extern "C" function
//   ZOO_INIT_CRASH        init dereferences NULL (SIGSEGV). Never load it in-process: it
//                         exists for an isolated (subprocess) discovery mode, and is built
//                         into a directory of its own (crash/) so scanning the zoo is safe.
//   ZOO_NO_DEVICE         init returns FL_ERR_NO_DEVICE "zoo: no driver installed"
//   ZOO_NEGATIVE_COUNT    device_count reports -3 with FL_OK
//   ZOO_COUNT_ERROR       device_count fails with FL_ERR_DEVICE "zoo: device enumeration failed"
//   ZOO_BAD_KERNEL_TABLE  invalid entries: op without namespace, NULL fn, short struct_size,
//                         a duplicate of aten::add.out; only aten::add.out is valid
//   ZOO_FAILING_KERNELS   aten::mul.out fails with FL_ERR_DEVICE "zoo kernel failure";
//                         aten::add.out throws a C++ exception out of the kernel
//   ZOO_EXTRA_EXPORT      also exports "fl_zoo_extra_symbol" (fl-plugin-check warns)
//   ZOO_MISSING_DEP       needs libfl_zoo_dep.so, which is not on any search path
#include <fl_abi.h>
#include <plugin_support.hpp>

#include "stub_plugin.hpp"

#include <csignal>
#include <cstring>
#include <stdexcept>

#ifdef ZOO_MISSING_DEP
extern "C" int fl_zoo_dep_answer(void);  // from libfl_zoo_dep.so
#endif
#ifdef ZOO_INIT_THROWS
extern "C" fl_status_t fl_zoo_init_throws(const fl_host_services*, const char*);
#endif
#ifdef ZOO_FAILING_KERNELS
extern "C" fl_status_t fl_zoo_kernel_throws(const fl_kernel_call*);
#endif

namespace {

#if defined(ZOO_NEWER_MINOR)
// A table as a newer minor would build it: fields appended after get_proc_address.
struct NewerOps {
  fl_device_ops base;
  void* (*appended_entry)(void);
  uint64_t appended_value;
};
#endif

#if defined(ZOO_OLDER_MINOR)
// Read by nobody: the table's struct_size ends before get_proc_address.
void* must_not_be_called(const char*) { std::abort(); }

// As a 1.0 plugin fills them: the stub's properties up to 1.0's end (host_pointers_usable is
// 1.1's), whatever the caller's struct_size.
fl_status_t properties_of_abi_1_0(int32_t device, fl_device_properties* props) {
  if (props == nullptr) return fl::stub::base_ops().device_get_properties(device, props);
  fl_device_properties full{};
  full.struct_size = sizeof(full);
  const fl_status_t status = fl::stub::base_ops().device_get_properties(device, &full);
  if (status != FL_OK) return status;
  const size_t v1_0 = offsetof(fl_device_properties, host_pointers_usable);
  const size_t n = props->struct_size < v1_0 ? props->struct_size : v1_0;
  if (n > sizeof(size_t))
    std::memcpy(reinterpret_cast<char*>(props) + sizeof(size_t), reinterpret_cast<const char*>(&full) + sizeof(size_t),
                n - sizeof(size_t));
  return FL_OK;
}
#endif

#if defined(ZOO_INIT_ERROR)
fl_status_t zoo_init(const fl_host_services*, const char*) {
  return fl::plugin::fail(FL_ERR_DEVICE, "zoo: the driver refused to start");
}
#endif

#if defined(ZOO_NO_DEVICE)
fl_status_t zoo_init(const fl_host_services*, const char*) {
  return fl::plugin::fail(FL_ERR_NO_DEVICE, "zoo: no driver installed");
}
#endif

#if defined(ZOO_INIT_CRASH)
fl_status_t zoo_init(const fl_host_services*, const char*) {
  volatile int* volatile nowhere = nullptr;
  *nowhere = 42;  // SIGSEGV
  return FL_OK;
}
#endif

#if defined(ZOO_NEGATIVE_COUNT)
fl_status_t zoo_device_count(int32_t* count) {
  *count = -3;
  return FL_OK;
}
#endif

#if defined(ZOO_COUNT_ERROR)
fl_status_t zoo_device_count(int32_t*) {
  return fl::plugin::fail(FL_ERR_DEVICE, "zoo: device enumeration failed");
}
#endif

#if defined(ZOO_BAD_KERNEL_TABLE)
fl_status_t zoo_kernel_ok(const fl_kernel_call*) { return FL_OK; }
#endif

#if defined(ZOO_BAD_KERNEL_TABLE)
const fl_kernel_entry kBadKernels[] = {
    {sizeof(fl_kernel_entry), "aten::add.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), 0, 0, zoo_kernel_ok, nullptr},
    {sizeof(fl_kernel_entry), "add_without_namespace.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), 0, 0, zoo_kernel_ok, nullptr},
    {sizeof(fl_kernel_entry), "aten::mul.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), 0, 0, nullptr, nullptr},
    {8, "aten::sub.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), 0, 0, zoo_kernel_ok, nullptr},
    {sizeof(fl_kernel_entry), "aten::add.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT64), 0, 0, zoo_kernel_ok, nullptr},
    {sizeof(fl_kernel_entry), "", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), 0, 0, zoo_kernel_ok, nullptr},
};
fl_status_t zoo_kernels_get(const fl_kernel_entry** entries, size_t* count) {
  if (entries == nullptr || count == nullptr) return fl::plugin::fail(FL_ERR_INVALID_ARGUMENT, "zoo: NULL argument");
  *entries = kBadKernels;
  *count = sizeof(kBadKernels) / sizeof(kBadKernels[0]);
  return FL_OK;
}
#endif

#if defined(ZOO_FAILING_KERNELS)
fl_status_t zoo_failing_kernel(const fl_kernel_call*) {
  return fl::plugin::fail(FL_ERR_DEVICE, "zoo kernel failure");
}
const fl_kernel_entry kFailingKernels[] = {
    {sizeof(fl_kernel_entry), "aten::add.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), 0, 0, fl_zoo_kernel_throws, nullptr},
    {sizeof(fl_kernel_entry), "aten::mul.out", FL_DTYPE_BIT(FL_DTYPE_FLOAT32), 0, 0, zoo_failing_kernel, nullptr},
};
fl_status_t zoo_kernels_get(const fl_kernel_entry** entries, size_t* count) {
  if (entries == nullptr || count == nullptr) return fl::plugin::fail(FL_ERR_INVALID_ARGUMENT, "zoo: NULL argument");
  *entries = kFailingKernels;
  *count = sizeof(kFailingKernels) / sizeof(kFailingKernels[0]);
  return FL_OK;
}
#endif

#if defined(ZOO_MISSING_DEP)
fl_status_t zoo_init(const fl_host_services* host, const char* options) {
  if (fl_zoo_dep_answer() != 42) return fl::plugin::fail(FL_ERR_INTERNAL, "zoo: wrong dependency");
  return fl::stub::base_ops().init(host, options);
}
#endif

}  // namespace

#if defined(ZOO_INIT_THROWS)
// Deliberately no guard: the exception escapes through the C ABI into the loader.
extern "C" fl_status_t fl_zoo_init_throws(const fl_host_services*, const char*) {
  throw std::runtime_error("zoo: init threw through the C ABI");
}
#endif

#if defined(ZOO_FAILING_KERNELS)
// Deliberately no guard: the exception escapes the kernel into the caller.
extern "C" fl_status_t fl_zoo_kernel_throws(const fl_kernel_call*) {
  throw std::runtime_error("zoo: kernel threw through the C ABI");
}
#endif

namespace {

[[maybe_unused]] fl_device_ops make_broken_ops() {
  fl_device_ops ops = fl::stub::base_ops();
  ops.plugin_name = ZOO_NAME;
#if defined(ZOO_WRONG_MAJOR)
  ops.abi_major = FL_ABI_MAJOR + 1;
#elif defined(ZOO_NEWER_MINOR)
  ops.abi_minor = FL_ABI_MINOR + 1;
  ops.struct_size = sizeof(NewerOps);
#elif defined(ZOO_OLDER_MINOR)
  ops.abi_minor = 0;
  ops.struct_size = FL_DEVICE_OPS_MIN_SIZE;
  ops.get_proc_address = must_not_be_called;
  ops.device_get_properties = properties_of_abi_1_0;
#elif defined(ZOO_SHORT_STRUCT)
  ops.struct_size = FL_DEVICE_OPS_MIN_SIZE - sizeof(void*);
#elif defined(ZOO_NULL_REQUIRED)
  ops.fl_malloc = nullptr;
#elif defined(ZOO_EMPTY_NAME)
  ops.plugin_name = "";
#elif defined(ZOO_INIT_ERROR) || defined(ZOO_NO_DEVICE) || defined(ZOO_INIT_CRASH) || defined(ZOO_MISSING_DEP)
  ops.init = zoo_init;
#elif defined(ZOO_INIT_THROWS)
  ops.init = fl_zoo_init_throws;
#elif defined(ZOO_NEGATIVE_COUNT) || defined(ZOO_COUNT_ERROR)
  ops.device_count = zoo_device_count;
#elif defined(ZOO_BAD_KERNEL_TABLE)
  ops.kernels_get = zoo_kernels_get;
#elif defined(ZOO_FAILING_KERNELS)
  ops.kernels_get = zoo_kernels_get;
#endif
  return ops;
}

const fl_device_ops* table() {
#if defined(ZOO_NULL_TABLE)
  return nullptr;
#elif defined(ZOO_NEWER_MINOR)
  static const NewerOps newer{make_broken_ops(), nullptr, 7};
  return &newer.base;
#else
  static const fl_device_ops ops = make_broken_ops();
  return &ops;
#endif
}

}  // namespace


#if defined(ZOO_MISSING_ENTRY)
extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops_v0(void) { return table(); }
#else
extern "C" FL_PLUGIN_EXPORT const fl_device_ops* fl_plugin_get_ops(void) { return table(); }
#endif

#if defined(ZOO_EXTRA_EXPORT)
extern "C" FL_PLUGIN_EXPORT int fl_zoo_extra_symbol(void) { return 1; }
#endif
