// test_vendor_plugins.cpp — fl-plugin-check's verdicts on the vendor plugins this machine can
// build but not run (HIP, CUDA, Ascend: every device-free check passes, device checks are
// skipped with the runtime's own reason; the GPU plugins' options are checked before the
// runtime is asked for devices) and on the template plugin (every check, kernels included).
// A plugin whose path is empty was not built in this configuration: its test is skipped.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <tuple>

namespace {

struct ToolRun {
  int exit_code = -1;
  nlohmann::json report;
  std::string text;

  const nlohmann::json& check(const std::string& name) const {
    for (const auto& c : report["checks"])
      if (c["name"] == name) return c;
    FAIL("no check named " << name);
    static nlohmann::json none;
    return none;
  }
};

// fl-plugin-check --json on `plugin`, with `options` for its init (--options) and `env`
// ("NAME=value", or empty) in its environment.
ToolRun run_tool(const std::string& plugin, const std::string& options = "", const std::string& env = "") {
  const std::string command = (env.empty() ? "" : "env '" + env + "' ") + "'" + FL_PLUGIN_CHECK_TOOL + "' --json " +
                              (options.empty() ? "" : "--options '" + options + "' ") + "'" + plugin + "' 2>/dev/null";
  ToolRun run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) run.text.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  INFO(run.text);
  REQUIRE_NOTHROW(run.report = nlohmann::json::parse(run.text));
  return run;
}

// Device-free checks pass; with no device, init and every device check are skipped with
// `no_device_text` in init's message; with a device, nothing fails.
void check_device_plugin(const std::string& path, const std::string& name, const std::string& no_device_text) {
  ToolRun run = run_tool(path);
  INFO(run.text);
  CHECK(run.exit_code == 0);
  CHECK(run.report["summary"]["failed"] == 0);
  CHECK(run.report["plugin"]["name"] == name);
  CHECK(run.check("exported symbols")["status"] == "pass");
  CHECK_THAT(run.check("exported symbols")["message"].get<std::string>(), !Catch::Contains("warning"));
  CHECK(run.check("negotiation")["status"] == "pass");
  const auto& init = run.check("init");
  if (init["status"] == "skip") {
    CHECK_THAT(init["message"].get<std::string>(), Catch::StartsWith("FL_ERR_NO_DEVICE"));
    CHECK_THAT(init["message"].get<std::string>(), Catch::Contains(no_device_text));
    for (const auto& c : run.report["checks"])
      if (c["name"] != "exported symbols" && c["name"] != "negotiation") CHECK(c["status"] == "skip");
  } else {
    CHECK(init["status"] == "pass");
  }
}

// A GPU plugin reads its sync= option, and where the options say nothing the `env_name`
// variable, before it asks the runtime for devices: a value it does not know fails init
// naming where it came from, with or without a device; the option wins over the variable.
void check_sync_option(const std::string& path, const std::string& env_name) {
  const std::string bad = env_name + "=sometimes";
  for (const auto& [options, env, named] : {std::tuple<std::string, std::string, std::string>{"sync=sometimes", "", "option sync=sometimes"},
                                            {"", bad, bad}}) {
    ToolRun run = run_tool(path, options, env);
    INFO(run.text);
    CHECK(run.exit_code != 0);
    const auto& init = run.check("init");
    CHECK(init["status"] == "fail");
    CHECK_THAT(init["message"].get<std::string>(), Catch::Contains(named + " is not one of auto, spin, yield, blocking"));
  }
  ToolRun run = run_tool(path, "sync=blocking", bad);
  INFO(run.text);
  CHECK(run.exit_code == 0);
  CHECK(run.check("init")["status"] != "fail");
}

// Whether the plugin at `path` was built in this configuration; if not, says why (a WARN in
// the test's report) so that the calling test case can return.
bool built(const std::string& path, const char* why_not) {
  if (!path.empty()) return true;
  WARN(why_not);
  return false;
}

}  // namespace

TEST_CASE("the template plugin passes every fl-plugin-check check, its two kernels included") {
  ToolRun run = run_tool(FL_TEMPLATE_PLUGIN);
  INFO(run.text);
  CHECK(run.exit_code == 0);
  CHECK(run.report["summary"]["failed"] == 0);
  CHECK(run.report["summary"]["skipped"] == 0);
  CHECK(run.report["plugin"]["name"] == "template");
  for (const char* name : {"exported symbols", "negotiation", "init", "kernel table", "device properties", "memory",
                           "copies", "large copies", "memset", "stream ordering", "events", "error paths", "leaks",
                           "kernel aten::add.out", "kernel aten::mul.out"})
    CHECK(run.check(name)["status"] == "pass");
}

TEST_CASE("the HIP plugin passes the device-free checks; without an AMD GPU init says why") {
  if (!built(FL_HIP_PLUGIN, "libfl_hip.so not built in this configuration (no hipcc)")) return;
  check_device_plugin(FL_HIP_PLUGIN, "hip", "HIP");
}

TEST_CASE("the HIP plugin refuses a sync mode it does not know, from its option or FL_HIP_SYNC") {
  if (!built(FL_HIP_PLUGIN, "libfl_hip.so not built in this configuration (no hipcc)")) return;
  check_sync_option(FL_HIP_PLUGIN, "FL_HIP_SYNC");
}

TEST_CASE("the CUDA plugin passes the device-free checks; without an NVIDIA GPU init says why") {
  if (!built(FL_CUDA_PLUGIN, "libfl_cuda.so not built in this configuration (no nvcc)")) return;
  check_device_plugin(FL_CUDA_PLUGIN, "cuda", "CUDA");
}

TEST_CASE("the CUDA plugin refuses a sync mode it does not know, from its option or FL_CUDA_SYNC") {
  if (!built(FL_CUDA_PLUGIN, "libfl_cuda.so not built in this configuration (no nvcc)")) return;
  check_sync_option(FL_CUDA_PLUGIN, "FL_CUDA_SYNC");
}

TEST_CASE("the Ascend plugin passes the device-free checks; without CANN init says why") {
  check_device_plugin(FL_ASCEND_PLUGIN, "ascend", "Ascend");
}
