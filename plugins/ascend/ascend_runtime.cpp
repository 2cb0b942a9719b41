// ascend_runtime.cpp — AscendCL lifecycle (aclInit, aclrtSetDevice, default streams,
// aclFinalize), cached device properties, per-stream scratch memory and pinned-block tracking.
// Written only by init and shutdown (the ABI calls them with nothing else running), read
// concurrently by every other entry; the scratch map and the pinned set have their own mutex.
#include "ascend_runtime.hpp"

#include <plugin_support.hpp>

#include <cstdio>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace fl::ascend {
namespace {

constexpr aclError kRepeatInitialize = 100002;  // ACL_ERROR_REPEAT_INITIALIZE

struct Scratch {
  void* ptr = nullptr;
  uint64_t bytes = 0;
};

struct RuntimeState {
  bool initialized = false;
  bool acl_initialized_here = false;
  const fl_host_services* host = nullptr;
  std::vector<aclrtStream> default_streams;
  std::vector<AscendProperties> props;
  std::mutex scratch_mutex;
  std::map<std::pair<aclrtStream, int>, Scratch> scratch;  // (stream, slot)
  std::mutex pinned_mutex;
  std::map<const char*, size_t> pinned;  // start -> size
};

RuntimeState& state() {
  static RuntimeState s;
  return s;
}

std::string stable_id_of(int32_t device, const std::string& soc) {
  const AclApi& a = acl();
  if (a.aclrtDeviceGetUuid != nullptr) {
    aclrtUuid uuid{};
    if (a.aclrtDeviceGetUuid(device, &uuid) == ACL_SUCCESS) {
      bool nonzero = false;
      for (char b : uuid.bytes) nonzero = nonzero || b != 0;
      if (nonzero) {
        std::string id = "NPU-";
        char hex[3];
        for (char b : uuid.bytes) {
          std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(b));
          id += hex;
        }
        return id;
      }
    }
  }
  // The physical id does not move with ASCEND_RT_VISIBLE_DEVICES (the logical id does).
  if (a.aclrtGetPhyDevIdByLogicDevId != nullptr) {
    int32_t phy = -1;
    if (a.aclrtGetPhyDevIdByLogicDevId(device, &phy) == ACL_SUCCESS && phy >= 0) return "npu-phy" + std::to_string(phy);
  }
  // Last resort on runtimes with neither query: the logical index, marked as such.
  log_message(FL_LOG_WARN, "ascend plugin: no UUID or physical id query in this CANN; stable_id uses the logical index");
  return soc + "-logical" + std::to_string(device);
}

}  // namespace

void log_message(int32_t level, const std::string& message) {
  const fl_host_services* host = state().host;
  if (host != nullptr && host->struct_size > offsetof(fl_host_services, log) && host->log != nullptr)
    host->log(host->user_data, level, message.c_str());
}

void check_acl(aclError err, const char* what) {
  if (err == ACL_SUCCESS) return;
  if (err == ACL_ERROR_RT_MEMORY_ALLOCATION) plugin::raise(FL_ERR_OUT_OF_MEMORY, acl_error_text(what, err));
  plugin::raise(FL_ERR_DEVICE, acl_error_text(what, err));
}

void init_runtime(const fl_host_services* host, const std::string& options) {
  RuntimeState& s = state();
  if (s.initialized) plugin::raise(FL_ERR_INVALID_ARGUMENT, "ascend plugin: init called twice");
  s.host = host;
  if (!options.empty()) log_message(FL_LOG_WARN, "ascend plugin: ignoring options '" + options + "'");
  const AclApi& a = load_acl_api();  // FL_ERR_NO_DEVICE "AscendCL runtime not found: ..." when absent
  try {
    const aclError init = a.aclInit(nullptr);
    if (init != ACL_SUCCESS && init != kRepeatInitialize)
      plugin::raise(FL_ERR_NO_DEVICE, acl_error_text("aclInit", init));
    s.acl_initialized_here = init == ACL_SUCCESS;
    uint32_t count = 0;
    const aclError err = a.aclrtGetDeviceCount(&count);
    if (err != ACL_SUCCESS) plugin::raise(FL_ERR_NO_DEVICE, acl_error_text("aclrtGetDeviceCount", err));
    if (count == 0) plugin::raise(FL_ERR_NO_DEVICE, "no Ascend NPU visible (aclrtGetDeviceCount = 0)");
    for (uint32_t i = 0; i < count; ++i) {
      const int32_t dev = static_cast<int32_t>(i);
      check_acl(a.aclrtSetDevice(dev), "aclrtSetDevice");
      AscendProperties p;
      const char* soc = a.aclrtGetSocName();
      p.soc_name = soc != nullptr ? soc : "Ascend";
      size_t free_b = 0, total_b = 0;
      check_acl(a.aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total_b), "aclrtGetMemInfo");
      p.total_memory = total_b;
      int64_t cores = 0;
      if (a.aclrtGetDeviceInfo != nullptr && a.aclrtGetDeviceInfo(i, ACL_DEV_ATTR_AICORE_CORE_NUM, &cores) == ACL_SUCCESS)
        p.ai_cores = static_cast<int32_t>(cores);
      p.stable_id = stable_id_of(dev, p.soc_name);
      aclrtStream stream = nullptr;
      check_acl(a.aclrtCreateStream(&stream), "aclrtCreateStream (default stream)");
      s.default_streams.push_back(stream);
      s.props.push_back(p);
      log_message(FL_LOG_INFO, "ascend plugin: device " + std::to_string(i) + " " + p.soc_name + " " + p.stable_id);
    }
  } catch (...) {
    for (size_t i = 0; i < s.default_streams.size(); ++i) {
      (void)a.aclrtSetDevice(static_cast<int32_t>(i));
      (void)a.aclrtDestroyStream(s.default_streams[i]);
    }
    s.default_streams.clear();
    s.props.clear();
    if (s.acl_initialized_here) (void)a.aclFinalize();
    unload_acl_api();
    throw;
  }
  s.initialized = true;
}

