#include "fl_context.h"

#include <error.h>

#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>

namespace fl::binding {
namespace {

thread_local c10::DeviceIndex tls_current_device = 0;

// Fork: a child has the parent's memory but not its threads (the CPU plugin's stream workers,
// a driver's) nor a usable driver context, so its first fl op would wait forever. As CUDA does
// ("Cannot re-initialize CUDA in forked subprocess"), a child forked after the parent used fl
// gets an error instead. "Used": it allocated fl memory (which every op producing a tensor
// does); a child forked before that may use fl (nothing of the parent's runtime ran).
std::atomic<bool> g_used{false};
std::atomic<bool> g_bad_fork{false};

void on_fork_child() {
  if (g_used.load(std::memory_order_relaxed)) g_bad_fork.store(true, std::memory_order_relaxed);
}

[[maybe_unused]] const int g_atfork_registered = pthread_atfork(nullptr, nullptr, &on_fork_child);

}  // namespace

void note_device_use() noexcept { g_used.store(true, std::memory_order_relaxed); }

bool in_bad_fork() noexcept { return g_bad_fork.load(std::memory_order_relaxed); }

bool was_used() noexcept { return g_used.load(std::memory_order_relaxed); }

fl::Runtime& runtime() {
  TORCH_CHECK(!in_bad_fork(),
              "torch_fl: cannot use fl devices in a forked subprocess: the parent process used them before it "
              "forked, and a child has its memory but not its plugins' threads or driver contexts. To use fl "
              "with multiprocessing, use the 'spawn' start method (torch.multiprocessing.set_start_method"
              "(\"spawn\"), or a DataLoader's multiprocessing_context=\"spawn\")");
  try {
    return fl::Runtime::global();
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "torch_fl: the device runtime failed to start: ", e.what());
  }
}

int device_count_noexcept() noexcept {
  try {
    return fl::Runtime::global().device_count();
  } catch (...) {
    return 0;
  }
}

c10::DeviceIndex current_device() { return tls_current_device; }

void check_device(c10::DeviceIndex index) {
  const int n = runtime().device_count();
  // Messages carry numbers as strings: streaming integers into c10::str crashed inside the
  // extension on the H200 build (its own copy of ostream's numeric formatting, see op_router).
  TORCH_CHECK_INDEX(index >= 0 && index < n, "invalid fl device index ", std::to_string(index),
                    ": ", std::to_string(n), " fl device(s) available (see torch_fl.list_devices())");
}

void set_current_device(c10::DeviceIndex index) {
  check_device(index);
  tls_current_device = index;
}

fl_dtype_t to_fl_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return FL_DTYPE_FLOAT32;
    case c10::ScalarType::Double: return FL_DTYPE_FLOAT64;
    case c10::ScalarType::Half: return FL_DTYPE_FLOAT16;
    case c10::ScalarType::BFloat16: return FL_DTYPE_BFLOAT16;
    case c10::ScalarType::Long: return FL_DTYPE_INT64;
    case c10::ScalarType::Int: return FL_DTYPE_INT32;
    case c10::ScalarType::Short: return FL_DTYPE_INT16;
    case c10::ScalarType::Char: return FL_DTYPE_INT8;
    case c10::ScalarType::Byte: return FL_DTYPE_UINT8;
    case c10::ScalarType::Bool: return FL_DTYPE_BOOL;
    case c10::ScalarType::ComplexFloat: return FL_DTYPE_COMPLEX64;
    case c10::ScalarType::ComplexDouble: return FL_DTYPE_COMPLEX128;
    default: return -1;
  }
}

fl_stream_t stream_handle(const c10::Stream& stream) {
  return runtime().streams(stream.device_index()).handle(stream.id());
}

c10::Stream current_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                     runtime().streams(index).current());
}

void rethrow_as_torch_error(const std::string& context) {
  try {
    throw;
  } catch (const fl::OutOfMemoryError& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, context, e.what());
  } catch (const fl::NotSupportedError& e) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, context, e.what());
  } catch (const fl::ConfigError& e) {
    TORCH_CHECK_VALUE(false, context, e.what());
  } catch (const fl::Error& e) {
    TORCH_CHECK(false, context, e.what());
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    TORCH_CHECK(false, context, e.what());
  }
}

}  // namespace fl::binding
