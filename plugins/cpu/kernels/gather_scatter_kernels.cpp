// gather_scatter_kernels.cpp — gather.out, scatter.src_out, scatter.value_out and
// scatter_add.out: tensors of any strides, int64 or int32 indices, every dtype.
//  - gather:      out[p] = self[p with p[dim] = index[p]], over index's positions p;
//  - scatter:     out = self, then out[p with p[dim] = index[p]] = src[p] (or the value);
//  - scatter_add: out = self, then out[p with p[dim] = index[p]] += src[p]; float16/bfloat16
//                 sum in a float copy of out, converted once at the end (ATen's CPU kernel
//                 gives those bits, not a rounding after each add), other dtypes in their own.
// Index positions are cut into lines along dim. Every write of a line lands in out's line with
// the same other coordinates, so lines run in parallel without sharing an element, and a line
// runs in index order: for a repeated index the last write wins and sums add in index order,
// which is ATen's CPU order (the results are its bits). A 0-dim tensor counts as one element
// along dim 0. An index outside [0, size) raises ATen's message on the worker (values live in
// device memory), like index_select's. Scatter in place (out is self) is served; an out that
// otherwise overlaps self, src or index is declined, so ATen's kernel raises its overlap error.
#include "elementwise_engine.hpp"
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "strided_walk.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// Size and stride of dim d, a 0-dim tensor read as one element along one dim.
int64_t size_at(const TensorDesc& t, int d) { return t.ndim == 0 ? 1 : t.shape[d]; }
int64_t stride_at(const TensorDesc& t, int d) { return t.ndim == 0 ? 1 : t.strides[d]; }
int effective_ndim(const TensorDesc& t) { return t.ndim == 0 ? 1 : t.ndim; }

// The walk over index's lines along dim, with offsets of index, the tensor addressed through
// the index values (`indexed`: self for gather, out for scatter) and the one addressed at the
// index's own position (`follower`: out for gather, src for scatter; none for a value).
struct Lines {
  StridedWalk<3> walk;
  int64_t count = 0;         // lines
  int64_t length = 0;        // index.size(dim)
  int64_t index_step = 0;    // strides along dim
  int64_t indexed_step = 0;
  int64_t follower_step = 0;
  int64_t bound = 0;         // indexed.size(dim): valid indices are [0, bound)
  int64_t dim = 0;
};

Lines make_lines(const TensorDesc& index, const TensorDesc& indexed, const TensorDesc* follower, int64_t dim) {
  Lines l;
  l.dim = dim;
  for (int d = 0; d < effective_ndim(index); ++d) {
    const int64_t follower_stride = follower != nullptr ? stride_at(*follower, d) : 0;
    if (d == dim) {
      l.length = size_at(index, d);
      l.index_step = stride_at(index, d);
      l.indexed_step = stride_at(indexed, d);
      l.follower_step = follower_stride;
      l.bound = size_at(indexed, d);
    } else {
      l.walk.add_dim(size_at(index, d), {stride_at(index, d), stride_at(indexed, d), follower_stride});
    }
  }
  l.count = l.walk.positions();
  return l;
}

int64_t load_index(const char* base, fl_dtype_t dtype, int64_t i) {
  if (dtype == FL_DTYPE_INT64) return reinterpret_cast<const int64_t*>(base)[i];
  return reinterpret_cast<const int32_t*>(base)[i];
}

// Calls body(offset in indexed, offset in follower) for every index position, lines in
// parallel, each line in index order; throws ATen's error for an index outside [0, bound).
template <class Body>
void for_each_index(const Lines& lines, const char* index, fl_dtype_t index_dtype, const char* what, Body body) {
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, lines.length));
  parallel_for(lines.count, grain, [&](int64_t begin, int64_t end) {
    StridedWalk<3> walk = lines.walk;
    walk.seek(begin);
    for (int64_t line = begin; line < end; ++line, walk.next()) {
      for (int64_t j = 0; j < lines.length; ++j) {
        const int64_t k = load_index(index, index_dtype, walk.offset[0] + j * lines.index_step);
        if (k < 0 || k >= lines.bound)
          throw std::runtime_error(std::string(what) + ": index " + std::to_string(k) +
                                   " is out of bounds for dimension " + std::to_string(lines.dim) + " with size " +
                                   std::to_string(lines.bound));
        body(walk.offset[1] + k * lines.indexed_step, walk.offset[2] + j * lines.follower_step);
      }
    }
  });
}

