// fl_context.h — what every part of the binding shares: access to the core runtime, the
// current fl device, dtype mapping and turning core errors into PyTorch errors.
#pragma once

#include <fl_abi.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <runtime.h>

#include <string>

namespace fl::binding {

// The process-wide core runtime (built on first use). Throws c10::Error on load failure, and
// in a child forked after this process used fl (in_bad_fork).
fl::Runtime& runtime();

// Marks that this process has used fl memory: a child forked from now on cannot use fl.
void note_device_use() noexcept;
// Whether this process is such a child (torch.fl._is_in_bad_fork()).
bool in_bad_fork() noexcept;
// Whether this process has used fl memory (note_device_use was called).
bool was_used() noexcept;

// Number of fl devices; 0 (never an exception) when the runtime cannot be built.
int device_count_noexcept() noexcept;

// A defined tensor on an fl device.
inline bool is_fl_tensor(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// This thread's current fl device index (default 0).
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
void check_device(c10::DeviceIndex index);

// ATen dtype ↔ ABI dtype; returns -1 when the ABI has no such dtype.
fl_dtype_t to_fl_dtype(c10::ScalarType type);

// The plugin stream handle of a c10::Stream on an fl device.
fl_stream_t stream_handle(const c10::Stream& stream);
c10::Stream current_stream(c10::DeviceIndex index);

// Rethrows a core exception as the matching c10 exception (OutOfMemoryError, NotImplementedError,
// ValueError...). Call inside a catch block.
[[noreturn]] void rethrow_as_torch_error(const std::string& context);

// Runs `body`, translating fl::Error into c10 errors with `context` prefixed.
template <class Body>
auto translate_errors(const std::string& context, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const c10::Error&) {
    throw;
  } catch (...) {
    rethrow_as_torch_error(context);
  }
}

}  // namespace fl::binding
