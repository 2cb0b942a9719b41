// parallel_loop.hpp — a kernel's loop split over the plugin's threads (the runtime's
// kernel_team, plugins/common/parallel_for.hpp). Call it from the work a kernel submitted
// (the stream's worker), never at call time.
#pragma once

#include <cstdint>
#include <functional>

namespace fl::cpu::kernels {

// Elements of a simple loop (a load, an op, a store) worth a thread of their own: below
// about this, waking a helper costs more than it saves.
constexpr int64_t kParallelGrain = 32768;

// Calls body(begin, end) over contiguous parts of [0, n), each of at least `grain` items, at
// most one per thread; returns when all are done (rethrows the first exception). The same
// bits as body(0, n) when each item's result depends on that item alone.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

}  // namespace fl::cpu::kernels
