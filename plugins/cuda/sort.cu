// sort.cu — sort.values_stable(self, *, stable, dim, descending) and topk.values(self, k, dim,
// largest, sorted) with CUB's radix sorts. Every line of self along dim is sorted whole:
//  1. a kernel turns each element into an unsigned radix key whose ascending order is ATen's
//     (floats: -0.0 folded into 0.0, every NaN the largest key; signed integers: the sign bit
//     flipped; descending: the key complemented) and pairs it with its position in its line;
//  2. one stable CUB sort of the (key, position) pairs: cub::DeviceRadixSort for a single
//     line, cub::DeviceSegmentedSort::StableSortPairs (a segment per line) for several;
//  3. a kernel writes the first `keep` pairs of each line (all for sort, k for topk): the
//     value copied from self at that position (NaN payloads and the sign of zero kept) and
//     the position as an int64 index.
// So equal elements keep their index order in both directions, whatever `stable` says, and
// topk's ties go to the lower index first; topk's output is sorted even for sorted=False
// (ATen leaves that order open). Results match the CPU plugin's bit for bit.
// Any strides in and out; any overlap between an output and self, or between the outputs, is
// declined (FL_ERR_NOT_SUPPORTED), as are lines longer than 2^31 - 1 elements. k outside
// [0, size] is FL_ERR_INVALID_ARGUMENT ("selected index k out of range"). A 0-dim self is one
// line of one element (topk allows k 0 or 1 and returns it either way, as ATen).
// Scratch: keys and positions twice over (for n elements of b bytes: 2n(b + 4) bytes), the
// line offsets and CUB's temporary storage, in one stream-ordered allocation.
// Not tuned: topk sorts whole lines (no selection for k << size), and DeviceSegmentedSort
// gives each very long segment one block when there are several lines.
// Not built by the HIP plugin (plugins/hip/meson.build: no hipCUB in Debian's ROCm); its
// kernel table leaves both ops out.
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "scratch_buffer.hpp"
#include "strided_offsets.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

// The lines along dim and what is written of each.
struct SortLines {
  StridedOffsets<3> starts;  // offsets of self, values and indices at each line's first element
  int64_t count = 1;         // lines
  int64_t length = 1;        // elements of self along dim
  int64_t keep = 1;          // elements written per line (topk's k; the length for sort)
  int64_t self_step = 0, values_step = 0, indices_step = 0;  // strides along dim
};

// How a dtype's bits become a radix key of the same width U.
template <class U>
struct KeyRule {
  bool floating = false;    // IEEE bits
  bool is_signed = false;   // two's complement integer
  U exponent_bits = 0;      // floating: the bits of +inf (above them, with the sign cleared: NaN)
  bool descending = false;
};

template <class U>
__host__ __device__ __forceinline__ U radix_key(U bits, const KeyRule<U>& rule) {
  constexpr U sign = U(U(1) << (sizeof(U) * 8 - 1));
  U key = bits;
  if (rule.floating) {
    const U magnitude = U(bits & U(~sign));
    if (magnitude > rule.exponent_bits) key = U(~U(0));          // NaN: above +inf
    else if (magnitude == 0) key = sign;                          // -0.0 and 0.0 alike
    else key = (bits & sign) ? U(~bits) : U(bits | sign);         // negatives reversed below positives
  } else if (rule.is_signed) {
    key = U(bits ^ sign);
  }
  return rule.descending ? U(~key) : key;
}

template <class U>
__global__ void make_keys(SortLines lines, const U* __restrict__ self, KeyRule<U> rule, U* __restrict__ keys,
                          int32_t* __restrict__ positions) {
  const int64_t total = lines.count * lines.length;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t line = e / lines.length;
    const int64_t i = e - line * lines.length;
    int64_t off[3];
    lines.starts.at(line, off);
    keys[e] = radix_key(self[off[0] + i * lines.self_step], rule);
    positions[e] = static_cast<int32_t>(i);
  }
}

__global__ void line_offsets(int64_t count, int64_t length, int64_t* __restrict__ offsets) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l <= count; l += step)
    offsets[l] = l * length;
}

template <class U>
__global__ void write_kept(SortLines lines, const U* __restrict__ self, const int32_t* __restrict__ sorted,
                           U* __restrict__ values, int64_t* __restrict__ indices) {
  const int64_t total = lines.count * lines.keep;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t line = e / lines.keep;
    const int64_t j = e - line * lines.keep;
    int64_t off[3];
    lines.starts.at(line, off);
    const int64_t position = sorted[line * lines.length + j];
    values[off[1] + j * lines.values_step] = self[off[0] + position * lines.self_step];
    indices[off[2] + j * lines.indices_step] = position;
  }
}