// A 0-dim host value (a wrapped number) is readable during the call only, not on the worker.
void refuse_host_values(const char* op, std::initializer_list<const TensorDesc*> tensors) {
  for (const TensorDesc* t : tensors)
    if (t != nullptr && t->host_scalar) unsupported(op, "a host value where a device tensor is expected");
}

void check_index(const char* op, const TensorDesc& index) {
  if (index.dtype != FL_DTYPE_INT64 && index.dtype != FL_DTYPE_INT32)
    invalid(op, std::string("index must be int64 or int32, got ") + plugin::dtype_name(index.dtype));
}

bool same_shape(const TensorDesc& a, const TensorDesc& b) {
  return a.ndim == b.ndim && std::equal(a.shape, a.shape + a.ndim, b.shape);
}

// gather.out(self, int dim, Tensor index, *, bool sparse_grad) -> out (index's shape)
void gather_out(const fl_kernel_call* call) {
  const char* op = "aten::gather.out";
  Args args(call);
  const TensorDesc self = describe(args.tensor(0), op);
  const int64_t dim = wrap_dim(args.integer(1), self.ndim, op);
  const TensorDesc index = describe(args.tensor(2), op);
  const TensorDesc out = describe(args.output(0), op);
  refuse_host_values(op, {&self, &index});
  if (out.dtype != self.dtype) unsupported(op, "output dtype differs from self's");
  if (!same_shape(out, index)) invalid(op, "output " + shape_string(out) + " is not index's " + shape_string(index));
  if (index.numel() == 0) return;  // ATen checks nothing more for an empty index
  check_index(op, index);
  if (effective_ndim(index) != effective_ndim(self))
    invalid(op, "index tensor must have the same number of dimensions as input tensor");
  for (int d = 0; d < effective_ndim(index); ++d)
    if (d != dim && size_at(index, d) > size_at(self, d))
      invalid(op, "size of index " + shape_string(index) + " exceeds self " + shape_string(self) + " outside dim " +
                      std::to_string(dim));
  const Lines lines = make_lines(index, self, &out, dim);
  const size_t element = plugin::dtype_size(self.dtype);
  const char* src = self.data;
  const char* idx = index.data;
  const fl_dtype_t idx_dtype = index.dtype;
  char* dst = out.data;
  submit(call, [=] {
    for_each_index(lines, idx, idx_dtype, "gather", [&](int64_t from, int64_t to) {
      copy_element(dst + to * static_cast<int64_t>(element), src + from * static_cast<int64_t>(element), element);
    });
  });
}

// Checks shared by the scatter family: out is self's shape and dtype and does not overlap
// self (unless it is self), src or index; index fits self and src. Returns false for an empty
// index (only the copy of self to do).
bool check_scatter(const char* op, const TensorDesc& self, int64_t dim, const TensorDesc& index,
                   const TensorDesc* src, const TensorDesc& out) {
  refuse_host_values(op, {&self, &index, src});
  if (out.dtype != self.dtype || (src != nullptr && src->dtype != self.dtype))
    unsupported(op, "self, src and out of different dtypes");
  if (!same_shape(out, self)) invalid(op, "output " + shape_string(out) + " is not self's " + shape_string(self));
  if (!same_elements(out, self) && overlaps(out, self)) unsupported(op, "an output that partly overlaps self");
  if (overlaps(out, index) || (src != nullptr && overlaps(out, *src)))
    unsupported(op, "an output that overlaps index or src");
  if (index.numel() == 0) return false;
  check_index(op, index);
  if (effective_ndim(index) != effective_ndim(self) || (src != nullptr && effective_ndim(*src) != effective_ndim(self)))
    invalid(op, "index tensor must have the same number of dimensions as self and src");
  for (int d = 0; d < effective_ndim(index); ++d) {
    if (d != dim && size_at(index, d) > size_at(self, d))
      invalid(op, "size of index " + shape_string(index) + " exceeds self " + shape_string(self) + " outside dim " +
                      std::to_string(dim));
    if (src != nullptr && size_at(index, d) > size_at(*src, d))
      invalid(op, "size of index " + shape_string(index) + " exceeds src " + shape_string(*src));
  }
  return true;
}

