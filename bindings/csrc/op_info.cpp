#include "op_info.h"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace fl::binding {
namespace {

std::shared_mutex& infos_mutex() {
  static std::shared_mutex m;
  return m;
}

std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>>& infos() {
  static std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> map;
  return map;
}

std::string qualified(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// Overload names per operator base name, from the dispatcher's registry (built once).
const std::unordered_map<std::string, std::vector<std::string>>& overloads_by_name() {
  static const auto index = [] {
    std::unordered_map<std::string, std::vector<std::string>> map;
    for (const auto& n : c10::Dispatcher::singleton().getAllOpNames())
      map[n.name].push_back(n.overload_name);
    return map;
  }();
  return index;
}

bool same_type(const c10::Argument& a, const c10::Argument& b) {
  return a.name() == b.name() && a.type()->str() == b.type()->str();
}

// The out= overload whose non-out arguments are exactly `args` (names and types).
std::string find_out_variant(const std::string& base, const std::vector<c10::Argument>& args) {
  auto it = overloads_by_name().find(base);
  if (it == overloads_by_name().end()) return "";
  for (const auto& overload : it->second) {
    auto handle = c10::Dispatcher::singleton().findSchema({base, overload});
    if (!handle) continue;
    const auto& s = handle->schema();
    std::vector<const c10::Argument*> inputs;
    size_t outs = 0;
    for (const auto& a : s.arguments()) {
      if (a.is_out()) ++outs; else inputs.push_back(&a);
    }
    if (outs == 0 || inputs.size() != args.size()) continue;
    bool match = true;
    for (size_t i = 0; i < args.size() && match; ++i) match = same_type(*inputs[i], args[i]);
    if (match) return qualified(s.operator_name());
  }
  return "";
}

std::unique_ptr<OpInfo> analyse(const c10::FunctionSchema& schema) {
  auto info = std::make_unique<OpInfo>();
  info->name = qualified(schema.operator_name());
  info->convolution = schema.name().find("convolution") != std::string::npos;
  for (const char* op : {"aten::arange", "aten::range", "aten::linspace", "aten::logspace", "aten::upsample_",
                         "aten::_upsample_"})
    if (info->name.rfind(op, 0) == 0) info->float_values_size_outputs = true;
  info->num_arguments = schema.arguments().size();
  info->num_returns = schema.returns().size();
  std::vector<c10::Argument> non_out;
  for (const auto& a : schema.arguments()) {
    if (a.is_out()) ++info->num_out_arguments; else non_out.push_back(a);
  }
  std::string base = schema.name();
  if (info->num_out_arguments > 0) {
    info->form = OpForm::Out;
    info->kernel_name = info->name;
    return info;
  }
  const bool inplace = !base.empty() && base.back() == '_' && !schema.arguments().empty() &&
                       schema.arguments()[0].alias_info() && schema.arguments()[0].alias_info()->isWrite();
  info->form = inplace ? OpForm::InPlace : OpForm::Functional;
  if (inplace) base.pop_back();
  std::string out_variant = find_out_variant(base, non_out);
  info->kernel_name = out_variant.empty() ? info->name : out_variant;
  return info;
}

}  // namespace

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::Native: return "native";
    case Tier::Generic: return "generic";
    case Tier::CpuFallback: return "cpu_fallback";
  }
  return "?";
}

OpInfo& op_info(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  {
    std::shared_lock lock(infos_mutex());
    auto it = infos().find(key);
    if (it != infos().end()) return *it->second;
  }
  auto info = analyse(op.schema());
  info->seeded = op.hasTag(at::Tag::nondeterministic_seeded);
  info->pointwise = op.hasTag(at::Tag::pointwise);
  info->refuses_overlapping_out = info->kernel_name == "aten::cat.out";
  std::unique_lock lock(infos_mutex());
  auto [it, inserted] = infos().emplace(key, std::move(info));
  return *it->second;
}

std::vector<const OpInfo*> all_op_infos() {
  std::shared_lock lock(infos_mutex());
  std::vector<const OpInfo*> out;
  for (const auto& [k, v] : infos()) out.push_back(v.get());
  return out;
}

namespace {

// The analysis of an operator overload given as "aten::name.overload" ("name" alone: aten).
std::unique_ptr<OpInfo> analyse_by_name(const std::string& qualified_name) {
  std::string name = qualified_name, overload;
  if (auto dot = name.find('.', name.find("::") == std::string::npos ? 0 : name.find("::")); dot != std::string::npos) {
    overload = name.substr(dot + 1);
    name = name.substr(0, dot);
  }
  if (name.find("::") == std::string::npos) name = "aten::" + name;
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle.has_value(), "unknown operator '", qualified_name, "'");
  return analyse(handle->schema());
}

}  // namespace

std::string kernel_name_for(const std::string& qualified_name) { return analyse_by_name(qualified_name)->kernel_name; }

bool is_convolution(const std::string& qualified_name) { return analyse_by_name(qualified_name)->convolution; }

}  // namespace fl::binding
