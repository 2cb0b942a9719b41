#include "generic_kernels.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_map>

namespace fl::binding {
namespace {

const at::Tensor& T(const std::vector<c10::IValue>& in, size_t i) { return in[i].toTensor(); }
at::Scalar S(const std::vector<c10::IValue>& in, size_t i) { return in[i].toScalar(); }

// Writes `value` into `out` (already sized by the router).
bool assign(at::Tensor& out, const at::Tensor& value) {
  out.copy_(value);
  return true;
}

const std::unordered_map<std::string, GenericKernel>& registry() {
  static const std::unordered_map<std::string, GenericKernel> kernels = {
      // self + value * t1 * t2
      {"aten::addcmul.out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), at::mul(T(in, 1), T(in, 2)), S(in, 3)));
       }},
      // self + value * t1 / t2
      {"aten::addcdiv.out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), at::div(T(in, 1), T(in, 2)), S(in, 3)));
       }},
      // self + weight * (end - self)
      {"aten::lerp.Scalar_out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), at::sub(T(in, 1), T(in, 0)), S(in, 2)));
       }},
      {"aten::lerp.Tensor_out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), at::mul(at::sub(T(in, 1), T(in, 0)), T(in, 2))));
       }},
      // self - alpha * other == self + (-alpha) * other
      {"aten::sub.out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::add(T(in, 0), T(in, 1), -S(in, 2)));
       }},
      {"aten::rsqrt.out",
       [](const auto& in, auto& out) { return assign(out[0], at::reciprocal(at::sqrt(T(in, 0)))); }},
      {"aten::sigmoid.out",
       [](const auto& in, auto& out) {
         return assign(out[0], at::reciprocal(at::add(at::exp(at::neg(T(in, 0))), 1)));
       }},
      {"aten::silu.out",
       [](const auto& in, auto& out) { return assign(out[0], at::mul(T(in, 0), at::sigmoid(T(in, 0)))); }},
      {"aten::zero.out",
       [](const auto& in, auto& out) {
         (void)in;
         out[0].fill_(0);
         return true;
       }},
      // mean = sum / count over the reduced dims
      {"aten::mean.out",
       [](const auto& in, auto& out) {
         const at::Tensor& self = T(in, 0);
         std::optional<at::IntArrayRef> dims;
         std::vector<int64_t> dim_list;
         if (!in[1].isNone()) dim_list = in[1].toIntVector();
         int64_t count = 1;
         if (dim_list.empty()) {
           count = self.numel();
         } else {
           for (int64_t d : dim_list) count *= self.size(d);
         }
         const bool keepdim = in[2].toBool();
         auto dtype = in[3].isNone() ? std::optional<at::ScalarType>() : in[3].toScalarType();
         at::Tensor sum = dim_list.empty() && !keepdim ? at::sum(self, dtype)
                                                       : at::sum(self, dim_list, keepdim, dtype);
         return assign(out[0], at::div(sum, static_cast<double>(count)));
       }},
  };
  return kernels;
}

}  // namespace

const GenericKernel* find_generic_kernel(const std::string& kernel_name) {
  auto it = registry().find(kernel_name);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> generic_kernel_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : registry()) names.push_back(k);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace fl::binding
