// Tests of core/runtime: loading a list of plugins (the stub, its copy and every in-process
// member of the broken-plugin zoo) with the step each bad one is skipped at; devices,
// allocators, dispatch tables and order_after on the stub's devices.
#include "plugin_library.h"
#include "runtime.h"
#include "scoped_env.hpp"

#include <catch2/catch.hpp>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using fl::Runtime;
using fl::RuntimeOptions;
using fl::test::ScopedEnv;

std::string zoo(const std::string& name) { return (fs::path(FL_ZOO_DIR) / ("libfl_" + name + ".so")).string(); }

// Zoo members that must be skipped, with the step that catches each.
const std::map<std::string, std::string> kSkippedAt = {
    {"garbage", "open"},
    {"zoo_missing_dep", "open"},
    {"zoo_missing_entry", "entry symbol"},
    {"zoo_null_table", "table"},
    {"zoo_wrong_major", "version"},
    {"zoo_short_struct", "struct size"},
    {"zoo_null_required", "required entries"},
    {"zoo_empty_name", "required entries"},
    {"zoo_init_error", "init"},
    {"zoo_init_throws", "init"},
    {"zoo_no_device", "init"},
    {"zoo_negative_count", "devices"},
    {"zoo_count_error", "devices"},
    {"stub_copy", "duplicate"},
};
// Zoo members that load (odd but valid).
const std::vector<std::string> kLoaded = {"zoo_newer_minor", "zoo_older_minor", "zoo_bad_kernel_table",
                                          "zoo_failing_kernels", "zoo_extra_export"};

RuntimeOptions options(std::vector<std::string> files, fl::Config config = {}) {
  RuntimeOptions o;
  o.plugin_files = std::move(files);
  o.use_config_file = false;
  config.logging.level = "off";  // the skips are asserted, not read
  o.config = std::move(config);
  return o;
}

fl::DeviceSelection stub_devices(const std::string& plugin_options) {
  fl::DeviceSelection d;
  d.type = "stub";
  d.options = plugin_options;
  return d;
}

// The stub's devices (with `stub_options`, which make it two) as fl:0 and fl:1, and the
// zoo_extra_export plugin's device as fl:2.
fl::Config two_stub_devices_and_another_plugin(const std::string& stub_options) {
  fl::Config config;
  config.devices = {stub_devices(stub_options)};
  config.devices.push_back(fl::DeviceSelection{"zoo_extra_export", -1, 1.0, {}, ""});
  return config;
}

std::string call_log(const fl::PluginLibrary& plugin) {
  auto lookup = plugin.entry(&fl_device_ops::get_proc_address);
  REQUIRE(lookup != nullptr);
  auto log = reinterpret_cast<const char* (*)()>(lookup("stub.call_log"));
  auto reset = reinterpret_cast<void (*)()>(lookup("stub.reset"));
  REQUIRE(log != nullptr);
  std::string text = log();
  reset();
  return text;
}

void reset_log(const fl::PluginLibrary& plugin) { (void)call_log(plugin); }

}  // namespace

TEST_CASE("runtime: every zoo member is skipped at its step or loaded; the crash member is not touched") {
  ScopedEnv env;
  env.clean_runtime();
  std::vector<std::string> files = {FL_STUB_PLUGIN};
  for (const auto& [name, step] : kSkippedAt) files.push_back(zoo(name));
  for (const auto& name : kLoaded) files.push_back(zoo(name));
  Runtime rt(options(files));

  std::map<std::string, const fl::SkippedPlugin*> skipped;
  for (const auto& s : rt.skipped_plugins()) skipped[fs::path(s.path).filename().string()] = &s;
  CHECK(skipped.size() == kSkippedAt.size());
  for (const auto& [name, step] : kSkippedAt) {
    INFO(name);
    auto it = skipped.find("libfl_" + name + ".so");
    REQUIRE(it != skipped.end());
    CHECK(it->second->step == step);
    CHECK(it->second->origin == "explicit");
    CHECK_FALSE(it->second->reason.empty());
  }
  CHECK_THAT(skipped.at("libfl_stub_copy.so")->reason, Contains("'stub' is already loaded from"));
  CHECK_THAT(skipped.at("libfl_zoo_init_error.so")->reason, Contains("zoo: the driver refused to start"));
  CHECK_THAT(skipped.at("libfl_zoo_init_throws.so")->reason, Contains("C++ exception escaped the plugin"));
  CHECK_THAT(skipped.at("libfl_zoo_missing_dep.so")->reason, Contains("libfl_zoo_dep.so"));

  std::vector<std::string> names;
  for (const auto& p : rt.plugins()) names.push_back(p->name());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"stub", "zoo_bad_kernel_table", "zoo_extra_export",
                                          "zoo_failing_kernels", "zoo_newer_minor", "zoo_older_minor"});
  for (const auto& p : rt.plugins()) CHECK(p->path().filename() != "libfl_zoo_init_crash.so");

  // One device each (the stub's default), ordered by plugin name.
  REQUIRE(rt.device_count() == 6);
  CHECK(rt.device(0).plugin->name() == "stub");
  CHECK(rt.device(1).plugin->name() == "zoo_bad_kernel_table");
  CHECK(rt.device(5).plugin->name() == "zoo_older_minor");
  for (int i = 0; i < rt.device_count(); ++i) CHECK(rt.device(i).index == i);

  // Dispatch tables are per plugin: the stub's three kernels; the bad table's one valid entry.
  CHECK(rt.dispatch(0).op_names() == std::vector<std::string>{"aten::add.out", "aten::mul.out", "aten::neg.out"});
  CHECK(rt.dispatch(1).op_names() == std::vector<std::string>{"aten::add.out"});
  CHECK(rt.dispatch(1).find("aten::add.out", FL_DTYPE_FLOAT32) != nullptr);
}

