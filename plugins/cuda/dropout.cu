// dropout.cu — native_dropout(input, p, train?) -> (output, mask). Element i is kept when a
// Philox uniform u < 1 - p; kept values are scaled by 1 / (1 - p) (0 when p == 1). Philox is
// keyed by the call's rng_seed and counted from its rng_offset, which a 1.2 core draws from the
// fl device's torch generator (FL_KERNEL_CALL_HAS_RNG), so torch.manual_seed makes dropout
// repeat. From an older core the key is the init option seed= (and the device) and the
// counter a per-device call counter, so every call draws fresh numbers and a run with the same
// seed and call sequence repeats exactly. train == false returns a copy and an all-true mask.
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "philox.cuh"

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64_t n,
                               float keep_prob, float scale, uint32_t key0, uint32_t key1, uint64_t call_id) {
  using Acc = acc_type_t<T>;
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Philox4 r = philox4x32_10(Philox4{static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32),
                                            static_cast<uint32_t>(call_id), static_cast<uint32_t>(call_id >> 32)},
                                    key0, key1);
    const uint32_t bits[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = g * 4 + k;
      if (i < n) {
        const bool keep = uniform_from_bits(bits[k]) < keep_prob;
        mask[i] = keep;
        y[i] = convert<T>(keep ? convert<Acc>(x[i]) * static_cast<Acc>(scale) : Acc(0));
      }
    }
  }
}

}  // namespace

FL_CUDA_KERNEL(k_native_dropout) {
  return plugin::guard([&] {
    const char* name = "aten::native_dropout";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    const fl_tensor& input = device_tensor(a, 0, name);
    const double p = a.number(1);
    const bool train = a.is_none(2) ? true : a.boolean(2);
    const fl_tensor& out = a.output(0);
    const fl_tensor& mask = a.output(1);
    if (out.dtype != input.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtype differs");
    if (mask.dtype != FL_DTYPE_BOOL) unsupported_dtype(name, mask.dtype);
    if (p < 0.0 || p > 1.0) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": p must be in [0, 1]");
    if (!is_floating_dtype(input.dtype)) unsupported_dtype(name, input.dtype);
    const int64_t n = plugin::numel(input);
    if (n == 0) return;
    if (!train) {
      check_gpu(gpuMemcpyAsync(plugin::data_ptr<void>(out), plugin::data_ptr<const void>(input),
                               static_cast<size_t>(n) * plugin::dtype_size(input.dtype), gpuMemcpyDeviceToDevice,
                               ctx.stream),
                "cudaMemcpyAsync");
      check_gpu(gpuMemsetAsync(plugin::data_ptr<void>(mask), 1, static_cast<size_t>(n), ctx.stream),
                "cudaMemsetAsync");
      return;
    }
    const double keep = 1.0 - p;
    const float scale = keep == 0.0 ? 0.0f : static_cast<float>(1.0 / keep);
    const bool given = FL_KERNEL_CALL_HAS_RNG(call);
    const uint64_t seed =
        given ? call->rng_seed : rng_seed() + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(ctx.device);
    const uint64_t call_id = given ? call->rng_offset : device_state(ctx.device).rng_offset.fetch_add(1);
    dispatch_float(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      dropout_kernel<T><<<grid_for((n + 3) / 4, kThreads, ctx), kThreads, 0, ctx.stream>>>(
          plugin::data_ptr<const T>(input), plugin::data_ptr<T>(out), plugin::data_ptr<bool>(mask), n,
          static_cast<float>(keep), scale, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), call_id);
      check_launch("dropout_kernel");
    });
  });
}

}  // namespace fl::cuda
