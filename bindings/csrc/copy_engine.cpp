#include "copy_engine.h"

#include "fl_context.h"

#include <plugin_library.h>

#include <ATen/ATen.h>
#include <ATen/ops/copy_ops.h>

namespace fl::binding {
namespace {

bool is_fl(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

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

// Same-device copy through the plugin's copy kernel, when it has one for this case.
bool device_copy_kernel(const at::Tensor& dst, const at::Tensor& src) {
  const auto& table = runtime().dispatch(dst.device().index());
  if (table.find("aten::copy.out", to_fl_dtype(src.scalar_type())) == nullptr) return false;
  // Route through the dispatcher so the op router builds the call (strides, aliasing).
  at::_ops::copy_out::call(dst, src, false, const_cast<at::Tensor&>(dst));
  return true;
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
  (void)non_blocking;  // copies from pageable host memory complete before returning
  if (dst.numel() == 0) return;
  translate_errors("copy: ", [&] {
    // host → fl
    if (!is_fl(src)) {
      const DeviceRef d = device_ref(dst.device().index());
      if (d.dev.props.host_accessible) {
        host_alias(dst).copy_(src);
        return;
      }
      at::Tensor staged = src.to(dst.scalar_type()).contiguous();
      if (dst.is_contiguous()) {
        memcpy_on(d, data_of(dst), staged.const_data_ptr(), staged.nbytes(), FL_MEMCPY_HOST_TO_DEVICE);
        d.streams.synchronize(d.streams.current());  // staged is pageable and dies here
      } else {
        at::Tensor tmp = at::empty(dst.sizes(), dst.options());
        memcpy_on(d, data_of(tmp), staged.const_data_ptr(), staged.nbytes(), FL_MEMCPY_HOST_TO_DEVICE);
        d.streams.synchronize(d.streams.current());
        copy_between(dst, tmp, false);
      }
      return;
    }
    // fl → host
    if (!is_fl(dst)) {
      const DeviceRef d = device_ref(src.device().index());
      if (d.dev.props.host_accessible) {
        dst.copy_(host_alias(src));
        return;
      }
      at::Tensor contiguous_src = src.is_contiguous() ? src : src.contiguous();
      if (dst.is_contiguous() && dst.scalar_type() == src.scalar_type()) {
        memcpy_on(d, dst.data_ptr(), data_of(contiguous_src), dst.nbytes(), FL_MEMCPY_DEVICE_TO_HOST);
        d.streams.synchronize(d.streams.current());
      } else {
        at::Tensor tmp = at::empty(src.sizes(), src.options().device(at::kCPU));
        memcpy_on(d, tmp.data_ptr(), data_of(contiguous_src), tmp.nbytes(), FL_MEMCPY_DEVICE_TO_HOST);
        d.streams.synchronize(d.streams.current());
        dst.copy_(tmp);
      }
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
      at::Tensor h = at::empty(src.sizes(), src.options().device(at::kCPU));
      copy_between(h, src, false);
      copy_between(dst, h, false);
      return;
    }
    // Different devices: order dst's stream after src's current work.
    const auto& sdev = rt.device(si);
    const auto& ddev = rt.device(di);
    if (sdev.plugin == ddev.plugin && dst.scalar_type() == src.scalar_type() && dst.is_contiguous() &&
        src.is_contiguous()) {
      int32_t peer = 0;
      auto can_access = sdev.plugin->entry(&fl_device_ops::device_can_access_peer);
      if (can_access != nullptr && can_access(sdev.local, ddev.local, &peer) == FL_OK && peer) {
        // Copy on the source stream, then make dst's stream wait for it.
        const DeviceRef s = device_ref(si);
        rt.order_after(si, s.streams.current(), di, rt.streams(di).current());
        memcpy_on(s, data_of(dst), data_of(src), dst.nbytes(), FL_MEMCPY_DEVICE_TO_DEVICE);
        rt.order_after(di, rt.streams(di).current(), si, s.streams.current());
        return;
      }
    }
    // Across plugins (or without peer access): stage through host memory. The D2H waits for
    // src's stream; the H2D is ordered on dst's stream.
    at::Tensor h = at::empty(src.sizes(), src.options().device(at::kCPU).pinned_memory(false));
    copy_between(h, src, false);
    copy_between(dst, h, false);
  });
}

}  // namespace fl::binding
