// sparse_ops.cpp — sparse tensors on fl: COO (the SparsePrivateUse1 dispatch key, "Sparsefl")
// and compressed, i.e. CSR, CSC, BSR and BSC (SparseCsrPrivateUse1, "SparseCsrfl").
//
// A COO tensor on an fl device (torch.sparse_coo_tensor(..., device="fl:0"), or the gradient
// of nn.Embedding(sparse=True)) dispatches to SparsePrivateUse1, which the dense router's
// fallback (PrivateUse1) does not serve: a backend fallback is looked up for the exact key.
// Without this file, building one failed with "Could not run
// 'aten::_sparse_coo_tensor_with_dims_and_tensors' with arguments from the 'Sparsefl' backend".
//
// Two parts, for each of the two keys:
// - Structure: constructing a sparse tensor, reading its metadata, indices and values, cloning
//   and copying it. ATen implements these once for every sparse backend (SparseCPU and
//   SparseCUDA share the symbols, as do SparseCsrCPU and SparseCsrCUDA); they only set sizes
//   and flags or move the dense buffers (indices, values) with dense ops, which the router
//   serves on fl. Registered as they are.
// - Values (coalesce, dense + sparse add, sparse + sparse add, mul, to_dense, ...): every
//   other op runs ATen's SparseCPU (SparseCsrCPU) kernel through the router's CPU fallback
//   (cpu_fallback.cpp: tensors copied to host memory, one copy for a tensor passed twice, the
//   result and any tensor it writes copied back), counted and warned once like the dense
//   router's CPU fallback tier (torch_fl.fallback_stats()), and refused as it is when
//   fallback.strict is set or the CPU fallback is disabled.
#include "cpu_fallback.h"
#include "fl_context.h"
#include "op_info.h"
#include "op_router.h"

#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_pin_memory_native.h>
#include <ATen/ops/_sparse_broadcast_to_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/is_pinned_native.h>
#include <ATen/ops/permute_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/select_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/zero_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <string>

namespace fl::binding {
namespace {

// The layouts one boxed fallback serves: COO (SparsePrivateUse1, run with SparseCPU's kernels)
// or compressed, i.e. CSR, CSC, BSR and BSC (SparseCsrPrivateUse1, run with SparseCsrCPU's).
template <c10::DispatchKey HostKey>
constexpr const char* kLayout = HostKey == c10::DispatchKey::SparseCPU ? "sparse" : "sparse compressed";

// The fl device an op's tensors are on, lists included (cat, stack). Tensors on two fl
// devices, or an fl tensor with a CPU one of one dimension or more, are refused as ATen
// refuses cuda:0 with cuda:1 or with the CPU (a CPU scalar tensor is let through, as there).
c10::DeviceIndex common_fl_device(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::Device> fl;
  std::optional<c10::Device> host;
  auto visit = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.is_privateuseone()) {
      TORCH_CHECK(!fl || *fl == t.device(), "Expected all tensors to be on the same device, but found at least two "
                  "devices, ", fl->str(), " and ", t.device().str(), "! (when checking arguments of ", info.name, ")");
      fl = t.device();
    } else if (t.device().is_cpu() && t.dim() > 0) {
      host = t.device();
    }
  };
  for (const auto& v : args) {
    if (v.isTensor()) {
      visit(v.toTensor());
    } else if (v.isTensorList() || v.isOptionalTensorList()) {
      for (const auto& e : v.toListRef())
        if (e.isTensor()) visit(e.toTensor());
    }
  }
  TORCH_CHECK(!fl || !host, "Expected all tensors to be on the same device, but found at least two devices, ",
              fl->str(), " and cpu! (when checking arguments of ", info.name, ")");
  return fl ? fl->index() : current_device();
}

// Whether a return of the op is a view of an argument (Tensor(a) in its schema): a copy made
// on the host cannot be one, so writes through it would not reach the input.
bool returns_a_view(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns())
    if (r.alias_info() && !r.alias_info()->isWrite()) return true;
  return false;
}