// body(offset in a, offset in b) for every element of a shape, a and b with their own strides,
// in parallel (on the worker).
template <class Body>
void for_each_element(int ndim, const int64_t* shape, const int64_t* a_strides, const int64_t* b_strides, Body body) {
  StridedWalk<2> walk;
  for (int d = 0; d < ndim; ++d) walk.add_dim(shape[d], {a_strides[d], b_strides[d]});
  if (walk.positions() == 0) return;
  parallel_for(walk.positions(), kParallelGrain, [&](int64_t begin, int64_t end) {
    StridedWalk<2> w = walk;
    w.seek(begin);
    for (int64_t i = begin; i < end; ++i, w.next()) body(w.offset[0], w.offset[1]);
  });
}

// out = self (element for element, any strides), on the worker; nothing when out is self.
void copy_self(const TensorDesc& self, const TensorDesc& out) {
  if (same_elements(out, self)) return;
  const auto e = static_cast<int64_t>(plugin::dtype_size(self.dtype));
  for_each_element(self.ndim, self.shape, out.strides, self.strides, [&](int64_t to, int64_t from) {
    copy_element(out.data + to * e, self.data + from * e, static_cast<size_t>(e));
  });
}

// scatter.src_out(self, dim, index, src) and scatter.value_out(self, dim, index, value) -> out
void scatter_out(const fl_kernel_call* call, bool with_src) {
  const char* op = with_src ? "aten::scatter.src_out" : "aten::scatter.value_out";
  Args args(call);
  const TensorDesc self = describe(args.tensor(0), op);
  const int64_t dim = wrap_dim(args.integer(1), self.ndim, op);
  const TensorDesc index = describe(args.tensor(2), op);
  TensorDesc src;
  if (with_src) src = describe(args.tensor(3), op);
  const TensorDesc out = describe(args.output(0), op);
  const bool any = check_scatter(op, self, dim, index, with_src ? &src : nullptr, out);
  const size_t element = plugin::dtype_size(self.dtype);
  // The value stored in out's dtype, converted at call time as ATen's Scalar::to<T>.
  alignas(8) char value[8] = {};
  if (!with_src) {
    const Param p = param_arg(args, 3);
    dispatch<kAllMask>(self.dtype, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T v;
      if constexpr (std::is_same_v<T, bool>) v = p.is_int ? p.i != 0 : p.d != 0;
      else if constexpr (std::is_integral_v<T>) v = param_as<T>(p);
      else v = convert<T>(param_as<double>(p));
      std::memcpy(value, &v, sizeof v);
    });
  }
  const Lines lines = make_lines(index, out, with_src ? &src : nullptr, dim);
  const char* idx = index.data;
  const fl_dtype_t idx_dtype = index.dtype;
  const char* from = src.data;
  submit(call, [=] {
    copy_self(self, out);
    if (!any) return;
    const auto e = static_cast<int64_t>(element);
    if (with_src)
      for_each_index(lines, idx, idx_dtype, "scatter",
                     [&](int64_t to, int64_t at) { copy_element(out.data + to * e, from + at * e, element); });
    else
      for_each_index(lines, idx, idx_dtype, "scatter",
                     [&](int64_t to, int64_t) { copy_element(out.data + to * e, value, element); });
  });
}

void scatter_src_out(const fl_kernel_call* call) { scatter_out(call, true); }
void scatter_value_out(const fl_kernel_call* call) { scatter_out(call, false); }

