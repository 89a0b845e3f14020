// storage/allocator.cc — helpers shared by the allocators.
#include "oclvm/storage/allocator.h"

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

}  // namespace oclvm
