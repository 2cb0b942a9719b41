// main.cpp — fl-plugin-check: conformance checks of one Torch-FL plugin.
//
//   fl-plugin-check [--json] [--reference PATH] [--options STR] PLUGIN.so
//
// Exit status: 0 when no check failed (skips allowed, e.g. every device check when init
// reports FL_ERR_NO_DEVICE), 1 when one failed, 2 on a usage error.
#include "elf_symbols.h"
#include "index_error_checks.h"
#include "kernel_checks.h"
#include "log.h"
#include "plugin_library.h"
#include "report.h"
#include "runtime_checks.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <optional>

namespace fs = std::filesystem;
using namespace fl::check;

namespace {

struct Options {
  bool json = false;
  std::string reference;
  std::string plugin_options;
  std::string plugin;
};

int usage(const std::string& problem) {
  std::cerr << "fl-plugin-check: " << problem << "\n"
            << "usage: fl-plugin-check [--json] [--reference PATH] [--options STR] PLUGIN.so\n";
  return 2;
}

std::optional<Options> parse(int argc, char** argv, std::string& problem) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") o.json = true;
    else if ((a == "--reference" || a == "--options") && i + 1 < argc) (a == "--reference" ? o.reference : o.plugin_options) = argv[++i];
    else if (a == "--reference" || a == "--options") { problem = a + " needs a value"; return std::nullopt; }
    else if (a == "-h" || a == "--help") { problem = "help"; return std::nullopt; }
    else if (a.rfind("--", 0) == 0) { problem = "unknown option " + a; return std::nullopt; }
    else if (o.plugin.empty()) o.plugin = a;
    else { problem = "more than one plugin given"; return std::nullopt; }
  }
  if (o.plugin.empty()) { problem = "no plugin given"; return std::nullopt; }
  return o;
}

// The reference plugin: --reference, else libfl_cpu.so of this build tree, next to this
// executable's build tree, or installed.
std::optional<fs::path> find_reference(const Options& o) {
  if (!o.reference.empty()) return fs::path(o.reference);
  std::vector<fs::path> candidates = {FL_REFERENCE_PLUGIN};
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(self.parent_path().parent_path().parent_path() / "plugins" / "cpu" / "libfl_cpu.so");
  candidates.push_back(fs::path(FL_INSTALLED_PLUGIN_DIR) / "libfl_cpu.so");
  for (const fs::path& c : candidates)
    if (fs::exists(c, ec)) return c;
  return std::nullopt;
}

void skip_all(Report& report, const std::vector<std::string>& names, const std::string& why) {
  for (const std::string& name : names) report.add({name, Status::Skip, why, 0});
}

