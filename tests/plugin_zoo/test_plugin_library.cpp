// test_plugin_library.cpp — PluginLibrary against the stub and the broken-plugin zoo.
#include <catch2/catch.hpp>

#include "log.h"
#include "plugin_library.h"

#include <spdlog/sinks/ostream_sink.h>

#include <filesystem>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using fl::LoadStep;
using fl::PluginLibrary;
using fl::PluginLoadError;

fs::path zoo(const std::string& name) { return fs::path(FL_ZOO_DIR) / ("libfl_" + name + ".so"); }

std::string stub_call_log(const PluginLibrary& plugin) {
  auto lookup = plugin.entry(&fl_device_ops::get_proc_address);
  REQUIRE(lookup != nullptr);
  auto fn = reinterpret_cast<const char* (*)()>(lookup("stub.call_log"));
  REQUIRE(fn != nullptr);
  return fn();
}

// Captures the core logger's output at debug level for the scope of one test.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    old_level_ = fl::log().level();
    fl::log().sinks().push_back(sink_);
    fl::log().set_level(spdlog::level::debug);
  }
  ~LogCapture() {
    fl::log().sinks().pop_back();
    fl::log().set_level(old_level_);
  }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum old_level_;
};

// Expects open() to fail at `step` with `fragment` in the reason.
void expect_open_fails(const fs::path& file, LoadStep step, const std::string& fragment) {
  INFO("plugin " << file);
  try {
    PluginLibrary::open(file);
    FAIL("open succeeded");
  } catch (const PluginLoadError& e) {
    CHECK(e.step() == step);
    CHECK_THAT(e.reason(), Catch::Contains(fragment));
    CHECK_THAT(std::string(e.what()), Catch::Contains(fl::to_string(step)));
  }
}

// Expects open() to succeed and initialize() to fail at `step` with `fragments` in the reason.
void expect_initialize_fails(const fs::path& file, LoadStep step, std::initializer_list<std::string> fragments) {
  INFO("plugin " << file);
  auto plugin = PluginLibrary::open(file);
  try {
    plugin->initialize("");
    FAIL("initialize succeeded");
  } catch (const PluginLoadError& e) {
    CHECK(e.step() == step);
    for (const auto& fragment : fragments) CHECK_THAT(e.reason(), Catch::Contains(fragment));
  }
  CHECK_FALSE(plugin->initialized());
}

}  // namespace

TEST_CASE("load steps have readable names") {
  CHECK(std::string(fl::to_string(LoadStep::Open)) == "open");
  CHECK(std::string(fl::to_string(LoadStep::EntrySymbol)) == "entry symbol");
  CHECK(std::string(fl::to_string(LoadStep::RequiredEntries)) == "required entries");
  CHECK(std::string(fl::to_string(LoadStep::Kernels)) == "kernels");
}

