#include "config.h"

#include "log.h"

#include <pwd.h>
#include <sys/auxv.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace fl {
namespace fs = std::filesystem;

const std::vector<std::string>& log_level_names() {
  static const std::vector<std::string> names{"trace", "debug", "info", "warn", "error", "off"};
  return names;
}

const std::vector<std::string>& matmul_precision_names() {
  static const std::vector<std::string> names{"highest", "high", "medium"};
  return names;
}

const DeviceSelection* Config::selection_for(const std::string& plugin_name) const {
  for (const auto& d : devices)
    if (d.type == plugin_name) return &d;
  for (const auto& d : devices)
    if (d.type == "*") return &d;
  return nullptr;
}

std::string Config::plugin_options(const std::string& plugin_name) const {
  const DeviceSelection* d = selection_for(plugin_name);
  return d ? d->options : std::string();
}

namespace {

// ---- value checks shared by the YAML reader and the environment overrides -----------------
// Each returns "" when the value is acceptable, else what is wrong ("must be ..., got ...").

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : separator) + s;
  return out;
}

bool contains(const std::vector<std::string>& items, const std::string& s) {
  return std::find(items.begin(), items.end(), s) != items.end();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_bool(const std::string& text, bool accept_digits, bool& out) {
  const std::string s = lower(text);
  if (s == "true" || s == "yes" || s == "on" || (accept_digits && s == "1")) return out = true, true;
  if (s == "false" || s == "no" || s == "off" || (accept_digits && s == "0"))
    return out = false, true;
  return false;
}

bool parse_int(const std::string& s, int& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && !s.empty();
}

bool parse_double(const std::string& s, double& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out, std::chars_format::general);
  return ec == std::errc() && p == end && !s.empty();
}

std::string check_memory_fraction(const std::string& text, double& out) {
  if (!parse_double(text, out)) return "must be a number, got '" + text + "'";
  if (!(out > 0.0 && out <= 1.0)) return "must be in (0, 1], got " + text;
  return "";
}

std::string check_choice(const std::string& value, const std::vector<std::string>& allowed) {
  if (contains(allowed, value)) return "";
  return "must be one of " + join(allowed) + ", got '" + value + "'";
}

// ---- YAML reader ---------------------------------------------------------------------------

class ConfigReader {
 public:
  explicit ConfigReader(std::string source) : source_(std::move(source)) {}

  Config read(const YAML::Node& root) {
    Config config;
    config.source = source_;
    if (root.IsNull()) return config;  // empty file (or only comments)
    if (!root.IsMap()) fail(root, "the top level must be a map, got " + describe(root));
    check_keys(root, "", {"devices", "fallback", "logging", "precision", "plugins"});
    read_devices(root["devices"], config.devices);
    read_fallback(root["fallback"], config.fallback);
    read_logging(root["logging"], config.logging);
    read_precision(root["precision"], config.precision);
    read_plugins(root["plugins"], config.plugins);
    return config;
  }

 private:
  [[noreturn]] void fail(const YAML::Node& at, const std::string& message) const {
    // Nodes built by the parser carry a 0-based mark; fall back to the last one seen.
    int line = at.IsDefined() && at.Mark().line >= 0 ? at.Mark().line + 1 : last_line_;
    throw ConfigError(source_ + ":" + std::to_string(line) + ": " + message);
  }

  void note(const YAML::Node& node) {
    if (node.IsDefined() && node.Mark().line >= 0) last_line_ = node.Mark().line + 1;
  }

  static std::string describe(const YAML::Node& node) {
    if (node.IsMap()) return "a map";
    if (node.IsSequence()) return "a list";
    if (node.IsScalar()) return "'" + node.Scalar() + "'";
    return "nothing";
  }

  static std::string section_name(const std::string& path) {
    return path.empty() ? "the top level" : "'" + path + "'";
  }