// Byte offsets of the parts of one scratch allocation, each 256-byte aligned.
struct ScratchLayout {
  size_t keys_in = 0, keys_out = 0, positions_in = 0, positions_out = 0, offsets = 0, cub = 0, total = 0;
  size_t cub_bytes = 0;
  size_t take(size_t bytes) {
    const size_t at = total;
    total += (bytes + 255) / 256 * 256;
    return at;
  }
};

template <class U>
void sort_lines(const SortLines& lines, const fl_tensor& self, const fl_tensor& values, const fl_tensor& indices,
                KeyRule<U> rule, const LaunchContext& ctx) {
  const int64_t n = lines.count * lines.length;
  const bool one_line = lines.count == 1;
  ScratchLayout layout;
  if (one_line) {
    check_gpu(cub::DeviceRadixSort::SortPairs(nullptr, layout.cub_bytes, static_cast<const U*>(nullptr),
                                              static_cast<U*>(nullptr), static_cast<const int32_t*>(nullptr),
                                              static_cast<int32_t*>(nullptr), n, 0, static_cast<int>(sizeof(U) * 8),
                                              ctx.stream),
              "cub::DeviceRadixSort::SortPairs (size)");
  } else {
    check_gpu(cub::DeviceSegmentedSort::StableSortPairs(nullptr, layout.cub_bytes, static_cast<const U*>(nullptr),
                                                        static_cast<U*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                        static_cast<int32_t*>(nullptr), n, lines.count,
                                                        static_cast<const int64_t*>(nullptr),
                                                        static_cast<const int64_t*>(nullptr), ctx.stream),
              "cub::DeviceSegmentedSort::StableSortPairs (size)");
  }
  const auto bytes = static_cast<size_t>(n);
  layout.keys_in = layout.take(bytes * sizeof(U));
  layout.keys_out = layout.take(bytes * sizeof(U));
  layout.positions_in = layout.take(bytes * sizeof(int32_t));
  layout.positions_out = layout.take(bytes * sizeof(int32_t));
  layout.offsets = layout.take(one_line ? 0 : static_cast<size_t>(lines.count + 1) * sizeof(int64_t));
  layout.cub = layout.take(layout.cub_bytes);
  ScratchBuffer scratch(layout.total, ctx.stream);
  char* base = scratch.get<char>();
  U* keys_in = reinterpret_cast<U*>(base + layout.keys_in);
  U* keys_out = reinterpret_cast<U*>(base + layout.keys_out);
  int32_t* positions_in = reinterpret_cast<int32_t*>(base + layout.positions_in);
  int32_t* positions_out = reinterpret_cast<int32_t*>(base + layout.positions_out);
  int64_t* offsets = reinterpret_cast<int64_t*>(base + layout.offsets);
  void* cub_storage = base + layout.cub;

  const U* in = plugin::data_ptr<const U>(self);
  make_keys<U><<<grid_for(n, kThreads, ctx), kThreads, 0, ctx.stream>>>(lines, in, rule, keys_in, positions_in);
  check_launch("make_keys");
  size_t cub_bytes = layout.cub_bytes;
  if (one_line) {
    check_gpu(cub::DeviceRadixSort::SortPairs(cub_storage, cub_bytes, keys_in, keys_out, positions_in, positions_out, n,
                                              0, static_cast<int>(sizeof(U) * 8), ctx.stream),
              "cub::DeviceRadixSort::SortPairs");
  } else {
    line_offsets<<<grid_for(lines.count + 1, kThreads, ctx), kThreads, 0, ctx.stream>>>(lines.count, lines.length,
                                                                                        offsets);
    check_launch("line_offsets");
    const int64_t* line_begins = offsets;  // the same iterator types as the size query's
    check_gpu(cub::DeviceSegmentedSort::StableSortPairs(cub_storage, cub_bytes, keys_in, keys_out, positions_in,
                                                        positions_out, n, lines.count, line_begins, line_begins + 1,
                                                        ctx.stream),
              "cub::DeviceSegmentedSort::StableSortPairs");
  }
  write_kept<U><<<grid_for(lines.count * lines.keep, kThreads, ctx), kThreads, 0, ctx.stream>>>(
      lines, in, positions_out, plugin::data_ptr<U>(values), plugin::data_ptr<int64_t>(indices));
  check_launch("write_kept");
}

template <class U>
KeyRule<U> key_rule(fl_dtype_t dtype, bool descending) {
  KeyRule<U> rule;
  rule.descending = descending;
  switch (dtype) {
    case FL_DTYPE_FLOAT32: rule.floating = true; rule.exponent_bits = U(0x7f800000u); break;
    case FL_DTYPE_FLOAT64: rule.floating = true; rule.exponent_bits = U(0x7ff0000000000000ull); break;
    case FL_DTYPE_FLOAT16: rule.floating = true; rule.exponent_bits = U(0x7c00u); break;
    case FL_DTYPE_BFLOAT16: rule.floating = true; rule.exponent_bits = U(0x7f80u); break;
    case FL_DTYPE_INT64: case FL_DTYPE_INT32: case FL_DTYPE_INT16: case FL_DTYPE_INT8: rule.is_signed = true; break;
    default: break;  // uint8, bool: the bits are the key
  }
  return rule;
}

