// runtime_checks.cpp — device properties, memory, copies, streams, events, error paths, leaks,
// and the "fl." extras of get_proc_address a plugin offers.
#include "runtime_checks.h"

#include "error.h"

#include <cstring>
#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <vector>

namespace fl::check {
namespace {

constexpr int32_t kDevice = 0;

// Device memory freed on scope exit.
struct Block {
  const PluginLibrary& plugin;
  void* ptr = nullptr;
  Block(const PluginLibrary& p, size_t bytes) : plugin(p) {
    plugin.check(plugin.ops().fl_malloc(kDevice, bytes, &ptr), "fl_malloc(" + std::to_string(bytes) + ")");
  }
  ~Block() { plugin.ops().fl_free(kDevice, ptr); }
  Block(const Block&) = delete;
};

// A stream of `device`, drained and destroyed on scope exit (also when a check throws).
struct OwnedStream {
  const PluginLibrary& plugin;
  int32_t device;
  fl_stream_t stream = nullptr;
  OwnedStream(const PluginLibrary& p, int32_t d) : plugin(p), device(d) {
    plugin.check(plugin.ops().stream_create(device, 0, &stream), "stream_create(device " + std::to_string(d) + ")");
  }
  ~OwnedStream() {
    plugin.ops().stream_synchronize(device, stream);
    plugin.ops().stream_destroy(device, stream);
  }
  OwnedStream(const OwnedStream&) = delete;
};

// An event of `device`, destroyed on scope exit.
struct OwnedEvent {
  const PluginLibrary& plugin;
  int32_t device;
  fl_event_t event = nullptr;
  OwnedEvent(const PluginLibrary& p, int32_t d) : plugin(p), device(d) {
    plugin.check(plugin.ops().event_create(device, 0, &event), "event_create(device " + std::to_string(d) + ")");
  }
  ~OwnedEvent() { plugin.ops().event_destroy(device, event); }
  OwnedEvent(const OwnedEvent&) = delete;
};

// What is wrong with how an invalid call (`what`) answered, "" when it returned an error with
// a message in last_error.
std::string error_path_problem(const PluginLibrary& p, const std::string& what, fl_status_t s) {
  if (s == FL_OK) return what + " returned FL_OK; ";
  if (p.last_error().empty()) return what + " returned " + status_name(s) + " with an empty last_error; ";
  return "";
}

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + salt);
  return v;
}

void upload(const PluginLibrary& p, void* dst, const std::vector<uint8_t>& src, fl_stream_t stream) {
  p.check(p.ops().fl_memcpy_async(kDevice, dst, src.data(), src.size(), FL_MEMCPY_HOST_TO_DEVICE, stream), "fl_memcpy_async(H2D)");
}

std::vector<uint8_t> download(const PluginLibrary& p, const void* src, size_t n, fl_stream_t stream) {
  std::vector<uint8_t> out(n);
  p.check(p.ops().fl_memcpy_async(kDevice, out.data(), src, n, FL_MEMCPY_DEVICE_TO_HOST, stream), "fl_memcpy_async(D2H)");
  p.check(p.ops().stream_synchronize(kDevice, stream), "stream_synchronize");
  return out;
}

Status check_properties(const PluginLibrary& p, std::string& message) {
  std::set<std::string> ids;
  std::string problems;
  for (size_t d = 0; d < p.devices().size(); ++d) {
    const fl_device_properties& props = p.devices()[d];
    const std::string at = "device " + std::to_string(d) + ": ";
    std::string id = props.stable_id;
    if (id.empty()) problems += at + "empty stable_id; ";
    else if (!ids.insert(id).second) problems += at + "stable_id '" + id + "' not unique; ";
    if (props.alignment == 0 || (props.alignment & (props.alignment - 1)) != 0)
      problems += at + "alignment " + std::to_string(props.alignment) + " is not a power of two; ";
    if (props.total_memory == 0) problems += at + "total_memory is 0; ";
    if (props.name[0] == '\0') problems += at + "empty name; ";
  }
  if (!problems.empty()) {
    message = problems;
    return Status::Fail;
  }
  message = std::to_string(p.devices().size()) + " device(s): ";
  for (const auto& props : p.devices()) message += std::string(props.name) + " [" + props.stable_id + "] ";
  return Status::Pass;
}

