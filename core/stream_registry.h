// stream_registry.h — the streams of one logical device. A stream is named by an id:
// 0 is the device's default stream (fl_stream_t NULL); ids >= 1 are streams created through
// the registry and kept until the registry is destroyed (like CUDA's stream pool, so an id
// stays valid for as long as PyTorch may hold it). Thread-safe. The current stream is per
// thread and per device.
#pragma once

#include <fl_abi.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace fl {

class PluginLibrary;

class StreamRegistry {
 public:
  StreamRegistry(std::shared_ptr<PluginLibrary> plugin, int32_t local_device, int device_index);
  ~StreamRegistry();
  StreamRegistry(const StreamRegistry&) = delete;
  StreamRegistry& operator=(const StreamRegistry&) = delete;

  fl_stream_t handle(int64_t id) const;   // throws fl::Error for an unknown id
  int64_t create(int32_t priority);       // a new stream of its own
  int64_t from_pool();                    // one of a small round-robin pool
  int64_t current() const;                // this thread's current stream (default 0)
  int64_t exchange_current(int64_t id);   // sets it, returns the previous one
  void synchronize(int64_t id);
  bool query(int64_t id);
  void synchronize_all();
  std::vector<int64_t> ids() const;       // every stream so far: 0 and each created or pooled one

  // Events (plugin handles, owned by the caller until destroy_event).
  fl_event_t create_event(bool timing);
  void destroy_event(fl_event_t event);
  void record(fl_event_t event, int64_t stream_id);
  void wait(int64_t stream_id, fl_event_t event);
  bool query_event(fl_event_t event);
  void synchronize_event(fl_event_t event);
  float elapsed_ms(fl_event_t start, fl_event_t end);

  int32_t local_device() const { return local_; }
  const PluginLibrary& plugin() const { return *plugin_; }

  static constexpr int kPoolSize = 4;

 private:
  std::shared_ptr<PluginLibrary> plugin_;
  int32_t local_;
  int device_index_;
  mutable std::mutex mutex_;
  std::deque<fl_stream_t> streams_;   // id k >= 1 → streams_[k - 1]
  std::vector<int64_t> pool_;
  size_t pool_next_ = 0;
};

}  // namespace fl
