// minimal_ops.cpp — the ops every PrivateUse1 backend implements natively (torch_openreg's
// minimal set): tensor creation, views, resize, copies, reading a scalar, set_, record_stream,
// and the shallow-copy compatibility check behind `param.data = t`. Also the views that ATen
// registers per backend (view_as_real, view_as_complex, unfold): routed to the CPU fallback
// they would return copies, and a write through them would be lost.
#include "copy_engine.h"
#include "device_allocator.h"
#include "fl_context.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace fl::binding {
namespace {

constexpr c10::DispatchKeySet kFlKeys(c10::DispatchKey::PrivateUse1);

// Under torch.use_deterministic_algorithms(True) (and fill_uninitialized_memory, its
// default), new memory holds NaN (integers: their largest value), as empty() gives on CPU
// and CUDA, so a read of it is reproducible.
bool fills_new_memory() {
  return at::globalContext().deterministicAlgorithms() && at::globalContext().deterministicFillUninitializedMemory();
}

at::Tensor filled_if_deterministic(at::Tensor t) {
  if (fills_new_memory()) at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device d = c10::device_or_default(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "fl tensors support the strided layout only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "pin_memory applies to CPU tensors only");
  const c10::DeviceGuard guard(d);
  return filled_if_deterministic(at::detail::empty_generic(size, &device_allocator(), kFlKeys,
                                                           c10::dtype_or_default(dtype), memory_format));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::Device d = c10::device_or_default(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "fl tensors support the strided layout only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "pin_memory applies to CPU tensors only");
  const c10::DeviceGuard guard(d);
  return filled_if_deterministic(at::detail::empty_strided_generic(size, stride, &device_allocator(), kFlKeys,
                                                                   c10::dtype_or_default(dtype)));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

// at::native::resize_ is the CPU one: when the storage must grow, it copies the old bytes
// with a host memcpy, which on a device the host cannot read (the CUDA plugin) read device
// pointers and crashed (resizing a non-empty tensor: an out= argument of another size, a CSR
// tensor's write-back). So the storage is grown here first by the PrivateUse1 hook that
// storage.resize_() uses (hooks.cpp: a new block, the old bytes copied with the plugin's
// device-to-device memcpy on the current stream, as CUDA's resize_bytes_cuda does);
// at::native::resize_ then finds it large enough. Returns the storage's size before (for the
// deterministic fill, which at::native::resize_ no longer sees a reason for).
size_t grow_storage_for(const at::Tensor& self, at::IntArrayRef sizes) {
  if (!self.has_storage()) return 0;
  const size_t before = self.storage().nbytes();
  if (c10::multiply_integers(sizes) == 0) return before;
  const size_t needed = at::detail::computeStorageNbytesContiguous(sizes, self.dtype().itemsize(),
                                                                   static_cast<size_t>(self.storage_offset()));
  if (needed > before) at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(self.storage(), needed);
  return before;
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  const auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  // The same sizes (and no memory format asked for) change nothing, as in ATen's resize.
  if (self.sizes() == sizes && !memory_format.has_value()) return self;
  const size_t before = grow_storage_for(self, sizes);
  at::native::resize_(self, sizes, memory_format);
  if (fills_new_memory()) at::native::fill_resize_deterministic_(self, static_cast<int64_t>(before));
  return self;
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

// A tensor's conjugate and negative bits are metadata over unchanged memory. ATen's copy_ hands
// a copy that involves an fl tensor to _copy_from before it looks at the bits, and the
// Conjugate/Negative fallbacks would resolve them with clone(), which copies through
// _copy_from again (endless recursion: `x.conj().cpu()` crashed). So those fallbacks fall
// through for _copy_from (below), and the copy moves the raw memory and then applies, on the
// destination, the conjugation and negation by which the two tensors' bits differ.
struct RawView {
  at::Tensor tensor;  // the same memory with both bits cleared
  bool conj = false;
  bool neg = false;
};

RawView without_bits(const at::Tensor& t) {
  RawView raw{t, t.is_conj(), t.is_neg()};
  if (raw.conj) raw.tensor = raw.tensor.conj();         // flips the bit back: a view
  if (raw.neg) raw.tensor = raw.tensor._neg_view();     // likewise
  return raw;
}

void copy_values(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  // ATen's copy_ checks these after it has handed fl copies to _copy_from: as on the CPU, a
  // destination whose elements share memory, or operands that partly overlap, are refused.
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, src);
  if (!src.is_conj() && !src.is_neg() && !dst.is_conj() && !dst.is_neg()) {
    copy_between(dst, src, non_blocking);
    return;
  }
  const RawView from = without_bits(src);
  RawView to = without_bits(dst);
  copy_between(to.tensor, from.tensor, false);
  // conj_physical_ reaches a DispatchStub with no fl kernel; negating the imaginary parts
  // through view_as_real routes like any elementwise op.
  // (A real destination took the real parts, which conjugation does not change.)
  if (from.conj != to.conj && to.tensor.is_complex()) at::view_as_real(to.tensor).select(-1, 1).neg_();
  if (from.neg != to.neg) to.tensor.neg_();
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  copy_values(dst, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.is_privateuseone()) {
    resize_(dst, c10::fromIntArrayRefSlow(self.sizes()), std::nullopt);  // (it guards dst's device)
  } else {
    at::native::resize_(dst, self.sizes(), std::nullopt);
  }
  copy_values(dst, self, false);
  return dst;
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  // `item()` works on any one-element tensor, not only 0-dim ones.
  at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  copy_between(host, self, false);
  return at::native::_local_scalar_dense_cpu(host);
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage storage, int64_t offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::cpu::set_(self, storage, offset, size, stride);
}

at::Tensor& set_empty(at::Tensor& self) {
  caffe2::TypeMeta dtype = self.dtype();
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &device_allocator(), true);
  at::cpu::set_(self, storage, 0, {0}, {});
  TORCH_INTERNAL_ASSERT(dtype == self.dtype());
  return self;
}

// tensor.record_stream(s): the allocator keeps the block from reuse until `s` reaches the
// work enqueued so far.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "record_stream: ", stream,
              " is not an fl stream");
  if (!self.storage().data_ptr().get()) return;
  device_allocator().recordStream(self.storage().data_ptr(), stream);
}

// `param.data = t` (and so `module.to("fl")` keeping its Parameter objects) needs this to be
// true between dense CPU and fl tensors; c10's default lists only built-in dense backends.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense_cpu_or_fl = [](const at::Tensor& t) {
    const auto type = t.device().type();
    return t.layout() == c10::Layout::Strided && !t.is_quantized() &&
           (type == c10::DeviceType::CPU || type == c10::DeviceType::PrivateUse1);
  };
  if (dense_cpu_or_fl(self) && dense_cpu_or_fl(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("record_stream", record_stream);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("resize_", resize_);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("view", view);
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_", set_empty);
}

// See copy_values: the bits of a copy's operands are applied by the copy itself.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace fl::binding