  // Rejects unknown, duplicate and non-string keys of a map.
  void check_keys(const YAML::Node& map, const std::string& path,
                  const std::vector<std::string>& allowed) {
    std::set<std::string> seen;
    for (const auto& entry : map) {
      const YAML::Node& key = entry.first;
      note(key);
      if (!key.IsScalar()) fail(key, "keys in " + section_name(path) + " must be strings");
      const std::string& name = key.Scalar();
      if (!contains(allowed, name))
        fail(key, "unknown key '" + name + "' in " + section_name(path) +
                      " (expected one of: " + join(allowed) + ")");
      if (!seen.insert(name).second)
        fail(key, "duplicate key '" + name + "' in " + section_name(path));
    }
  }

  // A section: absent or empty keeps the defaults; otherwise it must be a map.
  bool open_section(const YAML::Node& node, const std::string& path,
                    const std::vector<std::string>& allowed) {
    if (!node.IsDefined() || node.IsNull()) return false;
    note(node);
    if (!node.IsMap()) fail(node, "'" + path + "' must be a map, got " + describe(node));
    check_keys(node, path, allowed);
    return true;
  }

  const YAML::Node* scalar(const YAML::Node& node, const std::string& path, const char* kind) {
    if (!node.IsDefined()) return nullptr;
    note(node);
    if (!node.IsScalar())
      fail(node, "'" + path + "' must be " + kind + ", got " + describe(node));
    return &node;
  }

  void read_bool(const YAML::Node& node, const std::string& path, bool& out) {
    if (!scalar(node, path, "true or false")) return;
    if (!parse_bool(node.Scalar(), false, out))
      fail(node, "'" + path + "' must be true or false, got '" + node.Scalar() + "'");
  }

  void read_string(const YAML::Node& node, const std::string& path, std::string& out) {
    if (scalar(node, path, "a string")) out = node.Scalar();
  }

