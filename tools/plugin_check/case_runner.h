// case_runner.h — runs one KernelCase through a plugin's kernel on a device: uploads the
// inputs, calls the kernel on the default stream, synchronizes and downloads the outputs. A
// failed synchronize counts as the kernel's failure (its status and message).
#pragma once

#include "case_catalog.h"
#include "plugin_library.h"

#include <string>
#include <vector>

namespace fl::check {

struct CaseRun {
  fl_status_t status = FL_OK;
  std::string error;                // "<STATUS>: <last_error>" when status != FL_OK
  std::vector<HostTensor> outputs;  // one per output spec (empty tensors for not-requested)
  bool reported_by_synchronize = false;  // the kernel returned FL_OK, the wait after it failed
};

// The RNG pair a call carries (FL_CALL_RNG, fl_kernel_call.rng_seed/rng_offset).
struct RngPair {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Inputs are made contiguous when the entry lacks FL_KERNEL_STRIDED_INPUTS. A C++ exception
// escaping the kernel is reported as FL_ERR_INTERNAL with its text. With `rng`, the call
// carries that pair.
CaseRun run_case(const PluginLibrary& plugin, const fl_kernel_entry& entry, const KernelCase& c, int32_t device,
                 const RngPair* rng = nullptr);

// nullopt when equal within tolerance, else a message naming the first bad element.
std::optional<std::string> compare_outputs(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected,
                                           const std::vector<OutputSpec>& specs, double tolerance_scale);

// Whether every requested output equals the expected one value for value (no tolerance; a
// signed zero equals the other zero, and NaN equals NaN).
bool identical_outputs(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected,
                       const std::vector<OutputSpec>& specs);

// (rtol, atol) of a dtype before scaling: float32 1e-5, float64 1e-9, bfloat16 1e-2,
// float16 1e-3; integers and bool exact.
std::pair<double, double> base_tolerance(fl_dtype_t dtype);

}  // namespace fl::check