Status check_memory(const PluginLibrary& p, std::string& message) {
  const fl_device_properties& props = p.devices()[kDevice];
  std::string problems;
  int sizes_checked = 0;
  for (size_t size : {size_t{1}, size_t{3}, size_t{64}, size_t{1000}, size_t{4096}, size_t{1} << 20, size_t{64} << 20}) {
    if (size * 4 > props.total_memory) continue;
    void* ptr = nullptr;
    p.check(p.ops().fl_malloc(kDevice, size, &ptr), "fl_malloc(" + std::to_string(size) + ")");
    if (ptr == nullptr) problems += "fl_malloc(" + std::to_string(size) + ") returned FL_OK and NULL; ";
    else if (reinterpret_cast<uintptr_t>(ptr) % props.alignment != 0)
      problems += "fl_malloc(" + std::to_string(size) + ") not aligned to " + std::to_string(props.alignment) + "; ";
    p.check(p.ops().fl_free(kDevice, ptr), "fl_free");
    ++sizes_checked;
  }
  void* ptr = nullptr;
  fl_status_t zero = p.ops().fl_malloc(kDevice, 0, &ptr);
  if (zero == FL_OK) problems += "fl_malloc(0) returned FL_OK; ";
  else if (p.last_error().empty()) problems += "fl_malloc(0) failed without a last_error message; ";
  if (fl_status_t s = p.ops().fl_free(kDevice, nullptr); s != FL_OK)
    problems += std::string("fl_free(NULL) returned ") + status_name(s) + "; ";
  fl_status_t absurd = p.ops().fl_malloc(kDevice, SIZE_MAX / 2, &ptr);
  if (absurd != FL_ERR_OUT_OF_MEMORY)
    problems += std::string("fl_malloc(SIZE_MAX/2) returned ") + status_name(absurd) + ", not FL_ERR_OUT_OF_MEMORY; ";
  uint64_t free_bytes = 0, total_bytes = 0;
  p.check(p.ops().device_memory_info(kDevice, &free_bytes, &total_bytes), "device_memory_info");
  if (total_bytes == 0 || free_bytes > total_bytes)
    problems += "device_memory_info: free " + std::to_string(free_bytes) + " total " + std::to_string(total_bytes) + "; ";
  if (!problems.empty()) {
    message = problems;
    return Status::Fail;
  }
  message = std::to_string(sizes_checked) + " sizes aligned to " + std::to_string(props.alignment) +
            "; size 0 -> " + status_name(zero) + "; absurd size -> FL_ERR_OUT_OF_MEMORY; free " +
            std::to_string(free_bytes >> 20) + " of " + std::to_string(total_bytes >> 20) + " MiB";
  return Status::Pass;
}

