// aclnn_kernels.hpp — the Ascend plugin's kernel table (aclnn_kernels.cpp).
#pragma once

#include <fl_abi.h>

#include <cstddef>

namespace fl::ascend {

fl_status_t kernels_get(const fl_kernel_entry** entries, size_t* count);

}  // namespace fl::ascend
