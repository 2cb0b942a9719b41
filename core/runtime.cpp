#include "runtime.h"

#include "error.h"
#include "isolated_probe.h"
#include "log.h"
#include "plugin_discovery.h"
#include "plugin_library.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace fl {
namespace {

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

DeviceMemoryBackend make_backend(std::shared_ptr<PluginLibrary> plugin, int32_t local) {
  DeviceMemoryBackend b;
  const fl_device_ops* ops = &plugin->ops();
  b.malloc = [ops, local](size_t n, void** p) { return ops->fl_malloc(local, n, p); };
  b.free = [ops, local](void* p) { ops->fl_free(local, p); };
  b.synchronize = [plugin, local]() {
    plugin->check(plugin->ops().device_synchronize(local), "device_synchronize");
  };
  b.record_event = [plugin, local](fl_stream_t s) {
    fl_event_t e = nullptr;
    plugin->check(plugin->ops().event_create(local, 0, &e), "event_create");
    plugin->check(plugin->ops().event_record(local, e, s), "event_record");
    return e;
  };
  b.event_done = [plugin, local](fl_event_t e) {
    int32_t done = 0;
    plugin->check(plugin->ops().event_query(local, e, &done), "event_query");
    return done != 0;
  };
  b.destroy_event = [ops, local](fl_event_t e) { ops->event_destroy(local, e); };
  b.last_error = [plugin]() { return plugin->last_error(); };
  return b;
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) {
  config_ = options.use_config_file ? load_config() : options.config;
  if (!options.use_config_file) apply_env_overrides(config_);
  configure_logging(config_.logging.level, config_.logging.path);
  log().debug("runtime: config from {}", config_.source.empty() ? "defaults" : config_.source);
  load_plugins(options.plugin_files);
  devices_ = build_device_list(plugins_, config_);

  std::map<const PluginLibrary*, size_t> table_index;
  for (const auto& p : plugins_) {
    table_index[p.get()] = tables_.size();
    tables_.emplace_back(p->kernels());
  }
  for (const auto& d : devices_) {
    table_of_device_.push_back(table_index.at(d.plugin.get()));
    streams_.push_back(std::make_unique<StreamRegistry>(d.plugin, d.local, d.index));
    allocators_.push_back(std::make_unique<CachingAllocator>(
        fmt::format("fl:{}", d.index), make_backend(d.plugin, d.local), d.props.total_memory,
        d.memory_fraction));
  }
  log().info("runtime: {} device(s) from {} plugin(s); {} plugin file(s) skipped",
             devices_.size(), plugins_.size(), skipped_.size());
}

Runtime::~Runtime() {
  allocators_.clear();
  streams_.clear();
  for (auto& p : plugins_) p->shutdown();
}

Runtime& Runtime::global() {
  static Runtime* runtime = new Runtime(RuntimeOptions{});
  return *runtime;
}

void Runtime::load_plugins(const std::vector<std::string>& explicit_files) {
  std::map<std::string, std::string> loaded_names;  // name → path
  const std::vector<PluginCandidate> candidates = discover_plugins(explicit_files, config_.plugins);
  // Isolated discovery: every candidate is probed in a child first, before any is loaded here.
  std::map<std::string, std::string> probe_failures;  // path → reason
  if (config_.plugins.isolated_discovery) probe_failures = probe_candidates(candidates, config_);
  for (const auto& c : candidates) {
    const std::string path = c.path.string();
    auto skip = [&](const std::string& step, const std::string& reason) {
      // A plugin whose driver or device is absent is the normal case on most machines (the
      // CUDA plugin on a CPU box): info, not a warning. Broken plugins warn.
      const bool no_device = reason.rfind("no device", 0) == 0;
      log().log(no_device ? spdlog::level::info : spdlog::level::warn,
                "plugin {} skipped at step '{}': {}", path, step, reason);
      skipped_.push_back({path, c.origin, step, reason});
    };
    log().debug("plugin {}: found via {}", path, c.origin);
    if (!c.refused.empty()) {
      skip("permissions", c.refused + " (set plugins.allow_world_writable to load it anyway)");
      continue;
    }
    if (auto failed = probe_failures.find(path); failed != probe_failures.end()) {
      skip("probe", failed->second);
      continue;
    }
    std::shared_ptr<PluginLibrary> lib;
    try {
      lib = PluginLibrary::open(c.path);
    } catch (const PluginLoadError& e) {
      skip(to_string(e.step()), e.reason());
      continue;
    }
    const std::string& name = lib->name();
    if (!config_.plugins.enable.empty() && !listed(config_.plugins.enable, name)) {
      skip("select", fmt::format("plugin '{}' is not in plugins.enable", name));
      continue;
    }
    if (listed(config_.plugins.disable, name)) {
      skip("select", fmt::format("plugin '{}' is in plugins.disable", name));
      continue;
    }
    if (auto it = loaded_names.find(name); it != loaded_names.end()) {
      skip("duplicate", fmt::format("plugin '{}' is already loaded from {}", name, it->second));
      continue;
    }
    try {
      lib->initialize(config_.plugin_options(name));
    } catch (const PluginLoadError& e) {
      skip(to_string(e.step()), e.reason());
      continue;
    }
    log().info("plugin {} loaded: '{}' {} (ABI {}.{}, build id {}), {} device(s), {} kernel(s)",
               path, name, lib->version(), lib->abi_major(), lib->abi_minor(),
               lib->build_id().empty() ? "none" : lib->build_id(), lib->device_count(),
               lib->kernels().size());
    loaded_names[name] = path;
    plugins_.push_back(std::move(lib));
  }
}

void Runtime::check_index(int index) const {
  if (index < 0 || index >= device_count())
    throw Error(fmt::format("invalid device fl:{} ({} fl device(s) available)", index, device_count()),
                FL_ERR_INVALID_ARGUMENT);
}

const LogicalDevice& Runtime::device(int index) const {
  check_index(index);
  return devices_[index];
}

CachingAllocator& Runtime::allocator(int index) {
  check_index(index);
  return *allocators_[index];
}

StreamRegistry& Runtime::streams(int index) {
  check_index(index);
  return *streams_[index];
}

const DispatchTable& Runtime::dispatch(int index) const {
  check_index(index);
  return tables_[table_of_device_[index]];
}

fl_stream_wait_peer_event_fn Runtime::peer_wait(int dst, int src) const {
  const LogicalDevice& to = devices_[dst];
  const LogicalDevice& from = devices_[src];
  if (to.plugin != from.plugin || to.local == from.local) return nullptr;
  return reinterpret_cast<fl_stream_wait_peer_event_fn>(to.plugin->extra(FL_EXTRA_STREAM_WAIT_PEER_EVENT));
}

void Runtime::order_after(int dst, int64_t dst_stream, int src, int64_t src_stream) {
  check_index(dst);
  check_index(src);
  StreamRegistry& s = streams(src);
  StreamRegistry& d = streams(dst);
  (void)s.handle(src_stream);  // validate both ids before anything is created
  (void)d.handle(dst_stream);
  if (dst == src && dst_stream == src_stream) return;
  // fl_abi.h: stream_wait_event takes an event of the same device only, so an event orders
  // streams of one plugin device, and the extra "fl.stream_wait_peer_event" (where the plugin
  // offers it) streams of two of its devices; anything else waits for the source stream on
  // the host (without an event).
  const fl_stream_wait_peer_event_fn peer = dst == src ? nullptr : peer_wait(dst, src);
  if (dst != src && peer == nullptr) {
    s.synchronize(src_stream);
    return;
  }
  fl_event_t e = s.create_event(false);
  try {
    s.record(e, src_stream);
    device_wait(dst, dst_stream, src, e, peer);
  } catch (...) {
    s.destroy_event(e);
    throw;
  }
  s.destroy_event(e);
}

void Runtime::wait_event(int dst, int64_t dst_stream, int src, fl_event_t event) {
  check_index(dst);
  check_index(src);
  device_wait(dst, dst_stream, src, event, dst == src ? nullptr : peer_wait(dst, src));
}

void Runtime::device_wait(int dst, int64_t dst_stream, int src, fl_event_t event,
                          fl_stream_wait_peer_event_fn peer) {
  StreamRegistry& d = streams(dst);
  if (dst == src) {
    d.wait(dst_stream, event);
  } else if (peer != nullptr) {
    const LogicalDevice& to = devices_[dst];
    to.plugin->check(peer(to.local, d.handle(dst_stream), devices_[src].local, event),
                     FL_EXTRA_STREAM_WAIT_PEER_EVENT);
  } else {
    streams(src).synchronize_event(event);
  }
}

}  // namespace fl
