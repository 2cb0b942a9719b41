// Tests of core/device_registry: fl:N ordering (config rank, then plugin name; within a plugin
// pins first, then stable id), count, selection and memory_fraction — on the stub plugin and
// two zoo plugins that reuse the stub's devices under other names.
#include "config.h"
#include "device_registry.h"
#include "plugin_library.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using fl::Config;
using fl::DeviceSelection;
using fl::LogicalDevice;
using fl::PluginLibrary;

fs::path zoo(const std::string& name) { return fs::path(FL_ZOO_DIR) / ("libfl_" + name + ".so"); }

std::shared_ptr<PluginLibrary> load(const fs::path& file, const std::string& options) {
  auto plugin = PluginLibrary::open(file);
  plugin->initialize(options);
  return plugin;
}

// "<plugin>/<stable id>" for each logical device, in fl:N order.
std::vector<std::string> order(const std::vector<LogicalDevice>& devices) {
  std::vector<std::string> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    CHECK(devices[i].index == static_cast<int>(i));
    out.push_back(devices[i].plugin->name() + "/" + devices[i].props.stable_id);
  }
  return out;
}

DeviceSelection select(const std::string& type) {
  DeviceSelection d;
  d.type = type;
  return d;
}

// Three plugins: "stub" (ids c,a,b), "zoo_newer_minor" (ids n1,n0), "zoo_extra_export" (x0).
// Passed to build_device_list in an order that is neither the name order nor the config order.
struct ThreePlugins {
  std::shared_ptr<PluginLibrary> stub = load(FL_STUB_PLUGIN, "devices=3;ids=c,a,b");
  std::shared_ptr<PluginLibrary> newer = load(zoo("zoo_newer_minor"), "devices=2;ids=n1,n0");
  std::shared_ptr<PluginLibrary> extra = load(zoo("zoo_extra_export"), "devices=1;ids=x0");
  std::vector<std::shared_ptr<PluginLibrary>> all() const { return {newer, extra, stub}; }
};

}  // namespace

TEST_CASE("registry: without a devices list, plugins by name, devices by stable id") {
  ThreePlugins p;
  auto devices = fl::build_device_list(p.all(), Config{});
  CHECK(order(devices) == std::vector<std::string>{"stub/a", "stub/b", "stub/c", "zoo_extra_export/x0",
                                                   "zoo_newer_minor/n0", "zoo_newer_minor/n1"});
  // The plugin-local index behind each logical device is kept.
  CHECK(devices[0].local == 1);
  CHECK(devices[1].local == 2);
  CHECK(devices[2].local == 0);
  CHECK(devices[4].local == 1);
  for (const auto& d : devices) CHECK(d.memory_fraction == 1.0);
}

TEST_CASE("registry: the devices list ranks plugins and leaves out those it does not name") {
  ThreePlugins p;
  Config config;
  config.devices = {select("zoo_newer_minor"), select("stub")};
  auto devices = fl::build_device_list(p.all(), config);
  CHECK(order(devices) == std::vector<std::string>{"zoo_newer_minor/n0", "zoo_newer_minor/n1", "stub/a",
                                                   "stub/b", "stub/c"});
}

TEST_CASE("registry: a '*' entry selects the remaining plugins, which follow by name") {
  ThreePlugins p;
  Config config;
  DeviceSelection all = select("*");
  all.memory_fraction = 0.5;
  DeviceSelection newer = select("zoo_newer_minor");
  newer.memory_fraction = 0.25;
  config.devices = {newer, all};
  auto devices = fl::build_device_list(p.all(), config);
  CHECK(order(devices) == std::vector<std::string>{"zoo_newer_minor/n0", "zoo_newer_minor/n1", "stub/a",
                                                   "stub/b", "stub/c", "zoo_extra_export/x0"});
  CHECK(devices[0].memory_fraction == 0.25);
  CHECK(devices[2].memory_fraction == 0.5);
  CHECK(devices[5].memory_fraction == 0.5);
}

TEST_CASE("registry: pinned stable ids come first in pin order, then the rest by stable id") {
  ThreePlugins p;
  Config config;
  DeviceSelection stub = select("stub");
  stub.pin = {"c", "not-present", "b"};
  config.devices = {stub, select("zoo_extra_export")};
  auto devices = fl::build_device_list(p.all(), config);
  CHECK(order(devices) == std::vector<std::string>{"stub/c", "stub/b", "stub/a", "zoo_extra_export/x0"});
  CHECK(devices[0].local == 0);
}

TEST_CASE("registry: count keeps the first N devices of a plugin after ordering") {
  ThreePlugins p;
  Config config;
  DeviceSelection stub = select("stub");
  stub.count = 2;
  stub.pin = {"b"};
  DeviceSelection newer = select("zoo_newer_minor");
  newer.count = 0;
  DeviceSelection extra = select("zoo_extra_export");
  extra.count = 5;  // more than it has
  config.devices = {stub, newer, extra};
  auto devices = fl::build_device_list(p.all(), config);
  CHECK(order(devices) == std::vector<std::string>{"stub/b", "stub/a", "zoo_extra_export/x0"});
}

TEST_CASE("registry: the order does not depend on the plugins' enumeration order") {
  auto first = load(FL_STUB_PLUGIN, "devices=3;ids=gpu-2,gpu-0,gpu-1");
  auto a = order(fl::build_device_list({first}, Config{}));
  first.reset();
  auto second = load(FL_STUB_PLUGIN, "devices=3;ids=gpu-1,gpu-2,gpu-0");
  auto b = order(fl::build_device_list({second}, Config{}));
  CHECK(a == b);
  CHECK(a == std::vector<std::string>{"stub/gpu-0", "stub/gpu-1", "stub/gpu-2"});
}

TEST_CASE("registry: no plugins or no devices give an empty list; describe() names the device") {
  CHECK(fl::build_device_list({}, Config{}).empty());
  auto none = load(FL_STUB_PLUGIN, "devices=0");
  CHECK(fl::build_device_list({none}, Config{}).empty());
  none.reset();
  auto one = load(FL_STUB_PLUGIN, "devices=1;ids=card-7");
  auto devices = fl::build_device_list({one}, Config{});
  REQUIRE(devices.size() == 1);
  CHECK(devices[0].describe() == "fl:0 = card-7 (Torch-FL Stub device 0, plugin stub)");
  CHECK(devices[0].props.total_memory == 1024ull << 20);
}
