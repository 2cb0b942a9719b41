#include "copy_engine.h"

#include "fl_context.h"
#include "kernel_call.h"
#include "pinned_allocator.h"
#include "staging_pool.h"

#include <plugin_library.h>

#include <ATen/ATen.h>

#include <cstring>

namespace fl::binding {
namespace {

struct DeviceRef {
  const fl::LogicalDevice& dev;
  fl::StreamRegistry& streams;
  fl_stream_t stream;
};

DeviceRef device_ref(c10::DeviceIndex index) {
  auto& rt = runtime();
  auto& reg = rt.streams(index);
  return {rt.device(index), reg, reg.handle(reg.current())};
}

void* data_of(const at::Tensor& t) {
  return static_cast<char*>(t.storage().mutable_data()) + t.storage_offset() * t.element_size();
}

void memcpy_on(const DeviceRef& d, void* dst, const void* src, size_t bytes, fl_memcpy_kind_t kind) {
  if (bytes == 0) return;
  d.dev.plugin->check(d.dev.plugin->ops().fl_memcpy_async(d.dev.local, dst, src, bytes, kind, d.stream),
                      "memcpy");
}

// After an asynchronous copy between `pinned` host memory and device `d` was queued: keeps the
// pinned block until the stream has run the copy. False (the caller then waits for the copy)
// when the memory is not a live pinned block; when recording fails, waits and rethrows, so no
// block is left unprotected under a queued copy.
bool keep_until_copied(const DeviceRef& d, const void* pinned, c10::DeviceIndex device) {
  try {
    return keep_pinned_until_done(pinned, device);
  } catch (...) {
    d.streams.synchronize(d.streams.current());
    throw;
  }
}

// The largest copy from a host-memory device to another plugin's device that goes through a
// pinned block when non_blocking (larger ones wait, as without non_blocking): the pinned cache
// keeps what it hands out, so this bounds what such copies can leave pinned per copy.
constexpr size_t kMaxPinnedStagingBytes = size_t{64} << 20;

// Same-device copy through the plugin's `aten::copy.out` kernel, called directly (going
// through the dispatcher would reach ATen's composite copy_out and come back here). False when
// the plugin has no such kernel or it cannot take these layouts.
bool device_copy_kernel(const at::Tensor& dst, const at::Tensor& src) {
  const c10::DeviceIndex device = dst.device().index();
  auto& rt = runtime();
  const fl_kernel_entry* e = rt.dispatch(device).find("aten::copy.out", to_fl_dtype(src.scalar_type()));
  if (e == nullptr) return false;
  if (!(e->flags & FL_KERNEL_STRIDED_INPUTS) && !src.is_contiguous()) return false;
  if (!(e->flags & FL_KERNEL_STRIDED_OUTPUTS) && !dst.is_contiguous()) return false;
  if (!(e->flags & FL_KERNEL_ALIASING_OK) && dst.storage().is_alias_of(src.storage())) return false;
  const auto& dev = rt.device(device);
  KernelCallBuilder call(device, dev.local);
  if (!call.add_input(dst) || !call.add_input(src) || !call.add_input(c10::IValue(false)) ||
      !call.add_output(dst))
    return false;
  auto& reg = rt.streams(device);
  const fl_status_t st = e->fn(&call.build(reg.handle(reg.current()), 0, *e));
  if (st == FL_ERR_NOT_SUPPORTED) return false;
  dev.plugin->check(st, "aten::copy.out");
  return true;
}

// The bytes of device memory that a (possibly strided) tensor spans: element offsets
// [lo, hi] relative to the storage.
std::pair<int64_t, int64_t> element_span(const at::Tensor& t) {
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return {t.storage_offset(), t.storage_offset() - 1};
    hi += (t.size(d) - 1) * t.stride(d);
  }
  return {lo, hi};
}

// A host copy of the device memory a strided fl tensor spans, viewed with the same
// sizes/strides (no device kernel needed). `span_out` receives the host buffer.
at::Tensor span_to_host(const at::Tensor& t, at::Tensor& span_out) {
  auto [lo, hi] = element_span(t);
  const int64_t count = hi >= lo ? hi - lo + 1 : 0;
  span_out = at::empty({count}, t.options().device(at::kCPU));
  if (count > 0) {
    const DeviceRef d = device_ref(t.device().index());
    const char* base = static_cast<const char*>(t.storage().data()) + lo * t.element_size();
    memcpy_on(d, span_out.data_ptr(), base, static_cast<size_t>(count) * t.element_size(),
              FL_MEMCPY_DEVICE_TO_HOST);
    d.streams.synchronize(d.streams.current());
  }
  return span_out.as_strided(t.sizes(), t.strides(), 0);
}

// Writes a host span (from span_to_host, modified through its view) back to the device.
void span_to_device(const at::Tensor& t, const at::Tensor& span) {
  if (span.numel() == 0) return;
  auto [lo, hi] = element_span(t);
  (void)hi;
  const DeviceRef d = device_ref(t.device().index());
  char* base = static_cast<char*>(t.storage().mutable_data()) + lo * t.element_size();
  memcpy_on(d, base, span.const_data_ptr(), span.nbytes(), FL_MEMCPY_HOST_TO_DEVICE);
  d.streams.synchronize(d.streams.current());
}

}  // namespace

