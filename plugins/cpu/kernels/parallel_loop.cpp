#include "parallel_loop.hpp"

#include "../cpu_runtime.hpp"

namespace fl::cpu::kernels {

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  Runtime::get().kernel_team().for_range(n, grain, body);
}

}  // namespace fl::cpu::kernels