template <c10::DispatchKey HostKey>
void sparse_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo& info = op_info(op);
  const auto args = torch::jit::last(*stack, info.num_arguments);
  auto dtypes = [&] { return dtypes_of(args); };  // for messages
  const auto& cfg = runtime().config().fallback;
  if (cfg.strict || !cfg.enable_cpu_fallback) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_fl: ", info.name, " on a ", kLayout<HostKey>, " fl tensor (dtypes ",
                                dtypes(), ") needs the CPU fallback, and ",
                                cfg.strict ? "fallback.strict is set" : "the CPU fallback is disabled");
  }
  if (!op.hasComputedKernelForDispatchKey(HostKey)) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_fl: ", info.name, " is not available for ", kLayout<HostKey>,
                                " tensors on fl: PyTorch has no sparse CPU kernel for it to fall back on (dtypes ",
                                dtypes(), ")");
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!returns_a_view(op.schema()), "torch_fl: ", info.name, " on a ", kLayout<HostKey>,
                              " fl tensor returns a view, which the CPU fallback cannot give (it computes on "
                              "copies); move the tensor to the CPU first");
  const c10::DeviceIndex device = common_fl_device(info, args);
  auto& warned = HostKey == c10::DispatchKey::SparseCPU ? info.warned_sparse : info.warned_sparse_compressed;
  if (cfg.warn_once && !warned.exchange(true)) {
    TORCH_WARN("torch_fl: ", info.name, " (", dtypes(), ") on a ", kLayout<HostKey>,
               " fl tensor ran through the cpu_fallback tier: sparse values are computed by "
               "PyTorch's sparse CPU kernels on copies. This is warned once; see torch_fl.fallback_stats() "
               "for counts.");
  }
  run_cpu_fallback(op, stack, device, HostKey);
  info.calls[static_cast<int>(Tier::CpuFallback)].fetch_add(1, std::memory_order_relaxed);
}

// ATen's sparse constructors make the (empty) index and value buffers on the current device of
// the options' device type (SparseTensorImpl's constructor), relying on the device guard that
// the generated wrappers of SparseCPU/SparseCUDA kernels put around them; registered directly,
// these ops get none, and a tensor built for fl:1 while fl:0 was current failed ATen's
// "device() == values_.device()" assert. So each gets the guard of its device here.
at::Tensor with_dims(int64_t sparse_dim, int64_t dense_dim, at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                     std::optional<at::Layout> layout, std::optional<at::Device> device,
                     std::optional<bool> pin_memory) {
  const c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_sparse(sparse_dim, dense_dim, size, dtype, layout, device, pin_memory);
}

at::Tensor with_dims_and_tensors(int64_t sparse_dim, int64_t dense_dim, c10::SymIntArrayRef size,
                                 const at::Tensor& indices, const at::Tensor& values,
                                 std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                                 std::optional<at::Device> device, std::optional<bool> pin_memory,
                                 std::optional<bool> is_coalesced) {
  const c10::OptionalDeviceGuard guard(device.has_value() ? device : std::optional<at::Device>(values.device()));
  return at::native::new_with_dims_and_tensor_sparse_symint(sparse_dim, dense_dim, size, indices, values, dtype,
                                                            layout, device, pin_memory, is_coalesced);
}

// empty, empty_like and clone of either layout (Empty, EmptyLike, Clone: ATen's COO or
// compressed function), under the guard of the device they make the tensor on.
template <auto Empty>
at::Tensor empty_on_its_device(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  const c10::OptionalDeviceGuard guard(device);
  return Empty(size, dtype, layout, device, pin_memory, memory_format);
}

template <auto EmptyLike>
at::Tensor empty_like_on_its_device(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                                    std::optional<at::Layout> layout, std::optional<at::Device> device,
                                    std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  const c10::OptionalDeviceGuard guard(device.has_value() ? device : std::optional<at::Device>(self.device()));
  return EmptyLike(self, dtype, layout, device, pin_memory, memory_format);
}

template <auto Clone>
at::Tensor clone_on_its_device(const at::Tensor& self, std::optional<at::MemoryFormat> memory_format) {
  const c10::OptionalDeviceGuard guard(self.device());
  return Clone(self, memory_format);
}

