// blas_library.cpp — see blas_library.hpp.
#include "blas_library.hpp"

#include "plugin_support.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace fl::cpu::blas {
namespace {

using SgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                         const float*, blasint, const float*, blasint, float, float*, blasint);
using DgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, double,
                         const double*, blasint, const double*, blasint, double, double*, blasint);
using GetThreadsFn = int (*)();
using SetThreadsFn = void (*)(int);
using NameFn = char* (*)();

struct Library {
  void* handle = nullptr;
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  GetThreadsFn get_num_threads = nullptr;
  SetThreadsFn set_num_threads = nullptr;
  NameFn corename = nullptr;
  NameFn config = nullptr;
  LoadReport report;
};

// The library's soname, as the linker would look it up (LD_LIBRARY_PATH, Debian's alternatives),
// then where meson found OpenBLAS at build time.
std::vector<std::string> library_paths() {
  std::vector<std::string> paths{"libopenblas.so.0"};
#ifdef FL_OPENBLAS_LIBRARY
  paths.emplace_back(FL_OPENBLAS_LIBRARY);
#endif
  return paths;
}

template <class Fn>
Fn symbol(void* handle, const char* name, const std::string& path) {
  void* address = dlsym(handle, name);
  if (address == nullptr) {
    dlclose(handle);
    plugin::raise(FL_ERR_NO_DEVICE, "cpu plugin: " + path + " has no symbol " + name + " (not OpenBLAS?)");
  }
  return reinterpret_cast<Fn>(address);
}

std::string text_of(NameFn fn) {
  const char* text = fn();
  return text ? text : "";
}

// Opens the first of `paths` that loads and takes its symbols; returns the path used.
std::string open(Library& lib, const std::vector<std::string>& paths) {
  std::string failures;
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      failures += (failures.empty() ? "" : "; ") + path + ": " + (why ? why : "unknown");
      continue;
    }
    lib.sgemm = symbol<SgemmFn>(handle, "cblas_sgemm", path);
    lib.dgemm = symbol<DgemmFn>(handle, "cblas_dgemm", path);
    lib.get_num_threads = symbol<GetThreadsFn>(handle, "openblas_get_num_threads", path);
    lib.set_num_threads = symbol<SetThreadsFn>(handle, "openblas_set_num_threads", path);
    lib.corename = symbol<NameFn>(handle, "openblas_get_corename", path);
    lib.config = symbol<NameFn>(handle, "openblas_get_config", path);
    // The header's integer width must be the library's (an ILP64 build takes 64-bit sizes).
    const bool ilp64 = text_of(lib.config).find("USE64BITINT") != std::string::npos;
    if (ilp64 != (sizeof(blasint) == 8)) {
      dlclose(handle);
      plugin::raise(FL_ERR_NO_DEVICE, "cpu plugin: " + path + " is " + (ilp64 ? "an ILP64" : "an LP64") +
                                          " OpenBLAS, and the plugin was built with " +
                                          std::to_string(8 * sizeof(blasint)) + "-bit BLAS integers");
    }
    lib.handle = handle;
    return path;
  }
  plugin::raise(FL_ERR_NO_DEVICE, "cpu plugin: cannot load OpenBLAS (" + failures + ")");
}

// Sets an environment variable for a scope when the user has not set it, and unsets what it
// set when the scope ends (also by an exception); a user's value is left as it is.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value)
      : name_(name), set_(std::getenv(name) == nullptr && setenv(name, value.c_str(), 0) == 0) {}
  ~ScopedEnv() {
    if (set_) unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  bool set() const { return set_; }

 private:
  const char* name_;
  bool set_;
};

