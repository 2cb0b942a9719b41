// libFuzzer target: the plugin-table checks (core/plugin_validation) on fl_device_ops-shaped
// bytes and kernel entries built from the input.
//
// Input: [table: up to sizeof(fl_device_ops) bytes][kernel entries: sizeof(fl_kernel_entry)
// bytes each]. The table bytes are copied into a heap block of exactly that many bytes (so a
// read past `available_bytes` is an ASan report). Pointer fields that the checks dereference
// are made valid: plugin_name/plugin_version become NULL or a string from the input; a kernel
// entry's op becomes NULL, a name from a small list, or bytes from the input. Function
// pointers keep their raw bytes: the checks test them for NULL only and never call them.
#include "plugin_validation.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

const char* const kOpNames[] = {"aten::add.out", "aten::mul.out", "aten::add.out", "add.out",
                                "::x",           "aten::",        "",              "a::b"};

uint64_t read_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // ---- the table ----
  const size_t table_bytes = std::min(size, sizeof(fl_device_ops));
  std::unique_ptr<uint8_t[]> table(new uint8_t[table_bytes == 0 ? 1 : table_bytes]);
  if (table_bytes > 0) std::memcpy(table.get(), data, table_bytes);
  std::string name_text, version_text;
  auto fix_string_field = [&](size_t offset, std::string& storage) {
    if (offset + sizeof(const char*) > table_bytes) return;
    const uint64_t raw = read_u64(table.get() + offset);
    const char* value = nullptr;
    if (raw & 1) {
      const size_t start = (raw >> 8) % size;
      const size_t len = std::min<size_t>((raw >> 1) % 16, size - start);
      storage.assign(reinterpret_cast<const char*>(data) + start, len);
      value = storage.c_str();
    }
    std::memcpy(table.get() + offset, &value, sizeof(value));
  };
  fix_string_field(offsetof(fl_device_ops, plugin_name), name_text);
  fix_string_field(offsetof(fl_device_ops, plugin_version), version_text);
  fl::LoadStep step = fl::LoadStep::Open;
  const std::string problem = fl::validate_device_ops(
      table_bytes == 0 ? nullptr : reinterpret_cast<const fl_device_ops*>(table.get()), table_bytes, &step);
  if (problem.empty() && table_bytes < FL_DEVICE_OPS_MIN_SIZE) __builtin_trap();  // accepted a short table

  // ---- kernel entries ----
  const uint8_t* rest = data + table_bytes;
  const size_t count = (size - table_bytes) / sizeof(fl_kernel_entry);
  if (count == 0) {
    (void)fl::validate_kernel_table(nullptr, 0);
    return 0;
  }
  // Lay the entries out with the stride the checks will use (the plugin's contract).
  fl_kernel_entry first{};
  std::memcpy(&first, rest, sizeof(first));
  size_t stride = sizeof(fl_kernel_entry);
  if (first.struct_size > sizeof(fl_kernel_entry) && first.struct_size <= fl::kMaxKernelEntrySize &&
      first.struct_size % alignof(fl_kernel_entry) == 0)
    stride = first.struct_size;
  std::vector<std::string> op_storage(count);
  std::unique_ptr<uint8_t[]> entries(new uint8_t[count * stride]());
  for (size_t i = 0; i < count; ++i) {
    fl_kernel_entry e{};
    std::memcpy(&e, rest + i * sizeof(fl_kernel_entry), sizeof(e));
    const uint64_t raw = reinterpret_cast<uintptr_t>(e.op);
    switch (raw % 3) {
      case 0: e.op = nullptr; break;
      case 1: e.op = kOpNames[(raw >> 2) % (sizeof(kOpNames) / sizeof(kOpNames[0]))]; break;
      default: {
        const uint8_t* bytes = rest + i * sizeof(fl_kernel_entry);
        op_storage[i].assign(reinterpret_cast<const char*>(bytes), (raw >> 2) % sizeof(fl_kernel_entry));
        e.op = op_storage[i].c_str();
      }
    }
    std::memcpy(entries.get() + i * stride, &e, sizeof(e));
  }
  fl::KernelTableCheck check =
      fl::validate_kernel_table(reinterpret_cast<const fl_kernel_entry*>(entries.get()), count);
  if (check.error.empty() && check.accepted.size() + check.rejected.size() != count) __builtin_trap();
  for (const auto& e : check.accepted)
    if (e.fn == nullptr || e.op == nullptr || e.struct_size != sizeof(fl_kernel_entry)) __builtin_trap();
  return 0;
}