// The CPU fallback's write-back of a sparse fl tensor that the op changed in place (a sparse
// gradient that a second backward accumulates into): `dst` takes the structure and buffers of
// `self`, the CPU result, as copy_ would between two sparse tensors.
// When the structure is unchanged (an in-place op on the values: neg_, mul_ by a scalar),
// the values and indices are copied into dst's own buffers, as the CPU kernel writes them:
// copy_sparse_ gives dst new buffers, and a handle taken before (v = s._values()) went stale.
at::Tensor copy_from_and_resize_sparse(const at::Tensor& self, const at::Tensor& dst) {
  TORCH_CHECK(self.is_sparse() && dst.is_sparse(), "torch_fl: _copy_from_and_resize on Sparsefl takes two sparse tensors");
  const c10::OptionalDeviceGuard guard(dst.device());
  at::Tensor target = dst;
  if (self.sizes() == dst.sizes() && self.sparse_dim() == dst.sparse_dim() && self.dense_dim() == dst.dense_dim() &&
      self._nnz() == dst._nnz() && self.scalar_type() == dst.scalar_type()) {
    target._indices().copy_(self._indices());
    target._values().copy_(self._values());
    target._coalesced_(self.is_coalesced());
    return dst;
  }
  at::native::copy_sparse_(target, self, /*non_blocking=*/false);
  return dst;
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_cpu_fallback<c10::DispatchKey::SparseCPU>>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_cpu_fallback<c10::DispatchKey::SparseCsrCPU>>());
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // Construction: the device in the options picks the dispatch key (fl -> SparsePrivateUse1).
  m.impl("_sparse_coo_tensor_with_dims", with_dims);
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", with_dims_and_tensors);
  // An empty COO tensor (torch.empty(..., layout=torch.sparse_coo), smm's result) and its
  // resizes: structure only, the buffers made or resized with dense ops.
  m.impl("empty.memory_format", empty_on_its_device<at::native::empty_sparse>);
  m.impl("empty_like", empty_like_on_its_device<at::native::empty_like_sparse_coo>);
  m.impl("zero_", at::native::zero_sparse_);
  m.impl("sparse_resize_", at::native::sparse_resize_);
  m.impl("sparse_resize_and_clear_", at::native::sparse_resize_and_clear_);
  m.impl("resize_as_sparse_", at::native::resize_as_sparse_);
  // Metadata.
  m.impl("sparse_dim", at::native::sparse_dim_sparse);
  m.impl("dense_dim", at::native::dense_dim_sparse);
  m.impl("_dimI", at::native::sparse_dim_sparse);
  m.impl("_dimV", at::native::dense_dim_sparse);
  m.impl("_nnz", at::native::_nnz_sparse);
  m.impl("is_coalesced", at::native::is_coalesced_sparse);
  m.impl("_coalesced_", at::native::_coalesced_sparse_);
  // The two buffers (indices() and values() require a coalesced tensor; the _ forms do not).
  m.impl("_indices", at::native::_indices_sparse);
  m.impl("_values", at::native::_values_sparse);
  m.impl("indices", at::native::indices_sparse);
  m.impl("values", at::native::values_sparse);
  // Views: new tensors over the same buffers, made with dense views of them. (Through the
  // fallback these were copies: a write through permute(...) did not reach the input.)
  m.impl("permute", at::native::permute_sparse_coo);
  m.impl("unsqueeze", at::native::unsqueeze_sparse);
  m.impl("_sparse_broadcast_to", at::native::sparse_broadcast_to);
  m.impl("view_as_real", at::native::view_as_real_sparse);
  m.impl("view_as_complex", at::native::view_as_complex_sparse);
  // Pinning asks the buffers (fl memory: not pinned, and refused as CUDA memory is).
  m.impl("is_pinned", at::native::is_pinned_sparse_coo);
  m.impl("_pin_memory", at::native::_pin_memory_sparse_coo);
  // Moving the buffers with dense copies.
  m.impl("clone", clone_on_its_device<at::native::clone_sparse>);
  m.impl("copy_", at::native::copy_sparse_wrapper_);
  m.impl("copy_sparse_to_sparse_", at::native::copy_sparse_);
  m.impl("_copy_from_and_resize", copy_from_and_resize_sparse);
}

