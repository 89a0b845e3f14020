// instructions/blob_ranges.h — where an instruction's blob bytes are on the device, checked when
// the instruction executes, and how describe() names a blob. Shared by instructions.cc and
// kernel_instructions.cc; not installed.
//
// Thread-safety: the functions read their blob only; an instruction calls them on its worker.
#pragma once

#include <cstddef>
#include <string>

#include "oclvm/instructions/instructions.h"

namespace oclvm {

// Where bytes [offset, offset + bytes) of a blob are on the device.
struct DeviceRange {
  const Segment* segment = nullptr;  // nullptr only when bytes == 0
  size_t offset = 0;                 // in the segment
};

// Resolves a byte range of `blob` (offsets from its element 0) against its storage. `role`
// names the blob in messages ("copy source", "fill target"). Throws InvalidArgument when the blob
// has no storage, is released, or the storage does not hold the range.
DeviceRange resolve_range(const BlobObject& blob, size_t offset, size_t bytes, const char* role);
// Where a kernel's blob argument starts: resolve_range's checks for the bytes from `offset` to
// the storage's end, and the segment even when they are none (a 0-byte storage has no segment,
// and the kernel gets a null buffer).
DeviceRange resolve_start(const BlobObject& blob, size_t offset);
// The VM's access for a kernel argument's: a write for anything that writes.
inline vm::Access vm_access(KernelAccess access) {
  return access == KernelAccess::kRead ? vm::Access::kRead : vm::Access::kWrite;
}
// "u8[4096] on opencl:0 at 0x7f...": the label and, once allocated, the device address.
std::string blob_text(const BlobObject& blob);

}  // namespace oclvm