  void read_string_list(const YAML::Node& node, const std::string& path,
                        std::vector<std::string>& out) {
    if (!node.IsDefined() || node.IsNull()) return;
    note(node);
    if (!node.IsSequence())
      fail(node, "'" + path + "' must be a list of strings, got " + describe(node));
    out.clear();
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      std::string item;
      read_string(node[i], item_path, item);
      if (item.empty()) fail(node[i], "'" + item_path + "' must be a non-empty string");
      out.push_back(item);
    }
  }

  void read_devices(const YAML::Node& node, std::vector<DeviceSelection>& out) {
    if (!node.IsDefined() || node.IsNull()) return;
    note(node);
    if (!node.IsSequence()) fail(node, "'devices' must be a list, got " + describe(node));
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::string path = "devices[" + std::to_string(i) + "]";
      const YAML::Node entry = node[i];
      note(entry);
      if (!entry.IsMap()) fail(entry, "'" + path + "' must be a map, got " + describe(entry));
      check_keys(entry, path, {"type", "count", "memory_fraction", "options", "pin"});
      out.push_back(read_device(entry, path));
      for (std::size_t j = 0; j + 1 < out.size(); ++j)
        if (out[j].type == out.back().type)
          fail(entry["type"], "'" + path + ".type' repeats devices[" + std::to_string(j) +
                                  "] (type '" + out.back().type + "')");
    }
  }

  DeviceSelection read_device(const YAML::Node& entry, const std::string& path) {
    DeviceSelection d;
    if (!entry["type"].IsDefined()) fail(entry, "'" + path + "' needs a 'type'");
    read_string(entry["type"], path + ".type", d.type);
    if (d.type.empty()) fail(entry["type"], "'" + path + ".type' must be a non-empty string");

    // The node is held here: scalar() returns a pointer to its argument, and a temporary
    // entry["..."] would be gone before the body runs.
    const YAML::Node count = entry["count"];
    if (const YAML::Node* n = scalar(count, path + ".count", "an integer")) {
      if (!parse_int(n->Scalar(), d.count))
        fail(*n, "'" + path + ".count' must be an integer, got '" + n->Scalar() + "'");
      if (d.count < -1)
        fail(*n, "'" + path + ".count' must be -1 (all) or >= 0, got " + n->Scalar());
    }
    const YAML::Node memory_fraction = entry["memory_fraction"];
    if (const YAML::Node* n = scalar(memory_fraction, path + ".memory_fraction",
                                     "a number")) {
      std::string problem = check_memory_fraction(n->Scalar(), d.memory_fraction);
      if (!problem.empty()) fail(*n, "'" + path + ".memory_fraction' " + problem);
    }
    read_string(entry["options"], path + ".options", d.options);
    read_string_list(entry["pin"], path + ".pin", d.pin);
    for (std::size_t i = 0; i < d.pin.size(); ++i)
      if (std::count(d.pin.begin(), d.pin.begin() + i, d.pin[i]) > 0)
        fail(entry["pin"][i], "'" + path + ".pin' lists '" + d.pin[i] + "' twice");
    return d;
  }

  void read_fallback(const YAML::Node& node, FallbackConfig& out) {
    if (!open_section(node, "fallback",
                      {"enable_cpu_fallback", "enable_generic_kernel", "strict", "warn_once"}))
      return;
    read_bool(node["enable_cpu_fallback"], "fallback.enable_cpu_fallback",
              out.enable_cpu_fallback);
    read_bool(node["enable_generic_kernel"], "fallback.enable_generic_kernel",
              out.enable_generic_kernel);
    read_bool(node["strict"], "fallback.strict", out.strict);
    read_bool(node["warn_once"], "fallback.warn_once", out.warn_once);
  }

  void read_logging(const YAML::Node& node, LoggingConfig& out) {
    if (!open_section(node, "logging", {"level", "path"})) return;
    read_string(node["level"], "logging.level", out.level);
    std::string problem = check_choice(out.level, log_level_names());
    if (!problem.empty()) fail(node["level"], "'logging.level' " + problem);
    read_string(node["path"], "logging.path", out.path);
  }

  void read_precision(const YAML::Node& node, PrecisionConfig& out) {
    if (!open_section(node, "precision", {"matmul", "deterministic"})) return;
    read_string(node["matmul"], "precision.matmul", out.matmul);
    std::string problem = check_choice(out.matmul, matmul_precision_names());
    if (!problem.empty()) fail(node["matmul"], "'precision.matmul' " + problem);
    read_bool(node["deterministic"], "precision.deterministic", out.deterministic);
  }

  void read_plugins(const YAML::Node& node, PluginsConfig& out) {
    if (!open_section(node, "plugins",
                      {"paths", "enable", "disable", "allow_world_writable", "isolated_discovery"}))
      return;
    read_string_list(node["paths"], "plugins.paths", out.paths);
    read_string_list(node["enable"], "plugins.enable", out.enable);
    read_string_list(node["disable"], "plugins.disable", out.disable);
    read_bool(node["allow_world_writable"], "plugins.allow_world_writable",
              out.allow_world_writable);
    read_bool(node["isolated_discovery"], "plugins.isolated_discovery", out.isolated_discovery);
  }

  std::string source_;
  int last_line_ = 1;
};

// ---- environment ---------------------------------------------------------------------------

bool secure_execution_mode() { return getauxval(AT_SECURE) != 0; }

const char* const kOverrideNames[] = {
    "FL_CONFIG",          "FL_LOG_LEVEL",        "FL_LOG_FILE",
    "FL_FALLBACK_STRICT", "FL_ENABLE_CPU_FALLBACK", "FL_ENABLE_GENERIC_KERNEL",
    "FL_MEMORY_FRACTION", "FL_MATMUL_PRECISION", "FL_DETERMINISTIC",
    "FL_PLUGINS_ENABLE",  "FL_PLUGINS_DISABLE",  "FL_ISOLATED_DISCOVERY",
};

// The variable's value, or nullptr when unset or empty.
const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

[[noreturn]] void fail_env(const char* name, const std::string& problem) {
  throw ConfigError(std::string("environment variable ") + name + ": " + problem);
}

void env_bool(const char* name, bool& out) {
  const char* v = env_value(name);
  if (v && !parse_bool(v, true, out))
    fail_env(name, std::string("must be 0, 1, true or false, got '") + v + "'");
}

