// Tests of core/isolated_probe and the runtime's isolated discovery: plugins that crash, hang
// or exit in init are probed in a child process and skipped at step "probe"; the others load.
#include "config.h"
#include "isolated_probe.h"
#include "plugin_library.h"
#include "runtime.h"
#include "scoped_env.hpp"

#include <catch2/catch.hpp>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using fl::test::ScopedEnv;
using namespace std::chrono_literals;

const std::string kCrash = std::string(FL_ZOO_CRASH_DIR) + "/libfl_zoo_init_crash.so";
const std::string kInitError = std::string(FL_ZOO_DIR) + "/libfl_zoo_init_error.so";
const std::string kHang = std::string(FL_PROBE_ZOO_DIR) + "/libfl_probe_hang.so";
const std::string kExit = std::string(FL_PROBE_ZOO_DIR) + "/libfl_probe_exit.so";

fl::RuntimeOptions options(std::vector<std::string> files, bool isolated) {
  fl::RuntimeOptions o;
  o.plugin_files = std::move(files);
  o.use_config_file = false;
  o.config.logging.level = "off";
  o.config.plugins.isolated_discovery = isolated;
  return o;
}

}  // namespace

TEST_CASE("probe: signal names") {
  CHECK(fl::signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(fl::signal_name(SIGABRT) == "SIGABRT");
  CHECK(fl::signal_name(SIGKILL) == "SIGKILL");
  CHECK(fl::signal_name(1000) == "signal 1000");
}

TEST_CASE("probe: a plugin whose init crashes is reported with its signal; the caller lives") {
  auto r = fl::probe_plugin_in_child(kCrash, fl::Config{}, 20s);
  CHECK_FALSE(r.survived);
  CHECK(r.reason == "crashed during probe in a child process: signal 11 (SIGSEGV)");
}

TEST_CASE("probe: good plugins and plugins that fail cleanly survive the probe") {
  auto good = fl::probe_plugin_in_child(FL_STUB_PLUGIN, fl::Config{}, 20s);
  CHECK(good.survived);
  CHECK(good.reason.empty());
  auto clean_failure = fl::probe_plugin_in_child(kInitError, fl::Config{}, 20s);
  CHECK(clean_failure.survived);  // the in-process load reports it at its own step
  auto not_a_file = fl::probe_plugin_in_child("/nonexistent/libfl_x.so", fl::Config{}, 20s);
  CHECK(not_a_file.survived);
}

TEST_CASE("probe: a plugin that hangs is killed after the timeout; one that exits is reported") {
  const auto start = std::chrono::steady_clock::now();
  auto hang = fl::probe_plugin_in_child(kHang, fl::Config{}, 300ms);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK_FALSE(hang.survived);
  CHECK(hang.reason == "hung during probe in a child process: no answer after 300 ms (killed)");
  auto exits = fl::probe_plugin_in_child(kExit, fl::Config{}, 20s);
  CHECK_FALSE(exits.survived);
  CHECK(exits.reason == "exited during probe in a child process with status 3 before the probe finished");
}

TEST_CASE("probe: the probe passes the config's options to init") {
  // With no_device=1 the stub's init fails cleanly: still a survivor (no crash).
  fl::Config config;
  fl::DeviceSelection stub;
  stub.type = "stub";
  stub.options = "no_device=1";
  config.devices = {stub};
  CHECK(fl::probe_plugin_in_child(FL_STUB_PLUGIN, config, 20s).survived);
}

TEST_CASE("runtime: isolated discovery skips the crashing plugin at step 'probe' and loads the rest") {
  ScopedEnv env;
  env.clean_runtime().set("FL_ISOLATED_DISCOVERY_TIMEOUT_MS", "2000");
  fl::Runtime rt(options({kCrash, FL_STUB_PLUGIN, kInitError, kHang, kExit}, true));
  REQUIRE(rt.plugins().size() == 1);
  CHECK(rt.plugins()[0]->name() == "stub");
  CHECK(rt.device_count() == 1);
  REQUIRE(rt.skipped_plugins().size() == 4);
  const auto& s = rt.skipped_plugins();
  CHECK(fs::path(s[0].path).filename() == "libfl_zoo_init_crash.so");
  CHECK(s[0].step == "probe");
  CHECK(s[0].reason == "crashed during probe in a child process: signal 11 (SIGSEGV)");
  CHECK(fs::path(s[1].path).filename() == "libfl_zoo_init_error.so");
  CHECK(s[1].step == "init");
  CHECK(s[2].step == "probe");
  CHECK_THAT(s[2].reason, Contains("hung during probe"));
  CHECK(s[3].step == "probe");
  CHECK_THAT(s[3].reason, Contains("exited during probe"));
}

TEST_CASE("runtime: FL_ISOLATED_DISCOVERY=1 turns isolated discovery on") {
  ScopedEnv env;
  env.clean_runtime().set("FL_ISOLATED_DISCOVERY", "1");
  fl::Runtime rt(options({kCrash, FL_STUB_PLUGIN}, false));
  CHECK(rt.device_count() == 1);
  REQUIRE(rt.skipped_plugins().size() == 1);
  CHECK(rt.skipped_plugins()[0].step == "probe");
}

TEST_CASE("config: plugins.isolated_discovery is read from YAML") {
  CHECK(fl::parse_config("plugins:\n  isolated_discovery: true\n", "t.yaml").plugins.isolated_discovery);
  CHECK_FALSE(fl::parse_config("plugins:\n  paths: []\n", "t.yaml").plugins.isolated_discovery);
  CHECK_THROWS_WITH(fl::parse_config("plugins:\n  isolated_discovery: maybe\n", "t.yaml"),
                    Contains("'plugins.isolated_discovery' must be true or false"));
}
