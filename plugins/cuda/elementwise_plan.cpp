// elementwise_plan.cpp — broadcasting, coalescing and promotion for elementwise launches.
#include "elementwise_plan.hpp"

#include <plugin_support.hpp>

#include <algorithm>
#include <string>

namespace fl::cuda {

bool is_floating_dtype(fl_dtype_t dtype) {
  return dtype == FL_DTYPE_FLOAT32 || dtype == FL_DTYPE_FLOAT64 || dtype == FL_DTYPE_FLOAT16 ||
         dtype == FL_DTYPE_BFLOAT16;
}

bool is_real_dtype(fl_dtype_t dtype) {
  return dtype >= 0 && dtype < FL_DTYPE_COUNT && dtype != FL_DTYPE_COMPLEX64 &&
         dtype != FL_DTYPE_COMPLEX128;
}

ElementwiseOperands plan_elementwise(const fl_tensor& out, const std::vector<ElementwiseInput>& inputs) {
  using plugin::raise;
  if (inputs.size() > static_cast<size_t>(kMaxInputs))
    raise(FL_ERR_INTERNAL, "elementwise launch with too many inputs");
  if (!is_real_dtype(out.dtype))
    raise(FL_ERR_NOT_SUPPORTED, std::string("elementwise output of dtype ") + plugin::dtype_name(out.dtype));
  const int nd = out.ndim;
  const int nin = static_cast<int>(inputs.size());

  // Per dim: size, then the output's stride and each input's (0 where broadcast).
  std::vector<int64_t> sizes(static_cast<size_t>(nd));
  std::vector<std::vector<int64_t>> strides(static_cast<size_t>(nin + 1),
                                            std::vector<int64_t>(static_cast<size_t>(nd), 0));
  for (int d = 0; d < nd; ++d) {
    sizes[d] = out.shape[d];
    strides[0][d] = out.strides[d];
  }
  for (int k = 0; k < nin; ++k) {
    const fl_tensor* t = inputs[k].tensor;
    if (t == nullptr) continue;
    if (!is_real_dtype(t->dtype))
      raise(FL_ERR_NOT_SUPPORTED, std::string("elementwise input of dtype ") + plugin::dtype_name(t->dtype));
    if (t->ndim > nd)
      raise(FL_ERR_INVALID_ARGUMENT, "input " + std::to_string(k) + " has more dims (" +
                                         std::to_string(t->ndim) + ") than the output (" +
                                         std::to_string(nd) + ")");
    const int lead = nd - t->ndim;
    for (int d = 0; d < t->ndim; ++d) {
      const int od = d + lead;
      if (t->shape[d] == sizes[od]) strides[k + 1][od] = t->shape[d] == 1 ? 0 : t->strides[d];
      else if (t->shape[d] == 1) strides[k + 1][od] = 0;
      else
        raise(FL_ERR_INVALID_ARGUMENT, "input " + std::to_string(k) + " of size " +
                                           std::to_string(t->shape[d]) + " in dim " + std::to_string(d) +
                                           " does not broadcast to " + std::to_string(sizes[od]));
    }
  }

  ElementwiseOperands p;
  p.num_inputs = nin;
  p.numel = plugin::numel(out);
  p.out = plugin::data_ptr<void>(out);
  p.out_dtype = out.dtype;
  for (int k = 0; k < nin; ++k) {
    if (inputs[k].tensor != nullptr) {
      p.in[k] = plugin::data_ptr<const void>(*inputs[k].tensor);
      p.in_dtype[k] = inputs[k].tensor->dtype;
    } else {
      p.in[k] = nullptr;
      p.in_dtype[k] = FL_DTYPE_FLOAT64;
      p.scalar[k] = inputs[k].scalar;
    }
  }
  if (p.numel == 0) return p;

  // Drop size-1 dims, then merge dim d into the kept dim before it when every operand is
  // laid out so that the pair reads as one dim.
  std::vector<int> kept;
  for (int d = 0; d < nd; ++d)
    if (sizes[d] != 1) kept.push_back(d);
  // Walk the dims in the output's memory order (largest stride first), as ATen's
  // TensorIterator does: a channels_last or transposed output whose inputs share its layout
  // then coalesces to one dense dim. Ties keep their order.
  std::stable_sort(kept.begin(), kept.end(), [&](int a, int b) { return strides[0][a] > strides[0][b]; });
  std::vector<int64_t> csizes;
  std::vector<std::vector<int64_t>> cstrides(static_cast<size_t>(nin + 1));
  for (int d : kept) {
    if (!csizes.empty()) {
      bool mergeable = true;
      for (int k = 0; k <= nin && mergeable; ++k)
        mergeable = cstrides[k].back() == strides[k][d] * sizes[d];
      if (mergeable) {
        csizes.back() *= sizes[d];
        for (int k = 0; k <= nin; ++k) cstrides[k].back() = strides[k][d];
        continue;
      }
    }
    csizes.push_back(sizes[d]);
    for (int k = 0; k <= nin; ++k) cstrides[k].push_back(strides[k][d]);
  }
  if (csizes.size() > static_cast<size_t>(kMaxDims))
    raise(FL_ERR_NOT_SUPPORTED, "elementwise op over " + std::to_string(csizes.size()) +
                                    " non-mergeable dims (at most " + std::to_string(kMaxDims) + ")");
  p.ndim = static_cast<int32_t>(csizes.size());
  for (int d = 0; d < p.ndim; ++d) {
    p.sizes[d] = csizes[d];
    p.out_strides[d] = cstrides[0][d];
    for (int k = 0; k < nin; ++k) p.in_strides[k][d] = cstrides[k + 1][d];
  }
  bool dense = p.ndim == 0 || (p.ndim == 1 && p.out_strides[0] == 1);
  for (int k = 0; k < nin && dense; ++k)
    if (p.in[k] != nullptr) dense = p.ndim == 0 || p.in_strides[k][0] == 1;
  p.contiguous = dense;
  return p;
}

ComputeKind compute_kind_for(const ElementwiseOperands& p, const std::vector<ElementwiseInput>& inputs,
                             bool include_output) {
  bool any_double = false, any_float = false;
  auto count = [&](fl_dtype_t dt) {
    if (dt == FL_DTYPE_FLOAT64) any_double = true;
    else if (is_floating_dtype(dt)) any_float = true;
  };
  if (include_output) count(p.out_dtype);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].tensor != nullptr) count(inputs[k].tensor->dtype);
    else if (inputs[k].scalar_is_floating) any_float = true;
  }
  if (any_double) return ComputeKind::Double;
  if (any_float) return ComputeKind::Float;
  return ComputeKind::Int;
}

}  // namespace fl::cuda
