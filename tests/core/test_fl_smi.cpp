// Tests of tools/fl_smi (fl-smi) run as a subprocess: --json lists found/loaded/skipped
// plugins and devices; --doctor reports a bad FL_PLUGIN_PATH entry and a bad config file.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

struct Result {
  int status = -1;
  std::string out;
};

Result run(const std::string& env, const std::string& args) {
  const std::string command = "env -u FL_CONFIG -u FL_PLUGIN_PATH -u FL_ISOLATED_DISCOVERY " + env + " " +
                              FL_SMI_TOOL + " " + args + " 2>/dev/null";
  Result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

const std::string kPath = std::string("FL_PLUGIN_PATH=") + FL_STUB_PLUGIN + ":" + FL_ZOO_DIR +
                          "/libfl_zoo_init_error.so:" + FL_ZOO_DIR + "/libfl_zoo_wrong_major.so";

const nlohmann::json* find_check(const nlohmann::json& doc, const std::string& prefix) {
  for (const auto& c : doc["doctor"])
    if (c["check"].get<std::string>().rfind(prefix, 0) == 0) return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("fl-smi --json: plugins found, loaded and skipped with step and reason; devices with memory") {
  Result r = run(kPath + " HOME=/nonexistent", "--json");
  REQUIRE(r.status == 0);
  auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["plugins"].size() == 3);
  CHECK(doc["plugins"][0]["status"] == "loaded");
  CHECK(doc["plugins"][0]["name"] == "stub");
  CHECK(doc["plugins"][0]["origin"] == "FL_PLUGIN_PATH");
  CHECK(doc["plugins"][0]["kernels"] == 3);
  CHECK(doc["plugins"][1]["status"] == "skipped");
  CHECK(doc["plugins"][1]["step"] == "init");
  CHECK(doc["plugins"][1]["reason"].get<std::string>().find("zoo: the driver refused to start") != std::string::npos);
  CHECK(doc["plugins"][2]["step"] == "version");
  REQUIRE(doc["devices"].size() == 1);
  const auto& d = doc["devices"][0];
  CHECK(d["device"] == "fl:0");
  CHECK(d["stable_id"] == "stub-0");
  CHECK(d["total_memory"] == 1024ull << 20);
  CHECK(d["used_memory"] == 0);
  CHECK(d["allocator"]["reserved_bytes"] == 0);
  CHECK(doc.find("doctor") == doc.end());
}

TEST_CASE("fl-smi --doctor: a missing FL_PLUGIN_PATH entry and a bad config fail; exit status 1") {
  const std::string config = "/tmp/fl_smi_test_config.yaml";
  std::ofstream(config) << "devices:\n  - type: stub\n    memory_fraction: 2\n";
  Result r = run(kPath + ":/nonexistent/dir FL_CONFIG=" + config, "--doctor --json");
  CHECK(r.status == 1);
  auto doc = nlohmann::json::parse(r.out);
  const auto* missing = find_check(doc, "FL_PLUGIN_PATH entry /nonexistent/dir");
  REQUIRE(missing != nullptr);
  CHECK((*missing)["status"] == "fail");
  const auto* cfg = find_check(doc, "config");
  REQUIRE(cfg != nullptr);
  CHECK((*cfg)["status"] == "fail");
  CHECK((*cfg)["detail"].get<std::string>().find(config + ":3: 'devices[0].memory_fraction' must be in (0, 1]") !=
        std::string::npos);
  CHECK(doc["config"]["error"].get<std::string>().find("memory_fraction") != std::string::npos);
  // The defaults were used, so the stub is still listed.
  CHECK(doc["devices"].size() == 1);
  REQUIRE(find_check(doc, "/dev nodes: NVIDIA") != nullptr);
  REQUIRE(find_check(doc, "log") != nullptr);
  std::remove(config.c_str());
}

TEST_CASE("fl-smi text output and usage errors") {
  Result r = run(kPath + " HOME=/nonexistent", "");
  CHECK(r.status == 0);
  CHECK(r.out.find("Plugins: 3 found, 1 loaded, 2 skipped") != std::string::npos);
  CHECK(r.out.find("fl:0  stub:0") != std::string::npos);
  CHECK(run("", "--bogus").status == 2);
}
