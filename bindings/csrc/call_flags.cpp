#include "call_flags.h"

#include "fl_context.h"
#include "op_info.h"

#include <fl_abi.h>

#include <ATen/Context.h>

namespace fl::binding {

uint32_t kernel_call_flags(bool convolution) {
  const auto& context = at::globalContext();
  const auto& precision = runtime().config().precision;
  uint32_t flags = 0;
  if (convolution ? !context.allowTF32CuDNN() : precision.matmul == "highest") flags |= FL_CALL_PRECISE;
  if (precision.deterministic || context.deterministicAlgorithms() || (convolution && context.deterministicCuDNN()))
    flags |= FL_CALL_DETERMINISTIC;
  return flags;
}

std::vector<std::string> call_flags_for(const std::string& qualified_name) {
  const uint32_t flags = kernel_call_flags(is_convolution(qualified_name));
  std::vector<std::string> names;
  if (flags & FL_CALL_PRECISE) names.emplace_back("precise");
  if (flags & FL_CALL_DETERMINISTIC) names.emplace_back("deterministic");
  return names;
}

}  // namespace fl::binding
