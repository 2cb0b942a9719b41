// inventory.h — what fl-smi reports about the runtime: every plugin file found (loaded or
// skipped, with the step and reason), and every logical device with the plugin's memory
// figures and this process's caching-allocator statistics.
#pragma once

#include "runtime.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fl::smi {

struct PluginRow {
  std::string path;
  std::string origin;        // where discovery found it ("" when unknown)
  bool loaded = false;
  std::string name, version; // loaded only
  std::string abi;           // "1.0"
  std::string build_id;
  int devices = 0;
  size_t kernels = 0;
  std::string step, reason;  // skipped only
};

struct DeviceRow {
  int index = -1;
  std::string plugin;
  int local = -1;
  std::string vendor, name, stable_id;
  uint64_t total_memory = 0;
  bool memory_known = false;    // device_memory_info succeeded
  uint64_t free_bytes = 0;
  uint64_t used_bytes = 0;      // total - free, as the plugin reports it (every process)
  std::string memory_error;
  double memory_fraction = 1.0;
  AllocatorStats allocator;     // this process's caching allocator
};

struct Inventory {
  std::string config_source;    // file read, or "defaults"
  std::string config_error;     // non-empty: the config did not load; defaults were used
  std::vector<PluginRow> plugins;
  std::vector<DeviceRow> devices;
};

// Builds a Runtime (config file + environment; `explicit_plugins` loaded first) and reads it.
// A config that does not parse is reported in config_error and the defaults are used.
Inventory take_inventory(const std::vector<std::string>& explicit_plugins);

}  // namespace fl::smi
