#include "parallel_copy.hpp"

#include <cstring>
#include <functional>

namespace fl::plugin {

void ParallelCopy::copy(void* dst, const void* src, size_t size) {
  if (size == 0) return;  // dst and src may be NULL then (memmove's are declared non-null)
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // std::less gives a total order over unrelated pointers.
  bool overlap = std::less<const char*>()(s, d + size) && std::less<const char*>()(d, s + size);
  if (team_.threads() == 1 || overlap || size < kMinParallelBytes) {
    std::memmove(dst, src, size);
    return;
  }
  team_.for_range(static_cast<int64_t>(size), static_cast<int64_t>(kMinChunkBytes),
                  [d, s](int64_t begin, int64_t end) {
                    std::memcpy(d + begin, s + begin, static_cast<size_t>(end - begin));
                  });
}

}  // namespace fl::plugin
