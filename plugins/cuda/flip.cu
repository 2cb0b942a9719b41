// flip.cu — flip.out(self, int[] dims): out[p] = self[p with p[d] -> size(d) - 1 - p[d] for each
// d in dims]. Any strides in and out, any dtype (elements moved as raw 1/2/4/8-byte words), one
// thread per element; a flipped dim is read through a negated stride from its last element.
// Negative dims wrap; a dim listed twice is ATen's error; no dims is a copy.
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "strided_offsets.cuh"

#include <algorithm>
#include <string>
#include <vector>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

template <class E>
__global__ void flip_kernel(StridedOffsets<2> walk, int64_t numel, const E* __restrict__ in, E* __restrict__ out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < numel; p += step) {
    int64_t off[2];
    walk.at(p, off);
    out[off[0]] = in[off[1]];
  }
}

}  // namespace

// flip.out(self, dims) -> out
FL_CUDA_KERNEL(k_flip_out) {
  return plugin::guard([&] {
    const char* name = "aten::flip";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& self = device_tensor(a, 0, name);
    const std::vector<int64_t> dims = a.ints(1);
    const fl_tensor& out = a.output(0);
    if (out.dtype != self.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtype differs");
    if (out.ndim != self.ndim || !std::equal(self.shape, self.shape + self.ndim, out.shape))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output shape differs from self's");
    std::vector<bool> flipped(static_cast<size_t>(std::max<int32_t>(self.ndim, 1)), false);
    for (int64_t d : dims) {
      const int32_t w = normalize_dim(d, self.ndim, name);
      if (flipped[static_cast<size_t>(w)])
        plugin::raise(FL_ERR_INVALID_ARGUMENT,
                      std::string(name) + ": dim " + std::to_string(w) + " appears multiple times in the list of dims");
      flipped[static_cast<size_t>(w)] = true;
    }
    const int64_t numel = plugin::numel(self);
    StridedOffsets<2> walk;
    int64_t origin = 0;  // self's element at out's [0, ..., 0]
    for (int32_t d = 0; d < self.ndim; ++d) {
      const bool f = flipped[static_cast<size_t>(d)];
      if (f) origin += (self.shape[d] - 1) * self.strides[d];
      walk.add_dim(self.shape[d], {out.strides[d], f ? -self.strides[d] : self.strides[d]}, name);
    }
    if (numel == 0) return;
    const unsigned grid = grid_for(numel, kThreads, ctx);
    const bool ok = dispatch_element_size(plugin::dtype_size(self.dtype), [&](auto e) {
      using E = decltype(e);
      flip_kernel<E><<<grid, kThreads, 0, ctx.stream>>>(walk, numel, plugin::data_ptr<const E>(self) + origin,
                                                        plugin::data_ptr<E>(out));
    });
    if (!ok) unsupported_dtype(name, self.dtype);
    check_launch("flip_kernel");
  });
}

}  // namespace fl::cuda
