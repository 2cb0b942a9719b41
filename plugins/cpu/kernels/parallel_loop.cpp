#include "parallel_loop.hpp"

#include <parallel_for.hpp>

namespace fl::cpu::kernels {

namespace {
thread_local plugin::ParallelFor* current_team = nullptr;
}  // namespace

TeamScope::TeamScope(plugin::ParallelFor* team) : previous_(current_team) { current_team = team; }

TeamScope::~TeamScope() { current_team = previous_; }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (current_team == nullptr) {
    if (n > 0) body(0, n);
    return;
  }
  current_team->for_range(n, grain, body);
}

}  // namespace fl::cpu::kernels
