// random_fill.cu — the in-place random fills torch's factories and initialisers call, reached
// as their out= overloads: normal.out (randn, nn.init.normal_), uniform.out (rand, the
// uniform/kaiming/xavier initialisers), bernoulli.float_out and random.from_out (randint).
// Without them each went through the CPU fallback: a host fill and a copy to the device per
// call. Element i draws one Philox4x32-10 block keyed by the call's rng_seed and counted by
// (i, rng_offset): the pair a 1.2 core draws from the fl device's torch generator, so
// torch.manual_seed repeats the fill (a core without it: the init seed and a per-device call
// counter, as dropout.cu). The streams differ from ATen's CUDA and CPU generators.
// Outputs arrive contiguous (no FL_KERNEL_STRIDED_OUTPUTS); self is read for nothing but its
// size, so the in-place form writes it directly (FL_KERNEL_ALIASING_OK).
#include "dispatch.cuh"
#include "dtype_convert.cuh"
#include "gpu_check.hpp"
#include "kernel_glue.hpp"
#include "kernels.hpp"
#include "philox.cuh"

#include <string>

namespace fl::cuda {
namespace {

constexpr int kThreads = 256;

struct RandomKey {
  uint32_t key0, key1;
  uint64_t offset;
};

__device__ __forceinline__ Philox4 draw(const RandomKey& k, int64_t i) {
  return philox4x32_10(Philox4{static_cast<uint32_t>(i), static_cast<uint32_t>(static_cast<uint64_t>(i) >> 32),
                               static_cast<uint32_t>(k.offset), static_cast<uint32_t>(k.offset >> 32)},
                       k.key0, k.key1);
}

// Uniform double in [0, 1) from 53 of the bits of two words.
__device__ __forceinline__ double unit_double(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) | (lo >> 11)) * (1.0 / 9007199254740992.0);
}

enum class Fill { Normal, Uniform, Bernoulli };

// Normal: mean + std * Box-Muller; Uniform: a + (b - a) u, a value rounded up to b becoming a
// (as ATen's CUDA kernel keeps [a, b) half-open); Bernoulli: u < a.
template <class T, Fill F>
__global__ void fill_kernel(T* __restrict__ out, int64_t n, double a, double b, RandomKey key) {
  using Acc = acc_type_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Philox4 r = draw(key, i);
    if constexpr (std::is_same_v<Acc, double>) {
      const double u = unit_double(r.x, r.y);
      if constexpr (F == Fill::Normal) {
        const double radius = sqrt(-2.0 * log(1.0 - u));  // 1 - u in (0, 1]: the log is finite
        out[i] = a + b * radius * cospi(2.0 * unit_double(r.z, r.w));
      } else if constexpr (F == Fill::Uniform) {
        const double v = a + (b - a) * u;
        out[i] = v >= b && b > a ? a : v;
      } else {
        out[i] = u < a ? 1.0 : 0.0;
      }
    } else {
      const float u = uniform_from_bits(r.x);
      if constexpr (F == Fill::Normal) {
        const float radius = sqrtf(-2.0f * logf(1.0f - u));
        out[i] = convert<T>(static_cast<float>(a) + static_cast<float>(b) * radius * cospif(2.0f * uniform_from_bits(r.y)));
      } else if constexpr (F == Fill::Uniform) {
        const T v = convert<T>(static_cast<float>(a) + static_cast<float>(b - a) * u);
        out[i] = convert<float>(v) >= static_cast<float>(b) && b > a ? convert<T>(static_cast<float>(a)) : v;
      } else {
        out[i] = convert<T>(static_cast<double>(u) < a ? 1.0f : 0.0f);
      }
    }
  }
}

// Integers in [from, from + range).
template <class T>
__global__ void random_range_kernel(T* __restrict__ out, int64_t n, int64_t from, uint64_t range, RandomKey key) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Philox4 r = draw(key, i);
    const uint64_t bits = (static_cast<uint64_t>(r.x) << 32) | r.y;
    out[i] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(from) + bits % range));
  }
}

