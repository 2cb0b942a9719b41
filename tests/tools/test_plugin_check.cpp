// test_plugin_check.cpp — fl-plugin-check's verdicts on the stub, the broken-plugin zoo and
// (when it is built) the CPU plugin, read from its --json output and exit status.
#include <catch2/catch.hpp>
#include <fl_abi.h>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace {

struct ToolRun {
  int exit_code = -1;
  nlohmann::json report;
  std::string text;

  // The check named `name`; fails the test when absent.
  const nlohmann::json& check(const std::string& name) const {
    for (const auto& c : report["checks"])
      if (c["name"] == name) return c;
    FAIL("no check named " << name);
    static nlohmann::json none;
    return none;
  }
};

ToolRun run_tool(const std::string& arguments, bool json = true) {
  std::string command = std::string(FL_PLUGIN_CHECK_TOOL) + (json ? " --json " : " ") + arguments + " 2>/dev/null";
  ToolRun run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) run.text.append(buffer, n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (json) {
    INFO(run.text);
    REQUIRE_NOTHROW(run.report = nlohmann::json::parse(run.text));
  }
  return run;
}

std::string zoo(const std::string& name) { return std::string(FL_ZOO_DIR) + "/libfl_" + name + ".so"; }

}  // namespace

TEST_CASE("usage errors exit with status 2") {
  CHECK(run_tool("", false).exit_code == 2);
  CHECK(run_tool("--bogus " + zoo("stub"), false).exit_code == 2);
  CHECK(run_tool("--reference", false).exit_code == 2);
}

TEST_CASE("the stub passes every check when its failing kernel is switched off") {
  ToolRun run = run_tool("--options fail_neg=0 " + zoo("stub"));
  INFO(run.text);
  CHECK(run.exit_code == 0);
  CHECK(run.report["summary"]["failed"] == 0);
  CHECK(run.report["plugin"]["name"] == "stub");
  CHECK(run.report["plugin"]["abi_major"] == FL_ABI_MAJOR_EXPECTED);
  CHECK(run.report["plugin"]["build_id"].get<std::string>().size() == 40);
  for (const char* name : {"exported symbols", "negotiation", "init", "device properties", "memory", "copies",
                           "large copies", "memset", "stream ordering", "events", "error paths", "leaks", "fl extras", "kernel aten::add.out",
                           "kernel aten::neg.out"})
    CHECK(run.check(name)["status"] == "pass");
  // The stub declines broadcasting with FL_ERR_NOT_SUPPORTED, which the ABI allows.
  CHECK_THAT(run.check("kernel aten::add.out")["message"].get<std::string>(), Catch::Contains("FL_ERR_NOT_SUPPORTED"));
  for (const auto& c : run.report["checks"]) CHECK(c["duration_ms"].get<double>() >= 0);
}

TEST_CASE("the fl.* extras are checked when a plugin offers them") {
  ToolRun none = run_tool("--options fail_neg=0 " + zoo("stub"));
  CHECK(none.check("fl extras")["status"] == "pass");
  CHECK(none.check("fl extras")["message"] == "no fl.* extras offered");
  // Two devices and fl.stream_wait_peer_event: device 1's stream ordered after device 0's event.
  ToolRun peer = run_tool("--options 'fail_neg=0;devices=2;peer_events=1' " + zoo("stub"));
  INFO(peer.text);
  CHECK(peer.exit_code == 0);
  CHECK(peer.check("fl extras")["status"] == "pass");
  CHECK(peer.check("fl extras")["message"] == "checked: stream_wait_peer_event ");
  if (std::filesystem::exists(FL_CPU_PLUGIN)) {  // the CPU plugin's asynchronous streams
    ToolRun cpu = run_tool("--options devices=2 " + std::string(FL_CPU_PLUGIN));
    INFO(cpu.text);
    CHECK(cpu.check("fl extras")["status"] == "pass");
    CHECK(cpu.check("fl extras")["message"] == "checked: stream_wait_peer_event ");
  }
}

TEST_CASE("the stub's deliberately failing kernel fails the run with its message") {
  ToolRun run = run_tool(zoo("stub"));
  CHECK(run.exit_code == 1);
  CHECK(run.report["summary"]["failed"] == 1);
  CHECK(run.check("kernel aten::neg.out")["status"] == "fail");
  CHECK_THAT(run.check("kernel aten::neg.out")["message"].get<std::string>(),
             Catch::Contains("FL_ERR_DEVICE: stub kernel failure"));
}

TEST_CASE("the human-readable report names every check and the summary") {
  ToolRun run = run_tool("--options fail_neg=0 " + zoo("stub"), false);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.text, Catch::Contains("stream ordering") && Catch::Contains("0 failed"));
}

TEST_CASE("a plugin without a device passes on its device-free checks and says so") {
  ToolRun run = run_tool(zoo("zoo_no_device"));
  CHECK(run.exit_code == 0);
  CHECK(run.check("init")["status"] == "skip");
  CHECK(run.check("memory")["status"] == "skip");
  CHECK_THAT(run.check("memory")["message"].get<std::string>(), Catch::Contains("no device (zoo: no driver installed)"));
  CHECK(run.check("negotiation")["status"] == "pass");
  CHECK_THAT(run.report["notes"].dump(), Catch::Contains("device-free checks"));
}

