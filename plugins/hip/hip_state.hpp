// hip_state.hpp — lifecycle of the HIP plugin's state (init/shutdown) and the properties read
// once per device at init. The per-device state that kernels use is declared by the shared
// plugins/cuda/device_state.hpp (staged next to the kernel sources) and defined, for HIP, in
// hip_device_state.cpp.
#pragma once

#include <fl_abi.h>

#include <cstdint>
#include <string>

namespace fl::hip {

struct HipProperties {
  std::string name;          // marketing name (hipDeviceProp_t.name), else the gfx arch name
  std::string arch;          // gcnArchName, e.g. "gfx90a:sramecc+:xnack-"
  std::string stable_id;     // "GPU-<uuid>" when the runtime reports a UUID, else "pci:<bus id>"
  uint64_t total_memory = 0;
  int32_t compute_units = 0;  // multiProcessorCount: CUs
  int32_t pci_bus_id = -1;
};

// Probes the HIP runtime and creates every device's default stream. Raises FL_ERR_NO_DEVICE
// with the runtime's own error text when no AMD GPU (or no driver) is present.
void init_hip_state(const fl_host_services* host, const std::string& options);
void shutdown_hip_state();
const HipProperties& hip_properties(int32_t device);
void log_message(int32_t level, const std::string& message);

}  // namespace fl::hip
