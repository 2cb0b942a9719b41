// inventory.cpp — builds the runtime and reads plugins and devices for fl-smi.
#include "inventory.h"

#include "config.h"
#include "error.h"
#include "log.h"
#include "plugin_discovery.h"
#include "plugin_library.h"

#include <map>
#include <memory>

namespace fl::smi {
namespace {

std::unique_ptr<Runtime> make_runtime(const std::vector<std::string>& explicit_plugins, Inventory& inv) {
  RuntimeOptions options;
  options.plugin_files = explicit_plugins;
  try {
    return std::make_unique<Runtime>(options);
  } catch (const ConfigError& e) {
    inv.config_error = e.what();
  }
  // The config file (or an FL_* variable) is invalid: report it and look with the defaults.
  options.use_config_file = false;
  try {
    return std::make_unique<Runtime>(options);
  } catch (const ConfigError& e) {  // an FL_* variable itself is bad: no env overrides at all
    inv.config_error += std::string("; ") + e.what();
  }
  options.config = Config{};
  options.config.logging.level = "error";
  return std::make_unique<Runtime>(std::move(options));
}

}  // namespace

Inventory take_inventory(const std::vector<std::string>& explicit_plugins) {
  Inventory inv;
  // The runtime is never destroyed: like Runtime::global(), plugins stay loaded until exit.
  Runtime& rt = *make_runtime(explicit_plugins, inv).release();
  inv.config_source = rt.config().source.empty() ? "defaults" : rt.config().source;

  // Discovery again, for the origin of loaded plugins (the runtime keeps it for skipped ones
  // only); quietly, as the runtime already logged its warnings.
  std::map<std::string, std::string> origin;
  const auto level = log().level();
  log().set_level(spdlog::level::off);
  for (const auto& c : discover_plugins(explicit_plugins, rt.config().plugins)) origin[c.path.string()] = c.origin;
  log().set_level(level);

  for (const auto& p : rt.plugins()) {
    PluginRow row;
    row.path = p->path().string();
    row.origin = origin.count(row.path) ? origin[row.path] : "";
    row.loaded = true;
    row.name = p->name();
    row.version = p->version();
    row.abi = std::to_string(p->abi_major()) + "." + std::to_string(p->abi_minor());
    row.build_id = p->build_id();
    row.devices = p->device_count();
    row.kernels = p->kernels().size();
    inv.plugins.push_back(std::move(row));
  }
  for (const auto& s : rt.skipped_plugins()) {
    PluginRow row;
    row.path = s.path;
    row.origin = s.origin;
    row.step = s.step;
    row.reason = s.reason;
    inv.plugins.push_back(std::move(row));
  }

  for (int i = 0; i < rt.device_count(); ++i) {
    const LogicalDevice& d = rt.device(i);
    DeviceRow row;
    row.index = d.index;
    row.plugin = d.plugin->name();
    row.local = d.local;
    row.vendor = d.props.vendor;
    row.name = d.props.name;
    row.stable_id = d.props.stable_id;
    row.total_memory = d.props.total_memory;
    row.memory_fraction = d.memory_fraction;
    uint64_t free_bytes = 0, total = 0;
    try {
      d.plugin->check(d.plugin->ops().device_memory_info(d.local, &free_bytes, &total), "device_memory_info");
      row.memory_known = true;
      row.free_bytes = free_bytes;
      row.total_memory = total;
      row.used_bytes = total >= free_bytes ? total - free_bytes : 0;
    } catch (const Error& e) {
      row.memory_error = e.what();
    }
    row.allocator = rt.allocator(i).stats();
    inv.devices.push_back(std::move(row));
  }
  return inv;
}

}  // namespace fl::smi
