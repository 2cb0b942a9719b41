// runtime.h — the Torch-FL runtime: config, loaded plugins, the logical devices and, per
// device, its caching allocator, stream registry and dispatch table. Built once; then
// read-only apart from the allocators' and registries' own thread-safe state.
//
// Loading, each step logged at debug level (FL_LOG_LEVEL=debug shows the trace):
//   config → discovery → for each candidate: refused? → open (symbol, table, version, sizes,
//   required entries) → enable/disable by name → duplicate name? → init → devices → kernels.
// A plugin failing any step is skipped with its reason (skipped_plugins()); nothing a plugin
// does at load can take the process down short of a crash inside its own code.
#pragma once

#include "caching_allocator.h"
#include "config.h"
#include "device_registry.h"
#include "dispatch_table.h"
#include "stream_registry.h"

#include <memory>
#include <string>
#include <vector>

namespace fl {

class PluginLibrary;

struct SkippedPlugin {
  std::string path;
  std::string origin;   // where discovery found it
  std::string step;     // the load step that failed ("open", "init", "duplicate", ...)
  std::string reason;
};

struct RuntimeOptions {
  std::vector<std::string> plugin_files;  // loaded first, before FL_PLUGIN_PATH
  bool use_config_file = true;            // false: defaults + env only (tests)
  Config config;                          // used when use_config_file is false
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The process-wide runtime, built on first use from the config file and environment.
  // Never destroyed: tensors may outlive static destructors, and plugins must not be
  // unloaded while anything they made is alive.
  static Runtime& global();

  const Config& config() const { return config_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  const LogicalDevice& device(int index) const;
  CachingAllocator& allocator(int index);
  StreamRegistry& streams(int index);
  const DispatchTable& dispatch(int index) const;
  const std::vector<std::shared_ptr<PluginLibrary>>& plugins() const { return plugins_; }
  const std::vector<SkippedPlugin>& skipped_plugins() const { return skipped_; }

  // Orders work that `dst_stream` of device `dst` enqueues from now on after the work
  // enqueued so far on `src_stream` of `src`: an event wait on one device, or on two devices
  // of a plugin that offers "fl.stream_wait_peer_event"; otherwise (across plugins) a host
  // wait for the source stream.
  void order_after(int dst, int64_t dst_stream, int src, int64_t src_stream);
  // Orders work that `dst_stream` of device `dst` enqueues from now on after `event`, an
  // event of device `src` (from streams(src).create_event): the same waits as order_after,
  // the host waiting for the event itself where the devices cannot.
  void wait_event(int dst, int64_t dst_stream, int src, fl_event_t event);

 private:
  // The plugin's "fl.stream_wait_peer_event" when dst and src are two devices of one plugin
  // that offers it; nullptr otherwise.
  fl_stream_wait_peer_event_fn peer_wait(int dst, int src) const;
  // wait_event with `peer` = peer_wait(dst, src) already looked up (nullptr when dst == src).
  void device_wait(int dst, int64_t dst_stream, int src, fl_event_t event, fl_stream_wait_peer_event_fn peer);
  void load_plugins(const std::vector<std::string>& explicit_files);
  void check_index(int index) const;

  Config config_;
  std::vector<std::shared_ptr<PluginLibrary>> plugins_;
  std::vector<SkippedPlugin> skipped_;
  std::vector<LogicalDevice> devices_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
  std::vector<std::unique_ptr<StreamRegistry>> streams_;
  std::vector<DispatchTable> tables_;      // one per plugin, same order as plugins_
  std::vector<size_t> table_of_device_;    // device index → tables_ index
};

}  // namespace fl
