// template_kernels.hpp — the template plugin's kernel table (template_kernels.cpp).
#pragma once

#include <fl_abi.h>

#include <cstddef>

namespace fl::template_plugin {

// fl_device_ops.kernels_get: the table of ATen overloads this plugin runs.
fl_status_t kernels_get(const fl_kernel_entry** entries, size_t* count);

}  // namespace fl::template_plugin
