// index_error_checks.h — what a plugin does with an index it cannot use. For each indexing
// kernel the plugin lists (gather, index_select, scatter, scatter_add, nll_loss_forward), a call
// with one index out of range must fail with a message: at once (the kernel's status), or,
// when only the device can see the index, at the next stream_synchronize. Then the failure
// must be cleared (a second synchronize succeeds) and the same kernel with good indices must
// run and give the right values, so one bad batch does not end the process's use of the device.
#pragma once

#include "plugin_library.h"
#include "report.h"

namespace fl::check {

void run_index_error_checks(const PluginLibrary& plugin, Report& report);

}  // namespace fl::check
