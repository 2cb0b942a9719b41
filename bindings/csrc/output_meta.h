// output_meta.h — the shapes, strides and dtypes of an operator's outputs, from PyTorch
// itself: the operator's Meta kernel run on meta copies of the arguments (or a shape rule for
// the few ops that have none), cached per input signature so the hot path is one lookup.
#pragma once

#include <exception>

#include "op_info.h"

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <optional>
#include <vector>

namespace fl::binding {

struct TensorMeta {
  bool defined = false;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// Metadata of the op's returns when called with `args` (all schema arguments, out= included;
// for out= ops the returned metadata is that of the out tensors after ATen's resize rules).
using OutputMeta = std::shared_ptr<const std::vector<TensorMeta>>;

// nullptr when PyTorch has no way to tell (then the router skips the native tier). The result
// is shared with the cache: no copy on the hot path.
// `meta_error`, when given, receives the Meta kernel's exception when it raised one for this
// call (an error in the user's call, or one of a Python decomposition alone); the result is
// then nullptr, and the caller decides whether a lower tier runs ATen's kernel or the error
// is the answer.
OutputMeta output_meta(const c10::OperatorHandle& op, OpInfo& info, c10::ArrayRef<c10::IValue> args,
                       std::exception_ptr* meta_error = nullptr);

// Entries in the cache (for tests and statistics).
size_t output_meta_cache_entries();

size_t output_meta_cache_size();

}  // namespace fl::binding
