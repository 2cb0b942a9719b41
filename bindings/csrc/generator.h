// generator.h — one random generator per fl device (reproducible with torch.fl.manual_seed).
// Random ops run through the CPU fallback with a CPU generator whose state is that of the
// device's generator before the op and is written back after it, so the stream of numbers
// on fl:N is exactly that of a CPU generator with the same seed.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace fl::binding {

class FlGeneratorImpl : public at::CPUGeneratorImpl {
 public:
  explicit FlGeneratorImpl(c10::DeviceIndex device_index);
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
};

const at::Generator& default_generator(c10::DeviceIndex device_index);
at::Generator new_generator(c10::DeviceIndex device_index);

}  // namespace fl::binding
