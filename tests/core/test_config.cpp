// Tests of core/config.{h,cpp}: defaults, every field, each error kind with its file, line and
// key, environment overrides, and how load_config finds its file.
#include "config.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;

namespace {

const fs::path kDataDir = FL_TEST_DATA_DIR;

// Every variable load_config reads; each test starts with them unset and restores them after.
const char* const kConfigVariables[] = {
    "FL_CONFIG",          "FL_LOG_LEVEL",           "FL_LOG_FILE",
    "FL_FALLBACK_STRICT", "FL_ENABLE_CPU_FALLBACK", "FL_ENABLE_GENERIC_KERNEL",
    "FL_MEMORY_FRACTION", "FL_MATMUL_PRECISION",    "FL_DETERMINISTIC",
    "FL_PLUGINS_ENABLE",  "FL_PLUGINS_DISABLE",     "HOME",
};

class CleanEnvironment {
 public:
  CleanEnvironment() {
    for (const char* name : kConfigVariables) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
  }
  ~CleanEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }
  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("fl_test_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  fs::path write(const fs::path& relative, const std::string& text) const {
    const fs::path p = path_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }

 private:
  fs::path path_;
};

// The message of the ConfigError that parsing `yaml` as "test.yaml" throws.
std::string parse_error(const std::string& yaml) {
  try {
    fl::parse_config(yaml, "test.yaml");
  } catch (const fl::ConfigError& e) {
    return e.what();
  }
  FAIL("no ConfigError for:\n" << yaml);
  return "";
}

std::string env_error(fl::Config& config) {
  try {
    fl::apply_env_overrides(config, false);
  } catch (const fl::ConfigError& e) {
    return e.what();
  }
  FAIL("no ConfigError from the environment");
  return "";
}

void require_defaults(const fl::Config& c) {
  CHECK(c.devices.empty());
  CHECK(c.fallback.enable_cpu_fallback);
  CHECK(c.fallback.enable_generic_kernel);
  CHECK_FALSE(c.fallback.strict);
  CHECK(c.fallback.warn_once);
  CHECK(c.logging.level == "warn");
  CHECK(c.logging.path.empty());
  CHECK(c.precision.matmul == "highest");
  CHECK_FALSE(c.precision.deterministic);
  CHECK(c.plugins.paths.empty());
  CHECK(c.plugins.enable.empty());
  CHECK(c.plugins.disable.empty());
  CHECK_FALSE(c.plugins.allow_world_writable);
}

}  // namespace

TEST_CASE("defaults: a default Config, an empty text and a comments-only file", "[config]") {
  fl::Config plain;
  require_defaults(plain);
  CHECK(plain.source.empty());

  fl::Config empty = fl::parse_config("", "empty.yaml");
  require_defaults(empty);
  CHECK(empty.source == "empty.yaml");

  const fs::path comments = kDataDir / "config_comments_only.yaml";
  fl::Config from_file = fl::load_config_file(comments);
  require_defaults(from_file);
  CHECK(from_file.source == comments.string());

  // Sections without a value keep their defaults.
  require_defaults(fl::parse_config("devices:\nfallback:\nlogging:\nprecision:\nplugins:\n", "s"));
}

