// parallel_loop.hpp — a kernel's loop split over the plugin's threads (the runtime's
// kernel_team, plugins/common/parallel_for.hpp). The team is the one submit() captured when
// the kernel was called: work still queued while the plugin shuts down runs on it too (the
// team outlives the streams), and code running outside submitted work loops on one thread.
#pragma once

#include <cstdint>
#include <functional>

namespace fl::plugin {
class ParallelFor;
}

namespace fl::cpu::kernels {

// Elements of a simple loop (a load, an op, a store) worth a thread of their own: below
// about this, waking a helper costs more than it saves.
constexpr int64_t kParallelGrain = 32768;

// Calls body(begin, end) over contiguous chunks of [0, n), each of at least `grain` items
// (ParallelFor::for_range: up to kChunksPerThread chunks per thread, claimed by whichever
// thread is free); returns when all are done (rethrows the first exception). The same bits as
// body(0, n) when each item's result depends on that item alone.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

// Makes `team` the one parallel_for uses on this thread for the scope (submit()'s closures).
class TeamScope {
 public:
  explicit TeamScope(plugin::ParallelFor* team);
  ~TeamScope();
  TeamScope(const TeamScope&) = delete;
  TeamScope& operator=(const TeamScope&) = delete;

 private:
  plugin::ParallelFor* previous_;
};

}  // namespace fl::cpu::kernels
