// kernel_table.hpp — the CPU plugin's kernel table and the registry each kernel file fills.
#pragma once

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <cstdint>
#include <vector>

namespace fl::cpu::kernels {

class KernelRegistry {
 public:
  void add(const char* op, uint64_t dtype_mask, uint32_t flags, fl_kernel_fn fn,
           void* kernel_data = nullptr);
  std::vector<fl_kernel_entry>& entries() { return entries_; }

 private:
  std::vector<fl_kernel_entry> entries_;
};

// Built once, on first use; lives for the life of the library.
const std::vector<fl_kernel_entry>& kernel_table();

// Every dtype the device can hold (all non-complex dtypes; memory is untyped bytes).
uint64_t storable_dtype_mask();

// Wraps a kernel body so no exception crosses the ABI.
template <void (*Body)(const fl_kernel_call*)>
fl_status_t guarded(const fl_kernel_call* call) {
  return plugin::guard([&] { Body(call); });
}

// Flags of elementwise entries: any strides (0 included) in, in-place safe.
constexpr uint32_t kPointwiseFlags = FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_ALIASING_OK;

// One registration function per kernel file.
void register_pointwise_kernels(KernelRegistry& registry);
void register_pointwise_extra_kernels(KernelRegistry& registry);
void register_reduction_kernels(KernelRegistry& registry);
void register_gemm_kernels(KernelRegistry& registry);
void register_softmax_kernels(KernelRegistry& registry);
void register_loss_kernels(KernelRegistry& registry);
void register_normalization_kernels(KernelRegistry& registry);
void register_batch_norm_kernels(KernelRegistry& registry);
void register_indexing_kernels(KernelRegistry& registry);
void register_convolution_kernels(KernelRegistry& registry);
void register_pooling_kernels(KernelRegistry& registry);
void register_foreach_kernels(KernelRegistry& registry);
void register_triangle_kernels(KernelRegistry& registry);
void register_factory_kernels(KernelRegistry& registry);
void register_attention_kernels(KernelRegistry& registry);
void register_pointwise_math_kernels(KernelRegistry& registry);
void register_activation_kernels(KernelRegistry& registry);
void register_upsample_kernels(KernelRegistry& registry);
void register_group_norm_kernels(KernelRegistry& registry);
void register_rms_norm_kernels(KernelRegistry& registry);
void register_variance_kernels(KernelRegistry& registry);
void register_gather_scatter_kernels(KernelRegistry& registry);
void register_flip_kernels(KernelRegistry& registry);
void register_scan_kernels(KernelRegistry& registry);
void register_sort_kernels(KernelRegistry& registry);

}  // namespace fl::cpu::kernels
