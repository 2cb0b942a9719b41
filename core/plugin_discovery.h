// plugin_discovery.h — where plugin files come from, in order:
//   1. files named explicitly (tests, tools),
//   2. FL_PLUGIN_PATH: ':'-separated files or directories (ignored in setuid processes),
//   3. `plugins.paths` of the config,
//   4. the install dir (<prefix>/lib/torch_fl/plugins), then this build tree's plugins/.
// A directory contributes every `libfl_*.so` in it and in its immediate subdirectories,
// sorted by name (in the build tree, all but the vendor template `libfl_template.so`). The same real path is kept once. Files or directories writable by other
// users are refused unless `plugins.allow_world_writable` is set.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fl {

struct PluginsConfig;

struct PluginCandidate {
  std::filesystem::path path;  // as found (canonical when it exists)
  std::string origin;          // "explicit", "FL_PLUGIN_PATH", "config", "install dir", "build dir"
  std::string refused;         // non-empty: why this file must not be loaded
};

std::vector<PluginCandidate> discover_plugins(const std::vector<std::string>& explicit_files,
                                              const PluginsConfig& config);

// True when the process runs setuid/setgid or otherwise in secure-execution mode.
bool is_secure_execution();

}  // namespace fl