TEST_CASE("the stub opens without side effects and reports its identity") {
  LogCapture capture;
  auto plugin = PluginLibrary::open(FL_STUB_PLUGIN);
  CHECK(plugin->name() == "stub");
  CHECK(plugin->version() == "1.0.0-stub");
  CHECK(plugin->abi_major() == FL_ABI_MAJOR);
  CHECK(plugin->abi_minor() == FL_ABI_MINOR);
  CHECK(plugin->path() == fs::canonical(FL_STUB_PLUGIN));
  CHECK(plugin->ops().struct_size == sizeof(fl_device_ops));
  CHECK_FALSE(plugin->initialized());
  // The linker's default build-id is a 160-bit hash: 40 hex digits.
  CHECK(plugin->build_id().size() == 40);
  CHECK(plugin->build_id().find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(stub_call_log(*plugin).empty());
  const std::string log = capture.text();
  CHECK_THAT(log, Catch::Contains(plugin->path().string() + ": opened"));
  CHECK_THAT(log, Catch::Contains("ABI 1." + std::to_string(FL_ABI_MINOR) + " accepted"));
}

TEST_CASE("the stub initializes, lists devices and kernels in call order, and shuts down once") {
  LogCapture capture;
  auto plugin = PluginLibrary::open(FL_STUB_PLUGIN);
  plugin->initialize("devices=3;ids=card-c,card-a,card-b");
  REQUIRE(plugin->initialized());
  REQUIRE(plugin->device_count() == 3);
  CHECK(std::string(plugin->devices()[0].stable_id) == "card-c");
  CHECK(std::string(plugin->devices()[1].stable_id) == "card-a");
  CHECK(std::string(plugin->devices()[2].stable_id) == "card-b");
  CHECK(plugin->devices()[1].alignment == 64);
  CHECK(plugin->devices()[2].struct_size == sizeof(fl_device_properties));

  REQUIRE(plugin->kernels().size() == 3);
  CHECK(std::string(plugin->kernels()[0].op) == "aten::add.out");
  CHECK(std::string(plugin->kernels()[1].op) == "aten::mul.out");
  CHECK(std::string(plugin->kernels()[2].op) == "aten::neg.out");

  CHECK(stub_call_log(*plugin) ==
        "init\ndevice_count\ndevice_get_properties(0)\ndevice_get_properties(1)\n"
        "device_get_properties(2)\nkernels_get\n");
  // The stub logs through the host services; the core prefixes the plugin's name.
  CHECK_THAT(capture.text(), Catch::Contains("[plugin stub] stub: 3 device(s)"));

  auto reset = reinterpret_cast<void (*)()>(plugin->entry(&fl_device_ops::get_proc_address)("stub.reset"));
  REQUIRE(reset != nullptr);
  reset();
  plugin->shutdown();
  plugin->shutdown();
  CHECK_FALSE(plugin->initialized());
  CHECK(plugin->kernels().empty());
  CHECK(stub_call_log(*plugin) == "shutdown\n");
  CHECK_THROWS_AS(plugin->initialize(""), fl::Error);
}

TEST_CASE("check() turns statuses into typed errors with the plugin's message") {
  auto plugin = PluginLibrary::open(FL_STUB_PLUGIN);
  plugin->initialize("devices=1;memory_mb=1");
  void* ptr = nullptr;
  CHECK_NOTHROW(plugin->check(plugin->ops().fl_malloc(0, 256, &ptr), "fl_malloc"));
  CHECK(ptr != nullptr);
  CHECK_NOTHROW(plugin->check(plugin->ops().fl_free(0, ptr), "fl_free"));

  try {
    plugin->check(plugin->ops().fl_malloc(0, 0, &ptr), "fl_malloc(0)");
    FAIL("no throw");
  } catch (const fl::Error& e) {
    CHECK(e.status() == FL_ERR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()) ==
          "fl_malloc(0) failed on plugin stub: FL_ERR_INVALID_ARGUMENT: stub: fl_malloc of size 0");
  }
  CHECK_THROWS_AS(plugin->check(plugin->ops().fl_malloc(0, 2u << 20, &ptr), "fl_malloc"), fl::OutOfMemoryError);
  CHECK_THROWS_AS(plugin->check(FL_ERR_NOT_SUPPORTED, "x"), fl::NotSupportedError);

  // The deliberately failing kernel.
  fl_kernel_call call{};
  call.struct_size = sizeof(call);
  const fl_kernel_entry& neg = plugin->kernels()[2];
  REQUIRE(std::string(neg.op) == "aten::neg.out");
  try {
    plugin->check(neg.fn(&call), "aten::neg.out");
    FAIL("no throw");
  } catch (const fl::Error& e) {
    CHECK(e.status() == FL_ERR_DEVICE);
    CHECK_THAT(std::string(e.what()), Catch::Contains("FL_ERR_DEVICE: stub kernel failure"));
  }
}

TEST_CASE("the open steps refuse each broken plugin with the step and the reason") {
  expect_open_fails(fs::path(FL_ZOO_DIR) / "libfl_does_not_exist.so", LoadStep::Open, "cannot resolve path");
  expect_open_fails(zoo("garbage"), LoadStep::Open, "invalid ELF header");
  expect_open_fails(zoo("zoo_missing_dep"), LoadStep::Open, "libfl_zoo_dep.so");
  expect_open_fails(zoo("zoo_missing_entry"), LoadStep::EntrySymbol, "'fl_plugin_get_ops' not exported");
  expect_open_fails(zoo("zoo_null_table"), LoadStep::Table, "returned NULL");
  expect_open_fails(zoo("zoo_wrong_major"), LoadStep::Version,
                    "plugin ABI 2." + std::to_string(FL_ABI_MINOR) + ", host ABI 1." + std::to_string(FL_ABI_MINOR) +
                        "; accepted: major 1");
  expect_open_fails(zoo("zoo_short_struct"), LoadStep::StructSize, "below the minimum");
  expect_open_fails(zoo("zoo_null_required"), LoadStep::RequiredEntries, "required entry 'fl_malloc' is NULL");
  expect_open_fails(zoo("zoo_empty_name"), LoadStep::RequiredEntries, "plugin_name");
}

TEST_CASE("a version mismatch carries FL_ERR_VERSION") {
  try {
    PluginLibrary::open(zoo("zoo_wrong_major"));
    FAIL("no throw");
  } catch (const PluginLoadError& e) {
    CHECK(e.status() == FL_ERR_VERSION);
  }
}

TEST_CASE("the init steps refuse each broken plugin with the status and the plugin's message") {
  expect_initialize_fails(zoo("zoo_init_error"), LoadStep::Init, {"FL_ERR_DEVICE", "zoo: the driver refused to start"});
  expect_initialize_fails(zoo("zoo_init_throws"), LoadStep::Init,
                          {"C++ exception escaped the plugin", "zoo: init threw through the C ABI"});
  expect_initialize_fails(zoo("zoo_no_device"), LoadStep::Init, {"no device: zoo: no driver installed"});
  expect_initialize_fails(zoo("zoo_negative_count"), LoadStep::Devices, {"negative count -3"});
  expect_initialize_fails(zoo("zoo_count_error"), LoadStep::Devices,
                          {"device_count: FL_ERR_DEVICE: zoo: device enumeration failed"});
}

