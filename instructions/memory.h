// instructions/memory.h — a Paddle-style plain API over the VM, for callers that want no lists.
//
//   memory::Alloc(place, n)   allocates n bytes on `place` (AllocateBlob through vm::Run)
//   memory::Free(place, p)    releases it (ReleaseTensor through vm::Run)
//   memory::Used(place)       allocated bytes on `place` now (QueryStats through vm::Run)
//
// Each call is synchronous and throws what the instruction threw.
// Thread-safety: thread-safe (each call is its own vm::Run on the process-wide VM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "oclvm/storage/device.h"
#include "oclvm/storage/storage_objects.h"

namespace oclvm::memory {

// bytes == 0 gives a blob with an empty allocation (no driver call, no statistic), as Paddle allows.
std::shared_ptr<BlobObject> Alloc(Device place, size_t bytes);
// Throws InvalidArgument when `blob` is not on `place`.
void Free(Device place, std::shared_ptr<BlobObject> blob);
uint64_t Used(Device place);

}  // namespace oclvm::memory
