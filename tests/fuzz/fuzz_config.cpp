// libFuzzer target: fl::parse_config on arbitrary bytes. Only fl::ConfigError may come out;
// anything else (another exception, a crash, a sanitizer report) is a finding.
#include "config.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    fl::Config config = fl::parse_config(text, "fuzz.yaml");
    // A config that parses must be usable by the runtime's lookups.
    for (const auto& d : config.devices) (void)config.plugin_options(d.type);
    (void)config.selection_for("cpu");
  } catch (const fl::ConfigError& e) {
    const std::string message = e.what();
    if (message.rfind("fuzz.yaml", 0) != 0) __builtin_trap();  // every error names its source
  }
  return 0;
}
