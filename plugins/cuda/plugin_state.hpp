// plugin_state.hpp — lifecycle of the plugin-wide state (init/shutdown) and the properties
// read once per device at init. Used by plugin_entry.cpp; kernels use device_state.hpp.
#pragma once

#include <fl_abi.h>

#include <cstdint>
#include <string>

namespace fl::cuda {

struct CachedProperties {
  std::string name;
  std::string stable_id;  // "GPU-<uuid>", as nvidia-smi prints it
  uint64_t total_memory = 0;
  int32_t sm_count = 0;
  int32_t pci_bus_id = -1;
  int32_t compute_capability = 0;  // major * 10 + minor
};

// Probes the runtime and creates every device's default stream. Raises FL_ERR_NO_DEVICE
// when the driver is missing or no device is visible.
void init_plugin_state(const fl_host_services* host, const std::string& options);
void shutdown_plugin_state();
const CachedProperties& device_properties(int32_t device);
void log_message(int32_t level, const std::string& message);

}  // namespace fl::cuda
