#include "generator.h"

#include "fl_context.h"

#include <mutex>
#include <vector>

namespace fl::binding {

FlGeneratorImpl::FlGeneratorImpl(c10::DeviceIndex device_index) {
  device_ = c10::Device(c10::DeviceType::PrivateUse1, device_index);
  key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
}

const at::Generator& default_generator(c10::DeviceIndex device_index) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    const int n = device_count_noexcept();
    for (int i = 0; i < n; ++i) {
      generators.push_back(at::make_generator<FlGeneratorImpl>(static_cast<c10::DeviceIndex>(i)));
      generators.back().set_current_seed(c10::detail::getNonDeterministicRandom());
    }
  });
  const c10::DeviceIndex idx = device_index == -1 ? current_device() : device_index;
  TORCH_CHECK(idx >= 0 && idx < static_cast<c10::DeviceIndex>(generators.size()),
              "no fl device ", static_cast<int>(idx), " for a generator");
  return generators[idx];
}

at::Generator new_generator(c10::DeviceIndex device_index) {
  const c10::DeviceIndex idx = device_index == -1 ? current_device() : device_index;
  return at::make_generator<FlGeneratorImpl>(idx);
}

}  // namespace fl::binding