Status check_copies(const PluginLibrary& p, std::string& message) {
  const size_t n = 4096 + 13;
  fl_stream_t stream = nullptr;
  p.check(p.ops().stream_create(kDevice, 0, &stream), "stream_create");
  std::string problems;
  for (fl_stream_t s : {fl_stream_t{nullptr}, stream}) {
    const std::string on = s == nullptr ? " (default stream)" : " (created stream)";
    Block a(p, n), b(p, n);
    auto data = pattern(n, s == nullptr ? 1 : 2);
    upload(p, a.ptr, data, s);
    p.check(p.ops().fl_memcpy_async(kDevice, b.ptr, a.ptr, n, FL_MEMCPY_DEVICE_TO_DEVICE, s), "fl_memcpy_async(D2D)");
    if (download(p, b.ptr, n, s) != data) problems += "H2D -> D2D -> D2H mismatch" + on + "; ";
    std::vector<uint8_t> host_copy(n);
    p.check(p.ops().fl_memcpy_async(kDevice, host_copy.data(), data.data(), n, FL_MEMCPY_HOST_TO_HOST, s), "fl_memcpy_async(H2H)");
    p.check(p.ops().stream_synchronize(kDevice, s), "stream_synchronize");
    if (host_copy != data) problems += "H2H mismatch" + on + "; ";
  }
  p.check(p.ops().stream_destroy(kDevice, stream), "stream_destroy");
  if (!problems.empty()) {
    message = problems;
    return Status::Fail;
  }
  message = "H2D, D2D, D2H, H2H of " + std::to_string(n) + " bytes verified on the default and a created stream";
  return Status::Pass;
}

// Copies large enough that a GPU plugin may stage them itself, in chunks through pinned
// buffers of its own (the CUDA plugin does, from pageable memory): 40 MiB + 13 bytes at odd
// offsets on both sides, two uploads queued back to back (the second may reuse the staging
// buffers while the first's last chunks are in flight), on the default and a created stream.
Status check_large_copies(const PluginLibrary& p, std::string& message) {
  const size_t n = (size_t{40} << 20) + 13;
  if (8 * n > p.devices()[kDevice].total_memory) {
    message = "device memory under 8 x 40 MiB";
    return Status::Skip;
  }
  OwnedStream created(p, kDevice);
  std::string problems;
  for (fl_stream_t s : {fl_stream_t{nullptr}, created.stream}) {
    const std::string on = s == nullptr ? " (default stream)" : " (created stream)";
    Block a(p, n + 5), b(p, n + 5);
    const auto first = pattern(n + 7, 3), second = pattern(n + 7, 4);
    p.check(p.ops().fl_memcpy_async(kDevice, static_cast<char*>(a.ptr) + 5, first.data() + 7, n,
                                    FL_MEMCPY_HOST_TO_DEVICE, s), "fl_memcpy_async(H2D, 40 MiB)");
    p.check(p.ops().fl_memcpy_async(kDevice, static_cast<char*>(b.ptr) + 5, second.data() + 7, n,
                                    FL_MEMCPY_HOST_TO_DEVICE, s), "fl_memcpy_async(H2D, 40 MiB)");
    const auto got_first = download(p, static_cast<char*>(a.ptr) + 5, n, s);
    const auto got_second = download(p, static_cast<char*>(b.ptr) + 5, n, s);
    if (!std::equal(got_first.begin(), got_first.end(), first.begin() + 7)) problems += "first upload mismatch" + on + "; ";
    if (!std::equal(got_second.begin(), got_second.end(), second.begin() + 7)) problems += "second upload mismatch" + on + "; ";
  }
  if (!problems.empty()) {
    message = problems;
    return Status::Fail;
  }
  message = "two H2D copies of " + std::to_string(n) + " bytes at odd offsets, back to back, verified on the default and a created stream";
  return Status::Pass;
}

Status check_memset(const PluginLibrary& p, std::string& message) {
  const size_t n = 1000;
  Block a(p, n);
  p.check(p.ops().fl_memset_async(kDevice, a.ptr, 0xAB, n, nullptr), "fl_memset_async");
  p.check(p.ops().fl_memset_async(kDevice, static_cast<char*>(a.ptr) + 5, 0x11, 100, nullptr), "fl_memset_async(offset)");
  auto got = download(p, a.ptr, n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = (i >= 5 && i < 105) ? 0x11 : 0xAB;
    if (got[i] != want) {
      message = "byte " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " + std::to_string(want);
      return Status::Fail;
    }
  }
  message = "whole block and an unaligned sub-range verified";
  return Status::Pass;
}

