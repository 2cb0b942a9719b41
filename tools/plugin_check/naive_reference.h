// naive_reference.h — scalar reference implementations used when the plugin under test is
// itself the reference plugin: the elementwise families, sum, mm, batch norm and fused
// attention, among others. Other ops have none (the check then reports "skip: is the reference").
#pragma once

#include "case_catalog.h"

#include <optional>
#include <string>
#include <vector>

namespace fl::check {

// The outputs of `op` on `c`, computed in double and rounded to each output's dtype;
// nullopt when there is no naive implementation of `op`.
std::optional<std::vector<HostTensor>> naive_run(const std::string& op, const KernelCase& c);

// naive_run's part for group norm's backward and the variance reductions
// (naive_reference_statistics.cpp).
std::optional<std::vector<HostTensor>> naive_run_statistics(const std::string& op, const KernelCase& c);

// naive_run's part for _fused_rms_norm and its backward (naive_reference_rms_norm.cpp).
std::optional<std::vector<HostTensor>> naive_run_rms_norm(const std::string& op, const KernelCase& c);

// RMSNorm's rstd per row of `cols` trailing elements, 1/sqrt(mean(x^2) + eps), and the eps a
// None argument means (the accumulation dtype's epsilon: float32's unless the input is float64).
std::vector<double> rms_norm_rstd(const HostTensor& x, int64_t cols, double eps);
double rms_norm_default_eps(fl_dtype_t input_dtype);

// naive_run's part for gather, scatter, scatter_add, flip and cumsum
// (naive_reference_indexing.cpp); nullopt for any other op.
std::optional<std::vector<HostTensor>> naive_run_indexing(const std::string& op, const KernelCase& c);

// naive_run's part for sort and topk (naive_reference_sorting.cpp); nullopt for any other op.
std::optional<std::vector<HostTensor>> naive_run_sorting(const std::string& op, const KernelCase& c);

// Per-channel mean and 1/sqrt(biased var + eps) (0 where var + eps is 0) of x [N, C, *], as a
// training batch norm computes them; also the saved statistics of the catalog's backward cases.
void batch_norm_stats(const HostTensor& x, double eps, std::vector<double>& mean, std::vector<double>& invstd);

}  // namespace fl::check