void env_choice(const char* name, const std::vector<std::string>& allowed, std::string& out) {
  const char* v = env_value(name);
  if (!v) return;
  std::string problem = check_choice(v, allowed);
  if (!problem.empty()) fail_env(name, problem);
  out = v;
}

void env_list(const char* name, std::vector<std::string>& out) {
  const char* v = env_value(name);
  if (!v) return;
  out.clear();
  std::stringstream items(v);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    if (first == std::string::npos) continue;  // empty items are skipped
    const auto last = item.find_last_not_of(" \t");
    out.push_back(item.substr(first, last - first + 1));
  }
}

// The effective user's home from the password database (not $HOME), or "".
std::string password_db_home() {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwuid_r(geteuid(), &pw, buffer.data(), buffer.size(), &found) != 0 || !found ||
      !pw.pw_dir)
    return "";
  return pw.pw_dir;
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                      std::to_string(e.mark.column + 1) + ": invalid YAML: " + e.msg);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source_name + ": invalid YAML: " + e.msg);
  }
  return ConfigReader(source_name).read(root);
}

Config load_config_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw ConfigError(path.string() + ": cannot read config file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError(path.string() + ": cannot read config file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path.string() + ": cannot read config file: read error");
  return parse_config(text.str(), path.string());
}

void apply_env_overrides(Config& config) { apply_env_overrides(config, secure_execution_mode()); }

void apply_env_overrides(Config& config, bool secure_execution) {
  if (secure_execution) {
    std::vector<std::string> ignored;
    for (const char* name : kOverrideNames)
      if (std::getenv(name)) ignored.emplace_back(name);
    if (!ignored.empty())
      log().warn("secure-execution (setuid) process: ignoring {}", join(ignored));
    return;
  }
  env_choice("FL_LOG_LEVEL", log_level_names(), config.logging.level);
  if (const char* v = env_value("FL_LOG_FILE")) config.logging.path = v;
  env_bool("FL_FALLBACK_STRICT", config.fallback.strict);
  env_bool("FL_ENABLE_CPU_FALLBACK", config.fallback.enable_cpu_fallback);
  env_bool("FL_ENABLE_GENERIC_KERNEL", config.fallback.enable_generic_kernel);
  if (const char* v = env_value("FL_MEMORY_FRACTION")) {
    double fraction = 1.0;
    std::string problem = check_memory_fraction(v, fraction);
    if (!problem.empty()) fail_env("FL_MEMORY_FRACTION", problem);
    if (config.devices.empty()) {
      DeviceSelection all;
      all.type = "*";
      config.devices.push_back(all);
    }
    for (auto& d : config.devices) d.memory_fraction = fraction;
  }
  env_choice("FL_MATMUL_PRECISION", matmul_precision_names(), config.precision.matmul);
  env_bool("FL_DETERMINISTIC", config.precision.deterministic);
  env_list("FL_PLUGINS_ENABLE", config.plugins.enable);
  env_list("FL_PLUGINS_DISABLE", config.plugins.disable);
  env_bool("FL_ISOLATED_DISCOVERY", config.plugins.isolated_discovery);
}

Config load_config() { return load_config(secure_execution_mode()); }

Config load_config(bool secure_execution) {
  Config config;
  const char* named = secure_execution ? nullptr : env_value("FL_CONFIG");
  if (named) {
    if (!fs::exists(fs::path(named)))
      throw ConfigError(std::string("FL_CONFIG names '") + named + "', which does not exist");
    config = load_config_file(named);
  } else {
    const char* home_env = secure_execution ? nullptr : env_value("HOME");
    const std::string home = home_env ? home_env : password_db_home();
    if (!home.empty()) {
      const fs::path path = fs::path(home) / ".torch_fl" / "config.yaml";
      std::error_code ec;
      if (fs::exists(path, ec)) config = load_config_file(path);
    }
  }
  apply_env_overrides(config, secure_execution);
  return config;
}

}  // namespace fl
