// acl_loader.cpp — opens libascendcl.so, libnnopbase.so and libopapi.so with dlopen and fills
// AclApi with dlsym, so the plugin has no link-time dependency on CANN. The libraries are
// looked up by the dynamic loader's normal search (LD_LIBRARY_PATH, which CANN's set_env.sh
// sets, then the system paths), then under $ASCEND_HOME_PATH/lib64 and
// /usr/local/Ascend/ascend-toolkit/latest/lib64.
#include "acl_api.hpp"

#include <fl_abi.h>
#include <plugin_support.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace fl::ascend {
namespace {

AclApi g_api{};
std::vector<void*> g_handles;
bool g_loaded = false;

void* open_library(const char* name, std::string& errors) {
  std::vector<std::string> candidates = {name};
  if (const char* home = std::getenv("ASCEND_HOME_PATH"); home != nullptr && *home != '\0')
    candidates.push_back(std::string(home) + "/lib64/" + name);
  candidates.push_back(std::string("/usr/local/Ascend/ascend-toolkit/latest/lib64/") + name);
  for (const std::string& c : candidates) {
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    if (c == name) errors = e != nullptr ? e : (c + ": cannot open");
  }
  return nullptr;
}

void* find_symbol(const char* name) {
  for (void* h : g_handles)
    if (void* p = dlsym(h, name)) return p;
  return nullptr;
}

void close_all() {
  for (auto it = g_handles.rbegin(); it != g_handles.rend(); ++it) dlclose(*it);
  g_handles.clear();
  g_api = AclApi{};
  g_loaded = false;
}

}  // namespace

const AclApi& load_acl_api() {
  if (g_loaded) return g_api;
  for (const char* lib : {"libascendcl.so", "libnnopbase.so", "libopapi.so"}) {
    std::string error;
    void* h = open_library(lib, error);
    if (h == nullptr) {
      close_all();
      plugin::raise(FL_ERR_NO_DEVICE, "AscendCL runtime not found: " + error);
    }
    g_handles.push_back(h);
  }
  std::string missing;
  // Assigns the symbol `name` to g_api.name; a required one that is absent is reported.
#define FL_ACL_REQUIRED(name)                                                   \
  g_api.name = reinterpret_cast<decltype(g_api.name)>(find_symbol(#name));      \
  if (g_api.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
#define FL_ACL_OPTIONAL(name) g_api.name = reinterpret_cast<decltype(g_api.name)>(find_symbol(#name));
  FL_ACL_REQUIRED(aclInit)
  FL_ACL_REQUIRED(aclFinalize)
  FL_ACL_OPTIONAL(aclGetRecentErrMsg)
  FL_ACL_REQUIRED(aclrtGetDeviceCount)
  FL_ACL_REQUIRED(aclrtSetDevice)
  FL_ACL_REQUIRED(aclrtGetDevice)
  FL_ACL_REQUIRED(aclrtResetDevice)
  FL_ACL_REQUIRED(aclrtSynchronizeDevice)
  FL_ACL_REQUIRED(aclrtGetSocName)
  FL_ACL_REQUIRED(aclrtGetMemInfo)
  FL_ACL_REQUIRED(aclrtMalloc)
  FL_ACL_REQUIRED(aclrtFree)
  FL_ACL_REQUIRED(aclrtMallocHost)
  FL_ACL_REQUIRED(aclrtFreeHost)
  FL_ACL_REQUIRED(aclrtMemcpy)
  FL_ACL_REQUIRED(aclrtMemcpyAsync)
  FL_ACL_REQUIRED(aclrtMemsetAsync)
  FL_ACL_REQUIRED(aclrtCreateStream)
  FL_ACL_REQUIRED(aclrtDestroyStream)
  FL_ACL_REQUIRED(aclrtSynchronizeStream)
  FL_ACL_REQUIRED(aclrtStreamWaitEvent)
  FL_ACL_REQUIRED(aclrtCreateEvent)
  FL_ACL_REQUIRED(aclrtDestroyEvent)
  FL_ACL_REQUIRED(aclrtRecordEvent)
  FL_ACL_REQUIRED(aclrtQueryEventStatus)
  FL_ACL_REQUIRED(aclrtSynchronizeEvent)
  FL_ACL_REQUIRED(aclrtEventElapsedTime)
  FL_ACL_OPTIONAL(aclrtCreateEventWithFlag)
  FL_ACL_OPTIONAL(aclrtStreamQuery)
  FL_ACL_OPTIONAL(aclrtDeviceGetUuid)
  FL_ACL_OPTIONAL(aclrtGetPhyDevIdByLogicDevId)
  FL_ACL_OPTIONAL(aclrtGetDeviceInfo)
  FL_ACL_OPTIONAL(aclrtDeviceCanAccessPeer)
  FL_ACL_OPTIONAL(aclrtDeviceEnablePeerAccess)
  FL_ACL_REQUIRED(aclCreateTensor)
  FL_ACL_REQUIRED(aclCreateScalar)
  FL_ACL_REQUIRED(aclCreateIntArray)
  FL_ACL_REQUIRED(aclDestroyTensor)
  FL_ACL_REQUIRED(aclDestroyScalar)
  FL_ACL_REQUIRED(aclDestroyIntArray)
  FL_ACL_REQUIRED(aclnnAddGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnAdd)
  FL_ACL_REQUIRED(aclnnAddsGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnAdds)
  FL_ACL_REQUIRED(aclnnSubGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnSub)
  FL_ACL_REQUIRED(aclnnSubsGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnSubs)
  FL_ACL_REQUIRED(aclnnMulGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnMul)
  FL_ACL_REQUIRED(aclnnMulsGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnMuls)
  FL_ACL_REQUIRED(aclnnDivGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnDiv)
  FL_ACL_REQUIRED(aclnnDivsGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnDivs)
  FL_ACL_REQUIRED(aclnnMmGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnMm)
  FL_ACL_REQUIRED(aclnnAddmmGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnAddmm)
  FL_ACL_REQUIRED(aclnnBatchMatMulGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnBatchMatMul)
  FL_ACL_REQUIRED(aclnnReluGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnRelu)
  FL_ACL_REQUIRED(aclnnSoftmaxGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnSoftmax)
  FL_ACL_REQUIRED(aclnnLogSoftmaxGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnLogSoftmax)
  FL_ACL_REQUIRED(aclnnConvolutionGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnConvolution)
  FL_ACL_REQUIRED(aclnnMaxPool2dWithIndicesGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnMaxPool2dWithIndices)
  FL_ACL_REQUIRED(aclnnCastGetWorkspaceSize)
  FL_ACL_REQUIRED(aclnnCast)
#undef FL_ACL_REQUIRED
#undef FL_ACL_OPTIONAL
  if (!missing.empty()) {
    close_all();
    plugin::raise(FL_ERR_NO_DEVICE, "AscendCL runtime not found: the CANN libraries lack " + missing);
  }
  g_loaded = true;
  return g_api;
}

const AclApi& acl() {
  if (!g_loaded) plugin::raise(FL_ERR_NO_DEVICE, "ascend plugin is not initialized");
  return g_api;
}

void unload_acl_api() { close_all(); }

std::string acl_error_text(const char* what, aclError err) {
  std::string text = std::string(what) + ": aclError " + std::to_string(err);
  if (g_loaded && g_api.aclGetRecentErrMsg != nullptr)
    if (const char* msg = g_api.aclGetRecentErrMsg(); msg != nullptr && *msg != '\0') text += ": " + std::string(msg);
  return text;
}

}  // namespace fl::ascend
