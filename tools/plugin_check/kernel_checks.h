// kernel_checks.h — one check per kernel entry: every catalog case, for every dtype of the
// entry's mask among float32/float64/bfloat16/float16/int64, compared against the same op of
// the reference plugin (or, when the plugin is the reference, the naive implementation).
#pragma once

#include "plugin_library.h"
#include "report.h"

#include <memory>
#include <string>

namespace fl::check {

// `reference` may be null (none found) or the same plugin name as `plugin`.
void run_kernel_checks(const PluginLibrary& plugin, const PluginLibrary* reference, Report& report);

// The plugin's entry for `op` (an overload name as in the table), nullptr when it has none.
const fl_kernel_entry* find_entry(const PluginLibrary& plugin, const std::string& op);

}  // namespace fl::check