TEST_CASE("invalid kernel entries are dropped and the first duplicate wins") {
  auto plugin = PluginLibrary::open(zoo("zoo_bad_kernel_table"));
  plugin->initialize("");
  REQUIRE(plugin->kernels().size() == 1);
  CHECK(std::string(plugin->kernels()[0].op) == "aten::add.out");
  CHECK(plugin->kernels()[0].dtype_mask == FL_DTYPE_BIT(FL_DTYPE_FLOAT32));
  const auto& rejected = plugin->rejected_kernels();
  REQUIRE(rejected.size() == 5);
  CHECK_THAT(rejected[0], Catch::Contains("add_without_namespace.out") && Catch::Contains("namespace"));
  CHECK_THAT(rejected[1], Catch::Contains("aten::mul.out") && Catch::Contains("fn is NULL"));
  CHECK_THAT(rejected[2], Catch::Contains("aten::sub.out") && Catch::Contains("struct_size 8"));
  CHECK_THAT(rejected[3], Catch::Contains("duplicate"));
  CHECK_THAT(rejected[4], Catch::Contains("op name"));
}

TEST_CASE("failing kernels report through check(); a throwing kernel's exception reaches the caller") {
  auto plugin = PluginLibrary::open(zoo("zoo_failing_kernels"));
  plugin->initialize("");
  REQUIRE(plugin->kernels().size() == 2);
  fl_kernel_call call{};
  call.struct_size = sizeof(call);
  CHECK_THROWS_WITH(plugin->check(plugin->kernels()[1].fn(&call), "aten::mul.out"),
                    Catch::Contains("FL_ERR_DEVICE: zoo kernel failure"));
  CHECK_THROWS_WITH(plugin->kernels()[0].fn(&call), Catch::Contains("zoo: kernel threw"));
}

TEST_CASE("a plugin of a newer minor with a longer table loads and runs") {
  auto plugin = PluginLibrary::open(zoo("zoo_newer_minor"));
  CHECK(plugin->abi_minor() == FL_ABI_MINOR + 1);
  CHECK(plugin->ops().struct_size > sizeof(fl_device_ops));
  CHECK(plugin->entry(&fl_device_ops::get_proc_address) != nullptr);
  plugin->initialize("devices=2");
  CHECK(plugin->device_count() == 2);
}

TEST_CASE("a plugin of an older minor loads; entries beyond its struct_size read as absent") {
  auto plugin = PluginLibrary::open(zoo("zoo_older_minor"));
  CHECK(plugin->abi_minor() == 0);
  CHECK(plugin->ops().struct_size == FL_DEVICE_OPS_MIN_SIZE);
  CHECK(plugin->entry(&fl_device_ops::get_proc_address) == nullptr);
  CHECK(plugin->ops().get_proc_address == nullptr);
  CHECK(plugin->entry(&fl_device_ops::event_elapsed_ms) != nullptr);
  CHECK(plugin->entry(&fl_device_ops::kernels_get) != nullptr);
  plugin->initialize("");
  CHECK(plugin->device_count() == 1);
  CHECK(plugin->kernels().size() == 3);
  // A 1.0 plugin fills the device properties up to 1.0's end: the 1.1 field reads 0 (the stub
  // it wraps would say 1), so the core copies into its memory as before.
  CHECK(plugin->devices().at(0).host_pointers_usable == 0);
  auto stub = PluginLibrary::open(FL_STUB_PLUGIN);
  stub->initialize("");
  CHECK(stub->devices().at(0).host_pointers_usable == 1);
}

TEST_CASE("the same plugin under two file names loads twice with separate state (RTLD_LOCAL)") {
  auto first = PluginLibrary::open(FL_STUB_PLUGIN);
  auto second = PluginLibrary::open(zoo("stub_copy"));
  CHECK(first->name() == second->name());
  CHECK(first->path() != second->path());
  first->initialize("devices=1");
  second->initialize("devices=4");
  CHECK(first->device_count() == 1);
  CHECK(second->device_count() == 4);
  CHECK(stub_call_log(*first).find("device_get_properties(3)") == std::string::npos);
  CHECK(stub_call_log(*second).find("device_get_properties(3)") != std::string::npos);
}

TEST_CASE("the crashing plugin is built apart from the zoo (never loaded in-process)") {
  CHECK(fs::exists(fs::path(FL_ZOO_CRASH_DIR) / "libfl_zoo_init_crash.so"));
  CHECK_FALSE(fs::exists(zoo("zoo_init_crash")));
}

TEST_CASE("build ids are read from the ELF note, and absent for other files") {
  CHECK(fl::read_elf_build_id(zoo("garbage")).empty());
  CHECK(fl::read_elf_build_id(FL_STUB_PLUGIN).size() == 40);
  CHECK(fl::read_elf_build_id(FL_STUB_PLUGIN) != fl::read_elf_build_id(zoo("zoo_wrong_major")));
}
