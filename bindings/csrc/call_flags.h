// call_flags.h — the FL_CALL_* flags a kernel call carries: the precision and reproducibility
// that torch's switches and the config ask for at the moment of the call, read as native CUDA
// reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fl::binding {

// The flags for a call of an operator (`convolution`: OpInfo::convolution).
//   FL_CALL_PRECISE        no TF32: for convolutions when torch.backends.cudnn.allow_tf32 is
//                          off (PyTorch lets cuDNN use TF32 by default), for every other op
//                          when the config's precision.matmul is "highest";
//   FL_CALL_DETERMINISTIC  bitwise reproducible kernels: precision.deterministic,
//                          torch.use_deterministic_algorithms(True), or for convolutions
//                          torch.backends.cudnn.deterministic.
uint32_t kernel_call_flags(bool convolution);

// The names ("precise", "deterministic") of the flags a call of the operator given as
// "aten::name.overload" would carry now (torch_fl._C.call_flags_for).
std::vector<std::string> call_flags_for(const std::string& qualified_name);

}  // namespace fl::binding