bool sortable(fl_dtype_t dtype, bool allow_bool) {
  switch (dtype) {
    case FL_DTYPE_FLOAT32: case FL_DTYPE_FLOAT64: case FL_DTYPE_FLOAT16: case FL_DTYPE_BFLOAT16:
    case FL_DTYPE_INT64: case FL_DTYPE_INT32: case FL_DTYPE_INT16: case FL_DTYPE_INT8: case FL_DTYPE_UINT8:
      return true;
    case FL_DTYPE_BOOL: return allow_bool;
    default: return false;
  }
}

// Both ops: checks (all before any work), the line plan and the sort. `keep` is the outputs'
// size along dim (topk's k, or self's size); ATen's topk refuses bool, so `allow_bool` is false.
void run_sort(const fl_kernel_call* call, const char* name, int64_t dim_arg, int64_t keep, bool descending,
              bool allow_bool) {
  const LaunchContext ctx = begin_kernel(call);
  Args a(call);
  const fl_tensor& self = device_tensor(a, 0, name);
  const fl_tensor& values = a.output(0);
  const fl_tensor& indices = a.output(1);
  const int32_t dim = normalize_dim(dim_arg, self.ndim, name);
  const int64_t length = self.ndim > 0 ? self.shape[dim] : 1;
  if (keep < 0 || keep > length)
    plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": selected index k out of range (k " +
                                               std::to_string(keep) + ", size " + std::to_string(length) + ")");
  if (!sortable(self.dtype, allow_bool)) unsupported_dtype(name, self.dtype);
  if (values.dtype != self.dtype)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": a values output of another dtype than self's");
  if (indices.dtype != FL_DTYPE_INT64)
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": an indices output other than int64");
  for (const fl_tensor* out : {&values, &indices}) {
    bool fits = out->ndim == self.ndim;
    for (int32_t d = 0; fits && d < self.ndim; ++d) fits = out->shape[d] == (d == dim ? keep : self.shape[d]);
    if (!fits) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": an output's shape does not fit self's");
  }
  if (overlaps(values, self) || overlaps(indices, self) || overlaps(values, indices))
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": outputs that overlap self or each other");
  if (length > std::numeric_limits<int32_t>::max())
    plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": lines longer than 2^31 - 1 elements");
  SortLines lines;
  lines.length = length;
  lines.keep = self.ndim == 0 ? 1 : keep;  // a 0-dim self is returned for k 0 too
  for (int32_t d = 0; d < self.ndim; ++d) {
    if (d == dim) {
      lines.self_step = self.strides[d];
      lines.values_step = values.strides[d];
      lines.indices_step = indices.strides[d];
    } else {
      lines.starts.add_dim(self.shape[d], {self.strides[d], values.strides[d], indices.strides[d]}, name);
    }
  }
  lines.count = lines.starts.positions();
  if (plugin::numel(self) == 0 || lines.keep == 0) return;
  switch (plugin::dtype_size(self.dtype)) {
    case 1: sort_lines<uint8_t>(lines, self, values, indices, key_rule<uint8_t>(self.dtype, descending), ctx); break;
    case 2: sort_lines<uint16_t>(lines, self, values, indices, key_rule<uint16_t>(self.dtype, descending), ctx); break;
    case 4: sort_lines<uint32_t>(lines, self, values, indices, key_rule<uint32_t>(self.dtype, descending), ctx); break;
    default: sort_lines<uint64_t>(lines, self, values, indices, key_rule<uint64_t>(self.dtype, descending), ctx); break;
  }
}

}  // namespace

// sort.values_stable(self, *, stable, dim, descending) -> (values, indices)
FL_CUDA_KERNEL(k_sort_values_stable) {
  return plugin::guard([&] {
    const char* name = "aten::sort.values_stable";
    Args a(call);
    const fl_tensor& self = a.tensor(0);
    const int32_t dim = normalize_dim(a.integer(2), self.ndim, name);
    run_sort(call, name, dim, self.ndim > 0 ? self.shape[dim] : 1, a.boolean(3), true);
  });
}

// topk.values(self, k, dim, largest, sorted) -> (values, indices); `sorted` changes nothing.
FL_CUDA_KERNEL(k_topk_values) {
  return plugin::guard([&] {
    Args a(call);
    run_sort(call, "aten::topk.values", a.integer(2), a.integer(1), a.boolean(3), false);
  });
}

}  // namespace fl::cuda