Status check_stream_ordering(const PluginLibrary& p, std::string& message) {
  const size_t n = 4096, hops = 100;
  fl_stream_t stream = nullptr;
  p.check(p.ops().stream_create(kDevice, 0, &stream), "stream_create");
  std::vector<std::unique_ptr<Block>> chain;
  for (size_t i = 0; i <= hops; ++i) chain.push_back(std::make_unique<Block>(p, n));
  for (size_t i = 1; i <= hops; ++i) p.check(p.ops().fl_memset_async(kDevice, chain[i]->ptr, 0, n, stream), "fl_memset_async");
  auto data = pattern(n, 7);
  upload(p, chain[0]->ptr, data, stream);
  for (size_t i = 0; i < hops; ++i)
    p.check(p.ops().fl_memcpy_async(kDevice, chain[i + 1]->ptr, chain[i]->ptr, n, FL_MEMCPY_DEVICE_TO_DEVICE, stream), "fl_memcpy_async(D2D)");
  auto got = download(p, chain[hops]->ptr, n, stream);
  int32_t done = 0;
  p.check(p.ops().stream_query(kDevice, stream, &done), "stream_query");
  p.check(p.ops().stream_destroy(kDevice, stream), "stream_destroy");
  if (got != data) {
    message = "the end of a chain of " + std::to_string(hops) + " dependent copies does not hold the data";
    return Status::Fail;
  }
  if (done != 1) {
    message = "stream_query reports work pending after stream_synchronize";
    return Status::Fail;
  }
  message = std::to_string(hops) + " dependent copies ran in order; stream_query done after synchronize";
  return Status::Pass;
}

Status check_events(const PluginLibrary& p, std::string& message) {
  const size_t n = 1 << 16;
  fl_stream_t s1 = nullptr, s2 = nullptr;
  fl_event_t start = nullptr, end = nullptr, never = nullptr;
  p.check(p.ops().stream_create(kDevice, 0, &s1), "stream_create");
  p.check(p.ops().stream_create(kDevice, 0, &s2), "stream_create");
  p.check(p.ops().event_create(kDevice, FL_EVENT_TIMING, &start), "event_create(TIMING)");
  p.check(p.ops().event_create(kDevice, FL_EVENT_TIMING, &end), "event_create(TIMING)");
  p.check(p.ops().event_create(kDevice, 0, &never), "event_create");
  std::string problems;
  {
    Block a(p, n), b(p, n);
    auto data = pattern(n, 3);
    p.check(p.ops().event_record(kDevice, start, s1), "event_record");
    upload(p, a.ptr, data, s1);
    p.check(p.ops().event_record(kDevice, end, s1), "event_record");
    // s2 copies what s1 wrote, after waiting for `end`.
    p.check(p.ops().stream_wait_event(kDevice, s2, end), "stream_wait_event");
    p.check(p.ops().fl_memcpy_async(kDevice, b.ptr, a.ptr, n, FL_MEMCPY_DEVICE_TO_DEVICE, s2), "fl_memcpy_async(D2D)");
    if (download(p, b.ptr, n, s2) != data) problems += "a copy on stream 2 after stream_wait_event did not see stream 1's data; ";
    p.check(p.ops().event_synchronize(kDevice, end), "event_synchronize");
    int32_t done = 0;
    p.check(p.ops().event_query(kDevice, end, &done), "event_query");
    if (done != 1) problems += "event_query after event_synchronize reports pending; ";
    done = 0;
    p.check(p.ops().event_query(kDevice, never, &done), "event_query(never recorded)");
    if (done != 1) problems += "event_query of a never-recorded event reports pending; ";
  }
  std::string timing = "event_elapsed_ms not provided";
  if (auto elapsed = p.entry(&fl_device_ops::event_elapsed_ms)) {
    float ms = -1;
    p.check(elapsed(kDevice, start, end, &ms), "event_elapsed_ms");
    if (!(ms >= 0)) problems += "event_elapsed_ms gave " + std::to_string(ms) + "; ";
    timing = "elapsed " + std::to_string(ms) + " ms";
  }
  for (fl_event_t e : {start, end, never}) p.check(p.ops().event_destroy(kDevice, e), "event_destroy");
  p.check(p.ops().stream_destroy(kDevice, s1), "stream_destroy");
  p.check(p.ops().stream_destroy(kDevice, s2), "stream_destroy");
  if (!problems.empty()) {
    message = problems;
    return Status::Fail;
  }
  message = "record/query/synchronize, wait across two streams; " + timing;
  return Status::Pass;
}