// Whether `path` is loaded in the process already (by the dynamic linker for another library,
// LD_PRELOAD, numpy...): dlopen then returns that instance, initialised with the environment
// it saw.
bool loaded_already(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The best OpenBLAS core name for this CPU's instruction sets ("SkylakeX", "Haswell"), or empty
// when it has no AVX2 (or is not x86-64).
std::string best_core_for_this_cpu() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

bool core_has_avx2(const std::string& core) {
  // OpenBLAS's x86-64 kernel sets with AVX2 or AVX-512 (as openblas_get_corename spells them,
  // in any case); every other one (Prescott, Core2, Nehalem, Sandybridge, Bulldozer...) has not.
  static const char* const kAvx2Cores[] = {"haswell", "zen", "excavator", "skylakex", "cooperlake",
                                           "sapphirerapids"};
  const std::string name = lower(core);
  return std::any_of(std::begin(kAvx2Cores), std::end(kAvx2Cores), [&](const char* c) { return name == c; });
}

constexpr int kThreadTimeout = 4;  // OpenBLAS's least: about 16 cycles

Library& library() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
    // OpenBLAS's idle threads spin for 2^OPENBLAS_THREAD_TIMEOUT cycles (default 2^28, about
    // 0.1 s) before they sleep. A training step calls a GEMM every few milliseconds, so they
    // never slept: on the H200 machine they held the cores the plugin's own loops (ParallelFor)
    // and the other devices' feeding threads needed. Unless the user chose, they sleep after
    // 2^kThreadTimeout cycles; waking them costs tens of microseconds per GEMM. An OpenBLAS
    // loaded before the plugin has read its environment already: reported as not applied.
    // setenv/unsetenv race with a getenv of another thread; this runs once per process, while
    // the plugin initialises, before any kernel of it runs.
    const std::vector<std::string> paths = library_paths();
    std::vector<std::string> preloaded;  // the candidates already in the process
    for (const std::string& p : paths)
      if (loaded_already(p)) preloaded.push_back(p);
    const char* user_timeout = std::getenv("OPENBLAS_THREAD_TIMEOUT");
    std::string timeout = user_timeout ? std::string(user_timeout) + " (the user's)" : "";
    ScopedEnv spin("OPENBLAS_THREAD_TIMEOUT", std::to_string(kThreadTimeout));
    if (spin.set()) timeout = std::to_string(kThreadTimeout) + " (set by the plugin)";
    else if (timeout.empty()) timeout = "OpenBLAS's default (the plugin could not set it)";
    const std::string path = open(lib, paths);
    if (std::find(preloaded.begin(), preloaded.end(), path) != preloaded.end())
      timeout = "as OpenBLAS was loaded before the plugin (" +
                (user_timeout ? std::string(user_timeout) + " in the environment" : std::string("unset then")) + ")";
    const std::string config = text_of(lib.config);
    std::string core = text_of(lib.corename);
    std::string detected;
    bool replaced = false;
    const std::string best = best_core_for_this_cpu();
    // Only a DYNAMIC_ARCH build has other kernel sets to load; one built for a single target
    // keeps it (reported as not replaced).
    const bool dynamic = config.find("DYNAMIC_ARCH") != std::string::npos;
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr && !best.empty() && !core_has_avx2(core) && dynamic) {
      // OpenBLAS did not know this CPU and fell back to kernels without AVX2: initialise it
      // again with the best core for the CPU's instruction sets. dlclose runs its destructor
      // (its threads stop) when no one else holds it; if someone does, the reopen returns the
      // same instance and its choice stays (reported as such).
      dlclose(lib.handle);
      {
        ScopedEnv coretype("OPENBLAS_CORETYPE", best);
        open(lib, {path});
      }
      detected = core;
      core = text_of(lib.corename);
      replaced = core_has_avx2(core);
    }
    if (!dynamic && !best.empty() && !core_has_avx2(core)) detected = core;  // reported, not replaced
    lib.report = LoadReport{path, core, detected, replaced, best, text_of(lib.config),  // config: after any reload
                            timeout};
  });
  return lib;
}

}  // namespace

const LoadReport& load() { return library().report; }

void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, float alpha,
           const float* a, blasint lda, const float* b, blasint ldb, float beta, float* c, blasint ldc) {
  library().sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void dgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, double alpha,
           const double* a, blasint lda, const double* b, blasint ldb, double beta, double* c,
           blasint ldc) {
  library().dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int get_num_threads() { return library().get_num_threads(); }

void set_num_threads(int threads) { library().set_num_threads(threads); }

}  // namespace fl::cpu::blas
