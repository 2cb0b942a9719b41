// scoped_env.hpp — sets or unsets environment variables for one test and restores them after.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fl::test {

class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }
  ScopedEnv& set(const std::string& name, const std::string& value) {
    save(name);
    ::setenv(name.c_str(), value.c_str(), 1);
    return *this;
  }
  ScopedEnv& unset(const std::string& name) {
    save(name);
    ::unsetenv(name.c_str());
    return *this;
  }
  // Unsets every variable the runtime reads, so the test sees only what it sets itself.
  ScopedEnv& clean_runtime() {
    for (const char* name : {"FL_PLUGIN_PATH", "FL_CONFIG", "FL_LOG_LEVEL", "FL_LOG_FILE",
                             "FL_FALLBACK_STRICT", "FL_ENABLE_CPU_FALLBACK",
                             "FL_ENABLE_GENERIC_KERNEL", "FL_MEMORY_FRACTION",
                             "FL_MATMUL_PRECISION", "FL_DETERMINISTIC", "FL_PLUGINS_ENABLE",
                             "FL_PLUGINS_DISABLE", "FL_ISOLATED_DISCOVERY", "FL_CPU_DEVICES"})
      unset(name);
    return *this;
  }

 private:
  void save(const std::string& name) {
    const char* v = std::getenv(name.c_str());
    saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace fl::test