std::string negotiation_message(const fl::PluginLibrary& p) {
  const fl_device_ops& o = p.ops();
  std::string m = "ABI " + std::to_string(p.abi_major()) + "." + std::to_string(p.abi_minor()) + " (host " +
                  std::to_string(FL_ABI_MAJOR) + "." + std::to_string(FL_ABI_MINOR) + "): same major, so hosts of every " +
                  std::to_string(FL_ABI_MAJOR) + ".x minor accept it (older hosts ignore appended fields, newer hosts read "
                  "fields beyond its struct_size as absent); struct_size " + std::to_string(o.struct_size) +
                  " >= minimum " + std::to_string(FL_DEVICE_OPS_MIN_SIZE) + "; required entries present; optional:";
  auto optional = [&](const char* name, bool present) { m += std::string(" ") + name + (present ? "" : " (absent)"); };
  optional("device_can_access_peer", p.entry(&fl_device_ops::device_can_access_peer) != nullptr);
  optional("fl_host_malloc", p.entry(&fl_device_ops::fl_host_malloc) != nullptr);
  optional("event_elapsed_ms", p.entry(&fl_device_ops::event_elapsed_ms) != nullptr);
  optional("get_proc_address", p.entry(&fl_device_ops::get_proc_address) != nullptr);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::string problem;
  auto parsed = parse(argc, argv, problem);
  if (!parsed) return usage(problem);
  const Options& options = *parsed;
  // The checks provoke plugin errors on purpose; keep the core's warnings off the report.
  fl::log().set_level(spdlog::level::err);

  Report report;
  report.plugin.path = options.plugin;
  report.run("exported symbols", [&](std::string& message) {
    auto symbols = exported_symbols(options.plugin);
    bool has_entry = false;
    std::string others;
    for (const std::string& s : symbols) {
      if (s == FL_PLUGIN_ENTRY_SYMBOL) has_entry = true;
      else if (s.rfind("fl_", 0) == 0) others += (others.empty() ? "" : ", ") + s;
    }
    if (!has_entry) {
      message = std::string("'") + FL_PLUGIN_ENTRY_SYMBOL + "' is not exported";
      return Status::Fail;
    }
    message = std::string("exports ") + FL_PLUGIN_ENTRY_SYMBOL + "; " + std::to_string(symbols.size()) + " exported symbols in all";
    if (!others.empty()) message += "; warning: other exported fl_* symbols: " + others;
    return Status::Pass;
  });

  std::shared_ptr<fl::PluginLibrary> plugin;
  report.run("negotiation", [&](std::string& message) {
    try {
      plugin = fl::PluginLibrary::open(options.plugin);
    } catch (const fl::PluginLoadError& e) {
      message = std::string(fl::to_string(e.step())) + ": " + e.reason();
      return Status::Fail;
    }
    report.plugin = {plugin->path().string(), plugin->name(), plugin->version(), plugin->build_id(),
                     plugin->abi_major(), plugin->abi_minor()};
    message = negotiation_message(*plugin);
    return Status::Pass;
  });
  std::string device_skip;
  if (plugin == nullptr) {
    skip_all(report, {"init", "kernel table"}, "plugin did not load");
    skip_all(report, device_check_names(), "plugin did not load");
    skip_all(report, {"kernels"}, "plugin did not load");
  } else {
    report.run("init", [&](std::string& message) {
      try {
        plugin->initialize(options.plugin_options);
      } catch (const fl::PluginLoadError& e) {
        if (e.step() == fl::LoadStep::Init && e.reason().rfind("no device:", 0) == 0) {
          device_skip = "no device (" + e.reason().substr(11) + ")";
          message = "FL_ERR_NO_DEVICE: " + e.reason().substr(11);
          return Status::Skip;
        }
        message = std::string(fl::to_string(e.step())) + ": " + e.reason();
        device_skip = "init failed";
        return Status::Fail;
      }
      message = std::to_string(plugin->device_count()) + " device(s), " + std::to_string(plugin->kernels().size()) + " kernels";
      if (plugin->device_count() == 0) device_skip = "no device (device_count = 0)";
      return Status::Pass;
    });
    if (!device_skip.empty()) {
      skip_all(report, {"kernel table"}, device_skip);
      skip_all(report, device_check_names(), device_skip);
      skip_all(report, {"kernels"}, device_skip);
      if (device_skip.rfind("no device", 0) == 0)
        report.notes.push_back("No device: the device checks were skipped (" + device_skip +
                               "); the device-free checks above decide the exit status.");
    } else {
      report.run("kernel table", [&](std::string& message) {
        if (!plugin->rejected_kernels().empty()) {
          message = "invalid entries: ";
          for (const std::string& r : plugin->rejected_kernels()) message += r + "; ";
          return Status::Fail;
        }
        message = std::to_string(plugin->kernels().size()) + " valid entries";
        return Status::Pass;
      });
      run_device_checks(*plugin, report);
      std::shared_ptr<fl::PluginLibrary> reference;
      if (auto path = find_reference(options)) {
        try {
          if (fs::equivalent(*path, plugin->path())) {
            reference = plugin;
          } else {
            reference = fl::PluginLibrary::open(*path);
            reference->initialize("");
          }
          report.notes.push_back("Reference: " + reference->path().string() + " (" + reference->name() + ")");
        } catch (const std::exception& e) {
          reference.reset();
          report.notes.push_back(std::string("Reference plugin not usable: ") + e.what());
        }
      } else {
        report.notes.push_back("No reference plugin found; kernels are compared with the naive reference where it exists.");
      }
      run_kernel_checks(*plugin, reference.get(), report);
      run_index_error_checks(*plugin, report);
    }
  }

  if (options.json) report.print_json(std::cout);
  else report.print_table(std::cout);
  return report.failed() ? 1 : 0;
}