Status check_error_paths(const PluginLibrary& p, std::string& message) {
  const auto& o = p.ops();
  const int32_t bad = p.device_count() + 7;
  fl_device_properties props{};
  props.struct_size = sizeof(props);
  uint64_t u = 0;
  void* ptr = nullptr;
  int32_t i = 0;
  fl_stream_t stream = nullptr;
  fl_event_t event = nullptr;
  std::vector<std::pair<std::string, std::function<fl_status_t()>>> cases = {
      {"device_count(NULL)", [&] { return o.device_count(nullptr); }},
      {"device_get_properties(bad device)", [&] { return o.device_get_properties(bad, &props); }},
      {"device_get_properties(NULL)", [&] { return o.device_get_properties(kDevice, nullptr); }},
      {"device_memory_info(bad device)", [&] { return o.device_memory_info(bad, &u, &u); }},
      {"device_memory_info(NULL)", [&] { return o.device_memory_info(kDevice, nullptr, nullptr); }},
      {"device_synchronize(bad device)", [&] { return o.device_synchronize(bad); }},
      {"fl_malloc(bad device)", [&] { return o.fl_malloc(bad, 64, &ptr); }},
      {"fl_malloc(NULL out)", [&] { return o.fl_malloc(kDevice, 64, nullptr); }},
      {"fl_memset_async(bad device)", [&] { return o.fl_memset_async(bad, &u, 0, 1, nullptr); }},
      {"fl_memcpy_async(bad kind)", [&] { return o.fl_memcpy_async(kDevice, &u, &i, 1, 99, nullptr); }},
      {"fl_memcpy_async(bad device)", [&] { return o.fl_memcpy_async(bad, &u, &i, 1, FL_MEMCPY_HOST_TO_HOST, nullptr); }},
      {"stream_create(bad device)", [&] { return o.stream_create(bad, 0, &stream); }},
      {"stream_create(NULL out)", [&] { return o.stream_create(kDevice, 0, nullptr); }},
      {"stream_synchronize(bad device)", [&] { return o.stream_synchronize(bad, nullptr); }},
      {"stream_query(NULL out)", [&] { return o.stream_query(kDevice, nullptr, nullptr); }},
      {"event_create(bad device)", [&] { return o.event_create(bad, 0, &event); }},
      {"event_create(NULL out)", [&] { return o.event_create(kDevice, 0, nullptr); }},
      {"kernels_get(NULL)", [&] { return o.kernels_get(nullptr, nullptr); }},
  };
  if (auto peer = p.entry(&fl_device_ops::device_can_access_peer))
    cases.push_back({"device_can_access_peer(bad peer)", [&, peer] { return peer(kDevice, bad, &i); }});
  std::string problems;
  for (auto& [what, call] : cases) problems += error_path_problem(p, what, call());
  if (!problems.empty()) {
    message = problems;
    return Status::Fail;
  }
  message = std::to_string(cases.size()) + " invalid calls each returned an error with a message";
  return Status::Pass;
}

