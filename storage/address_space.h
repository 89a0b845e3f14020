// storage/address_space.h — unique device addresses for every live segment of every device.
//
// Each segment gets a range of host virtual address space reserved with PROT_NONE: never
// accessible, so a host dereference of a device address traps instead of reading garbage, and
// never handed to anyone else while reserved, so ranges of live segments never overlap across
// devices. PyTorch computes a view's data_ptr as base + offset and compares ranges for aliasing;
// both stay meaningful.
//
// Ranges are aligned to kChunk (2 MiB) and cover whole chunks, so each chunk belongs to at most one
// segment and `resolve` is one hash lookup of address / kChunk: O(1) from any interior address to
// (segment, offset).
//
// Released ranges stay reserved (still PROT_NONE) in a cache keyed by length, and a later
// reservation of the same length takes one from there without a system call: a segment per
// allocation (the system allocator) would otherwise pay an mmap and two munmaps each time. The
// cache holds at most kMaxCachedBytes of address space (virtual only; no memory behind it).
//
// Thread-safety: thread-safe (one mutex); every device's allocator uses the one instance.
// Lifetime: a process-wide singleton that is never destroyed, so releases during exit are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "oclvm/storage/thread_annotations.h"

namespace oclvm {

struct Segment;

struct ResolvedAddress {
  Segment* segment = nullptr;  // nullptr: the address is in no live segment
  size_t offset = 0;           // address - segment->address
};

class AddressSpace {
 public:
  static constexpr size_t kChunkShift = 21;
  static constexpr size_t kChunk = size_t{1} << kChunkShift;
  static constexpr size_t kMaxCachedBytes = size_t{1} << 40;  // 1 TiB of virtual address space

  static AddressSpace& instance();

  // Reserves a fresh range for `segment` (segment->size bytes) and returns its first address.
  // Throws OutOfMemoryError when the host has no address space left.
  uintptr_t reserve(Segment* segment);
  // Unreserves the range of `segment`. Never throws.
  void release(const Segment* segment) noexcept;
  // O(1): the live segment holding `address`, and the offset of `address` in it.
  ResolvedAddress resolve(uintptr_t address) const;
  // Number of live reservations (for leak checks).
  size_t live_ranges() const;
  // Bytes of released ranges kept for reuse.
  size_t cached_bytes() const;

 private:
  AddressSpace() = default;
  // A fresh chunk-aligned range of `length` bytes from the cache or from mmap.
  uintptr_t take_range(size_t length);

  mutable Mutex mutex_;
  // chunk number -> segment
  std::unordered_map<uintptr_t, Segment*> chunk_owner_ OCLVM_GUARDED_BY(mutex_);
  size_t live_ranges_ OCLVM_GUARDED_BY(mutex_) = 0;
  std::multimap<size_t, uintptr_t> cached_ranges_ OCLVM_GUARDED_BY(mutex_);  // length -> start
  size_t cached_bytes_ OCLVM_GUARDED_BY(mutex_) = 0;  // sum of cached lengths
};

}  // namespace oclvm