TEST_CASE("each broken plugin fails the check that must catch it, with the reason") {
  const std::map<std::string, std::pair<std::string, std::string>> expected = {
      {"zoo_missing_entry", {"exported symbols", "'fl_plugin_get_ops' is not exported"}},
      {"zoo_null_table", {"negotiation", "returned NULL"}},
      {"zoo_wrong_major", {"negotiation", "version: plugin ABI 2." + std::to_string(FL_ABI_MINOR) +
                                              ", host ABI 1." + std::to_string(FL_ABI_MINOR)}},
      {"zoo_short_struct", {"negotiation", "struct size: struct_size"}},
      {"zoo_null_required", {"negotiation", "required entry 'fl_malloc' is NULL"}},
      {"zoo_empty_name", {"negotiation", "plugin_name is NULL or empty"}},
      {"zoo_missing_dep", {"negotiation", "libfl_zoo_dep.so: cannot open shared object file"}},
      {"garbage", {"negotiation", "invalid ELF header"}},
      {"zoo_init_error", {"init", "FL_ERR_DEVICE: zoo: the driver refused to start"}},
      {"zoo_init_throws", {"init", "C++ exception escaped the plugin: zoo: init threw"}},
      {"zoo_negative_count", {"init", "negative count -3"}},
      {"zoo_count_error", {"init", "FL_ERR_DEVICE: zoo: device enumeration failed"}},
      {"zoo_bad_kernel_table", {"kernel table", "fn is NULL"}},
      {"zoo_failing_kernels", {"kernel aten::mul.out", "FL_ERR_DEVICE: zoo kernel failure"}},
  };
  for (const auto& [plugin, check] : expected) {
    INFO(plugin);
    ToolRun run = run_tool(zoo(plugin));
    CHECK(run.exit_code == 1);
    const auto& c = run.check(check.first);
    CHECK(c["status"] == "fail");
    CHECK_THAT(c["message"].get<std::string>(), Catch::Contains(check.second));
  }
  ToolRun throwing = run_tool(zoo("zoo_failing_kernels"));
  CHECK_THAT(throwing.check("kernel aten::add.out")["message"].get<std::string>(),
             Catch::Contains("C++ exception escaped the kernel"));
}

TEST_CASE("newer and older minors pass negotiation; an extra fl_ export is a warning") {
  for (const char* plugin : {"zoo_newer_minor", "zoo_older_minor"}) {
    ToolRun run = run_tool("--options fail_neg=0 " + zoo(plugin));
    INFO(run.text);
    CHECK(run.exit_code == 0);
    CHECK(run.check("negotiation")["status"] == "pass");
  }
  ToolRun older = run_tool("--options fail_neg=0 " + zoo("zoo_older_minor"));
  CHECK_THAT(older.check("negotiation")["message"].get<std::string>(), Catch::Contains("get_proc_address (absent)"));
  ToolRun extra = run_tool("--options fail_neg=0 " + zoo("zoo_extra_export"));
  CHECK(extra.exit_code == 0);
  CHECK(extra.check("exported symbols")["status"] == "pass");
  CHECK_THAT(extra.check("exported symbols")["message"].get<std::string>(), Catch::Contains("warning") && Catch::Contains("fl_zoo_extra_symbol"));
}

TEST_CASE("the CPU plugin's kernels pass against the naive reference, and the stub against it") {
  if (!std::filesystem::exists(FL_CPU_PLUGIN)) {
    WARN("libfl_cpu.so is not built; skipped");
    return;
  }
  ToolRun run = run_tool(FL_CPU_PLUGIN);
  INFO(run.text);
  CHECK(run.report["plugin"]["name"] == "cpu");
  int kernels_passed = 0;
  for (const auto& c : run.report["checks"]) {
    const std::string name = c["name"];
    if (name.rfind("kernel ", 0) == 0 && name != "kernel table") {
      INFO(name << ": " << c["message"]);
      CHECK(c["status"] != "fail");
      kernels_passed += c["status"] == "pass";
    }
  }
  CHECK(kernels_passed > 5);
  for (const char* name : {"negotiation", "init", "kernel table", "memory", "copies", "memset", "stream ordering", "events", "leaks"})
    CHECK(run.check(name)["status"] == "pass");
  // The stub compared with the CPU plugin as reference.
  ToolRun stub = run_tool("--options fail_neg=0 --reference " + std::string(FL_CPU_PLUGIN) + " " + zoo("stub"));
  CHECK(stub.exit_code == 0);
  CHECK_THAT(stub.check("kernel aten::mul.out")["message"].get<std::string>(), Catch::Contains("reference cpu"));
  // Against a reference plugin the report also counts the cases equal value for value.
  CHECK_THAT(stub.check("kernel aten::mul.out")["message"].get<std::string>(), Catch::Matches(".*; [0-9]+ of [0-9]+ value for value$"));
}

TEST_CASE("the CPU plugin passes every check with memory the host may not read (host_accessible=0)") {
  // Its device addresses then carry a bit that makes a host dereference fault (the plugin's
  // device_address.hpp): a check or a kernel that read device memory on the host would crash
  // the tool here, as on a GPU.
  if (!std::filesystem::exists(FL_CPU_PLUGIN)) {
    WARN("libfl_cpu.so is not built; skipped");
    return;
  }
  ToolRun run = run_tool("--options host_accessible=0 " + std::string(FL_CPU_PLUGIN));
  ToolRun plain = run_tool(FL_CPU_PLUGIN);
  INFO(run.text);
  CHECK(run.exit_code == 0);
  auto passed = [](const ToolRun& r) {
    std::vector<std::string> names;
    for (const auto& c : r.report["checks"])
      if (c["status"] == "pass") names.push_back(c["name"]);
    return names;
  };
  for (const auto& c : run.report["checks"]) {
    INFO(c["name"] << ": " << c["message"]);
    CHECK(c["status"] != "fail");
  }
  CHECK(passed(run) == passed(plain));  // the same checks pass as with host-readable memory
  for (const char* name : {"memory", "copies", "memset", "stream ordering", "events", "leaks"})
    CHECK(run.check(name)["status"] == "pass");
}