Status check_leaks(const PluginLibrary& p, std::string& message) {
  const int rounds = 1000;
  for (int k = 0; k < rounds; ++k) {
    fl_stream_t s = nullptr;
    fl_event_t e = nullptr;
    p.check(p.ops().stream_create(kDevice, 0, &s), "stream_create");
    p.check(p.ops().event_create(kDevice, 0, &e), "event_create");
    p.check(p.ops().event_record(kDevice, e, s), "event_record");
    p.check(p.ops().event_destroy(kDevice, e), "event_destroy");
    p.check(p.ops().stream_destroy(kDevice, s), "stream_destroy");
  }
  uint64_t baseline = 0, after = 0, total = 0;
  p.check(p.ops().device_memory_info(kDevice, &baseline, &total), "device_memory_info");
  const size_t block = 4u << 20;
  const int blocks = total >= 64ull * block ? 16 : 0;
  {
    std::vector<std::unique_ptr<Block>> held;
    for (int k = 0; k < blocks; ++k) held.push_back(std::make_unique<Block>(p, block));
  }
  p.check(p.ops().device_memory_info(kDevice, &after, &total), "device_memory_info");
  // Host-memory plugins report the machine's free memory, which moves on its own: allow 1%.
  const uint64_t slack = std::max<uint64_t>(total / 100, 1u << 20);
  if (after + slack < baseline) {
    message = "free memory " + std::to_string(after) + " after freeing " + std::to_string(blocks) + " blocks, baseline " +
              std::to_string(baseline);
    return Status::Fail;
  }
  message = std::to_string(rounds) + " stream/event create+destroy rounds; free memory back to baseline after " +
            std::to_string(blocks) + " x 4 MiB";
  return Status::Pass;
}