TEST_CASE("runtime: plugins.enable / plugins.disable skip at the select step") {
  ScopedEnv env;
  env.clean_runtime();
  fl::Config config;
  config.plugins.disable = {"zoo_extra_export"};
  {
    Runtime rt(options({FL_STUB_PLUGIN, zoo("zoo_extra_export")}, config));
    REQUIRE(rt.skipped_plugins().size() == 1);
    CHECK(rt.skipped_plugins()[0].step == "select");
    CHECK_THAT(rt.skipped_plugins()[0].reason, Contains("plugins.disable"));
    CHECK(rt.device_count() == 1);
  }
  config.plugins.disable.clear();
  config.plugins.enable = {"zoo_extra_export"};
  {
    Runtime rt(options({FL_STUB_PLUGIN, zoo("zoo_extra_export")}, config));
    REQUIRE(rt.skipped_plugins().size() == 1);
    CHECK(rt.skipped_plugins()[0].step == "select");
    CHECK_THAT(rt.skipped_plugins()[0].reason, Contains("not in plugins.enable"));
    REQUIRE(rt.plugins().size() == 1);
    CHECK(rt.plugins()[0]->name() == "zoo_extra_export");
  }
}

TEST_CASE("runtime: a plugin in a world-writable directory is skipped at the permissions step") {
  ScopedEnv env;
  env.clean_runtime();
  std::string dir = (fs::temp_directory_path() / "fl_runtime_ww_XXXXXX").string();
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  fs::permissions(dir, fs::perms::all);
  const fs::path copy = fs::path(dir) / "libfl_ww_stub.so";
  fs::copy_file(FL_STUB_PLUGIN, copy);
  {
    Runtime rt(options({copy.string()}));
    REQUIRE(rt.skipped_plugins().size() == 1);
    CHECK(rt.skipped_plugins()[0].step == "permissions");
    CHECK_THAT(rt.skipped_plugins()[0].reason, Contains("writable by other users"));
    CHECK(rt.device_count() == 0);
  }
  fl::Config allow;
  allow.plugins.allow_world_writable = true;
  {
    Runtime rt(options({copy.string()}, allow));
    CHECK(rt.skipped_plugins().empty());
    CHECK(rt.device_count() == 1);
  }
  fs::remove_all(dir);
}

TEST_CASE("runtime: devices follow the config; options reach the plugin; bad indexes throw") {
  ScopedEnv env;
  env.clean_runtime();
  fl::Config config;
  config.devices = {stub_devices("devices=3;ids=s2,s0,s1;memory_mb=64")};
  config.devices[0].memory_fraction = 0.5;
  Runtime rt(options({FL_STUB_PLUGIN}, config));
  REQUIRE(rt.device_count() == 3);
  CHECK(std::string(rt.device(0).props.stable_id) == "s0");
  CHECK(rt.device(0).local == 1);
  CHECK(std::string(rt.device(2).props.stable_id) == "s2");
  CHECK(rt.device(2).props.total_memory == 64ull << 20);
  CHECK(rt.allocator(0).memory_fraction() == 0.5);
  CHECK(rt.allocator(0).stats().limit_bytes == 32ull << 20);
  CHECK_THROWS_AS(rt.device(3), fl::Error);
  CHECK_THROWS_AS(rt.device(-1), fl::Error);
  CHECK_THROWS_WITH(rt.allocator(7), Contains("invalid device fl:7 (3 fl device(s) available)"));
  CHECK_THROWS_AS(rt.streams(3), fl::Error);
  CHECK_THROWS_AS(rt.dispatch(3), fl::Error);
}

TEST_CASE("runtime: each device's allocator draws on its own plugin device") {
  ScopedEnv env;
  env.clean_runtime();
  fl::Config config;
  config.devices = {stub_devices("devices=2;memory_mb=16")};
  Runtime rt(options({FL_STUB_PLUGIN}, config));
  REQUIRE(rt.device_count() == 2);
  const auto& plugin = *rt.device(1).plugin;
  reset_log(plugin);
  void* p = rt.allocator(1).allocate(1000, nullptr);
  REQUIRE(p != nullptr);
  CHECK_THAT(call_log(plugin), Contains("fl_malloc(1)"));
  uint64_t free_bytes = 0, total = 0;
  plugin.check(plugin.ops().device_memory_info(1, &free_bytes, &total), "device_memory_info");
  CHECK(total == 16ull << 20);
  CHECK(free_bytes == total - fl::CachingAllocator::kSmallSegment);
  CHECK(rt.allocator(0).stats().reserved_bytes == 0);
  // Allocations past the stub's 16 MiB fail with the allocator's OOM message.
  CHECK_THROWS_AS(rt.allocator(1).allocate(32ull << 20, nullptr), fl::OutOfMemoryError);
  rt.allocator(1).deallocate(p);
  rt.allocator(1).empty_cache();
  plugin.check(plugin.ops().device_memory_info(1, &free_bytes, &total), "device_memory_info");
  CHECK(free_bytes == total);
}

