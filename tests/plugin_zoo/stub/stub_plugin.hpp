// stub_plugin.hpp — what the broken-plugin zoo uses from the stub: its complete table.
#pragma once

#include <fl_abi.h>

namespace fl::stub {
const fl_device_ops& base_ops();
}  // namespace fl::stub
