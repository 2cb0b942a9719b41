// Tests of core/plugin_discovery: explicit files, FL_PLUGIN_PATH directories and files, config
// paths, their order, de-duplication by real path, the world-writable refusal, and when the
// default directories are used. The candidate files are empty files: discovery never opens them.
#include "config.h"
#include "plugin_discovery.h"
#include "scoped_env.hpp"

#include <catch2/catch.hpp>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using fl::PluginCandidate;
using fl::PluginsConfig;
using fl::test::ScopedEnv;

// A private temporary tree:
//   a/libfl_two.so a/libfl_one.so a/other.so a/libfl_note.txt a/sub/libfl_sub.so
//   a/sub/deeper/libfl_deep.so b/libfl_b.so link_to_one.so -> a/libfl_one.so empty/
class Tree {
 public:
  Tree() {
    std::string pattern = (fs::temp_directory_path() / "fl_discovery_XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    root = fs::canonical(pattern);
    for (const char* d : {"a", "a/sub", "a/sub/deeper", "b", "empty"}) {
      fs::create_directories(root / d);
      fs::permissions(root / d, fs::perms::owner_all | fs::perms::group_read |
                                    fs::perms::group_exec | fs::perms::others_read |
                                    fs::perms::others_exec);
    }
    for (const char* f : {"a/libfl_two.so", "a/libfl_one.so", "a/other.so", "a/libfl_note.txt",
                          "a/sub/libfl_sub.so", "a/sub/deeper/libfl_deep.so", "b/libfl_b.so"})
      touch(root / f);
    fs::create_symlink(root / "a/libfl_one.so", root / "link_to_one.so");
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  static void touch(const fs::path& p) {
    std::ofstream(p) << "";
    fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                           fs::perms::others_read);
  }
  std::string operator()(const std::string& rel) const { return (root / rel).string(); }

  fs::path root;
};

std::vector<std::string> paths(const std::vector<PluginCandidate>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(c.path.string());
  return out;
}

}  // namespace

TEST_CASE("discovery: FL_PLUGIN_PATH directories give libfl_*.so of the dir and its subdirs, sorted") {
  Tree t;
  ScopedEnv env;
  env.clean_runtime().set("FL_PLUGIN_PATH", t("b") + ":" + t("a"));
  auto found = fl::discover_plugins({}, PluginsConfig{});
  CHECK(paths(found) == std::vector<std::string>{t("b/libfl_b.so"), t("a/libfl_one.so"),
                                                 t("a/libfl_two.so"), t("a/sub/libfl_sub.so")});
  for (const auto& c : found) {
    CHECK(c.origin == "FL_PLUGIN_PATH");
    CHECK(c.refused.empty());
  }
}

TEST_CASE("discovery: a named file is taken whatever its name; empty and missing entries are skipped") {
  Tree t;
  ScopedEnv env;
  env.clean_runtime().set("FL_PLUGIN_PATH", "::" + t("a/other.so") + ":" + t("missing") + ":");
  auto found = fl::discover_plugins({}, PluginsConfig{});
  CHECK(paths(found) == std::vector<std::string>{t("a/other.so")});
}

TEST_CASE("discovery: explicit files, then FL_PLUGIN_PATH, then config paths") {
  Tree t;
  ScopedEnv env;
  env.clean_runtime().set("FL_PLUGIN_PATH", t("b"));
  PluginsConfig config;
  config.paths = {t("a/sub/deeper")};
  auto found = fl::discover_plugins({t("a/libfl_two.so")}, config);
  REQUIRE(found.size() == 3);
  CHECK(found[0].path == t("a/libfl_two.so"));
  CHECK(found[0].origin == "explicit");
  CHECK(found[1].path == t("b/libfl_b.so"));
  CHECK(found[1].origin == "FL_PLUGIN_PATH");
  CHECK(found[2].path == t("a/sub/deeper/libfl_deep.so"));
  CHECK(found[2].origin == "config");
}

TEST_CASE("discovery: the same real path is kept once, at its first position") {
  Tree t;
  ScopedEnv env;
  env.clean_runtime().set("FL_PLUGIN_PATH", t("link_to_one.so") + ":" + t("a") + ":" + t("a/../a/libfl_two.so"));
  auto found = fl::discover_plugins({t("a/libfl_one.so")}, PluginsConfig{});
  CHECK(paths(found) == std::vector<std::string>{t("a/libfl_one.so"), t("a/libfl_two.so"),
                                                 t("a/sub/libfl_sub.so")});
  CHECK(found[0].origin == "explicit");
}

TEST_CASE("discovery: files in world-writable directories, or world-writable files, are refused") {
  Tree t;
  fs::create_directory(t.root / "open");
  Tree::touch(t.root / "open" / "libfl_open.so");
  fs::permissions(t.root / "open", fs::perms::all);  // 0777
  Tree::touch(t.root / "b" / "libfl_shared.so");
  fs::permissions(t.root / "b" / "libfl_shared.so", fs::perms::others_write, fs::perm_options::add);
  ScopedEnv env;
  env.clean_runtime().set("FL_PLUGIN_PATH", t("open") + ":" + t("b"));

  auto found = fl::discover_plugins({}, PluginsConfig{});
  REQUIRE(found.size() == 3);
  CHECK(found[0].path == t("open/libfl_open.so"));
  CHECK_THAT(found[0].refused, Catch::Contains(t("open") + " is writable by other users"));
  CHECK(found[1].path == t("b/libfl_b.so"));
  CHECK(found[1].refused.empty());
  CHECK(found[2].path == t("b/libfl_shared.so"));
  CHECK_THAT(found[2].refused, Catch::Contains("libfl_shared.so is writable by other users"));

  PluginsConfig allow;
  allow.allow_world_writable = true;
  for (const auto& c : fl::discover_plugins({}, allow)) CHECK(c.refused.empty());
}

TEST_CASE("discovery: the default directories are used only when nothing names plugins") {
  Tree t;
  ScopedEnv env;
  env.clean_runtime();
  auto defaults = fl::discover_plugins({}, PluginsConfig{});
  for (const auto& c : defaults) CHECK((c.origin == "install dir" || c.origin == "build dir"));
  const fs::path built_cpu = fs::path(FL_BUILD_PLUGIN_DIR) / "cpu" / "libfl_cpu.so";
  if (fs::exists(built_cpu)) {
    bool has_cpu = false;
    for (const auto& c : defaults) has_cpu |= c.path == fs::canonical(built_cpu);
    CHECK(has_cpu);
  }

  SECTION("an FL_PLUGIN_PATH that holds no plugin gives none, not the defaults") {
    env.set("FL_PLUGIN_PATH", t("empty"));
    CHECK(fl::discover_plugins({}, PluginsConfig{}).empty());
    env.set("FL_PLUGIN_PATH", t("does-not-exist"));
    CHECK(fl::discover_plugins({}, PluginsConfig{}).empty());
  }
  SECTION("an empty FL_PLUGIN_PATH counts as unset") {
    env.set("FL_PLUGIN_PATH", "");
    CHECK(paths(fl::discover_plugins({}, PluginsConfig{})) == paths(defaults));
  }
  SECTION("config paths replace the defaults") {
    PluginsConfig config;
    config.paths = {t("empty")};
    CHECK(fl::discover_plugins({}, config).empty());
  }
}