TEST_CASE("runtime: order_after uses an event on one device, a host wait across devices and plugins") {
  ScopedEnv env;
  env.clean_runtime();
  Runtime rt(options({FL_STUB_PLUGIN, zoo("zoo_extra_export")}, two_stub_devices_and_another_plugin("devices=2")));
  REQUIRE(rt.device_count() == 3);
  const auto& stub = *rt.device(0).plugin;
  const int64_t s1 = rt.streams(0).create(0);
  reset_log(stub);

  SECTION("same device, two streams: event record + stream wait, no host wait") {
    rt.order_after(0, s1, 0, 0);
    const std::string log = call_log(stub);
    CHECK_THAT(log, Contains("event_create(0)\nevent_record(0)\nstream_wait_event(0)\nevent_destroy(0)"));
    CHECK_THAT(log, !Contains("synchronize"));
  }
  SECTION("same stream: nothing to do") {
    rt.order_after(0, s1, 0, s1);
    CHECK(call_log(stub).empty());
  }
  SECTION("two devices of one plugin without fl.stream_wait_peer_event: a host wait") {
    // stream_wait_event takes an event of its own device only (fl_abi.h).
    rt.order_after(1, 0, 0, s1);
    const std::string log = call_log(stub);
    CHECK_THAT(log, Contains("stream_synchronize(0)"));
    CHECK_THAT(log, !Contains("stream_wait_event"));
  }
  SECTION("two plugins: the source stream is waited for on the host") {
    rt.order_after(2, 0, 0, s1);
    CHECK_THAT(call_log(stub), Contains("stream_synchronize(0)"));
  }
  SECTION("bad device indexes or stream ids throw") {
    CHECK_THROWS_AS(rt.order_after(5, 0, 0, 0), fl::Error);
    CHECK_THROWS_AS(rt.order_after(0, 0, 5, 0), fl::Error);
    CHECK_THROWS_AS(rt.order_after(0, 0, 0, 99), fl::Error);
  }
}

TEST_CASE("runtime: order_after across two devices of a plugin offering fl.stream_wait_peer_event waits on the device") {
  ScopedEnv env;
  env.clean_runtime();
  Runtime rt(options({FL_STUB_PLUGIN, zoo("zoo_extra_export")}, two_stub_devices_and_another_plugin("devices=2;peer_events=1")));
  REQUIRE(rt.device_count() == 3);
  const auto& stub = *rt.device(0).plugin;
  const int64_t s1 = rt.streams(0).create(0);
  reset_log(stub);

  SECTION("two devices of the plugin: an event of device 0 waited on by device 1's stream, no host wait") {
    rt.order_after(1, 0, 0, s1);
    const std::string log = call_log(stub);
    CHECK_THAT(log, Contains("get_proc_address fl.stream_wait_peer_event\nevent_create(0)\nevent_record(0)\n"
                             "stream_wait_peer_event(1<-0)\nevent_destroy(0)"));
    CHECK_THAT(log, !Contains("synchronize"));
  }
  SECTION("two plugins: still a host wait") {
    rt.order_after(2, 0, 0, s1);
    CHECK_THAT(call_log(stub), Contains("stream_synchronize(0)"));
    CHECK_THAT(call_log(stub), !Contains("stream_wait_peer_event"));
  }
}

TEST_CASE("runtime: environment overrides apply when the config file is not used") {
  ScopedEnv env;
  env.clean_runtime().set("FL_PLUGINS_DISABLE", "stub");
  Runtime rt(options({FL_STUB_PLUGIN}));
  CHECK(rt.device_count() == 0);
  REQUIRE(rt.skipped_plugins().size() == 1);
  CHECK(rt.skipped_plugins()[0].step == "select");
}

TEST_CASE("runtime: destruction shuts every plugin down once") {
  ScopedEnv env;
  env.clean_runtime();
  std::shared_ptr<fl::PluginLibrary> kept;
  {
    Runtime rt(options({FL_STUB_PLUGIN}));
    kept = rt.plugins().at(0);
    CHECK(kept->initialized());
    void* p = rt.allocator(0).allocate(4096, nullptr);
    rt.allocator(0).deallocate(p);
    reset_log(*kept);
  }
  CHECK_FALSE(kept->initialized());
  const std::string log = call_log(*kept);
  CHECK_THAT(log, Contains("fl_free(0)"));  // the cached segment went back before shutdown
  CHECK_THAT(log, Contains("shutdown"));
}
