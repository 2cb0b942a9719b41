// case_catalog.h — fl-plugin-check's test cases: for an ATen overload named by a kernel entry,
// the inputs (in schema order) and the output shapes and dtypes the binding would allocate.
// Each op gets a plain case, a broadcast case where broadcasting applies, a transposed input
// when the entry declares FL_KERNEL_STRIDED_INPUTS, and a zero-size case.
#pragma once

#include "host_tensor.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fl::check {

struct CaseArg {
  enum class Kind { None, Tensor, Int, Double, Bool, IntList, BoolList, String };
  Kind kind = Kind::None;
  HostTensor tensor;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  std::vector<int64_t> ints;
  std::vector<int32_t> bools;
  std::string str;

  static CaseArg none() { return {}; }
  static CaseArg of(HostTensor t) { CaseArg a; a.kind = Kind::Tensor; a.tensor = std::move(t); return a; }
  static CaseArg integer(int64_t v) { CaseArg a; a.kind = Kind::Int; a.i = v; return a; }
  static CaseArg real(double v) { CaseArg a; a.kind = Kind::Double; a.d = v; return a; }
  static CaseArg boolean(bool v) { CaseArg a; a.kind = Kind::Bool; a.b = v; return a; }
  static CaseArg int_list(std::vector<int64_t> v) { CaseArg a; a.kind = Kind::IntList; a.ints = std::move(v); return a; }
  static CaseArg bool_list(std::vector<int32_t> v) { CaseArg a; a.kind = Kind::BoolList; a.bools = std::move(v); return a; }
  static CaseArg string(std::string v) { CaseArg a; a.kind = Kind::String; a.str = std::move(v); return a; }
};

struct OutputSpec {
  fl_dtype_t dtype = FL_DTYPE_FLOAT32;
  Shape shape;
  bool requested = true;  // false: passed with ndim == -1 (e.g. a masked-off gradient)
};

struct KernelCase {
  std::string label;               // e.g. "broadcast [4,1,3]x[5,1]"
  std::vector<CaseArg> inputs;
  std::vector<OutputSpec> outputs;
};

struct CatalogEntry {
  // Cases for one dtype of the primary input; empty when the dtype does not apply to the op.
  std::function<std::vector<KernelCase>(fl_dtype_t dtype, bool strided_inputs)> build;
  // Multiplies the dtype's base tolerance (reductions, gemm, conv accumulate more error).
  double tolerance_scale = 1.0;
  // Where the op leaves the order of its outputs open (an unstable sort's equal elements,
  // topk's sorted=False), rewrites outputs into one canonical order before they are compared,
  // the plugin's and the reference's alike; nullptr: compared as they come.
  std::function<void(const KernelCase& c, std::vector<HostTensor>& outputs)> canonical_order = nullptr;
};

// The entry for an op name ("aten::add.out"), or nullptr when the catalog has no case.
const CatalogEntry* find_catalog_entry(const std::string& op);

// c10::ScalarType number of an fl dtype (for ScalarType arguments).
int64_t c10_scalar_type(fl_dtype_t dtype);

}  // namespace fl::check
