// Devices, memory, copies, streams and events of the CPU plugin, through the ABI table.
#define CATCH_CONFIG_MAIN
#include "cpu_plugin_fixture.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

using namespace fl::test;

TEST_CASE("cpu plugin: table, name and version") {
  const fl_device_ops& ops = cpu_ops();
  CHECK(ops.struct_size == sizeof(fl_device_ops));
  CHECK(ops.abi_major == FL_ABI_MAJOR);
  CHECK(std::string(ops.plugin_name) == "cpu");
  int32_t count = 0;
  FL_REQUIRE_OK(ops.device_count(&count));
  CHECK(count == 2);  // from "devices=2"
  CHECK(std::string(ops.last_error()).empty());
}

TEST_CASE("cpu plugin: device properties") {
  const fl_device_ops& ops = cpu_ops();
  for (int32_t dev = 0; dev < 2; ++dev) {
    fl_device_properties props{};
    props.struct_size = sizeof(props);
    FL_REQUIRE_OK(ops.device_get_properties(dev, &props));
    CHECK(props.struct_size == sizeof(props));
    CHECK(std::string(props.vendor) == "Torch-FL");
    CHECK(std::string(props.name) == "CPU (host memory)");
    CHECK(std::string(props.stable_id) == "cpu:" + std::to_string(dev));
    CHECK(props.total_memory > (uint64_t{1} << 26));
    CHECK(props.alignment == 64);
    CHECK(props.host_accessible == 1);
    CHECK(props.supports_pinned_host == 1);
    CHECK(props.pci_bus_id == -1);
    CHECK((props.dtype_mask & FL_DTYPE_BIT(FL_DTYPE_FLOAT32)) != 0);
    CHECK((props.dtype_mask & FL_DTYPE_BIT(FL_DTYPE_BOOL)) != 0);
    CHECK((props.dtype_mask & FL_DTYPE_BIT(FL_DTYPE_BFLOAT16)) != 0);
  }
  fl_device_properties props{};
  props.struct_size = sizeof(props);
  CHECK(ops.device_get_properties(2, &props) == FL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ops.last_error()).find("device") != std::string::npos);

  SECTION("a smaller caller struct is filled only up to its size") {
    fl_device_properties small{};
    std::memset(&small, 0x5a, sizeof(small));
    small.struct_size = offsetof(fl_device_properties, total_memory);
    FL_REQUIRE_OK(ops.device_get_properties(0, &small));
    CHECK(std::string(small.vendor) == "Torch-FL");
    uint64_t untouched;
    std::memset(&untouched, 0x5a, sizeof(untouched));
    CHECK(small.total_memory == untouched);
  }
}

TEST_CASE("cpu plugin: malloc, free and memory accounting") {
  const fl_device_ops& ops = cpu_ops();
  uint64_t free0 = 0, total = 0;
  FL_REQUIRE_OK(ops.device_memory_info(1, &free0, &total));
  CHECK(total > 0);
  CHECK(free0 <= total);

  void* p = nullptr;
  FL_REQUIRE_OK(ops.fl_malloc(1, 1 << 20, &p));
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  std::memset(p, 1, 1 << 20);  // host_accessible
  uint64_t free1 = 0;
  FL_REQUIRE_OK(ops.device_memory_info(1, &free1, &total));
  CHECK(free0 - free1 == (1u << 20));
  FL_REQUIRE_OK(ops.fl_free(1, p));
  uint64_t free2 = 0;
  FL_REQUIRE_OK(ops.device_memory_info(1, &free2, &total));
  CHECK(free2 == free0);

  CHECK(ops.fl_free(0, nullptr) == FL_OK);
  void* q = reinterpret_cast<void*>(0x1);
  CHECK(ops.fl_malloc(0, 0, &q) == FL_ERR_INVALID_ARGUMENT);
  CHECK(ops.fl_malloc(0, SIZE_MAX / 2, &q) == FL_ERR_OUT_OF_MEMORY);
  CHECK(q == nullptr);
  CHECK(std::string(ops.last_error()).find("allocate") != std::string::npos);
  CHECK(ops.fl_malloc(0, static_cast<size_t>(total) + 1, &q) == FL_ERR_OUT_OF_MEMORY);
  CHECK(ops.fl_malloc(5, 16, &q) == FL_ERR_INVALID_ARGUMENT);

  void* pinned = nullptr;
  FL_REQUIRE_OK(ops.fl_host_malloc(4096, &pinned));
  CHECK(reinterpret_cast<uintptr_t>(pinned) % 64 == 0);
  FL_REQUIRE_OK(ops.fl_host_free(pinned));
  CHECK(ops.fl_host_free(nullptr) == FL_OK);
}

