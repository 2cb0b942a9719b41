#include "dispatch_table.h"

#include <algorithm>

namespace fl {

DispatchTable::DispatchTable(std::span<const fl_kernel_entry> entries) {
  by_name_.reserve(entries.size());
  for (const auto& e : entries) by_name_.emplace(e.op, &e);  // first wins
}

const fl_kernel_entry* DispatchTable::find(std::string_view op) const {
  auto it = by_name_.find(std::string(op));
  return it == by_name_.end() ? nullptr : it->second;
}

const fl_kernel_entry* DispatchTable::find(std::string_view op, fl_dtype_t dtype) const {
  const fl_kernel_entry* e = find(op);
  if (e == nullptr || dtype < 0 || dtype >= FL_DTYPE_COUNT) return nullptr;
  return (e->dtype_mask & FL_DTYPE_BIT(dtype)) ? e : nullptr;
}

std::vector<std::string> DispatchTable::op_names() const {
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& [name, e] : by_name_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace fl
