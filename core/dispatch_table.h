// dispatch_table.h — a plugin's kernel table as a hash map, built once at init; one lookup
// per call at run time.
#pragma once

#include <fl_abi.h>

#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fl {

class DispatchTable {
 public:
  DispatchTable() = default;
  explicit DispatchTable(std::span<const fl_kernel_entry> entries);
  // nullptr when the plugin has no kernel for `op` (an ATen overload name, "aten::add.out").
  const fl_kernel_entry* find(std::string_view op) const;
  // The entry for `op` if it also handles `dtype`; else nullptr.
  const fl_kernel_entry* find(std::string_view op, fl_dtype_t dtype) const;
  size_t size() const { return by_name_.size(); }
  std::vector<std::string> op_names() const;  // sorted

 private:
  std::unordered_map<std::string, const fl_kernel_entry*> by_name_;
};

}  // namespace fl
