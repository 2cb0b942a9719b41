// plugin_validation.cpp — table checks shared by PluginLibrary and the fuzz targets.
#include "plugin_validation.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace fl {
namespace {

struct RequiredEntry {
  const char* name;
  bool (*present)(const fl_device_ops&);
};

#define FL_REQUIRED(member) \
  RequiredEntry { #member, [](const fl_device_ops& o) { return o.member != nullptr; } }

const RequiredEntry kRequiredEntries[] = {
    FL_REQUIRED(init),
    FL_REQUIRED(shutdown),
    FL_REQUIRED(last_error),
    FL_REQUIRED(device_count),
    FL_REQUIRED(device_get_properties),
    FL_REQUIRED(device_memory_info),
    FL_REQUIRED(device_synchronize),
    FL_REQUIRED(fl_malloc),
    FL_REQUIRED(fl_free),
    FL_REQUIRED(fl_memset_async),
    FL_REQUIRED(fl_memcpy_async),
    FL_REQUIRED(stream_create),
    FL_REQUIRED(stream_destroy),
    FL_REQUIRED(stream_synchronize),
    FL_REQUIRED(stream_query),
    FL_REQUIRED(stream_wait_event),
    FL_REQUIRED(event_create),
    FL_REQUIRED(event_destroy),
    FL_REQUIRED(event_record),
    FL_REQUIRED(event_query),
    FL_REQUIRED(event_synchronize),
    FL_REQUIRED(kernels_get),
};
#undef FL_REQUIRED

std::string fail(LoadStep step, std::string reason, LoadStep* failed_step) {
  if (failed_step != nullptr) *failed_step = step;
  return reason;
}

// "aten::add.out": a non-empty namespace, "::", a non-empty name.
bool valid_op_name(const char* op) {
  if (op == nullptr) return false;
  const char* sep = std::strstr(op, "::");
  return sep != nullptr && sep != op && sep[2] != '\0';
}

}  // namespace

std::string validate_device_ops(const fl_device_ops* ops, size_t available_bytes,
                                LoadStep* failed_step) {
  if (ops == nullptr)
    return fail(LoadStep::Table, std::string(FL_PLUGIN_ENTRY_SYMBOL) + " returned NULL", failed_step);
  constexpr size_t header = offsetof(fl_device_ops, abi_minor) + sizeof(uint32_t);
  if (available_bytes < header)
    return fail(LoadStep::StructSize,
                "only " + std::to_string(available_bytes) + " bytes readable, less than the " +
                    std::to_string(header) + "-byte table header",
                failed_step);
  if (ops->abi_major != FL_ABI_MAJOR)
    return fail(LoadStep::Version,
                "plugin ABI " + std::to_string(ops->abi_major) + "." + std::to_string(ops->abi_minor) +
                    ", host ABI " + std::to_string(FL_ABI_MAJOR) + "." + std::to_string(FL_ABI_MINOR) +
                    "; accepted: major " + std::to_string(FL_ABI_MAJOR) + ", any minor",
                failed_step);
  if (ops->struct_size < FL_DEVICE_OPS_MIN_SIZE)
    return fail(LoadStep::StructSize,
                "struct_size " + std::to_string(ops->struct_size) + " is below the minimum " +
                    std::to_string(FL_DEVICE_OPS_MIN_SIZE) + " of ABI major " + std::to_string(FL_ABI_MAJOR),
                failed_step);
  if (ops->struct_size > available_bytes)
    return fail(LoadStep::StructSize,
                "struct_size " + std::to_string(ops->struct_size) + " exceeds the " +
                    std::to_string(available_bytes) + " bytes readable",
                failed_step);

  // Read only what the plugin declared; the rest of this header's table stays NULL.
  fl_device_ops table{};
  std::memcpy(&table, ops, std::min(ops->struct_size, sizeof(fl_device_ops)));
  if (table.plugin_name == nullptr || table.plugin_name[0] == '\0')
    return fail(LoadStep::RequiredEntries, "plugin_name is NULL or empty", failed_step);
  for (const RequiredEntry& required : kRequiredEntries)
    if (!required.present(table))
      return fail(LoadStep::RequiredEntries,
                  std::string("required entry '") + required.name + "' is NULL", failed_step);
  return "";
}

KernelTableCheck validate_kernel_table(const fl_kernel_entry* entries, size_t count) {
  KernelTableCheck check;
  if (count == 0) return check;
  if (entries == nullptr) {
    check.error = "kernels_get returned NULL entries with count " + std::to_string(count);
    return check;
  }
  if (count > kMaxKernelEntries) {
    check.error = "kernels_get returned count " + std::to_string(count) + ", more than the " +
                  std::to_string(kMaxKernelEntries) + " entries accepted";
    return check;
  }
  // A newer minor's longer entries are walked with their own size as the stride (the ABI
  // does not say; see the report). Entries shorter than this header's struct are rejected.
  size_t stride = sizeof(fl_kernel_entry);
  const size_t first_size = entries[0].struct_size;
  if (first_size > sizeof(fl_kernel_entry)) {
    if (first_size > kMaxKernelEntrySize || first_size % alignof(fl_kernel_entry) != 0) {
      check.error = "kernel entry 0 has struct_size " + std::to_string(first_size) +
                    ", not a usable entry stride (a multiple of " +
                    std::to_string(alignof(fl_kernel_entry)) + " up to " +
                    std::to_string(kMaxKernelEntrySize) + ")";
      return check;
    }
    stride = first_size;
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < count; ++i) {
    const auto& e = *reinterpret_cast<const fl_kernel_entry*>(reinterpret_cast<const char*>(entries) + i * stride);
    const std::string label =
        std::to_string(i) + " (" + (e.op != nullptr ? std::string("'") + e.op + "'" : "NULL op") + ")";
    std::string why;
    if (e.struct_size < sizeof(fl_kernel_entry))
      why = "struct_size " + std::to_string(e.struct_size) + " < " + std::to_string(sizeof(fl_kernel_entry));
    else if (!valid_op_name(e.op))
      why = "op name must be '<namespace>::<name>'";
    else if (e.fn == nullptr)
      why = "fn is NULL";
    else if (!seen.insert(e.op).second)
      why = "duplicate op (the first entry wins)";
    if (!why.empty()) {
      check.rejected.push_back(label + ": " + why);
      continue;
    }
    fl_kernel_entry copy{};
    std::memcpy(&copy, &e, sizeof(fl_kernel_entry));
    copy.struct_size = sizeof(fl_kernel_entry);
    check.accepted.push_back(copy);
  }
  return check;
}

}  // namespace fl
