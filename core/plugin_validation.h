// plugin_validation.h — the checks PluginLibrary applies to what a plugin hands over (its
// fl_device_ops table and its kernel table), as pure functions: no dlopen, no plugin call, no
// logging. PluginLibrary uses them; fuzz targets feed them arbitrary bytes.
#pragma once

#include <fl_abi.h>

#include "plugin_library.h"

#include <cstddef>
#include <string>
#include <vector>

namespace fl {

// Checks a table as fl_plugin_get_ops returned it: non-NULL, same major, struct_size at least
// FL_DEVICE_OPS_MIN_SIZE and within `available_bytes` (the bytes known readable at `ops`;
// SIZE_MAX when unknown, as for a loaded plugin), plugin_name non-empty, every required entry
// non-NULL. Entries beyond struct_size are never read. Returns "" when acceptable, else the
// reason, and sets *failed_step (if given) to the load step it belongs to.
std::string validate_device_ops(const fl_device_ops* ops, size_t available_bytes,
                                LoadStep* failed_step = nullptr);

// The most entries and the largest entry stride accepted from kernels_get.
inline constexpr size_t kMaxKernelEntries = size_t{1} << 20;
inline constexpr size_t kMaxKernelEntrySize = 1024;

struct KernelTableCheck {
  std::vector<fl_kernel_entry> accepted;  // copies, struct_size set to this header's size
  std::vector<std::string> rejected;      // "<index> ('<op>'): <why>" per dropped entry
  std::string error;                      // non-empty: the table as a whole is unusable
};

// Checks kernels_get's result. The array is walked with the first entry's struct_size as the
// stride when it is larger than this header's fl_kernel_entry (a newer minor); such a stride
// must be a multiple of alignof(fl_kernel_entry) and at most kMaxKernelEntrySize. Entries are
// dropped (not fatal) for: struct_size below this header's, an op not "<ns>::<name>", a NULL
// fn, a duplicate op (the first wins).
KernelTableCheck validate_kernel_table(const fl_kernel_entry* entries, size_t count);

}  // namespace fl
