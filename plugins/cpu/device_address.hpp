// device_address.hpp — the addresses the CPU plugin hands out for device memory.
//
// With host_accessible=0 (FL_CPU_HOST_ACCESSIBLE=0) the devices report memory the host may not
// dereference, as a GPU's. The memory is still host memory, so a host read of it used to work
// here and crash only on a real GPU (the binding's resize_ copied device bytes with a host
// memcpy; the H200 found it). So in that mode the addresses handed out are the host blocks'
// with bit 55 set: a non-canonical address on x86-64 and a kernel-half one on AArch64, which
// faults when dereferenced, here and in CI, as a device pointer would. The plugin's own entry
// points (memcpy, memset, free, every kernel's tensor descriptors) take the bit off again.
// Arithmetic inside a block (sub-allocations, byte offsets) is unaffected.
#pragma once

#include <cstdint>

namespace fl::cpu {

inline constexpr std::uintptr_t kFenceBit = std::uintptr_t{1} << 55;

// The address to hand out for a host block (`fenced`: the devices are not host-accessible).
inline void* device_address(void* host_block, bool fenced) {
  return fenced && host_block != nullptr
             ? reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(host_block) | kFenceBit)
             : host_block;
}

// The host address behind a device address (unchanged when it carries no fence bit: host
// addresses never have bit 55 set).
inline void* host_address(const void* device_pointer) {
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(device_pointer) & ~kFenceBit);
}

}  // namespace fl::cpu