// The extras fl_abi.h defines, each checked when offered: fl.native_device gives every device
// a distinct ordinal; fl.native_stream gives non-NULL, distinct handles for the default and a
// created stream; fl.stream_wait_peer_event (two devices or more) orders a stream of device 1
// after an event recorded on device 0 behind 64 MiB of memset — once that stream has been
// synchronized the event must report complete, and so must device 0's work when the event
// was destroyed right after the wait (as the core does). Bad arguments must return errors.
Status check_extras(const PluginLibrary& p, std::string& message) {
  std::string problems, done;
  auto expect_error = [&](const std::string& what, fl_status_t s) { problems += error_path_problem(p, what, s); };
  const int32_t bad = p.device_count() + 7;
  if (auto native_device = reinterpret_cast<fl_native_device_fn>(p.extra(FL_EXTRA_NATIVE_DEVICE))) {
    std::set<int32_t> ordinals;
    for (int32_t d = 0; d < p.device_count(); ++d) {
      int32_t ordinal = -1;
      p.check(native_device(d, &ordinal), FL_EXTRA_NATIVE_DEVICE);
      if (ordinal < 0 || !ordinals.insert(ordinal).second)
        problems += "fl.native_device(" + std::to_string(d) + ") gave ordinal " + std::to_string(ordinal) + "; ";
    }
    int32_t ordinal = 0;
    expect_error("fl.native_device(bad device)", native_device(bad, &ordinal));
    expect_error("fl.native_device(NULL out)", native_device(kDevice, nullptr));
    done += "native_device ";
  }
  if (auto native_stream = reinterpret_cast<fl_native_stream_fn>(p.extra(FL_EXTRA_NATIVE_STREAM))) {
    OwnedStream s(p, kDevice);
    void* of_default = nullptr;
    void* of_created = nullptr;
    p.check(native_stream(kDevice, nullptr, &of_default), FL_EXTRA_NATIVE_STREAM);
    p.check(native_stream(kDevice, s.stream, &of_created), FL_EXTRA_NATIVE_STREAM);
    if (of_default == nullptr || of_created == nullptr || of_default == of_created)
      problems += "fl.native_stream: default and created stream handles must be non-NULL and distinct; ";
    expect_error("fl.native_stream(NULL out)", native_stream(kDevice, s.stream, nullptr));
    done += "native_stream ";
  }
  if (auto peer_wait = reinterpret_cast<fl_stream_wait_peer_event_fn>(p.extra(FL_EXTRA_STREAM_WAIT_PEER_EVENT))) {
    if (p.device_count() < 2) {
      done += "stream_wait_peer_event (one device: ordering not checked) ";
    } else {
      const uint64_t eighth = p.devices()[kDevice].total_memory / 8;
      const size_t bytes = static_cast<size_t>(std::clamp<uint64_t>(eighth, 1, uint64_t{64} << 20));
      Block big(p, bytes);
      // Declared after `big`, so destroyed first: the streams are drained before it is freed,
      // also when a check below throws.
      OwnedStream s0(p, kDevice), s1(p, 1);
      auto queue_work = [&] {
        for (int k = 0; k < 4; ++k)
          p.check(p.ops().fl_memset_async(kDevice, big.ptr, k, bytes, s0.stream), "fl_memset_async");
      };
      {  // The wait orders device 1's stream after the event: synchronized, the event is done.
        OwnedEvent e0(p, kDevice);
        queue_work();
        p.check(p.ops().event_record(kDevice, e0.event, s0.stream), "event_record");
        p.check(peer_wait(1, s1.stream, kDevice, e0.event), FL_EXTRA_STREAM_WAIT_PEER_EVENT);
        p.check(p.ops().stream_synchronize(1, s1.stream), "stream_synchronize(device 1)");
        int32_t complete = 0;
        p.check(p.ops().event_query(kDevice, e0.event, &complete), "event_query");
        if (complete != 1)
          problems += "a stream of device 1 that waited for device 0's event was synchronized before the event completed; ";
        expect_error("fl.stream_wait_peer_event(NULL event)", peer_wait(1, s1.stream, kDevice, nullptr));
        expect_error("fl.stream_wait_peer_event(bad event device)", peer_wait(1, s1.stream, bad, e0.event));
      }
      {  // The event destroyed right after the wait (as the core does): the wait still holds.
         // `before`, recorded just ahead of it on the same stream, shows how far device 0 got.
        OwnedEvent before(p, kDevice);
        fl_event_t e = nullptr;
        p.check(p.ops().event_create(kDevice, 0, &e), "event_create");
        queue_work();
        p.check(p.ops().event_record(kDevice, before.event, s0.stream), "event_record");
        p.check(p.ops().event_record(kDevice, e, s0.stream), "event_record");
        p.check(peer_wait(1, s1.stream, kDevice, e), FL_EXTRA_STREAM_WAIT_PEER_EVENT);
        p.check(p.ops().event_destroy(kDevice, e), "event_destroy");
        p.check(p.ops().stream_synchronize(1, s1.stream), "stream_synchronize(device 1)");
        int32_t complete = 0;
        p.check(p.ops().event_query(kDevice, before.event, &complete), "event_query");
        if (complete != 1)
          problems += "after waiting for an event destroyed right after the wait, device 1's stream was synchronized "
                      "before device 0's work that preceded the event; ";
      }
      done += "stream_wait_peer_event ";
    }
  }
  if (!problems.empty()) {
    message = problems;
    return Status::Fail;
  }
  message = done.empty() ? "no fl.* extras offered" : "checked: " + done;
  return Status::Pass;
}

}  // namespace

const std::vector<std::string>& device_check_names() {
  static const std::vector<std::string> names = {"device properties", "memory", "copies", "large copies", "memset",
                                                  "stream ordering", "events", "error paths", "leaks",
                                                  "fl extras"};
  return names;
}

void run_device_checks(const PluginLibrary& plugin, Report& report) {
  using Body = Status (*)(const PluginLibrary&, std::string&);
  const Body bodies[] = {check_properties, check_memory, check_copies, check_large_copies, check_memset,
                         check_stream_ordering, check_events, check_error_paths, check_leaks, check_extras};
  for (size_t k = 0; k < device_check_names().size(); ++k)
    report.run(device_check_names()[k], [&](std::string& message) { return bodies[k](plugin, message); });
}

}  // namespace fl::check
