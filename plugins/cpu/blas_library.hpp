// blas_library.hpp — OpenBLAS, loaded by the CPU plugin at its first use (dlopen) rather than by
// the dynamic linker when the plugin is loaded, so that the plugin can correct OpenBLAS's choice
// of kernels first.
//
// OpenBLAS's DYNAMIC_ARCH builds (Debian's) pick their kernels from the CPU model when the
// library initialises. A model newer than the build knows falls back to its generic x86-64
// kernels ("Prescott", SSE3): OpenBLAS 0.3.21 on an Intel family 6 model 207 (the Xeon of the
// H200 machine and of CI) ran the wide MLP's GEMMs 3-5x slower than with the AVX-512 kernels it
// has. So when OpenBLAS reports a core without AVX2 while the CPU has AVX2 and FMA, and the user
// did not choose one (OPENBLAS_CORETYPE unset), the library is loaded again with
// OPENBLAS_CORETYPE set to the best core this CPU runs: SkylakeX (AVX-512 F/BW/VL/DQ) or Haswell
// (AVX2, FMA). A core OpenBLAS chose knowingly is never replaced.
//
// Its idle threads sleep almost at once (OPENBLAS_THREAD_TIMEOUT=4 unless the user set it)
// instead of spinning for about 0.1 s after each GEMM: see library() in blas_library.cpp.
//
// Thread-safety: every function may be called from any thread; the first call loads the
// library (once per process), and a failure to load is thrown as plugin::raise(FL_ERR_NO_DEVICE).
#pragma once

#include <cblas.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace fl::cpu::blas {

// What was loaded, for the plugin's log.
struct LoadReport {
  std::string library;      // the path dlopen was given
  std::string core;         // OpenBLAS's kernel set in use (openblas_get_corename)
  std::string detected;     // OpenBLAS's own choice when it lacked the AVX2 this CPU has; else empty
  bool replaced = false;    // the plugin loaded it again with better kernels (false with `detected`
                            // set: another component holds the same OpenBLAS, or the build has one
                            // target only, so its choice stays)
  std::string best;         // the core the plugin asked for (best_core_for_this_cpu)
  std::string config;       // openblas_get_config()
  std::string thread_timeout;  // OPENBLAS_THREAD_TIMEOUT as the library was loaded, and who set it
};

// Loads OpenBLAS if it is not loaded yet; returns what was loaded.
const LoadReport& load();

void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, float alpha,
           const float* a, blasint lda, const float* b, blasint ldb, float beta, float* c, blasint ldc);
void dgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, double alpha,
           const double* a, blasint lda, const double* b, blasint ldb, double beta, double* c,
           blasint ldc);
int get_num_threads();
void set_num_threads(int threads);

// Row-major c = alpha * op(a) @ op(b) + beta * c for float or double, sizes as the kernels hold
// them (int64_t; BLAS takes blasint).
template <class T>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto i = [](int64_t v) { return static_cast<blasint>(v); };
  if constexpr (std::is_same_v<T, float>)
    sgemm(ta, tb, i(m), i(n), i(k), alpha, a, i(lda), b, i(ldb), beta, c, i(ldc));
  else
    dgemm(ta, tb, i(m), i(n), i(k), alpha, a, i(lda), b, i(ldb), beta, c, i(ldc));
}

}  // namespace fl::cpu::blas
