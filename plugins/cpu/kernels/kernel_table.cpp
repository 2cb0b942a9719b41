#include "kernel_table.hpp"

#include "scalar_types.hpp"

namespace fl::cpu::kernels {

void KernelRegistry::add(const char* op, uint64_t dtype_mask, uint32_t flags, fl_kernel_fn fn,
                         void* kernel_data) {
  fl_kernel_entry entry{};
  entry.struct_size = sizeof(fl_kernel_entry);
  entry.op = op;
  entry.dtype_mask = dtype_mask;
  entry.flags = flags;
  entry.fn = fn;
  entry.kernel_data = kernel_data;
  entries_.push_back(entry);
}

const std::vector<fl_kernel_entry>& kernel_table() {
  static const std::vector<fl_kernel_entry> table = [] {
    KernelRegistry registry;
    register_pointwise_kernels(registry);
    register_pointwise_extra_kernels(registry);
    register_reduction_kernels(registry);
    register_gemm_kernels(registry);
    register_softmax_kernels(registry);
    register_loss_kernels(registry);
    register_normalization_kernels(registry);
    register_batch_norm_kernels(registry);
    register_indexing_kernels(registry);
    register_convolution_kernels(registry);
    register_pooling_kernels(registry);
    register_foreach_kernels(registry);
    register_triangle_kernels(registry);
    register_factory_kernels(registry);
    register_attention_kernels(registry);
    register_pointwise_math_kernels(registry);
    register_activation_kernels(registry);
    register_upsample_kernels(registry);
    register_group_norm_kernels(registry);
    register_rms_norm_kernels(registry);
    register_variance_kernels(registry);
    register_gather_scatter_kernels(registry);
    register_flip_kernels(registry);
    register_scan_kernels(registry);
    register_sort_kernels(registry);
    return std::move(registry.entries());
  }();
  return table;
}

uint64_t storable_dtype_mask() { return kAllMask; }

}  // namespace fl::cpu::kernels