TEST_CASE("every field of a file is read", "[config]") {
  const fs::path path = kDataDir / "config_full.yaml";
  fl::Config c = fl::load_config_file(path);
  CHECK(c.source == path.string());

  REQUIRE(c.devices.size() == 2);
  const fl::DeviceSelection& cpu = c.devices[0];
  CHECK(cpu.type == "cpu");
  CHECK(cpu.count == 2);
  CHECK(cpu.memory_fraction == 0.5);
  CHECK(cpu.options == "devices=2");
  CHECK(cpu.pin == std::vector<std::string>{"cpu:1", "cpu:0"});
  const fl::DeviceSelection& any = c.devices[1];
  CHECK(any.type == "*");
  CHECK(any.count == 0);
  CHECK(any.memory_fraction == 1.0);
  CHECK(any.options.empty());
  CHECK(any.pin.empty());

  CHECK_FALSE(c.fallback.enable_cpu_fallback);
  CHECK_FALSE(c.fallback.enable_generic_kernel);
  CHECK(c.fallback.strict);
  CHECK_FALSE(c.fallback.warn_once);
  CHECK(c.logging.level == "debug");
  CHECK(c.logging.path == "/tmp/fl.log");
  CHECK(c.precision.matmul == "high");
  CHECK(c.precision.deterministic);
  CHECK(c.plugins.paths == std::vector<std::string>{"/opt/x", "/opt/y"});
  CHECK(c.plugins.enable == std::vector<std::string>{"cpu"});
  CHECK(c.plugins.disable == std::vector<std::string>{"hip"});
  CHECK(c.plugins.allow_world_writable);
}

TEST_CASE("parsing strings: partial sections keep other defaults", "[config]") {
  fl::Config c = fl::parse_config(
      "devices:\n"
      "  - {type: cuda, memory_fraction: 1e-1}\n"
      "fallback: {strict: yes}\n"
      "precision: {matmul: medium}\n",
      "inline");
  REQUIRE(c.devices.size() == 1);
  CHECK(c.devices[0].type == "cuda");
  CHECK(c.devices[0].count == -1);
  CHECK(c.devices[0].memory_fraction == Approx(0.1));
  CHECK(c.fallback.strict);
  CHECK(c.fallback.enable_cpu_fallback);  // untouched keys keep their defaults
  CHECK(c.fallback.warn_once);
  CHECK(c.precision.matmul == "medium");
  CHECK_FALSE(c.precision.deterministic);
  CHECK(c.logging.level == "warn");

  CHECK(fl::parse_config("logging: {level: 'off'}", "s").logging.level == "off");
  CHECK(fl::parse_config("devices: [{type: cpu, count: -1}]", "s").devices[0].count == -1);
  CHECK(fl::parse_config("devices: [{type: cpu, memory_fraction: 1}]", "s")
            .devices[0].memory_fraction == 1.0);
  CHECK(fl::parse_config("plugins: {paths: []}", "s").plugins.paths.empty());
}

TEST_CASE("selection_for and plugin_options", "[config]") {
  fl::Config c = fl::parse_config(
      "devices:\n"
      "  - {type: '*', options: 'any=1'}\n"
      "  - {type: cpu, options: 'devices=2'}\n"
      "  - {type: cuda}\n",
      "s");
  REQUIRE(c.selection_for("cpu") == &c.devices[1]);  // the exact type wins over an earlier "*"
  CHECK(c.plugin_options("cpu") == "devices=2");
  CHECK(c.selection_for("cuda") == &c.devices[2]);
  CHECK(c.plugin_options("cuda").empty());
  CHECK(c.selection_for("hip") == &c.devices[0]);
  CHECK(c.plugin_options("hip") == "any=1");

  fl::Config no_star = fl::parse_config("devices: [{type: cpu, options: x}]", "s");
  CHECK(no_star.selection_for("hip") == nullptr);
  CHECK(no_star.plugin_options("hip").empty());
  CHECK(fl::Config{}.selection_for("cpu") == nullptr);
}

TEST_CASE("malformed YAML names file, line and column", "[config][errors]") {
  const fs::path path = kDataDir / "config_invalid_yaml.yaml";
  REQUIRE_THROWS_MATCHES(fl::load_config_file(path), fl::ConfigError,
                         Catch::Message(path.string() +
                                        ":5:1: invalid YAML: end of map flow not found"));

  CHECK_THAT(parse_error("logging:\n  level: debug\n   path: x\n"),
             Equals("test.yaml:3:8: invalid YAML: illegal map value"));
  CHECK_THAT(parse_error("a: [1, 2\n"), StartsWith("test.yaml:2:1: invalid YAML: "));
}

