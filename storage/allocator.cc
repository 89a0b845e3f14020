// storage/allocator.cc — helpers shared by the allocators.
#include "oclvm/storage/allocator.h"

#include <algorithm>
#include <cstdint>

#include "oclvm/storage/errors.h"

namespace oclvm {

size_t round_up_checked(size_t bytes, size_t alignment, const Device& device) {
  if (bytes > SIZE_MAX - (alignment - 1)) {
    throw InvalidArgument("Expected an allocation size the device can hold on " + device.str() +
                          ", but got " + std::to_string(bytes) + " bytes");
  }
  return (bytes + alignment - 1) & ~(alignment - 1);
}

uint64_t device_free_bytes(const Allocator& allocator) {
  const uint64_t limit = allocator.memory_limit() != 0
                             ? allocator.memory_limit()
                             : allocator.backend().properties().global_mem_bytes;
  const auto reserved =
      static_cast<uint64_t>(allocator.stats().reserved_bytes.aggregate().current);
  return reserved >= limit ? 0 : limit - reserved;
}

void sort_by_address(std::vector<SegmentSnapshot>& segments) {
  std::sort(
      segments.begin(), segments.end(),
      [](const SegmentSnapshot& a, const SegmentSnapshot& b) { return a.address < b.address; });
}

}  // namespace oclvm
