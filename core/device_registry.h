// device_registry.h — the flat list of logical devices fl:0..N-1 across all loaded plugins.
//
// Order, so that the same card gets the same fl:N across restarts:
//   1. plugins in the order of the config's `devices:` entries, then the rest by plugin name;
//   2. within a plugin, the devices listed in that entry's `pin:` (by stable id) first, in
//      that order, then the others sorted by stable id (never by the driver's enumeration
//      order, which can change between boots);
//   3. `count:` keeps the first N of a plugin.
#pragma once

#include <fl_abi.h>

#include <memory>
#include <string>
#include <vector>

namespace fl {

class PluginLibrary;
struct Config;

struct LogicalDevice {
  int index = -1;                          // N of fl:N
  std::shared_ptr<PluginLibrary> plugin;
  int32_t local = -1;                      // the plugin's own index
  fl_device_properties props{};
  double memory_fraction = 1.0;
  std::string describe() const;            // "fl:0 = cpu:0 (Torch-FL CPU (host memory), plugin cpu)"
};

std::vector<LogicalDevice> build_device_list(
    const std::vector<std::shared_ptr<PluginLibrary>>& plugins, const Config& config);

}  // namespace fl
