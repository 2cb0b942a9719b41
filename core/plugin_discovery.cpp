#include "plugin_discovery.h"

#include "config.h"
#include "log.h"

#include <sys/auxv.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

namespace fl {
namespace fs = std::filesystem;

bool is_secure_execution() { return getauxval(AT_SECURE) != 0; }

namespace {

bool is_plugin_file_name(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.rfind("libfl_", 0) == 0 && p.extension() == ".so";
}

// "" when acceptable, else the reason.
std::string writable_by_others(const fs::path& p) {
  struct stat st {};
  for (const fs::path& q : {p, p.parent_path()}) {
    if (q.empty() || ::stat(q.c_str(), &st) != 0) continue;
    if (st.st_mode & S_IWOTH) {
      // A sticky world-writable directory (/tmp) still lets others replace nothing of ours
      // only if they cannot rename over it; we refuse it anyway, as ld.so does for
      // untrusted paths.
      return q.string() + " is writable by other users";
    }
  }
  return "";
}

void add_directory(const fs::path& dir, const std::string& origin,
                   std::vector<PluginCandidate>& out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    log().debug("discovery: {} '{}' is not a directory; skipped", origin, dir.string());
    return;
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && is_plugin_file_name(entry.path())) {
      files.push_back(entry.path());
    } else if (entry.is_directory(ec)) {
      for (const auto& sub : fs::directory_iterator(entry.path(), ec))
        if (sub.is_regular_file(ec) && is_plugin_file_name(sub.path())) files.push_back(sub.path());
    }
  }
  std::sort(files.begin(), files.end());
  if (origin == "build dir") {
    // The build tree also holds the vendor template (plugins/template), a sample for plugin
    // authors rather than a device for users: it loads only when named explicitly.
    std::erase_if(files, [](const fs::path& f) { return f.filename() == "libfl_template.so"; });
  }
  log().debug("discovery: {} '{}': {} plugin file(s)", origin, dir.string(), files.size());
  for (auto& f : files) out.push_back({f, origin, ""});
}

void add_entry(const std::string& entry, const std::string& origin,
               std::vector<PluginCandidate>& out) {
  if (entry.empty()) return;
  std::error_code ec;
  fs::path p(entry);
  if (fs::is_directory(p, ec)) {
    add_directory(p, origin, out);
  } else if (fs::exists(p, ec)) {
    out.push_back({p, origin, ""});
  } else {
    log().warn("discovery: {} entry '{}' does not exist; skipped", origin, entry);
  }
}

}  // namespace

std::vector<PluginCandidate> discover_plugins(const std::vector<std::string>& explicit_files,
                                              const PluginsConfig& config) {
  std::vector<PluginCandidate> found;
  for (const auto& f : explicit_files) add_entry(f, "explicit", found);

  // Something more specific named where plugins are: explicit files, a non-empty
  // FL_PLUGIN_PATH (honoured), or config paths. Then the default directories are not used,
  // even when the named places hold no plugin, so FL_PLUGIN_PATH selects exactly what a user
  // points it at (an empty or mistyped directory gives no plugins, not the defaults).
  bool named = !explicit_files.empty() || !config.paths.empty();
  const char* env = std::getenv("FL_PLUGIN_PATH");
  if (env != nullptr && *env != '\0' && is_secure_execution()) {
    log().warn("discovery: FL_PLUGIN_PATH ignored in a setuid/secure-execution process");
  } else if (env != nullptr && *env != '\0') {
    named = true;
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':')) add_entry(item, "FL_PLUGIN_PATH", found);
  }
  for (const auto& p : config.paths) add_entry(p, "config", found);
  if (!named) {
    add_directory(FL_PLUGIN_INSTALL_DIR, "install dir", found);
    add_directory(FL_BUILD_PLUGIN_DIR, "build dir", found);
  }

  std::vector<PluginCandidate> unique;
  std::set<fs::path> seen;
  for (auto& c : found) {
    std::error_code ec;
    fs::path real = fs::canonical(c.path, ec);
    if (!ec) c.path = real;
    if (!seen.insert(c.path).second) {
      log().debug("discovery: '{}' listed twice; kept once", c.path.string());
      continue;
    }
    if (!config.allow_world_writable) c.refused = writable_by_others(c.path);
    unique.push_back(std::move(c));
  }
  return unique;
}

}  // namespace fl