namespace {

// Sparse compressed tensors (CSR, CSC, BSR, BSC: one dispatch key) have three dense buffers
// (compressed indices, plain indices, values). Building one on fl needs no kernel (ATen's
// _sparse_compressed_tensor_unsafe makes the TensorImpl itself), and moving one between devices
// is _to_copy's composite; what reads or copies its structure is ATen's shared code, registered
// here as for COO above (before, ops on a CSR tensor on fl failed: "crow_indices expected
// sparse row compressed tensor layout but got SparseCsr", and t.cpu() with them).

// The CPU fallback's write-back of a compressed tensor an op wrote: copy_ between compressed
// tensors needs the same number of elements, so `dst` first takes the shapes of `self`'s.
at::Tensor copy_from_and_resize_compressed(const at::Tensor& self, const at::Tensor& dst) {
  const c10::OptionalDeviceGuard guard(dst.device());
  at::native::resize_as_sparse_compressed_(dst, self);
  at::Tensor target = dst;
  at::native::copy_sparse_compressed_(target, self, /*non_blocking=*/false);
  return dst;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("empty.memory_format", empty_on_its_device<at::native::empty_sparse_compressed>);
  m.impl("empty_like", empty_like_on_its_device<at::native::empty_like_sparse_csr>);
  m.impl("resize_as_sparse_", at::native::resize_as_sparse_compressed_);
  m.impl("sparse_dim", at::native::sparse_dim_sparse_csr);
  m.impl("dense_dim", at::native::dense_dim_sparse_csr);
  m.impl("_nnz", at::native::_nnz_sparse_csr);
  m.impl("crow_indices", at::native::crow_indices_sparse_csr);
  m.impl("col_indices", at::native::col_indices_sparse_csr);
  m.impl("ccol_indices", at::native::ccol_indices_sparse_csr);
  m.impl("row_indices", at::native::row_indices_sparse_csr);
  m.impl("values", at::native::values_sparse_csr);
  m.impl("select.int", at::native::select_sparse_csr);  // a view, as on the CPU
  m.impl("is_pinned", at::native::is_pinned_sparse_compressed);
  m.impl("_pin_memory", at::native::_pin_memory_sparse_compressed);
  m.impl("clone", clone_on_its_device<at::native::clone_sparse_compressed>);
  m.impl("copy_", at::native::copy_sparse_compressed_);
  m.impl("_copy_from_and_resize", copy_from_and_resize_compressed);
}

namespace {

// Ops that PyTorch serves on SparseCPU (and SparseCUDA) with a kernel of their own but that
// also have a CompositeExplicitAutograd kernel, which wins over a backend fallback: on
// Sparsefl, sum() took the composite's sum(dim=[]) and returned the tensor itself (an empty
// dim list reduces nothing for sparse tensors), and permute/unsqueeze/mv/isinf failed in ops
// of the decomposition. They are registered here to the sparse CPU fallback, as their
// SparseCPU kernels are what a sparse CUDA tensor gets (in torch 2.13: sum,
// mv, isinf, abs, nan_to_num, deg2rad, rad2deg and their variants, zeros.out; the structure
// and view ops among them, such as permute, unsqueeze and empty_like, are registered above).
// Registers every aten op with a HostKey kernel and a CompositeExplicitAutograd(NonFunctional)
// one, and no kernel of its own on FlKey yet, to the fallback on FlKey. (The NonFunctional
// alias covers SparseCsr backends: on SparseCsrfl, add took the structured kernel's
// TensorIterator and failed with "unsupported tensor layout: SparseCsr".)
template <c10::DispatchKey FlKey, c10::DispatchKey HostKey>
void register_sparse_over_composite() {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", FlKey, __FILE__, __LINE__);
  for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto handle = c10::Dispatcher::singleton().findSchema(name);
    if (!handle || !handle->hasKernelForDispatchKey(HostKey) || handle->hasKernelForDispatchKey(FlKey) ||
        !(handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)))
      continue;
    const std::string qualified = name.overload_name.empty() ? name.name.substr(6)
                                                             : name.name.substr(6) + "." + name.overload_name;
    lib->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&sparse_cpu_fallback<HostKey>>());
  }
}

struct RegisterSparseOverComposite {
  RegisterSparseOverComposite() {
    register_sparse_over_composite<c10::DispatchKey::SparsePrivateUse1, c10::DispatchKey::SparseCPU>();
    register_sparse_over_composite<c10::DispatchKey::SparseCsrPrivateUse1, c10::DispatchKey::SparseCsrCPU>();
  }
};
RegisterSparseOverComposite register_sparse_over_composite_kernels;

}  // namespace

}  // namespace fl::binding
