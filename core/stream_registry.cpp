#include "stream_registry.h"

#include "error.h"
#include "plugin_library.h"

#include <fmt/format.h>

#include <unordered_map>

namespace fl {
namespace {

// Current stream id per device index, per thread.
std::unordered_map<int, int64_t>& current_streams() {
  thread_local std::unordered_map<int, int64_t> current;
  return current;
}

}  // namespace

StreamRegistry::StreamRegistry(std::shared_ptr<PluginLibrary> plugin, int32_t local_device,
                               int device_index)
    : plugin_(std::move(plugin)), local_(local_device), device_index_(device_index) {}

StreamRegistry::~StreamRegistry() {
  if (!plugin_ || !plugin_->initialized()) return;
  for (fl_stream_t s : streams_) plugin_->ops().stream_destroy(local_, s);
}

fl_stream_t StreamRegistry::handle(int64_t id) const {
  if (id == 0) return nullptr;
  std::lock_guard lock(mutex_);
  if (id < 0 || static_cast<size_t>(id) > streams_.size())
    throw Error(fmt::format("fl:{}: unknown stream id {}", device_index_, id), FL_ERR_INVALID_ARGUMENT);
  return streams_[static_cast<size_t>(id - 1)];
}

int64_t StreamRegistry::create(int32_t priority) {
  fl_stream_t s = nullptr;
  plugin_->check(plugin_->ops().stream_create(local_, priority, &s), "stream_create");
  std::lock_guard lock(mutex_);
  streams_.push_back(s);
  return static_cast<int64_t>(streams_.size());
}

int64_t StreamRegistry::from_pool() {
  {
    std::lock_guard lock(mutex_);
    if (pool_.size() >= static_cast<size_t>(kPoolSize)) return pool_[pool_next_++ % pool_.size()];
  }
  // Created outside the lock (a plugin call). Threads racing here may each create one; only
  // the first kPoolSize join the pool, the others stay registered streams of their caller.
  int64_t id = create(0);
  std::lock_guard lock(mutex_);
  if (pool_.size() < static_cast<size_t>(kPoolSize)) pool_.push_back(id);
  return id;
}

int64_t StreamRegistry::current() const {
  auto& cur = current_streams();
  auto it = cur.find(device_index_);
  return it == cur.end() ? 0 : it->second;
}

int64_t StreamRegistry::exchange_current(int64_t id) {
  (void)handle(id);  // validates
  auto& cur = current_streams();
  int64_t previous = current();
  cur[device_index_] = id;
  return previous;
}

void StreamRegistry::synchronize(int64_t id) {
  plugin_->check(plugin_->ops().stream_synchronize(local_, handle(id)), "stream_synchronize");
}

bool StreamRegistry::query(int64_t id) {
  int32_t done = 0;
  plugin_->check(plugin_->ops().stream_query(local_, handle(id), &done), "stream_query");
  return done != 0;
}

std::vector<int64_t> StreamRegistry::ids() const {
  std::lock_guard lock(mutex_);
  std::vector<int64_t> out(streams_.size() + 1);
  for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<int64_t>(k);
  return out;
}

void StreamRegistry::synchronize_all() {
  plugin_->check(plugin_->ops().device_synchronize(local_), "device_synchronize");
}

fl_event_t StreamRegistry::create_event(bool timing) {
  fl_event_t e = nullptr;
  plugin_->check(plugin_->ops().event_create(local_, timing ? FL_EVENT_TIMING : 0u, &e),
                 "event_create");
  return e;
}

void StreamRegistry::destroy_event(fl_event_t event) {
  if (event != nullptr) plugin_->check(plugin_->ops().event_destroy(local_, event), "event_destroy");
}

void StreamRegistry::record(fl_event_t event, int64_t stream_id) {
  plugin_->check(plugin_->ops().event_record(local_, event, handle(stream_id)), "event_record");
}

void StreamRegistry::wait(int64_t stream_id, fl_event_t event) {
  plugin_->check(plugin_->ops().stream_wait_event(local_, handle(stream_id), event),
                 "stream_wait_event");
}

bool StreamRegistry::query_event(fl_event_t event) {
  int32_t done = 0;
  plugin_->check(plugin_->ops().event_query(local_, event, &done), "event_query");
  return done != 0;
}

void StreamRegistry::synchronize_event(fl_event_t event) {
  plugin_->check(plugin_->ops().event_synchronize(local_, event), "event_synchronize");
}

float StreamRegistry::elapsed_ms(fl_event_t start, fl_event_t end) {
  auto fn = plugin_->entry(&fl_device_ops::event_elapsed_ms);
  if (fn == nullptr)
    throw NotSupportedError(fmt::format("fl:{}: plugin '{}' does not time events", device_index_,
                                        plugin_->name()));
  float ms = 0;
  plugin_->check(fn(local_, start, end, &ms), "event_elapsed_ms");
  return ms;
}

}  // namespace fl
