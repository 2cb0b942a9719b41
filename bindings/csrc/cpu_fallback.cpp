#include "cpu_fallback.h"

#include "copy_engine.h"
#include "fl_context.h"
#include "generator.h"
#include "ivalue_map.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <ATen/CPUGeneratorImpl.h>

#include <array>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace fl::binding {
namespace {

struct WriteBack {
  at::Tensor fl;   // the user's tensor
  at::Tensor cpu;  // what the CPU kernel wrote
};

class HostArguments {
 public:
  // `mode_copy`: give the CPU kernel a copy (to be written back when `written`).
  at::Tensor to_host(const at::Tensor& t, bool written, bool is_out) {
    if (!is_fl_tensor(t)) return t;
    auto key = t.unsafeGetTensorImpl();
    if (auto it = seen_.find(key); it != seen_.end()) {
      // The same tensor again, e.g. out= aliasing self (in-place ops reach the router as
      // X.out(self, ..., out=self)): its host copy must now be written back too.
      Entry& e = it->second;
      if ((written || is_out) && !e.aliased && !e.written_back) {
        write_backs_.push_back({t, e.host});
        e.written_back = true;
      }
      return e.host;
    }
    Entry e;
    // A sparse tensor has no one buffer to alias: it is copied (indices and values), and an
    // out= one keeps its structure as well as its values.
    const bool strided = t.layout() == c10::kStrided;
    if (strided && is_host_accessible(t) && !is_out) {
      e.host = host_alias(t);  // in-place writes land in device memory directly
      e.aliased = true;
    } else if (is_out && strided) {
      e.host = at::empty(t.sizes(), t.options().device(at::kCPU));
      if (t.numel() > 0) e.host.copy_(t);  // out= may be read (e.g. accumulate) — keep its values
      e.written_back = true;
    } else {
      e.host = t.to(at::kCPU);
      e.written_back = written || is_out;
    }
    if (e.written_back) write_backs_.push_back({t, e.host});
    seen_.emplace(key, e);
    return e.host;
  }

  c10::IValue convert(const c10::IValue& v, bool written, bool is_out) {
    return map_tensors(v, [&](const at::Tensor& t) { return to_host(t, written, is_out); },
                       c10::Device(at::kCPU));
  }

  // The fl tensor that `host` stands for, if any.
  at::Tensor original_of(const at::Tensor& host) const {
    for (const auto& [impl, e] : seen_)
      if (e.host.is_same(host)) return at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(impl));
    return at::Tensor();
  }

  void write_back() {
    for (auto& w : write_backs_) {
      if (w.fl.layout() != c10::kStrided) {
        at::_copy_from_and_resize(w.cpu, w.fl);  // takes the structure too (sparse_ops.cpp)
        continue;
      }
      if (w.fl.sizes() != w.cpu.sizes()) w.fl.resize_(w.cpu.sizes());
      w.fl.copy_(w.cpu);
    }
  }

 private:
  struct Entry {
    at::Tensor host;
    bool aliased = false;       // a host view of the device memory: nothing to write back
    bool written_back = false;  // queued in write_backs_
  };
  std::unordered_map<c10::TensorImpl*, Entry> seen_;
  std::vector<WriteBack> write_backs_;
};

at::Tensor to_device(const at::Tensor& host, c10::Device device, const HostArguments& args) {
  if (!host.defined() || host.device().type() != c10::DeviceType::CPU) return host;
  if (at::Tensor original = args.original_of(host); original.defined()) return original;
  // A sparse result (dense.to_sparse()) has no strides: its indices and values move as a COO
  // tensor (sparse_ops.cpp builds it on the device).
  if (host.layout() != c10::kStrided) return host.to(device);
  at::Tensor out = at::empty_strided(host.sizes(), host.strides(), host.options().device(device));
  out.copy_(host);
  return out;
}