TEST_CASE("cpu plugin: memcpy in every direction and memset") {
  const fl_device_ops& ops = cpu_ops();
  const size_t n = 1000;
  std::vector<uint8_t> host(n), back(n, 0);
  std::iota(host.begin(), host.end(), 0);
  DeviceBuffer a(n), b(n);
  FL_REQUIRE_OK(ops.fl_memcpy_async(0, a.data(), host.data(), n, FL_MEMCPY_HOST_TO_DEVICE, nullptr));
  FL_REQUIRE_OK(ops.fl_memcpy_async(0, b.data(), a.data(), n, FL_MEMCPY_DEVICE_TO_DEVICE, nullptr));
  FL_REQUIRE_OK(ops.fl_memcpy_async(0, back.data(), b.data(), n, FL_MEMCPY_DEVICE_TO_HOST, nullptr));
  FL_REQUIRE_OK(ops.stream_synchronize(0, nullptr));
  CHECK(back == host);

  std::vector<uint8_t> h2(n, 0);
  FL_REQUIRE_OK(ops.fl_memcpy_async(0, h2.data(), host.data(), n, FL_MEMCPY_HOST_TO_HOST, nullptr));
  FL_REQUIRE_OK(ops.stream_synchronize(0, nullptr));
  CHECK(h2 == host);

  FL_REQUIRE_OK(ops.fl_memset_async(0, b.data(), 7, n / 2, nullptr));
  FL_REQUIRE_OK(ops.fl_memcpy_async(0, back.data(), b.data(), n, FL_MEMCPY_DEVICE_TO_HOST, nullptr));
  FL_REQUIRE_OK(ops.stream_synchronize(0, nullptr));
  for (size_t i = 0; i < n; ++i) CHECK(back[i] == (i < n / 2 ? 7 : host[i]));

  SECTION("pinned host memory copies asynchronously and in order") {
    void* pinned = nullptr;
    FL_REQUIRE_OK(ops.fl_host_malloc(n, &pinned));
    fl_stream_t s = nullptr;
    FL_REQUIRE_OK(ops.stream_create(0, 0, &s));
    FL_REQUIRE_OK(ops.fl_memset_async(0, a.data(), 3, n, s));
    FL_REQUIRE_OK(ops.fl_memcpy_async(0, pinned, a.data(), n, FL_MEMCPY_DEVICE_TO_HOST, s));
    FL_REQUIRE_OK(ops.stream_synchronize(0, s));
    for (size_t i = 0; i < n; ++i) REQUIRE(static_cast<uint8_t*>(pinned)[i] == 3);
    FL_REQUIRE_OK(ops.stream_destroy(0, s));
    FL_REQUIRE_OK(ops.fl_host_free(pinned));
  }
  CHECK(ops.fl_memcpy_async(0, a.data(), host.data(), n, 42, nullptr) == FL_ERR_INVALID_ARGUMENT);
}