TEST_CASE("the top level must be a map", "[config][errors]") {
  CHECK_THAT(parse_error("- a\n- b\n"), Equals("test.yaml:1: the top level must be a map, got a list"));
  CHECK_THAT(parse_error("\n\njust text\n"),
             Equals("test.yaml:3: the top level must be a map, got 'just text'"));
}

TEST_CASE("unknown keys are errors at every level", "[config][errors]") {
  const fs::path path = kDataDir / "config_unknown_key.yaml";
  REQUIRE_THROWS_MATCHES(
      fl::load_config_file(path), fl::ConfigError,
      Catch::Message(path.string() +
                     ":3: unknown key 'stritc' in 'fallback' (expected one of: "
                     "enable_cpu_fallback, enable_generic_kernel, strict, warn_once)"));

  CHECK_THAT(parse_error("logging: {level: info}\ndevice: []\n"),
             Equals("test.yaml:2: unknown key 'device' in the top level (expected one of: "
                    "devices, fallback, logging, precision, plugins)"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    counts: 2\n"),
             Equals("test.yaml:3: unknown key 'counts' in 'devices[0]' (expected one of: "
                    "type, count, memory_fraction, options, pin)"));
  CHECK_THAT(parse_error("logging:\n  file: /tmp/x\n"),
             Equals("test.yaml:2: unknown key 'file' in 'logging' (expected one of: level, path)"));
  CHECK_THAT(parse_error("precision:\n  tf32: true\n"),
             Equals("test.yaml:2: unknown key 'tf32' in 'precision' (expected one of: matmul, "
                    "deterministic)"));
  CHECK_THAT(parse_error("plugins:\n  paths: []\n  path: [/x]\n"),
             Equals("test.yaml:3: unknown key 'path' in 'plugins' (expected one of: paths, "
                    "enable, disable, allow_world_writable, isolated_discovery)"));
}

TEST_CASE("duplicate keys and non-string keys", "[config][errors]") {
  CHECK_THAT(parse_error("fallback:\n  strict: true\n  strict: false\n"),
             Equals("test.yaml:3: duplicate key 'strict' in 'fallback'"));
  CHECK_THAT(parse_error("logging: {}\nlogging: {}\n"),
             Equals("test.yaml:2: duplicate key 'logging' in the top level"));
  CHECK_THAT(parse_error("fallback:\n  ? [a, b]\n  : true\n"),
             Equals("test.yaml:2: keys in 'fallback' must be strings"));
}

TEST_CASE("wrong types name the key path and the value", "[config][errors]") {
  const fs::path path = kDataDir / "config_bad_count.yaml";
  REQUIRE_THROWS_MATCHES(
      fl::load_config_file(path), fl::ConfigError,
      Catch::Message(path.string() + ":3: 'devices[0].count' must be an integer, got 'abc'"));

  CHECK_THAT(parse_error("devices:\n  - type: cpu\n  - type: cuda\n    count: 1.5\n"),
             Equals("test.yaml:4: 'devices[1].count' must be an integer, got '1.5'"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    count: [1]\n"),
             Equals("test.yaml:3: 'devices[0].count' must be an integer, got a list"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    memory_fraction: half\n"),
             Equals("test.yaml:3: 'devices[0].memory_fraction' must be a number, got 'half'"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    options: {a: 1}\n"),
             Equals("test.yaml:3: 'devices[0].options' must be a string, got a map"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    pin: cpu:0\n"),
             Equals("test.yaml:3: 'devices[0].pin' must be a list of strings, got 'cpu:0'"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    pin: [[a]]\n"),
             Equals("test.yaml:3: 'devices[0].pin[0]' must be a string, got a list"));
  CHECK_THAT(parse_error("devices: {type: cpu}\n"),
             Equals("test.yaml:1: 'devices' must be a list, got a map"));
  CHECK_THAT(parse_error("devices:\n  - cpu\n"),
             Equals("test.yaml:2: 'devices[0]' must be a map, got 'cpu'"));
  CHECK_THAT(parse_error("fallback:\n  strict: maybe\n"),
             Equals("test.yaml:2: 'fallback.strict' must be true or false, got 'maybe'"));
  CHECK_THAT(parse_error("fallback: [strict]\n"),
             Equals("test.yaml:1: 'fallback' must be a map, got a list"));
  CHECK_THAT(parse_error("precision:\n  deterministic: 1\n"),
             Equals("test.yaml:2: 'precision.deterministic' must be true or false, got '1'"));
  CHECK_THAT(parse_error("plugins:\n  enable: cpu\n"),
             Equals("test.yaml:2: 'plugins.enable' must be a list of strings, got 'cpu'"));
  CHECK_THAT(parse_error("plugins:\n  allow_world_writable: [true]\n"),
             Equals("test.yaml:2: 'plugins.allow_world_writable' must be true or false, got a list"));
  CHECK_THAT(parse_error("logging:\n  path: [a]\n"),
             Equals("test.yaml:2: 'logging.path' must be a string, got a list"));
}

TEST_CASE("out-of-range values", "[config][errors]") {
  const fs::path path = kDataDir / "config_bad_fraction.yaml";
  REQUIRE_THROWS_MATCHES(
      fl::load_config_file(path), fl::ConfigError,
      Catch::Message(path.string() +
                     ":4: 'devices[1].memory_fraction' must be in (0, 1], got 1.5"));

  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    memory_fraction: 0\n"),
             Equals("test.yaml:3: 'devices[0].memory_fraction' must be in (0, 1], got 0"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    memory_fraction: -0.25\n"),
             Equals("test.yaml:3: 'devices[0].memory_fraction' must be in (0, 1], got -0.25"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    count: -2\n"),
             Equals("test.yaml:3: 'devices[0].count' must be -1 (all) or >= 0, got -2"));
  CHECK_THAT(parse_error("logging:\n  path: /x\n  level: verbose\n"),
             Equals("test.yaml:3: 'logging.level' must be one of trace, debug, info, warn, "
                    "error, off, got 'verbose'"));
  CHECK_THAT(parse_error("precision: {matmul: tf32}\n"),
             Equals("test.yaml:1: 'precision.matmul' must be one of highest, high, medium, "
                    "got 'tf32'"));
}

TEST_CASE("device entries: type required and unique, pins unique", "[config][errors]") {
  CHECK_THAT(parse_error("devices:\n  - count: 1\n"),
             Equals("test.yaml:2: 'devices[0]' needs a 'type'"));
  CHECK_THAT(parse_error("devices:\n  - type: ''\n"),
             Equals("test.yaml:2: 'devices[0].type' must be a non-empty string"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n  - type: cuda\n  - type: cpu\n"),
             Equals("test.yaml:4: 'devices[2].type' repeats devices[0] (type 'cpu')"));
  CHECK_THAT(parse_error("devices:\n  - type: cpu\n    pin:\n      - cpu:0\n      - cpu:0\n"),
             Equals("test.yaml:5: 'devices[0].pin' lists 'cpu:0' twice"));
  CHECK_THAT(parse_error("plugins:\n  paths: [/a, '']\n"),
             Equals("test.yaml:2: 'plugins.paths[1]' must be a non-empty string"));
}

TEST_CASE("load_config_file: unreadable paths", "[config][errors]") {
  TempDir dir;
  const fs::path missing = dir.path() / "nope.yaml";
  REQUIRE_THROWS_MATCHES(
      fl::load_config_file(missing), fl::ConfigError,
      Catch::Message(missing.string() + ": cannot read config file: No such file or directory"));
  REQUIRE_THROWS_MATCHES(
      fl::load_config_file(dir.path()), fl::ConfigError,
      Catch::Message(dir.path().string() + ": cannot read config file: it is a directory"));
}

TEST_CASE("environment overrides each field", "[config][env]") {
  CleanEnvironment env;
  fl::Config c = fl::load_config_file(kDataDir / "config_full.yaml");

  SECTION("no variable set changes nothing") {
    fl::apply_env_overrides(c, false);
    CHECK(c.logging.level == "debug");
    CHECK(c.devices[0].memory_fraction == 0.5);
    CHECK(c.plugins.enable == std::vector<std::string>{"cpu"});
  }
  SECTION("every variable") {
    env.set("FL_LOG_LEVEL", "trace");
    env.set("FL_LOG_FILE", "/tmp/other.log");
    env.set("FL_FALLBACK_STRICT", "0");
    env.set("FL_ENABLE_CPU_FALLBACK", "TRUE");
    env.set("FL_ENABLE_GENERIC_KERNEL", "1");
    env.set("FL_MEMORY_FRACTION", "0.25");
    env.set("FL_MATMUL_PRECISION", "medium");
    env.set("FL_DETERMINISTIC", "false");
    env.set("FL_PLUGINS_ENABLE", "cpu, cuda,,hip ");
    env.set("FL_PLUGINS_DISABLE", "fake");
    fl::apply_env_overrides(c, false);
    CHECK(c.logging.level == "trace");
    CHECK(c.logging.path == "/tmp/other.log");
    CHECK_FALSE(c.fallback.strict);
    CHECK(c.fallback.enable_cpu_fallback);
    CHECK(c.fallback.enable_generic_kernel);
    CHECK_FALSE(c.fallback.warn_once);  // no variable for it: the file's value stays
    REQUIRE(c.devices.size() == 2);     // every existing selection gets the fraction
    CHECK(c.devices[0].memory_fraction == 0.25);
    CHECK(c.devices[1].memory_fraction == 0.25);
    CHECK(c.precision.matmul == "medium");
    CHECK_FALSE(c.precision.deterministic);
    CHECK(c.plugins.enable == std::vector<std::string>{"cpu", "cuda", "hip"});
    CHECK(c.plugins.disable == std::vector<std::string>{"fake"});
    CHECK(c.plugins.paths == std::vector<std::string>{"/opt/x", "/opt/y"});
  }
  SECTION("an empty value counts as unset") {
    env.set("FL_LOG_LEVEL", "");
    env.set("FL_PLUGINS_ENABLE", "");
    fl::apply_env_overrides(c, false);
    CHECK(c.logging.level == "debug");
    CHECK(c.plugins.enable == std::vector<std::string>{"cpu"});
  }
}

TEST_CASE("FL_MEMORY_FRACTION adds a '*' selection when there is none", "[config][env]") {
  CleanEnvironment env;
  env.set("FL_MEMORY_FRACTION", "0.75");
  fl::Config c;
  fl::apply_env_overrides(c, false);
  REQUIRE(c.devices.size() == 1);
  CHECK(c.devices[0].type == "*");
  CHECK(c.devices[0].count == -1);
  CHECK(c.devices[0].memory_fraction == 0.75);
  CHECK(c.selection_for("cuda") == &c.devices[0]);
}

TEST_CASE("bad environment values name the variable", "[config][env][errors]") {
  CleanEnvironment env;
  fl::Config c;
  SECTION("memory fraction out of range") {
    env.set("FL_MEMORY_FRACTION", "2");
    CHECK_THAT(env_error(c),
               Equals("environment variable FL_MEMORY_FRACTION: must be in (0, 1], got 2"));
  }
  SECTION("memory fraction not a number") {
    env.set("FL_MEMORY_FRACTION", "0.5x");
    CHECK_THAT(env_error(c),
               Equals("environment variable FL_MEMORY_FRACTION: must be a number, got '0.5x'"));
  }
  SECTION("boolean") {
    env.set("FL_FALLBACK_STRICT", "2");
    CHECK_THAT(env_error(c), Equals("environment variable FL_FALLBACK_STRICT: must be 0, 1, "
                                    "true or false, got '2'"));
  }
  SECTION("log level") {
    env.set("FL_LOG_LEVEL", "loud");
    CHECK_THAT(env_error(c), Equals("environment variable FL_LOG_LEVEL: must be one of trace, "
                                    "debug, info, warn, error, off, got 'loud'"));
  }
  SECTION("matmul precision") {
    env.set("FL_MATMUL_PRECISION", "low");
    CHECK_THAT(env_error(c), Equals("environment variable FL_MATMUL_PRECISION: must be one of "
                                    "highest, high, medium, got 'low'"));
  }
  SECTION("deterministic") {
    env.set("FL_DETERMINISTIC", "sometimes");
    CHECK_THAT(env_error(c), StartsWith("environment variable FL_DETERMINISTIC: "));
  }
}

TEST_CASE("secure execution ignores every FL_* variable", "[config][env]") {
  CleanEnvironment env;
  env.set("FL_LOG_LEVEL", "trace");
  env.set("FL_MEMORY_FRACTION", "2");  // would be an error if read
  env.set("FL_PLUGINS_ENABLE", "evil");
  fl::Config c;
  REQUIRE_NOTHROW(fl::apply_env_overrides(c, true));
  require_defaults(c);
}

TEST_CASE("load_config: FL_CONFIG, then ~/.torch_fl/config.yaml, then defaults",
          "[config][load]") {
  CleanEnvironment env;
  TempDir home;
  env.set("HOME", home.path().string());

  SECTION("no file at home: defaults") {
    fl::Config c = fl::load_config(false);
    require_defaults(c);
    CHECK(c.source.empty());
  }
  SECTION("the file at home is read, then env overrides apply") {
    const fs::path file =
        home.write(".torch_fl/config.yaml", "logging: {level: info}\nprecision: {matmul: high}\n");
    env.set("FL_MATMUL_PRECISION", "medium");
    fl::Config c = fl::load_config(false);
    CHECK(c.source == file.string());
    CHECK(c.logging.level == "info");
    CHECK(c.precision.matmul == "medium");
  }
  SECTION("an invalid file at home is an error") {
    const fs::path file = home.write(".torch_fl/config.yaml", "logging: {levl: info}\n");
    REQUIRE_THROWS_MATCHES(fl::load_config(false), fl::ConfigError,
                           Catch::Message(file.string() +
                                          ":1: unknown key 'levl' in 'logging' (expected one "
                                          "of: level, path)"));
  }
  SECTION("FL_CONFIG wins over the file at home") {
    home.write(".torch_fl/config.yaml", "logging: {level: info}\n");
    const fs::path full = kDataDir / "config_full.yaml";
    env.set("FL_CONFIG", full.string());
    fl::Config c = fl::load_config();
    CHECK(c.source == full.string());
    CHECK(c.logging.level == "debug");
  }
  SECTION("a missing file named by FL_CONFIG is an error") {
    const fs::path missing = home.path() / "missing.yaml";
    env.set("FL_CONFIG", missing.string());
    REQUIRE_THROWS_MATCHES(
        fl::load_config(), fl::ConfigError,
        Catch::Message("FL_CONFIG names '" + missing.string() + "', which does not exist"));
  }
  SECTION("secure execution ignores FL_CONFIG and $HOME") {
    home.write(".torch_fl/config.yaml", "logging: {level: info}\n");
    env.set("FL_CONFIG", (home.path() / "missing.yaml").string());
    env.set("FL_LOG_LEVEL", "trace");
    fl::Config c = fl::load_config(true);
    CHECK(c.source != (home.path() / ".torch_fl/config.yaml").string());
    CHECK(c.logging.level != "trace");
  }
}
