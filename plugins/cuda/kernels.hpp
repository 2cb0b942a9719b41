// kernels.hpp — every kernel entry point of the CUDA plugin (fl_kernel_fn), grouped by the
// source file that defines it. kernel_table.cpp maps ATen overload names onto them.
#pragma once

#include <fl_abi.h>

namespace fl::cuda {

// elementwise_arith.cu
fl_status_t k_add_out(const fl_kernel_call* call);
fl_status_t k_sub_out(const fl_kernel_call* call);
fl_status_t k_mul_out(const fl_kernel_call* call);
fl_status_t k_div_out(const fl_kernel_call* call);
fl_status_t k_pow_tensor_scalar_out(const fl_kernel_call* call);
fl_status_t k_pow_out(const fl_kernel_call* call);
fl_status_t k_lerp_out(const fl_kernel_call* call);
fl_status_t k_addcmul_out(const fl_kernel_call* call);
fl_status_t k_addcdiv_out(const fl_kernel_call* call);

// elementwise_select.cu
fl_status_t k_maximum_out(const fl_kernel_call* call);
fl_status_t k_minimum_out(const fl_kernel_call* call);
fl_status_t k_clamp_out(const fl_kernel_call* call);
fl_status_t k_where_self_out(const fl_kernel_call* call);
fl_status_t k_masked_fill_out(const fl_kernel_call* call);
fl_status_t k_eq_out(const fl_kernel_call* call);
fl_status_t k_ne_out(const fl_kernel_call* call);
fl_status_t k_lt_out(const fl_kernel_call* call);
fl_status_t k_le_out(const fl_kernel_call* call);
fl_status_t k_gt_out(const fl_kernel_call* call);
fl_status_t k_ge_out(const fl_kernel_call* call);
fl_status_t k_logical_and_out(const fl_kernel_call* call);
fl_status_t k_logical_or_out(const fl_kernel_call* call);
fl_status_t k_logical_xor_out(const fl_kernel_call* call);

// elementwise_math.cu
fl_status_t k_sin_out(const fl_kernel_call* call);
fl_status_t k_cos_out(const fl_kernel_call* call);
fl_status_t k_erf_out(const fl_kernel_call* call);
fl_status_t k_expm1_out(const fl_kernel_call* call);
fl_status_t k_log1p_out(const fl_kernel_call* call);
fl_status_t k_floor_out(const fl_kernel_call* call);
fl_status_t k_ceil_out(const fl_kernel_call* call);
fl_status_t k_round_out(const fl_kernel_call* call);
fl_status_t k_trunc_out(const fl_kernel_call* call);
fl_status_t k_sign_out(const fl_kernel_call* call);
fl_status_t k_bitwise_and_out(const fl_kernel_call* call);
fl_status_t k_bitwise_or_out(const fl_kernel_call* call);
fl_status_t k_bitwise_xor_out(const fl_kernel_call* call);

// activations.cu
fl_status_t k_leaky_relu_out(const fl_kernel_call* call);
fl_status_t k_leaky_relu_backward(const fl_kernel_call* call);
fl_status_t k_hardtanh_backward(const fl_kernel_call* call);
fl_status_t k_elu_out(const fl_kernel_call* call);
fl_status_t k_elu_backward(const fl_kernel_call* call);
fl_status_t k_softplus_out(const fl_kernel_call* call);
fl_status_t k_softplus_backward(const fl_kernel_call* call);
fl_status_t k_log_sigmoid_forward(const fl_kernel_call* call);
fl_status_t k_log_sigmoid_backward(const fl_kernel_call* call);

// upsample_nearest.cu
fl_status_t k_upsample_nearest2d(const fl_kernel_call* call);
fl_status_t k_upsample_nearest_exact2d(const fl_kernel_call* call);
fl_status_t k_upsample_nearest2d_backward(const fl_kernel_call* call);
fl_status_t k_upsample_nearest_exact2d_backward(const fl_kernel_call* call);

// elementwise_unary.cu
fl_status_t k_sqrt_out(const fl_kernel_call* call);
fl_status_t k_rsqrt_out(const fl_kernel_call* call);
fl_status_t k_neg_out(const fl_kernel_call* call);
fl_status_t k_exp_out(const fl_kernel_call* call);
fl_status_t k_log_out(const fl_kernel_call* call);
fl_status_t k_abs_out(const fl_kernel_call* call);
fl_status_t k_tanh_out(const fl_kernel_call* call);
fl_status_t k_sigmoid_out(const fl_kernel_call* call);
fl_status_t k_relu_out(const fl_kernel_call* call);
fl_status_t k_reciprocal_out(const fl_kernel_call* call);
fl_status_t k_bitwise_not_out(const fl_kernel_call* call);
fl_status_t k_logical_not_out(const fl_kernel_call* call);
fl_status_t k_isnan_out(const fl_kernel_call* call);
fl_status_t k_isposinf_out(const fl_kernel_call* call);
fl_status_t k_isneginf_out(const fl_kernel_call* call);
fl_status_t k_silu_out(const fl_kernel_call* call);
fl_status_t k_silu_backward(const fl_kernel_call* call);
fl_status_t k_tanh_backward(const fl_kernel_call* call);
fl_status_t k_sigmoid_backward(const fl_kernel_call* call);
fl_status_t k_gelu_out(const fl_kernel_call* call);
fl_status_t k_gelu_backward(const fl_kernel_call* call);
fl_status_t k_threshold_backward(const fl_kernel_call* call);
fl_status_t k_native_dropout_backward(const fl_kernel_call* call);

// elementwise_fill_copy.cu
fl_status_t k_fill_out(const fl_kernel_call* call);
fl_status_t k_zero_out(const fl_kernel_call* call);
fl_status_t k_copy_out(const fl_kernel_call* call);

// reduce.cu
fl_status_t k_sum_out(const fl_kernel_call* call);
fl_status_t k_sum_all_out(const fl_kernel_call* call);
fl_status_t k_mean_out(const fl_kernel_call* call);
fl_status_t k_mean_all_out(const fl_kernel_call* call);
fl_status_t k_amax_out(const fl_kernel_call* call);
fl_status_t k_amin_out(const fl_kernel_call* call);
fl_status_t k_argmax_out(const fl_kernel_call* call);
fl_status_t k_linalg_vector_norm_out(const fl_kernel_call* call);
fl_status_t k_mse_loss_out(const fl_kernel_call* call);
fl_status_t k_mse_loss_backward(const fl_kernel_call* call);
fl_status_t k_argmin_out(const fl_kernel_call* call);
fl_status_t k_max_dim(const fl_kernel_call* call);
fl_status_t k_min_dim(const fl_kernel_call* call);
fl_status_t k_max_all_out(const fl_kernel_call* call);
fl_status_t k_min_all_out(const fl_kernel_call* call);
fl_status_t k_all_out(const fl_kernel_call* call);
fl_status_t k_all_dims_out(const fl_kernel_call* call);
fl_status_t k_all_all_out(const fl_kernel_call* call);
fl_status_t k_any_out(const fl_kernel_call* call);
fl_status_t k_any_dims_out(const fl_kernel_call* call);
fl_status_t k_any_all_out(const fl_kernel_call* call);

// softmax.cu
fl_status_t k_softmax_out(const fl_kernel_call* call);
fl_status_t k_log_softmax_out(const fl_kernel_call* call);
fl_status_t k_softmax_backward_out(const fl_kernel_call* call);
fl_status_t k_log_softmax_backward_out(const fl_kernel_call* call);

// nll_loss.cu
fl_status_t k_nll_loss_forward(const fl_kernel_call* call);
fl_status_t k_nll_loss_backward(const fl_kernel_call* call);

// layer_norm.cu
fl_status_t k_native_layer_norm(const fl_kernel_call* call);
fl_status_t k_native_layer_norm_backward(const fl_kernel_call* call);

// group_norm.cu
fl_status_t k_native_group_norm_backward(const fl_kernel_call* call);

// rms_norm.cu
fl_status_t k_fused_rms_norm(const fl_kernel_call* call);
fl_status_t k_fused_rms_norm_backward(const fl_kernel_call* call);

// variance.cu
fl_status_t k_var_correction_out(const fl_kernel_call* call);
fl_status_t k_std_correction_out(const fl_kernel_call* call);
fl_status_t k_var_mean_correction_out(const fl_kernel_call* call);
fl_status_t k_std_mean_correction_out(const fl_kernel_call* call);

// embedding.cu
fl_status_t k_index_select_out(const fl_kernel_call* call);
fl_status_t k_embedding_dense_backward(const fl_kernel_call* call);

// gather_scatter.cu
fl_status_t k_gather_out(const fl_kernel_call* call);
fl_status_t k_scatter_src_out(const fl_kernel_call* call);
fl_status_t k_scatter_value_out(const fl_kernel_call* call);
fl_status_t k_scatter_add_out(const fl_kernel_call* call);

// dropout.cu
fl_status_t k_native_dropout(const fl_kernel_call* call);
fl_status_t k_normal_out(const fl_kernel_call* call);
fl_status_t k_uniform_out(const fl_kernel_call* call);
fl_status_t k_bernoulli_float_out(const fl_kernel_call* call);
fl_status_t k_random_from_out(const fl_kernel_call* call);

// pooling.cu
fl_status_t k_max_pool2d_with_indices(const fl_kernel_call* call);
fl_status_t k_max_pool2d_with_indices_backward(const fl_kernel_call* call);

// batch_norm.cu
fl_status_t k_native_batch_norm(const fl_kernel_call* call);
fl_status_t k_native_batch_norm_legit(const fl_kernel_call* call);
fl_status_t k_native_batch_norm_legit_no_training(const fl_kernel_call* call);
fl_status_t k_native_batch_norm_backward(const fl_kernel_call* call);

// adaptive_pool.cu
fl_status_t k_adaptive_avg_pool2d(const fl_kernel_call* call);
fl_status_t k_adaptive_avg_pool2d_backward(const fl_kernel_call* call);

// foreach.cu
fl_status_t k_foreach_add_list(const fl_kernel_call* call);
fl_status_t k_foreach_sub_list(const fl_kernel_call* call);
fl_status_t k_foreach_add_scalar(const fl_kernel_call* call);
fl_status_t k_foreach_sub_scalar(const fl_kernel_call* call);
fl_status_t k_foreach_add_scalar_list(const fl_kernel_call* call);
fl_status_t k_foreach_mul_scalar(const fl_kernel_call* call);
fl_status_t k_foreach_mul_scalar_list(const fl_kernel_call* call);
fl_status_t k_foreach_mul_list(const fl_kernel_call* call);
fl_status_t k_foreach_mul_tensor(const fl_kernel_call* call);
fl_status_t k_foreach_div_scalar(const fl_kernel_call* call);
fl_status_t k_foreach_div_scalar_list(const fl_kernel_call* call);
fl_status_t k_foreach_div_list(const fl_kernel_call* call);
fl_status_t k_foreach_div_tensor(const fl_kernel_call* call);
fl_status_t k_foreach_sqrt(const fl_kernel_call* call);
fl_status_t k_foreach_neg(const fl_kernel_call* call);
fl_status_t k_foreach_lerp_scalar(const fl_kernel_call* call);
fl_status_t k_foreach_lerp_list(const fl_kernel_call* call);
fl_status_t k_foreach_addcmul_scalar(const fl_kernel_call* call);
fl_status_t k_foreach_addcmul_scalar_list(const fl_kernel_call* call);
fl_status_t k_foreach_addcdiv_scalar(const fl_kernel_call* call);
fl_status_t k_foreach_addcdiv_scalar_list(const fl_kernel_call* call);
fl_status_t k_foreach_copy(const fl_kernel_call* call);
fl_status_t k_foreach_zero(const fl_kernel_call* call);
fl_status_t k_foreach_norm(const fl_kernel_call* call);

// shape_ops.cu
fl_status_t k_cat_out(const fl_kernel_call* call);
fl_status_t k_tril_out(const fl_kernel_call* call);
fl_status_t k_triu_out(const fl_kernel_call* call);
fl_status_t k_arange_out(const fl_kernel_call* call);

// flip.cu
fl_status_t k_flip_out(const fl_kernel_call* call);

// scan.cu
fl_status_t k_cumsum_out(const fl_kernel_call* call);

// sort.cu (not in the HIP plugin)
fl_status_t k_sort_values_stable(const fl_kernel_call* call);
fl_status_t k_topk_values(const fl_kernel_call* call);

// gemm_cublas.cpp
fl_status_t k_mm_out(const fl_kernel_call* call);
fl_status_t k_addmm_out(const fl_kernel_call* call);
fl_status_t k_bmm_out(const fl_kernel_call* call);
fl_status_t k_baddbmm_out(const fl_kernel_call* call);

// conv_cudnn.cpp (or conv_unavailable.cpp when cuDNN is not found at build time)
fl_status_t k_convolution(const fl_kernel_call* call);
fl_status_t k_convolution_backward(const fl_kernel_call* call);

// attention_cudnn.cpp (or attention_unavailable.cu without cuDNN, and in the HIP plugin)
fl_status_t k_scaled_dot_product_fused_attention(const fl_kernel_call* call);
fl_status_t k_scaled_dot_product_fused_attention_backward(const fl_kernel_call* call);

// kernel_table.cpp
fl_status_t kernels_get(const fl_kernel_entry** entries, size_t* count);

}  // namespace fl::cuda