bool is_host_accessible(const at::Tensor& t) {
  return runtime().device(t.device().index()).props.host_accessible != 0;
}

void sync_current_stream(c10::DeviceIndex device) {
  auto& reg = runtime().streams(device);
  reg.synchronize(reg.current());
}

at::Tensor host_alias(const at::Tensor& t) {
  TORCH_CHECK(is_host_accessible(t), "fl:", static_cast<int>(t.device().index()),
              ": device memory is not host-accessible");
  sync_current_stream(t.device().index());
  if (t.numel() == 0 || !t.storage().data()) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  }
  return at::from_blob(data_of(t), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

void copy_between(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  if (dst.numel() == 0) return;
  if (src.sizes() != dst.sizes()) {
    // copy_ broadcasts its source; the paths below copy whole buffers of dst's size.
    copy_between(dst, src.expand(dst.sizes()), non_blocking);
    return;
  }
  translate_errors("copy: ", [&] {
    // Another device type's tensor (a native cuda tensor beside fl devices): through the host,
    // since the paths below hand its data pointer to the plugin as host memory.
    if (!is_fl_tensor(src) && !src.is_cpu()) {
      copy_between(dst, src.cpu(), false);
      return;
    }
    if (!is_fl_tensor(dst) && !dst.is_cpu()) {
      at::Tensor host = at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(at::kCPU));
      copy_between(host, src, false);
      dst.copy_(host);
      return;
    }
    // host → fl
    if (!is_fl_tensor(src)) {
      const DeviceRef d = device_ref(dst.device().index());
      // A dense copy goes through the plugin's memcpy, also when the device memory is host
      // memory: the CPU plugin copies on its stream thread, while ATen's CPU copy would wake
      // torch's OpenMP pool, whose threads then spin beside the plugin's BLAS threads.
      // (A conversion or gather into host-accessible memory is written there directly below.)
      const bool dense_same = src.is_contiguous() && dst.scalar_type() == src.scalar_type();
      // non_blocking from pinned memory (as in CUDA): the copy stays queued on the stream, and
      // the pinned block is kept until the stream has read it. Pageable memory is read before
      // returning, since its owner may free it at once.
      if (non_blocking && dense_same && dst.is_contiguous() && pinned_allocator().is_pinned(src.const_data_ptr())) {
        memcpy_on(d, data_of(dst), src.const_data_ptr(), src.nbytes(), FL_MEMCPY_HOST_TO_DEVICE);
        if (!keep_until_copied(d, src.const_data_ptr(), dst.device().index())) d.streams.synchronize(d.streams.current());
        return;
      }
      if (dst.is_contiguous() && (dense_same || !d.dev.props.host_accessible)) {
        at::Tensor staged = src.to(dst.scalar_type()).contiguous();
        memcpy_on(d, data_of(dst), staged.const_data_ptr(), staged.nbytes(), FL_MEMCPY_HOST_TO_DEVICE);
        d.streams.synchronize(d.streams.current());  // staged is pageable and dies here
        return;
      }
      if (d.dev.props.host_accessible) {
        host_alias(dst).copy_(src);
        return;
      }
      // A strided destination: read the span it covers, update it on the host, write it back.
      at::Tensor span;
      at::Tensor view = span_to_host(dst, span);
      view.copy_(src);
      span_to_device(dst, span);
      return;
    }
    // fl → host
    if (!is_fl_tensor(dst)) {
      const DeviceRef d = device_ref(src.device().index());
      if (src.is_contiguous() && dst.is_contiguous() && dst.scalar_type() == src.scalar_type()) {
        memcpy_on(d, dst.data_ptr(), data_of(src), dst.nbytes(), FL_MEMCPY_DEVICE_TO_HOST);
        // non_blocking into pinned memory (as in CUDA): the caller synchronizes before reading.
        if (non_blocking && keep_until_copied(d, dst.data_ptr(), src.device().index())) return;
        d.streams.synchronize(d.streams.current());
        return;
      }
      if (d.dev.props.host_accessible) {
        dst.copy_(host_alias(src));
        return;
      }
      at::Tensor span;
      dst.copy_(span_to_host(src, span));
      return;
    }
    // fl → fl
    const c10::DeviceIndex di = dst.device().index(), si = src.device().index();
    auto& rt = runtime();
    if (di == si) {
      const DeviceRef d = device_ref(di);
      if (dst.scalar_type() == src.scalar_type() && dst.is_contiguous() && src.is_contiguous()) {
        memcpy_on(d, data_of(dst), data_of(src), dst.nbytes(), FL_MEMCPY_DEVICE_TO_DEVICE);
        return;
      }
      if (device_copy_kernel(dst, src)) return;
      if (d.dev.props.host_accessible) {
        host_alias(dst).copy_(host_alias(src));
        return;
      }
      // Stage through the host: correct for any layout and dtype, slow.
      at::Tensor span;
      at::Tensor h = span_to_host(src, span);
      copy_between(dst, h, false);
      return;
    }
    // Different devices of one plugin with peer access: one device-to-device copy.
    const auto& sdev = rt.device(si);
    const auto& ddev = rt.device(di);
    if (sdev.plugin == ddev.plugin && dst.scalar_type() == src.scalar_type() && dst.is_contiguous() &&
        src.is_contiguous()) {
      int32_t peer = 0;
      auto can_access = sdev.plugin->entry(&fl_device_ops::device_can_access_peer);
      if (can_access != nullptr && can_access(sdev.local, ddev.local, &peer) == FL_OK && peer) {
        const DeviceRef s = device_ref(si);
        rt.order_after(si, s.streams.current(), di, rt.streams(di).current());
        memcpy_on(s, data_of(dst), data_of(src), dst.nbytes(), FL_MEMCPY_DEVICE_TO_DEVICE);
        rt.order_after(di, rt.streams(di).current(), si, s.streams.current());
        return;
      }
    }
    // Across plugins, when one side's memory is host memory (the CPU plugin): one copy between
    // it and the other device, no staging buffer. host_alias waits for the host-side device's
    // stream (its queued writes of src, or reads of dst); the device half is synchronous.
    if (sdev.props.host_accessible) {
      at::Tensor host = host_alias(src);
      // non_blocking, dense, into device memory: through a pinned block (a host memcpy, from
      // the pinned cache), so that the device half stays queued on dst's stream instead of
      // waiting for it (into host memory the direct copy below needs no block). A plain
      // memcpy on this thread: ATen's CPU copy would wake torch's OpenMP pool, whose threads
      // then wait for cores beside the plugin's BLAS threads.
      if (non_blocking && !ddev.props.host_accessible && host.is_contiguous() && dst.is_contiguous() &&
          dst.scalar_type() == src.scalar_type() && host.nbytes() <= kMaxPinnedStagingBytes) {
        // From this binding's pinned cache by name: at::empty(pinned_memory(true)) would take
        // torch's own CUDA host allocator in a CUDA build of torch, whose blocks is_pinned does
        // not know, and the copy would then wait for dst's stream (measured on the H200: a
        // 512 KiB gradient's copy took as long as the GPU's queued work, 3-8 ms).
        at::Tensor pinned = at::detail::empty_generic(host.sizes(), &pinned_allocator(),
                                                      c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                      host.scalar_type(), std::nullopt);
        if (pinned_allocator().is_pinned(pinned.const_data_ptr())) {
          std::memcpy(pinned.data_ptr(), host.const_data_ptr(), host.nbytes());
          copy_between(dst, pinned, true);
          return;
        }
      }
      copy_between(dst, host, false);
      return;
    }
    if (ddev.props.host_accessible) {
      copy_between(host_alias(dst), src, false);
      return;
    }
    // Across plugins (or without peer access): stage through host memory pinned by src's
    // plugin (its device-to-host copy is then a DMA), from a pool that keeps the buffers. The
    // device-to-host half waits for src's stream; the host-to-device half is ordered on dst's
    // stream and finished before the buffer goes back to the pool.
    StagingBuffer staging(sdev.plugin.get(), static_cast<size_t>(src.numel()) * src.element_size());
    at::Tensor h = at::from_blob(staging.data(), src.sizes(), src.options().device(at::kCPU));
    copy_between(h, src, false);
    copy_between(dst, h, false);
  });
}

}  // namespace fl::binding
