// storage/address_space.cc — PROT_NONE reservations and the chunk -> segment table.
#include "oclvm/storage/address_space.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "oclvm/storage/backend.h"
#include "oclvm/storage/errors.h"

namespace oclvm {
namespace {

size_t reserved_length(size_t bytes) {
  return (bytes + AddressSpace::kChunk - 1) & ~(AddressSpace::kChunk - 1);
}

}  // namespace

AddressSpace& AddressSpace::instance() {
  // Never destroyed: segments may be released by objects that die during process exit.
  static AddressSpace* const space = new AddressSpace();
  return *space;
}

uintptr_t AddressSpace::take_range(size_t length) {
  {
    MutexLock lock(mutex_);
    // Most recently released first (entries of equal length keep insertion order).
    auto it = cached_ranges_.upper_bound(length);
    if (it != cached_ranges_.begin() && (--it)->first == length) {
      const uintptr_t start = it->second;
      cached_ranges_.erase(it);
      cached_bytes_ -= length;
      return start;
    }
  }
  // Over-reserve by one chunk, then trim both ends so the range starts on a chunk boundary.
  const size_t padded = length + kChunk;
  void* raw = mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    throw OutOfMemoryError("Expected to reserve " + std::to_string(length) +
                           " bytes of device address space, but mmap failed: " +
                           std::strerror(errno));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kChunk - 1) & ~(kChunk - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = aligned + length;
  const uintptr_t end = start + padded;
  if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
  return aligned;
}

uintptr_t AddressSpace::reserve(Segment* segment) {
  const size_t length = reserved_length(segment->size);
  const uintptr_t start = take_range(length);
  MutexLock lock(mutex_);
  for (uintptr_t chunk = start >> kChunkShift; chunk < (start + length) >> kChunkShift; ++chunk) {
    chunk_owner_[chunk] = segment;
  }
  ++live_ranges_;
  return start;
}

void AddressSpace::release(const Segment* segment) noexcept {
  const size_t length = reserved_length(segment->size);
  {
    MutexLock lock(mutex_);
    for (uintptr_t chunk = segment->address >> kChunkShift;
         chunk < (segment->address + length) >> kChunkShift; ++chunk) {
      chunk_owner_.erase(chunk);
    }
    --live_ranges_;
    if (cached_bytes_ + length <= kMaxCachedBytes) {
      try {
        cached_ranges_.emplace(length, segment->address);
        cached_bytes_ += length;
        return;
      } catch (const std::bad_alloc&) {
        // Fall through: give the range back to the kernel instead of caching it.
      }
    }
  }
  munmap(reinterpret_cast<void*>(segment->address), length);
}

ResolvedAddress AddressSpace::resolve(uintptr_t address) const {
  MutexLock lock(mutex_);
  auto it = chunk_owner_.find(address >> kChunkShift);
  if (it == chunk_owner_.end()) return {};
  Segment* segment = it->second;
  if (address < segment->address || address >= segment->address + segment->size) return {};
  return {segment, address - segment->address};
}

size_t AddressSpace::cached_bytes() const {
  MutexLock lock(mutex_);
  return cached_bytes_;
}

size_t AddressSpace::live_ranges() const {
  MutexLock lock(mutex_);
  return live_ranges_;
}

}  // namespace oclvm
