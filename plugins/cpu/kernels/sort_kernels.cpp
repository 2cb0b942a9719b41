// sort_kernels.cpp — sort.values_stable(self, *, stable, dim, descending) and
// topk.values(self, k, dim, largest, sorted): each line of self along dim, ordered.
// The order is ATen's: NaN is larger than every number (ascending puts NaNs last, descending
// first), -0.0 equals 0.0, and equal elements keep their index order. Every sort here is
// stable, whatever `stable` says (ATen leaves the unstable order unspecified, so stable is one
// of its answers). topk takes the k first elements of that order, so among equal values the
// lower index wins, and returns them sorted even for sorted=False (ATen's order is unspecified
// there). 16-bit floats compare as float; values are copied from self, NaN payloads and all.
// Indices are int64. Any strides in and out; values may be self itself (each line is read
// whole before it is written); other overlaps are declined. A 0-dim self is one line of one
// element (topk allows k 0 or 1 there and, as ATen, returns the element either way).
// k outside [0, size] is FL_ERR_INVALID_ARGUMENT ("selected index k out of range").
// Lines run in parallel; one long line runs on one thread.
#include "kernel_table.hpp"
#include "parallel_loop.hpp"
#include "strided_walk.hpp"
#include "tensor_desc.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace fl::cpu::kernels {
namespace {

using plugin::Args;

// The lines along dim: offsets of self, values and indices at each line's first element.
struct SortLines {
  StridedWalk<3> walk;
  int64_t length = 1;  // elements of self along dim
  int64_t keep = 1;    // elements written per line (topk's k; the length for sort)
  int64_t self_step = 0, values_step = 0, indices_step = 0;  // strides along dim
  bool descending = false;
};

template <class K>
bool is_nan(K v) {
  if constexpr (std::is_floating_point_v<K>) return std::isnan(v);
  else return false;
}

// ATen's ascending order: NaN above every number, -0.0 == 0.0.
template <class K>
bool ordered_less(K a, K b) {
  return (!is_nan(a) && is_nan(b)) || a < b;
}

template <class K>
struct Keyed {
  K key;
  int64_t index;
};

// A total order on (key, index): the requested direction, then the lower index first.
template <class K>
bool before(const Keyed<K>& a, const Keyed<K>& b, bool descending) {
  if (descending ? ordered_less(b.key, a.key) : ordered_less(a.key, b.key)) return true;
  if (descending ? ordered_less(a.key, b.key) : ordered_less(b.key, a.key)) return false;
  return a.index < b.index;
}

template <class T>
void sort_lines(const SortLines& lines, const T* self, T* values, int64_t* indices) {
  using K = std::conditional_t<std::is_same_v<T, bool>, bool, opmath_t<T>>;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(lines.length, 1));
  parallel_for(lines.walk.positions(), grain, [&](int64_t begin, int64_t end) {
    StridedWalk<3> w = lines.walk;
    w.seek(begin);
    std::vector<Keyed<K>> line(static_cast<size_t>(lines.length));
    std::unique_ptr<T[]> original(new T[static_cast<size_t>(lines.length)]);  // (no vector<bool>)
    auto order = [&](const Keyed<K>& a, const Keyed<K>& b) { return before(a, b, lines.descending); };
    for (int64_t l = begin; l < end; ++l, w.next()) {
      const T* in = self + w.offset[0];
      for (int64_t i = 0; i < lines.length; ++i) {
        original[i] = in[i * lines.self_step];
        line[i] = {convert<K>(original[i]), i};
      }
      const auto kept = line.begin() + lines.keep;
      if (lines.keep < lines.length) std::nth_element(line.begin(), kept, line.end(), order);
      std::sort(line.begin(), kept, order);
      T* v = values + w.offset[1];
      int64_t* ix = indices + w.offset[2];
      for (int64_t j = 0; j < lines.keep; ++j) {
        v[j * lines.values_step] = original[line[j].index];
        ix[j * lines.indices_step] = line[j].index;
      }
    }
  });
}