RandomKey call_key(const fl_kernel_call* call, const LaunchContext& ctx) {
  const bool given = FL_KERNEL_CALL_HAS_RNG(call);
  const uint64_t seed = given ? call->rng_seed : rng_seed() + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(ctx.device);
  const uint64_t offset = given ? call->rng_offset : device_state(ctx.device).rng_offset.fetch_add(1);
  return RandomKey{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), offset};
}

// The output (self's size and dtype, contiguous) and its element count.
const fl_tensor& fill_output(const Args& a, const char* name, int64_t* n) {
  const fl_tensor& self = device_tensor(a, 0, name);
  const fl_tensor& out = a.output(0);
  if (out.dtype != self.dtype) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": output dtype differs from self's");
  *n = plugin::numel(out);
  if (*n != plugin::numel(self)) plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": output size differs from self's");
  return out;
}

template <Fill F>
fl_status_t float_fill(const fl_kernel_call* call, const char* name) {
  return plugin::guard([&] {
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    int64_t n = 0;
    const fl_tensor& out = fill_output(a, name, &n);
    const double x = a.number(1);
    const double y = F == Fill::Bernoulli ? 0.0 : a.number(2);
    if (F == Fill::Normal && !(y >= 0.0))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": normal expects std >= 0.0, but found std " + std::to_string(y));
    if (F == Fill::Uniform && !(x <= y))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": uniform_ expects to return a [from, to) range, but found from=" +
                                                 std::to_string(x) + " > to=" + std::to_string(y));
    if (F == Fill::Bernoulli && !(x >= 0.0 && x <= 1.0))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": bernoulli_ expects p to be in [0, 1], but got p=" + std::to_string(x));
    if (!is_floating_dtype(out.dtype)) unsupported_dtype(name, out.dtype);
    if (n == 0) return;
    const RandomKey key = call_key(call, ctx);
    dispatch_float(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      fill_kernel<T, F><<<grid_for(n, kThreads, ctx), kThreads, 0, ctx.stream>>>(plugin::data_ptr<T>(out), n, x, y, key);
      check_launch("random fill_kernel");
    });
  });
}

}  // namespace

FL_CUDA_KERNEL(k_normal_out) { return float_fill<Fill::Normal>(call, "aten::normal.out"); }
FL_CUDA_KERNEL(k_uniform_out) { return float_fill<Fill::Uniform>(call, "aten::uniform.out"); }
FL_CUDA_KERNEL(k_bernoulli_float_out) { return float_fill<Fill::Bernoulli>(call, "aten::bernoulli.float_out"); }

// random.from_out(self, int from, int? to, Generator? generator, *, out): integers in [from, to);
// without `to` (the dtype's whole range) it declines to the CPU fallback.
FL_CUDA_KERNEL(k_random_from_out) {
  return plugin::guard([&] {
    const char* name = "aten::random.from_out";
    const LaunchContext ctx = begin_kernel(call);
    Args a(call);
    int64_t n = 0;
    const fl_tensor& out = fill_output(a, name, &n);
    const int64_t from = a.integer(1);
    if (a.is_none(2)) plugin::raise(FL_ERR_NOT_SUPPORTED, std::string(name) + ": random_ without an upper bound");
    const int64_t to = a.integer(2);
    if (!(from < to))
      plugin::raise(FL_ERR_INVALID_ARGUMENT, std::string(name) + ": random_ expects 'from' to be less than 'to', but got from=" +
                                                 std::to_string(from) + " >= to=" + std::to_string(to));
    const uint64_t range = static_cast<uint64_t>(to) - static_cast<uint64_t>(from);
    if (n == 0) return;
    const RandomKey key = call_key(call, ctx);
    const unsigned int grid = grid_for(n, kThreads, ctx);
    switch (out.dtype) {
      case FL_DTYPE_INT64:
        random_range_kernel<int64_t><<<grid, kThreads, 0, ctx.stream>>>(plugin::data_ptr<int64_t>(out), n, from, range, key);
        break;
      case FL_DTYPE_INT32:
        random_range_kernel<int32_t><<<grid, kThreads, 0, ctx.stream>>>(plugin::data_ptr<int32_t>(out), n, from, range, key);
        break;
      default:
        unsupported_dtype(name, out.dtype);
    }
    check_launch("random_range_kernel");
  });
}

}  // namespace fl::cuda
