// config.h — Torch-FL's configuration: which devices to expose, fallback policy, logging,
// matmul precision and plugin search settings.
//
// Read from YAML (all sections and keys optional; unknown keys are errors at every level):
//
//   devices:                       # empty or absent = every device of every plugin
//     - type: cpu                  # plugin name, or "*" for every plugin (required)
//       count: 2                   # -1 (default) = all devices of that type
//       memory_fraction: 0.5       # cap of the caching allocator, in (0, 1]
//       options: "devices=2"       # passed to the plugin's init as-is
//       pin: ["cpu:1", "cpu:0"]    # stable ids in the order they must get fl:N
//   fallback: {enable_cpu_fallback: true, enable_generic_kernel: true, strict: false,
//              warn_once: true}
//   logging: {level: warn, path: /tmp/fl.log}   # trace|debug|info|warn|error|off; "" = stderr
//   precision: {matmul: highest, deterministic: false}   # highest|high|medium
//   plugins: {paths: [/opt/x], enable: [cpu], disable: [hip], allow_world_writable: false,
//             isolated_discovery: false}
//
// A section given with no value (`fallback:`) keeps its defaults. Booleans are true/false
// (yes/no and on/off are also accepted). Two `devices` entries of the same type are an error.
//
// Environment overrides (applied after the file; an empty value counts as unset):
//   FL_CONFIG                 the file to read instead of ~/.torch_fl/config.yaml
//   FL_LOG_LEVEL              logging.level
//   FL_LOG_FILE               logging.path
//   FL_FALLBACK_STRICT        fallback.strict                 (0, 1, true, false, yes, no, on, off)
//   FL_ENABLE_CPU_FALLBACK    fallback.enable_cpu_fallback    (same)
//   FL_ENABLE_GENERIC_KERNEL  fallback.enable_generic_kernel  (same)
//   FL_MEMORY_FRACTION        memory_fraction of every devices entry; adds a "*" entry if none
//   FL_MATMUL_PRECISION       precision.matmul
//   FL_DETERMINISTIC          precision.deterministic         (boolean as above)
//   FL_PLUGINS_ENABLE         plugins.enable, comma-separated (replaces the file's list)
//   FL_PLUGINS_DISABLE        plugins.disable, comma-separated (replaces the file's list)
//   FL_ISOLATED_DISCOVERY     plugins.isolated_discovery      (boolean as above)
// In a setuid/setgid (secure-execution, AT_SECURE) process FL_CONFIG, $HOME and every FL_*
// override are ignored with a warning; the file read is then the effective user's
// ~/.torch_fl/config.yaml from the password database.
#pragma once

#include "error.h"

#include <filesystem>
#include <string>
#include <vector>

namespace fl {

// One entry of `devices:`.
struct DeviceSelection {
  std::string type;                // plugin name, e.g. "cpu", "cuda"; "*" for all
  int count = -1;                  // max logical devices of this type; -1 = all
  double memory_fraction = 1.0;    // cap of the caching allocator, (0, 1]
  std::vector<std::string> pin;    // optional: stable ids in the order they must get fl:N
  std::string options;             // passed to the plugin's init as-is, e.g. "devices=2"
};

struct FallbackConfig {
  bool enable_cpu_fallback = true;
  bool enable_generic_kernel = true;
  bool strict = false;
  bool warn_once = true;
};

struct LoggingConfig {
  std::string level = "warn";  // trace, debug, info, warn, error or off
  std::string path;            // "" = stderr
};

struct PrecisionConfig {
  // highest|high|medium: "high"/"medium" let float32 GEMM use TF32-like fast paths.
  std::string matmul = "highest";
  bool deterministic = false;
};

struct PluginsConfig {
  std::vector<std::string> paths;
  std::vector<std::string> enable;
  std::vector<std::string> disable;
  bool allow_world_writable = false;
  // Probe each candidate in a forked child (open + init + shutdown) before loading it
  // in-process; a plugin that crashes there is skipped (core/isolated_probe.h).
  bool isolated_discovery = false;
};

struct Config {
  std::vector<DeviceSelection> devices;  // empty = every device of every plugin
  FallbackConfig fallback;
  LoggingConfig logging;
  PrecisionConfig precision;
  PluginsConfig plugins;
  std::string source;  // file it was read from, or "" for defaults

  // Options for a plugin by name: the `options` of selection_for(plugin_name), or "".
  std::string plugin_options(const std::string& plugin_name) const;
  // The entry whose type is plugin_name; failing that the first "*" entry; else nullptr.
  const DeviceSelection* selection_for(const std::string& plugin_name) const;
};

// Path: $FL_CONFIG if set, else ~/.torch_fl/config.yaml ($HOME). Missing default file (or no
// home directory) = defaults; a missing file named by FL_CONFIG is an error. Then env
// overrides are applied. Throws ConfigError.
Config load_config();
// The same with the secure-execution decision made by the caller (tests use this).
Config load_config(bool secure_execution);

Config load_config_file(const std::filesystem::path& path);  // throws ConfigError
// Parses YAML text; source_name prefixes error messages and becomes Config::source.
Config parse_config(const std::string& yaml_text, const std::string& source_name);

// Applies the FL_* variables listed above. Throws ConfigError on a bad value.
void apply_env_overrides(Config& config);
// With secure_execution = true every FL_* variable is ignored (a warning names those set).
void apply_env_overrides(Config& config, bool secure_execution);

// The accepted values of logging.level and precision.matmul, for messages and checks.
const std::vector<std::string>& log_level_names();
const std::vector<std::string>& matmul_precision_names();

}  // namespace fl