// CPU kernels of these ops are traps ("use TORCH_LIBRARY_IMPL to override"): run the CPU
// operator they stand for instead. Returns false when `op` is not one of them.
bool run_cpu_equivalent(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device fl_device) {
  const auto& name = op.schema().name();
  if (name != "aten::convolution_overrideable" && name != "aten::convolution_backward_overrideable")
    return false;
  const size_t n = op.schema().arguments().size();
  HostArguments host;
  std::vector<c10::IValue> a;
  for (const auto& v : torch::jit::last(*stack, n)) a.push_back(host.convert(v, false, false));
  auto ints = [&](size_t i) { return a[i].toIntVector(); };
  torch::jit::drop(*stack, n);
  if (name == "aten::convolution_overrideable") {
    std::optional<at::Tensor> bias;
    if (!a[2].isNone()) bias = a[2].toTensor();
    at::Tensor out = at::convolution(a[0].toTensor(), a[1].toTensor(), bias, ints(3), ints(4), ints(5),
                                     a[6].toBool(), ints(7), a[8].toInt());
    stack->emplace_back(to_device(out, fl_device, host));
    return true;
  }
  const at::Tensor& weight = a[2].toTensor();
  const bool transposed = a[6].toBool();
  const int64_t groups = a[8].toInt();
  std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto mask_list = a[9].toBoolList();
  std::array<bool, 3> mask{mask_list[0], mask_list[1], mask_list[2]};
  auto [gi, gw, gb] = at::convolution_backward(a[0].toTensor(), a[1].toTensor(), weight, bias_sizes,
                                               ints(3), ints(4), ints(5), transposed, ints(7), groups, mask);
  stack->emplace_back(to_device(gi, fl_device, host));
  stack->emplace_back(to_device(gw, fl_device, host));
  stack->emplace_back(to_device(gb, fl_device, host));
  return true;
}

// Arguments some CPU kernels write although their schema has no (a!) annotation:
// native_batch_norm updates running_mean/running_var (arguments 3 and 4) in training mode.
bool mutates_unannotated(const c10::FunctionSchema& schema, size_t argument) {
  return schema.name() == "aten::native_batch_norm" && (argument == 3 || argument == 4);
}

}  // namespace

void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device,
                      c10::DispatchKey host_backend) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  const c10::Device fl_device(c10::DeviceType::PrivateUse1, device < 0 ? current_device() : device);
  if (run_cpu_equivalent(op, stack, fl_device)) return;

  HostArguments host;
  torch::jit::Stack cpu_stack;
  cpu_stack.reserve(n);
  auto args = torch::jit::last(*stack, n);
  // A random op draws from the fl device's generator: a CPU generator carries its state.
  std::optional<at::Generator> fl_gen;
  at::Generator cpu_gen;
  for (size_t i = 0; i < n; ++i) {
    const auto& a = schema.arguments()[i];
    const bool written = (a.alias_info() && a.alias_info()->isWrite()) || mutates_unannotated(schema, i);
    auto type = a.type();
    if (type->kind() == c10::TypeKind::OptionalType)
      type = type->castRaw<c10::OptionalType>()->getElementType();
    if (type->kind() == c10::TypeKind::GeneratorType &&
        (args[i].isNone() || args[i].toGenerator().device().type() == c10::DeviceType::PrivateUse1)) {
      fl_gen = args[i].isNone() ? default_generator(fl_device.index()) : args[i].toGenerator();
      cpu_gen = at::detail::createCPUGenerator();
      std::lock_guard lock(fl_gen->mutex());
      cpu_gen.set_state(fl_gen->get_state());
      cpu_stack.emplace_back(cpu_gen);
      continue;
    }
    cpu_stack.push_back(host.convert(args[i], written, a.is_out()));
  }
  {
    c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
    op.redispatchBoxed(c10::DispatchKeySet(host_backend), &cpu_stack);
  }
  if (fl_gen) {
    std::lock_guard lock(fl_gen->mutex());
    fl_gen->set_state(cpu_gen.get_state());
  }
  host.write_back();

  torch::jit::drop(*stack, n);
  for (auto& r : cpu_stack) {
    if (r.isTensor()) {
      stack->emplace_back(to_device(r.toTensor(), fl_device, host));
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : r.toTensorList()) out.push_back(to_device(t, fl_device, host));
      stack->emplace_back(out);
    } else {
      stack->emplace_back(std::move(r));
    }
  }
}

}  // namespace fl::binding