TEST_CASE("cpu plugin: large copies split over threads keep every byte") {
  // Copies from 4 MiB up are split into chunks over the plugin's copy threads (two or more
  // when the machine has two cores); overlapping ranges take one memmove.
  const fl_device_ops& ops = cpu_ops();
  const size_t mib = size_t{1} << 20;
  for (size_t n : {4 * mib - 1, 4 * mib, 4 * mib + 3, 37 * mib + 5}) {
    std::vector<uint8_t> host(n), back(n, 0);
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    DeviceBuffer a(n), b(n);
    FL_REQUIRE_OK(ops.fl_memcpy_async(0, a.data(), host.data(), n, FL_MEMCPY_HOST_TO_DEVICE, nullptr));
    FL_REQUIRE_OK(ops.fl_memcpy_async(0, b.data(), a.data(), n, FL_MEMCPY_DEVICE_TO_DEVICE, nullptr));
    FL_REQUIRE_OK(ops.fl_memcpy_async(0, back.data(), b.data(), n, FL_MEMCPY_DEVICE_TO_HOST, nullptr));
    FL_REQUIRE_OK(ops.stream_synchronize(0, nullptr));
    INFO("bytes " << n);
    CHECK(std::memcmp(back.data(), host.data(), n) == 0);
  }

  SECTION("an overlapping copy within one buffer moves as memmove does") {
    const size_t n = 8 * mib, shift = mib + 1;
    std::vector<uint8_t> host(n + shift), back(n + shift);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7 + (i >> 11));
    DeviceBuffer a(n + shift);
    auto* base = static_cast<uint8_t*>(a.data());
    FL_REQUIRE_OK(ops.fl_memcpy_async(0, base, host.data(), n + shift, FL_MEMCPY_HOST_TO_DEVICE, nullptr));
    FL_REQUIRE_OK(ops.fl_memcpy_async(0, base + shift, base, n, FL_MEMCPY_DEVICE_TO_DEVICE, nullptr));
    FL_REQUIRE_OK(ops.fl_memcpy_async(0, back.data(), base, n + shift, FL_MEMCPY_DEVICE_TO_HOST, nullptr));
    FL_REQUIRE_OK(ops.stream_synchronize(0, nullptr));
    std::vector<uint8_t> expected = host;
    std::memmove(expected.data() + shift, expected.data(), n);
    CHECK(back == expected);
  }

  SECTION("two streams copying at once take turns and both land") {
    const size_t n = 9 * mib + 17;
    std::vector<uint8_t> h1(n, 1), h2(n, 2), r1(n, 0), r2(n, 0);
    DeviceBuffer d1(n), d2(n);
    fl_stream_t s1 = nullptr, s2 = nullptr;
    FL_REQUIRE_OK(ops.stream_create(0, 0, &s1));
    FL_REQUIRE_OK(ops.stream_create(0, 0, &s2));
    auto round_trip = [&](fl_stream_t s, DeviceBuffer& d, std::vector<uint8_t>& src, std::vector<uint8_t>& dst) {
      for (int k = 0; k < 4; ++k) {
        if (ops.fl_memcpy_async(0, d.data(), src.data(), n, FL_MEMCPY_HOST_TO_DEVICE, s) != FL_OK) return;
        if (ops.fl_memcpy_async(0, dst.data(), d.data(), n, FL_MEMCPY_DEVICE_TO_HOST, s) != FL_OK) return;
      }
    };
    std::thread t1(round_trip, s1, std::ref(d1), std::ref(h1), std::ref(r1));
    std::thread t2(round_trip, s2, std::ref(d2), std::ref(h2), std::ref(r2));
    t1.join();
    t2.join();
    FL_REQUIRE_OK(ops.stream_synchronize(0, s1));
    FL_REQUIRE_OK(ops.stream_synchronize(0, s2));
    CHECK(r1 == h1);
    CHECK(r2 == h2);
    FL_REQUIRE_OK(ops.stream_destroy(0, s1));
    FL_REQUIRE_OK(ops.stream_destroy(0, s2));
  }
}

TEST_CASE("cpu plugin: work on one stream runs in order") {
  const fl_device_ops& ops = cpu_ops();
  fl_stream_t s = nullptr;
  FL_REQUIRE_OK(ops.stream_create(0, 0, &s));
  const int64_t n = 1024;
  Tensor x(FL_DTYPE_FLOAT32, {n});
  HostScalar one(1.0);
  FL_REQUIRE_OK(ops.fl_memset_async(0, const_cast<void*>(x.desc().data), 0, n * 4, s));
  // 200 in-place increments: each reads the previous result.
  for (int i = 0; i < 200; ++i)
    REQUIRE(call_kernel("aten::add.out", Inputs().tensor(x).host(one).integer(1), outs({&x}), s) == FL_OK);
  FL_REQUIRE_OK(ops.stream_synchronize(0, s));
  int32_t done = 0;
  FL_REQUIRE_OK(ops.stream_query(0, s, &done));
  CHECK(done == 1);
  for (float v : x.values<float>()) REQUIRE(v == 200.0f);
  FL_REQUIRE_OK(ops.stream_destroy(0, s));
  CHECK(ops.stream_destroy(0, nullptr) == FL_OK);
}

