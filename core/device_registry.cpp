#include "device_registry.h"

#include "config.h"
#include "log.h"
#include "plugin_library.h"

#include <fmt/format.h>

#include <algorithm>

namespace fl {

std::string LogicalDevice::describe() const {
  return fmt::format("fl:{} = {} ({} {}, plugin {})", index, props.stable_id, props.vendor,
                     props.name, plugin ? plugin->name() : "?");
}

std::vector<LogicalDevice> build_device_list(
    const std::vector<std::shared_ptr<PluginLibrary>>& plugins, const Config& config) {
  auto rank = [&](const std::string& name) {
    for (size_t i = 0; i < config.devices.size(); ++i)
      if (config.devices[i].type == name) return static_cast<int>(i);
    return static_cast<int>(config.devices.size());
  };
  std::vector<std::shared_ptr<PluginLibrary>> ordered = plugins;
  std::stable_sort(ordered.begin(), ordered.end(), [&](const auto& a, const auto& b) {
    int ra = rank(a->name()), rb = rank(b->name());
    return ra != rb ? ra < rb : a->name() < b->name();
  });

  std::vector<LogicalDevice> list;
  for (const auto& plugin : ordered) {
    const DeviceSelection* sel = config.selection_for(plugin->name());
    if (!config.devices.empty() && sel == nullptr) {
      log().info("registry: plugin '{}' not selected by the config's devices list", plugin->name());
      continue;
    }
    std::vector<int32_t> order(plugin->devices().size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    auto pin_rank = [&](int32_t local) {
      if (sel == nullptr) return static_cast<int>(1 << 30);
      const std::string id = plugin->devices()[local].stable_id;
      for (size_t k = 0; k < sel->pin.size(); ++k)
        if (sel->pin[k] == id) return static_cast<int>(k);
      return static_cast<int>(1 << 30);
    };
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      int pa = pin_rank(a), pb = pin_rank(b);
      if (pa != pb) return pa < pb;
      return std::string(plugin->devices()[a].stable_id) < std::string(plugin->devices()[b].stable_id);
    });
    if (sel != nullptr) {
      for (const auto& id : sel->pin) {
        bool present = std::any_of(plugin->devices().begin(), plugin->devices().end(),
                                   [&](const fl_device_properties& p) { return id == p.stable_id; });
        if (!present) log().warn("registry: pinned device '{}' of plugin '{}' is not present", id, plugin->name());
      }
    }
    size_t keep = order.size();
    if (sel != nullptr && sel->count >= 0) keep = std::min(keep, static_cast<size_t>(sel->count));
    for (size_t k = 0; k < keep; ++k) {
      LogicalDevice d;
      d.index = static_cast<int>(list.size());
      d.plugin = plugin;
      d.local = order[k];
      d.props = plugin->devices()[order[k]];
      d.memory_fraction = sel != nullptr ? sel->memory_fraction : 1.0;
      log().debug("registry: {}", d.describe());
      list.push_back(std::move(d));
    }
  }
  return list;
}

}  // namespace fl