// The common part of both ops: checks, the line plan, the dtype dispatch and the submission.
// `keep` is the size of the outputs along dim (topk's k, or self's size).
void submit_sort(const fl_kernel_call* call, const char* op, uint64_t dtype_mask, int64_t dim_arg, int64_t keep,
                 bool descending) {
  Args args(call);
  const TensorDesc self = describe(args.tensor(0), op);
  const TensorDesc values = describe(args.output(0), op);
  const TensorDesc indices = describe(args.output(1), op);
  if (self.host_scalar) unsupported(op, "a host value where a device tensor is expected");
  const int64_t dim = wrap_dim(dim_arg, self.ndim, op);
  const int64_t length = self.ndim > 0 ? self.shape[dim] : 1;
  if (keep < 0 || keep > length)
    invalid(op, "selected index k out of range (k " + std::to_string(keep) + ", size " + std::to_string(length) + ")");
  if (values.dtype != self.dtype) unsupported(op, "a values output of another dtype than self's");
  if (indices.dtype != FL_DTYPE_INT64) unsupported(op, "an indices output other than int64");
  for (const TensorDesc* out : {&values, &indices}) {
    bool same = out->ndim == self.ndim;
    for (int d = 0; same && d < self.ndim; ++d) same = out->shape[d] == (d == dim ? keep : self.shape[d]);
    if (!same) invalid(op, "output " + shape_string(*out) + " does not fit self " + shape_string(self));
  }
  if (overlaps(values, indices)) unsupported(op, "values and indices outputs that overlap");
  if (overlaps(indices, self)) unsupported(op, "an indices output that overlaps self");
  if (overlaps(values, self) && !same_elements(values, self)) unsupported(op, "a values output that partly overlaps self");
  if ((dtype_mask & bit(self.dtype)) == 0)
    unsupported(op, std::string("dtype ") + plugin::dtype_name(self.dtype));
  using Fn = void (*)(const SortLines&, const char*, char*, char*);
  const Fn run = dispatch<kAllMask>(self.dtype, op, [&](auto tag) -> Fn {
    using T = typename decltype(tag)::type;
    return [](const SortLines& l, const char* s, char* v, char* i) {
      sort_lines<T>(l, reinterpret_cast<const T*>(s), reinterpret_cast<T*>(v), reinterpret_cast<int64_t*>(i));
    };
  });
  // A 0-dim self: one line of one element, whatever keep (ATen's topk returns it for k 0 too).
  if (self.ndim == 0) keep = 1;
  if (self.numel() == 0 || keep == 0) return;
  SortLines lines;
  lines.length = length;
  lines.keep = keep;
  lines.descending = descending;
  for (int d = 0; d < self.ndim; ++d) {
    if (d == dim) {
      lines.self_step = self.strides[d];
      lines.values_step = values.strides[d];
      lines.indices_step = indices.strides[d];
    } else {
      lines.walk.add_dim(self.shape[d], {self.strides[d], values.strides[d], indices.strides[d]});
    }
  }
  const char* s = self.data;
  char* v = values.data;
  char* i = indices.data;
  submit(call, [=] { run(lines, s, v, i); });
}

// sort.values_stable(self, *, stable, dim, descending) -> (values, indices)
void sort_values_stable(const fl_kernel_call* call) {
  const char* op = "aten::sort.values_stable";
  Args args(call);
  const int64_t dim = args.integer(2);
  const bool descending = args.boolean(3);
  const fl_tensor& self = args.tensor(0);
  const int64_t wrapped = wrap_dim(dim, self.ndim, op);
  submit_sort(call, op, kAllMask, dim, self.ndim > 0 ? self.shape[wrapped] : 1, descending);
}

// topk.values(self, k, dim, largest, sorted) -> (values, indices); `sorted` changes nothing.
void topk_values(const fl_kernel_call* call) {
  const char* op = "aten::topk.values";
  Args args(call);
  submit_sort(call, op, kArithmeticMask, args.integer(2), args.integer(1), args.boolean(3));
}

}  // namespace

void register_sort_kernels(KernelRegistry& r) {
  const uint32_t f = FL_KERNEL_STRIDED_INPUTS | FL_KERNEL_STRIDED_OUTPUTS | FL_KERNEL_PRECISE | FL_KERNEL_DETERMINISTIC;
  r.add("aten::sort.values_stable", kAllMask, f, guarded<sort_values_stable>);
  // ATen's CPU topk refuses bool ("topk does not support bool dtypes"); so does this one.
  r.add("aten::topk.values", kArithmeticMask, f, guarded<topk_values>);
}

}  // namespace fl::cpu::kernels
