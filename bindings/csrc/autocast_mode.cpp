// autocast_mode.cpp — torch.autocast("fl"): ops with no autocast rule fall through the
// AutocastPrivateUse1 key; the rest follow the same policy lists as CUDA's autocast
// (ATen's AT_FORALL_* lists): matmul/conv in the autocast dtype, numerically sensitive ops
// (softmax, norms, losses, exp/log) in float32, mixed-dtype ops promoted to the widest type.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace fl::binding {
namespace {

// The policy lists name types unqualified (Tensor, Scalar, IntArrayRef, ScalarType).
using namespace at;

#define FL_AUTOCAST_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define FL_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define FL_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define FL_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(FL_AUTOCAST_LOWER_PRECISION_FP)
  AT_FORALL_FP32(FL_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(FL_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(FL_AUTOCAST_PROMOTE)
}

}  // namespace
}  // namespace fl::binding
