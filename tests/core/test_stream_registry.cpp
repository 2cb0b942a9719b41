// Tests of core/stream_registry on the stub plugin: stream ids, the round-robin pool, the
// per-thread current stream, events and their errors.
#include "plugin_library.h"
#include "stream_registry.h"

#include <catch2/catch.hpp>

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using Catch::Matchers::Contains;
using fl::PluginLibrary;
using fl::StreamRegistry;

std::shared_ptr<PluginLibrary> stub(const std::string& options = "devices=2") {
  auto plugin = PluginLibrary::open(FL_STUB_PLUGIN);
  plugin->initialize(options);
  return plugin;
}

std::string call_log(const PluginLibrary& plugin) {
  auto lookup = plugin.entry(&fl_device_ops::get_proc_address);
  auto log = reinterpret_cast<const char* (*)()>(lookup("stub.call_log"));
  auto reset = reinterpret_cast<void (*)()>(lookup("stub.reset"));
  std::string text = log();
  reset();
  return text;
}

}  // namespace

TEST_CASE("streams: id 0 is the default stream; created streams get ids 1, 2, ...") {
  auto plugin = stub();
  StreamRegistry reg(plugin, 1, 7);
  CHECK(reg.local_device() == 1);
  CHECK(reg.handle(0) == nullptr);
  call_log(*plugin);
  const int64_t a = reg.create(0);
  const int64_t b = reg.create(-1);
  CHECK(a == 1);
  CHECK(b == 2);
  CHECK(reg.handle(a) != nullptr);
  CHECK(reg.handle(a) != reg.handle(b));
  CHECK_THAT(call_log(*plugin), Contains("stream_create(1)\nstream_create(1)"));
  CHECK_THROWS_WITH(reg.handle(3), Contains("fl:7: unknown stream id 3"));
  CHECK_THROWS_AS(reg.handle(-1), fl::Error);
  reg.synchronize(a);
  CHECK(reg.query(b));
  reg.synchronize(0);
  CHECK(reg.query(0));
  reg.synchronize_all();
  const std::string log = call_log(*plugin);
  CHECK_THAT(log, Contains("stream_synchronize(1)\nstream_query(1)\nstream_synchronize(1)\nstream_query(1)\n"
                           "device_synchronize(1)"));
  CHECK_THROWS_AS(reg.synchronize(9), fl::Error);
}

TEST_CASE("streams: the pool creates four streams, then hands them out round robin") {
  auto plugin = stub();
  StreamRegistry reg(plugin, 0, 0);
  std::vector<int64_t> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(reg.from_pool());
  CHECK(ids == std::vector<int64_t>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2});
  CHECK(reg.create(0) == 5);  // streams of their own are outside the pool
  CHECK(reg.from_pool() == 3);
}

TEST_CASE("streams: the pool stays at four streams when threads race to fill it") {
  auto plugin = stub();
  StreamRegistry reg(plugin, 0, 0);
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> got(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) got[t].push_back(reg.from_pool());
    });
  for (auto& th : threads) th.join();
  // A race may create a few extra streams while the pool fills, but never more than one per
  // racing thread, and afterwards only pool streams are returned.
  std::set<int64_t> distinct;
  for (const auto& g : got) distinct.insert(g.begin(), g.end());
  CHECK(distinct.size() <= static_cast<size_t>(StreamRegistry::kPoolSize + 8));
  std::set<int64_t> later;
  for (int i = 0; i < 16; ++i) later.insert(reg.from_pool());
  CHECK(later.size() == static_cast<size_t>(StreamRegistry::kPoolSize));
  const int64_t next_own = reg.create(0);
  CHECK(next_own <= StreamRegistry::kPoolSize + 8 + 1);
}

TEST_CASE("streams: the current stream is per thread and per device") {
  auto plugin = stub();
  StreamRegistry dev0(plugin, 0, 100);
  StreamRegistry dev1(plugin, 1, 101);
  const int64_t s = dev0.create(0);
  const int64_t t = dev1.create(0);
  CHECK(dev0.current() == 0);
  CHECK(dev0.exchange_current(s) == 0);
  CHECK(dev0.current() == s);
  CHECK(dev1.current() == 0);
  CHECK(dev1.exchange_current(t) == 0);
  int64_t seen_in_other_thread = -1;
  std::thread([&] { seen_in_other_thread = dev0.current(); }).join();
  CHECK(seen_in_other_thread == 0);
  CHECK_THROWS_AS(dev0.exchange_current(42), fl::Error);
  CHECK(dev0.current() == s);  // a bad id changes nothing
  CHECK(dev0.exchange_current(0) == s);
  CHECK(dev1.exchange_current(0) == t);
}

TEST_CASE("streams: events record, wait, query, synchronize and time") {
  auto plugin = stub();
  StreamRegistry reg(plugin, 0, 0);
  const int64_t s = reg.create(0);
  fl_event_t start = reg.create_event(true);
  fl_event_t end = reg.create_event(true);
  call_log(*plugin);
  reg.record(start, 0);
  reg.wait(s, start);
  reg.record(end, s);
  CHECK(reg.query_event(end));
  reg.synchronize_event(end);
  CHECK(reg.elapsed_ms(start, end) >= 0.0f);
  CHECK(call_log(*plugin) == "event_record(0)\nstream_wait_event(0)\nevent_record(0)\nevent_query(0)\n"
                             "event_synchronize(0)\nevent_elapsed_ms(0)\n");
  fl_event_t untimed = reg.create_event(false);
  reg.record(untimed, 0);
  CHECK_THROWS_WITH(reg.elapsed_ms(start, untimed), Contains("FL_EVENT_TIMING"));
  CHECK_THROWS_AS(reg.record(untimed, 12), fl::Error);
  reg.destroy_event(start);
  reg.destroy_event(end);
  reg.destroy_event(untimed);
  reg.destroy_event(nullptr);  // no-op
}

TEST_CASE("streams: an event of one device is refused by a stream of another (plugin check)") {
  auto plugin = stub();
  StreamRegistry dev0(plugin, 0, 0);
  StreamRegistry dev1(plugin, 1, 1);
  fl_event_t e = dev0.create_event(false);
  dev0.record(e, 0);
  CHECK_THROWS_WITH(dev1.wait(0, e), Contains("FL_ERR_INVALID_ARGUMENT"));
  dev0.destroy_event(e);
}

TEST_CASE("streams: the registry destroys the streams it created") {
  auto plugin = stub();
  {
    StreamRegistry reg(plugin, 0, 0);
    reg.create(0);
    reg.from_pool();
    call_log(*plugin);
  }
  const std::string log = call_log(*plugin);
  CHECK(log == "stream_destroy(0)\nstream_destroy(0)\n");
}
