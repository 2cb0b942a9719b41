// doctor.cpp — the fl-smi --doctor checks.
#include "doctor.h"

#include "config.h"
#include "error.h"

#include <glob.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace fl::smi {
namespace {

namespace fs = std::filesystem;

void check_plugin_path(std::vector<Check>& out) {
  const char* env = std::getenv("FL_PLUGIN_PATH");
  if (env == nullptr || *env == '\0') {
    out.push_back({"FL_PLUGIN_PATH", "info", "not set: the install dir and the build tree's plugins/ are searched"});
    return;
  }
  std::stringstream items(env);
  std::string item;
  while (std::getline(items, item, ':')) {
    if (item.empty()) continue;
    const std::string name = "FL_PLUGIN_PATH entry " + item;
    std::error_code ec;
    if (!fs::exists(item, ec)) {
      out.push_back({name, "fail", "does not exist"});
    } else if (fs::is_directory(item, ec)) {
      if (::access(item.c_str(), R_OK | X_OK) != 0)
        out.push_back({name, "fail", "directory is not readable (needs r and x)"});
      else
        out.push_back({name, "ok", "readable directory"});
    } else if (::access(item.c_str(), R_OK) != 0) {
      out.push_back({name, "fail", "file is not readable"});
    } else {
      out.push_back({name, "ok", "readable file"});
    }
  }
}

void check_config(const Inventory& inv, std::vector<Check>& out) {
  try {
    Config config = load_config();
    out.push_back({"config", "ok", config.source.empty() ? "no config file; defaults" : "parsed " + config.source});
  } catch (const ConfigError& e) {
    out.push_back({"config", "fail", e.what()});
  }
  (void)inv;
}

void check_plugins(const Inventory& inv, std::vector<Check>& out) {
  int loaded = 0;
  for (const auto& p : inv.plugins) {
    if (p.loaded) {
      ++loaded;
      out.push_back({"plugin " + p.name, "ok", p.path + ": " + std::to_string(p.devices) + " device(s)"});
    } else if (p.step == "select") {
      out.push_back({"plugin " + p.path, "info", "not selected: " + p.reason});
    } else {
      const bool no_device = p.reason.rfind("no device", 0) == 0;
      out.push_back({"plugin " + p.path, no_device ? "info" : "warn", "skipped at " + p.step + ": " + p.reason});
    }
  }
  if (loaded == 0) out.push_back({"plugins", "fail", "no plugin loaded: Torch-FL has no device"});
  if (inv.devices.empty() && loaded > 0) out.push_back({"devices", "fail", "plugins loaded but no device selected"});
}

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

void check_device_nodes(std::vector<Check>& out) {
  struct Vendor {
    const char* name;
    std::vector<const char*> patterns;
  };
  const Vendor vendors[] = {
      {"NVIDIA", {"/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm"}},
      {"AMD (ROCm)", {"/dev/kfd", "/dev/dri/renderD*"}},
      {"Huawei Ascend", {"/dev/davinci[0-9]*", "/dev/davinci_manager"}},
  };
  for (const auto& v : vendors) {
    std::vector<std::string> present, denied;
    for (const char* pattern : v.patterns)
      for (const auto& node : glob_paths(pattern)) {
        present.push_back(node);
        if (::access(node.c_str(), R_OK | W_OK) != 0) denied.push_back(node);
      }
    const std::string name = std::string("/dev nodes: ") + v.name;
    if (present.empty()) {
      out.push_back({name, "info", "none present (no such device or driver on this machine)"});
    } else if (!denied.empty()) {
      std::string list;
      for (const auto& n : denied) list += (list.empty() ? "" : ", ") + n;
      out.push_back({name, "fail", "present but not readable and writable by this user: " + list +
                                       " (add the user to the device's group, e.g. video/render)"});
    } else {
      out.push_back({name, "ok", std::to_string(present.size()) + " node(s) accessible"});
    }
  }
}

void check_log(std::vector<Check>& out) {
  Config config;
  try {
    config = load_config();
  } catch (const ConfigError&) {
    // Reported by check_config; the defaults (stderr) apply.
  }
  const std::string level = config.logging.level;
  if (config.logging.path.empty()) {
    out.push_back({"log", "info", "level " + level + ", to stderr (set logging.path or FL_LOG_FILE for a file)"});
    return;
  }
  const fs::path path = config.logging.path;
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  if (fs::exists(path, ec) ? ::access(path.c_str(), W_OK) == 0 : ::access(dir.c_str(), W_OK | X_OK) == 0)
    out.push_back({"log", "ok", "level " + level + ", appended to " + path.string()});
  else
    out.push_back({"log", "fail", "level " + level + ", but " + path.string() + " cannot be written"});
}

}  // namespace

std::vector<Check> run_doctor(const Inventory& inventory) {
  std::vector<Check> out;
  check_plugin_path(out);
  check_config(inventory, out);
  check_plugins(inventory, out);
  check_device_nodes(out);
  check_log(out);
  return out;
}

}  // namespace fl::smi
