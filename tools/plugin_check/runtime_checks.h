// runtime_checks.h — fl-plugin-check's checks of the runtime entries on device 0 (and the
// properties of every device): properties, memory, copies, memset, stream ordering, events,
// error paths and leaks.
#pragma once

#include "plugin_library.h"
#include "report.h"

namespace fl::check {

// Names of the device checks, in order (also used to report them skipped).
const std::vector<std::string>& device_check_names();

void run_device_checks(const PluginLibrary& plugin, Report& report);

}  // namespace fl::check