// out = self, then out[target] += src[position] over the index, in T's own arithmetic.
template <class T>
void scatter_add_in_place(const Lines& lines, const char* idx, fl_dtype_t idx_dtype, const TensorDesc& self,
                          const TensorDesc& src, const TensorDesc& out) {
  copy_self(self, out);
  using C = opmath_t<T>;
  const T* s = src.ptr<T>();
  T* o = out.ptr<T>();
  for_each_index(lines, idx, idx_dtype, "scatter_add", [&](int64_t to, int64_t at) {
    o[to] = convert<T>(static_cast<C>(convert<C>(o[to]) + convert<C>(s[at])));
  });
}

// The same for float16/bfloat16, summed in a float copy of out (contiguous, which `lines`
// addresses) and converted to out once.
template <class T>
void scatter_add_in_float(const Lines& lines, const char* idx, fl_dtype_t idx_dtype, const TensorDesc& self,
                          const TensorDesc& src, const TensorDesc& out) {
  std::vector<float> sums(static_cast<size_t>(out.numel()));
  int64_t dense[kMaxDims];
  contiguous_strides(out.shape, out.ndim, dense);
  const T* x = self.ptr<T>();
  const T* s = src.ptr<T>();
  T* o = out.ptr<T>();
  for_each_element(out.ndim, out.shape, dense, self.strides,
                   [&](int64_t to, int64_t from) { sums[static_cast<size_t>(to)] = convert<float>(x[from]); });
  for_each_index(lines, idx, idx_dtype, "scatter_add",
                 [&](int64_t to, int64_t at) { sums[static_cast<size_t>(to)] += convert<float>(s[at]); });
  for_each_element(out.ndim, out.shape, out.strides, dense,
                   [&](int64_t to, int64_t from) { o[to] = convert<T>(sums[static_cast<size_t>(from)]); });
}

// scatter_add.out(self, dim, index, src) -> out
void scatter_add_out(const fl_kernel_call* call) {
  const char* op = "aten::scatter_add.out";
  Args args(call);
  const TensorDesc self = describe(args.tensor(0), op);
  const int64_t dim = wrap_dim(args.integer(1), self.ndim, op);
  const TensorDesc index = describe(args.tensor(2), op);
  const TensorDesc src = describe(args.tensor(3), op);
  const TensorDesc out = describe(args.output(0), op);
  const bool any = check_scatter(op, self, dim, index, &src, out);
  using Fn = void (*)(const Lines&, const char*, fl_dtype_t, const TensorDesc&, const TensorDesc&, const TensorDesc&);
  const Fn add = dispatch<kAllMask>(self.dtype, op, [](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<opmath_t<T>, T>) return &scatter_add_in_place<T>;
    else return &scatter_add_in_float<T>;
  });
  const bool in_float = self.dtype == FL_DTYPE_FLOAT16 || self.dtype == FL_DTYPE_BFLOAT16;
  // The sums' addresses: out's own, or (in float) those of a contiguous buffer of out's shape.
  TensorDesc sums = out;
  if (in_float) contiguous_strides(out.shape, out.ndim, sums.strides);
  const Lines lines = make_lines(index, sums, &src, dim);
  const char* idx = index.data;
  const fl_dtype_t idx_dtype = index.dtype;
  submit(call, [=] {
    if (any) add(lines, idx, idx_dtype, self, src, out);
    else copy_self(self, out);
  });
}

}  // namespace

void register_gather_scatter_kernels(KernelRegistry& r) {
  const uint32_t strided = FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_STRIDED_OUTPUTS | FL_KERNEL_DETERMINISTIC;
  r.add("aten::gather.out", kAllMask, strided, guarded<gather_out>);
  // In place (x.scatter_(...)) passes out = self: served without a copy.
  r.add("aten::scatter.src_out", kAllMask, strided | FL_KERNEL_ALIASING_OK, guarded<scatter_src_out>);
  r.add("aten::scatter.value_out", kAllMask, strided | FL_KERNEL_ALIASING_OK, guarded<scatter_value_out>);
  r.add("aten::scatter_add.out", kAllMask, strided | FL_KERNEL_ALIASING_OK, guarded<scatter_add_out>);
}

}  // namespace fl::cpu::kernels