TEST_CASE("cpu plugin: stream_destroy drains pending work") {
  const fl_device_ops& ops = cpu_ops();
  fl_stream_t s = nullptr;
  FL_REQUIRE_OK(ops.stream_create(1, 0, &s));
  const int64_t n = 1 << 20;
  Tensor x(FL_DTYPE_FLOAT32, {n}, {}, -1, 1);
  HostScalar one(1.0);
  FL_REQUIRE_OK(ops.fl_memset_async(1, const_cast<void*>(x.desc().data), 0, n * 4, s));
  for (int i = 0; i < 20; ++i)
    REQUIRE(call_kernel("aten::add.out", Inputs().tensor(x).host(one).integer(1), outs({&x}), s, 1) == FL_OK);
  FL_REQUIRE_OK(ops.stream_destroy(1, s));
  std::vector<float> v = x.values<float>();
  CHECK(v.front() == 20.0f);
  CHECK(v.back() == 20.0f);
}

TEST_CASE("cpu plugin: events order work across streams and devices") {
  const fl_device_ops& ops = cpu_ops();
  const int64_t n = 1 << 22;  // a 16 MiB memset + 64 passes takes a while
  // Stream b on the same device, then on the other device of the plugin.
  const int32_t dev_b = GENERATE(0, 1);
  fl_stream_t a = nullptr, b = nullptr;
  FL_REQUIRE_OK(ops.stream_create(0, 0, &a));
  FL_REQUIRE_OK(ops.stream_create(dev_b, 0, &b));
  Tensor src(FL_DTYPE_FLOAT32, {n});
  Tensor dst(FL_DTYPE_FLOAT32, {n}, {}, -1, dev_b);
  HostScalar one(1.0);
  FL_REQUIRE_OK(ops.fl_memset_async(0, const_cast<void*>(src.desc().data), 0, n * 4, a));
  for (int i = 0; i < 64; ++i)
    REQUIRE(call_kernel("aten::add.out", Inputs().tensor(src).host(one).integer(1), outs({&src}), a) == FL_OK);
  fl_event_t ev = nullptr;
  FL_REQUIRE_OK(ops.event_create(0, 0, &ev));
  FL_REQUIRE_OK(ops.event_record(0, ev, a));
  int32_t done = 1;
  FL_REQUIRE_OK(ops.event_query(0, ev, &done));
  CHECK(done == 0);  // 64 passes over 16 MiB cannot be finished yet
  FL_REQUIRE_OK(ops.stream_wait_event(dev_b, b, ev));
  FL_REQUIRE_OK(ops.fl_memcpy_async(dev_b, const_cast<void*>(dst.desc().data), src.desc().data, n * 4,
                                    FL_MEMCPY_DEVICE_TO_DEVICE, b));
  FL_REQUIRE_OK(ops.event_destroy(0, ev));  // pending waits stay valid
  FL_REQUIRE_OK(ops.stream_synchronize(dev_b, b));
  std::vector<float> v = dst.values<float>();
  CHECK(v.front() == 64.0f);
  CHECK(v[n / 2] == 64.0f);
  CHECK(v.back() == 64.0f);
  FL_REQUIRE_OK(ops.stream_destroy(0, a));
  FL_REQUIRE_OK(ops.stream_destroy(dev_b, b));
}