void shutdown_runtime() {
  RuntimeState& s = state();
  if (!s.initialized) return;
  const AclApi& a = acl();
  for (size_t i = 0; i < s.default_streams.size(); ++i) {
    (void)a.aclrtSetDevice(static_cast<int32_t>(i));
    (void)a.aclrtSynchronizeDevice();
  }
  {
    std::lock_guard<std::mutex> lock(s.scratch_mutex);
    for (auto& [key, buf] : s.scratch) (void)a.aclrtFree(buf.ptr);
    s.scratch.clear();
  }
  for (size_t i = 0; i < s.default_streams.size(); ++i) {
    (void)a.aclrtSetDevice(static_cast<int32_t>(i));
    (void)a.aclrtDestroyStream(s.default_streams[i]);
    (void)a.aclrtResetDevice(static_cast<int32_t>(i));
  }
  s.default_streams.clear();
  s.props.clear();
  if (s.acl_initialized_here) (void)a.aclFinalize();
  unload_acl_api();
  s.initialized = false;
  s.host = nullptr;
}

int32_t device_count_or_zero() { return state().initialized ? static_cast<int32_t>(state().props.size()) : 0; }

const AscendProperties& properties(int32_t device) {
  RuntimeState& s = state();
  if (!s.initialized) plugin::raise(FL_ERR_NO_DEVICE, "ascend plugin is not initialized");
  if (device < 0 || device >= static_cast<int32_t>(s.props.size()))
    plugin::raise(FL_ERR_INVALID_ARGUMENT, "ascend plugin: no device " + std::to_string(device));
  return s.props[static_cast<size_t>(device)];
}

void use_device(int32_t device) {
  (void)properties(device);
  int32_t current = -1;
  if (acl().aclrtGetDevice(&current) == ACL_SUCCESS && current == device) return;
  check_acl(acl().aclrtSetDevice(device), "aclrtSetDevice");
}

aclrtStream resolve_stream(int32_t device, fl_stream_t stream) {
  (void)properties(device);
  return stream != nullptr ? reinterpret_cast<aclrtStream>(stream) : state().default_streams[static_cast<size_t>(device)];
}

void* stream_scratch(int32_t device, aclrtStream stream, int slot, uint64_t bytes) {
  if (bytes == 0) return nullptr;
  RuntimeState& s = state();
  std::lock_guard<std::mutex> lock(s.scratch_mutex);
  Scratch& buf = s.scratch[{stream, slot}];
  if (buf.bytes >= bytes) return buf.ptr;
  const AclApi& a = acl();
  if (buf.ptr != nullptr) {
    // Work already enqueued on this stream may still read the old buffer.
    check_acl(a.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream (growing scratch)");
    (void)a.aclrtFree(buf.ptr);
    buf = Scratch{};
  }
  (void)device;
  void* p = nullptr;
  check_acl(a.aclrtMalloc(&p, bytes, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc (aclnn workspace)");
  buf.ptr = p;
  buf.bytes = bytes;
  return p;
}

void release_stream_scratch(int32_t device, aclrtStream stream) {
  (void)device;
  RuntimeState& s = state();
  std::lock_guard<std::mutex> lock(s.scratch_mutex);
  for (auto it = s.scratch.begin(); it != s.scratch.end();) {
    if (it->first.first == stream) {
      (void)acl().aclrtFree(it->second.ptr);
      it = s.scratch.erase(it);
    } else {
      ++it;
    }
  }
}

void remember_pinned(void* ptr, size_t size) {
  std::lock_guard<std::mutex> lock(state().pinned_mutex);
  state().pinned[static_cast<const char*>(ptr)] = size;
}

bool forget_pinned(void* ptr) {
  std::lock_guard<std::mutex> lock(state().pinned_mutex);
  return state().pinned.erase(static_cast<const char*>(ptr)) > 0;
}

bool is_pinned(const void* ptr, size_t size) {
  std::lock_guard<std::mutex> lock(state().pinned_mutex);
  const char* p = static_cast<const char*>(ptr);
  auto it = state().pinned.upper_bound(p);
  if (it == state().pinned.begin()) return false;
  --it;
  return p >= it->first && p + size <= it->first + it->second;
}

}  // namespace fl::ascend
