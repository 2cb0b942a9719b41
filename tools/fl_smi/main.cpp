// fl-smi — what Torch-FL sees on this machine.
//
//   fl-smi [--doctor] [--json] [--plugin FILE]...
//
// Lists the plugin files found (loaded, or skipped with the load step and the reason), the
// logical devices fl:N with the memory in use that the plugin reports and this process's
// caching-allocator view, and with --doctor a checklist (FL_PLUGIN_PATH, the config file,
// /dev nodes of known vendors, the log). Exit status: 0; 1 when a doctor check fails; 2 on a
// usage error.
#include "doctor.h"
#include "inventory.h"
#include "render.h"

#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

void usage(std::ostream& out) {
  out << "usage: fl-smi [--doctor] [--json] [--plugin FILE]...\n"
         "  --doctor       also run the checklist (plugin path, config, /dev nodes, log)\n"
         "  --json         one JSON document instead of text\n"
         "  --plugin FILE  load FILE first (before FL_PLUGIN_PATH); repeatable\n"
         "Plugins are found as the runtime finds them (FL_PLUGIN_PATH, config, default dirs);\n"
         "FL_ISOLATED_DISCOVERY=1 probes each in a child process first.\n";
}

}  // namespace

int main(int argc, char** argv) {
  bool doctor = false, json = false;
  std::vector<std::string> plugins;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--doctor") doctor = true;
    else if (arg == "--json") json = true;
    else if (arg == "--plugin" && i + 1 < argc) plugins.push_back(argv[++i]);
    else if (arg == "-h" || arg == "--help") {
      usage(std::cout);
      return 0;
    } else {
      std::cerr << "fl-smi: unknown argument '" << arg << "'\n";
      usage(std::cerr);
      return 2;
    }
  }
  try {
    const fl::smi::Inventory inventory = fl::smi::take_inventory(plugins);
    std::optional<std::vector<fl::smi::Check>> checks;
    if (doctor) checks = fl::smi::run_doctor(inventory);
    if (json)
      std::cout << fl::smi::render_json(inventory, checks).dump(2) << "\n";
    else
      std::cout << fl::smi::render_text(inventory, checks);
    if (checks)
      for (const auto& c : *checks)
        if (c.status == "fail") return 1;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fl-smi: " << e.what() << "\n";
    return 1;
  }
}