TEST_CASE("cpu plugin: event query, synchronize and elapsed time") {
  const fl_device_ops& ops = cpu_ops();
  fl_event_t start = nullptr, stop = nullptr, plain = nullptr;
  FL_REQUIRE_OK(ops.event_create(0, FL_EVENT_TIMING, &start));
  FL_REQUIRE_OK(ops.event_create(0, FL_EVENT_TIMING, &stop));
  FL_REQUIRE_OK(ops.event_create(0, 0, &plain));
  int32_t done = 0;
  FL_REQUIRE_OK(ops.event_query(0, plain, &done));
  CHECK(done == 1);  // never recorded
  FL_REQUIRE_OK(ops.event_synchronize(0, plain));

  const int64_t n = 1 << 22;
  Tensor x(FL_DTYPE_FLOAT32, {n});
  HostScalar one(1.0);
  FL_REQUIRE_OK(ops.event_record(0, start, nullptr));
  for (int i = 0; i < 16; ++i)
    REQUIRE(call_kernel("aten::add.out", Inputs().tensor(x).host(one).integer(1), outs({&x})) == FL_OK);
  FL_REQUIRE_OK(ops.event_record(0, stop, nullptr));
  FL_REQUIRE_OK(ops.event_synchronize(0, stop));
  FL_REQUIRE_OK(ops.event_query(0, stop, &done));
  CHECK(done == 1);
  float ms = -1;
  FL_REQUIRE_OK(ops.event_elapsed_ms(0, start, stop, &ms));
  CHECK(ms > 0.0f);
  CHECK(ms < 60000.0f);
  CHECK(ops.event_elapsed_ms(0, start, plain, &ms) == FL_ERR_INVALID_ARGUMENT);

  SECTION("re-recording replaces the capture") {
    FL_REQUIRE_OK(ops.event_record(0, plain, nullptr));
    FL_REQUIRE_OK(ops.event_synchronize(0, plain));
    FL_REQUIRE_OK(ops.event_query(0, plain, &done));
    CHECK(done == 1);
  }
  FL_REQUIRE_OK(ops.event_destroy(0, start));
  FL_REQUIRE_OK(ops.event_destroy(0, stop));
  FL_REQUIRE_OK(ops.event_destroy(0, plain));
  CHECK(ops.event_destroy(0, nullptr) == FL_OK);
}

TEST_CASE("cpu plugin: errors in asynchronous work are reported by synchronize") {
  const fl_device_ops& ops = cpu_ops();
  fl_stream_t s = nullptr;
  FL_REQUIRE_OK(ops.stream_create(0, 0, &s));
  Tensor a = Tensor::from<int64_t>(FL_DTYPE_INT64, {3}, {6, 7, 8});
  Tensor b = Tensor::from<int64_t>(FL_DTYPE_INT64, {3}, {2, 0, 4});
  Tensor out(FL_DTYPE_INT64, {3});
  // Integer division by zero throws on the worker, after the call returned FL_OK.
  REQUIRE(call_kernel("aten::div.out_mode", Inputs().tensor(a).tensor(b).str("trunc"), outs({&out}), s) == FL_OK);
  fl_status_t st = ops.stream_synchronize(0, s);
  CHECK(st == FL_ERR_DEVICE);
  CHECK(std::string(ops.last_error()).find("ZeroDivisionError") != std::string::npos);
  // Reported once; the stream keeps working.
  FL_REQUIRE_OK(ops.stream_synchronize(0, s));
  SECTION("query reports it too") {
    REQUIRE(call_kernel("aten::div.out_mode", Inputs().tensor(a).tensor(b).str("floor"), outs({&out}), s) == FL_OK);
    FL_REQUIRE_OK(ops.device_synchronize(1));  // other device: unaffected
    fl_status_t q = FL_OK;
    int32_t done = 0;
    for (int i = 0; i < 1000 && q == FL_OK && !done; ++i) {
      q = ops.stream_query(0, s, &done);
      if (q == FL_OK && !done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(q == FL_ERR_DEVICE);
  }
  SECTION("device_synchronize reports it") {
    REQUIRE(call_kernel("aten::div.out_mode", Inputs().tensor(a).tensor(b).str("trunc"), outs({&out}), s) == FL_OK);
    CHECK(ops.device_synchronize(0) == FL_ERR_DEVICE);
    FL_REQUIRE_OK(ops.device_synchronize(0));
  }
  FL_REQUIRE_OK(ops.stream_destroy(0, s));
}

TEST_CASE("cpu plugin: small-op latency (enqueue + synchronize)") {
  const fl_device_ops& ops = cpu_ops();
  Tensor x = Tensor::from<float>(FL_DTYPE_FLOAT32, {16}, std::vector<float>(16, 0.0f));
  HostScalar one(1.0);
  run_kernel("aten::add.out", Inputs().tensor(x).host(one).integer(1), outs({&x}));
  const int iters = 2000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    call_kernel("aten::add.out", Inputs().tensor(x).host(one).integer(1), outs({&x}));
    ops.stream_synchronize(0, nullptr);
  }
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  WARN("add + synchronize round trip: " << us << " us");
  CHECK(x.values<float>()[0] == static_cast<float>(iters + 1));
  CHECK(us < 5000.0);  // sanity only: the machine is shared
}
