// storage/allocator.h — the allocator interface (TensorFlow's shape) and the Allocation handle.
//
// An allocator hands out blocks of one device's memory. Blocks live inside segments obtained from
// the device's MemoryBackend; a block is named by its device address and resolves to
// (segment, offset) without a lookup, because the handle carries both.
//
// Contract common to every allocator:
//   - allocate(0) returns an empty Allocation and touches no driver and no statistic.
//   - allocate(n) returns a block of at least n bytes whose offset in its segment (and so whose
//     device address) is a multiple of the device's base address alignment
//     (CL_DEVICE_MEM_BASE_ADDR_ALIGN) and of 512 bytes. Throws InvalidArgument (n over the
//     device's largest allocation, SIZE_MAX) with no statistic changed, and OutOfMemoryError after
//     the out-of-memory ladder (design/storage.md): `num_ooms` is counted, and if the ladder gave
//     cached segments back before failing, that shows too (reserved, num_device_free,
//     num_alloc_retries). Nothing is held for the failed request.
//   - deallocate(a) gives the block back. An empty handle is a no-op. A handle that is not live in
//     this allocator (double free, another allocator's, forged) throws InvalidArgument and changes
//     nothing.
//   - stats() follows storage/stats.h.
//
// Thread-safety: thread-compatible. An allocator is confined to one thread at a time, the one that
// owns it (in a VM, its device's worker: vm/device_worker.h); it takes no lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "oclvm/storage/backend.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/memory_history.h"
#include "oclvm/storage/stats.h"

namespace oclvm {

struct Allocation {
  void* ptr = nullptr;          // device address of the block; nullptr iff the allocation is empty
  size_t size = 0;              // bytes requested by the caller
  Segment* segment = nullptr;   // segment that holds the block
  size_t offset = 0;            // ptr == segment->address + offset
  uint64_t id = 0;              // unique per allocator, increasing; 0 for an empty allocation
  void* block = nullptr;        // the allocator's own record; opaque to callers

  explicit operator bool() const { return ptr != nullptr; }
};

// One block of a segment as a memory snapshot shows it.
struct BlockSnapshot {
  uintptr_t address = 0;  // device address
  size_t size = 0;        // bytes set aside (allocated size for a live block)
  size_t requested = 0;   // bytes asked for; 0 for a free block
  bool allocated = false; // handed out to a user (else free, cached for reuse)
  // Where a live block was allocated, when the memory history kept it (memory snapshots fill it
  // in; allocators leave it null).
  std::shared_ptr<const MemoryContext> context;
};

// One segment held from the driver and the blocks that tile it, in address order.
struct SegmentSnapshot {
  uintptr_t address = 0;
  size_t size = 0;
  bool small_pool = false;  // held for small blocks (PyTorch's "small" segment type)
  std::vector<BlockSnapshot> blocks;

  // Bytes of the allocated blocks.
  uint64_t allocated_bytes() const {
    uint64_t bytes = 0;
    for (const BlockSnapshot& block : blocks) bytes += block.allocated ? block.size : 0;
    return bytes;
  }
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Registry name: "system", "caching", "buddy", "tracking(<inner>)".
  virtual std::string name() const = 0;
  virtual MemoryBackend& backend() const = 0;
  Device device() const { return backend().device(); }

  virtual Allocation allocate(size_t bytes) = 0;
  virtual void deallocate(const Allocation& allocation) = 0;

  // Bytes requested for a live allocation (== allocation.size).
  size_t requested_size(const Allocation& allocation) const { return allocation.size; }
  // Bytes actually set aside for a live allocation (>= requested, after rounding).
  virtual size_t allocated_size(const Allocation& allocation) const = 0;

  virtual DeviceStats stats() const = 0;
  virtual void reset_peak_stats() = 0;
  virtual void reset_accumulated_stats() = 0;

  // Gives every wholly free cached segment back to the driver. No-op without a cache.
  virtual void empty_cache() {}

  // The per-device limit on reserved bytes (0: none).
  virtual uint64_t memory_limit() const = 0;
  // Sets that limit (0: none) from now on. Lowering it under what is reserved gives every wholly
  // free cached segment back (as empty_cache) and refuses new segments until reserved bytes fall
  // under it; live blocks are never taken back, so reserved may stay above the limit until they
  // die. Never throws.
  virtual void set_memory_limit(uint64_t bytes) = 0;

  // Every segment the allocator holds, sorted by address, with its blocks. Linear in the blocks;
  // for memory snapshots, not for hot paths.
  virtual std::vector<SegmentSnapshot> segments() const = 0;

  // Checks the allocator's invariants (stats.h and its own); aborts on violation. Tests call it
  // after every step; cost is linear in the number of blocks.
  virtual void check_invariants() const {}

  // Runs `guard` before any segment of this allocator goes back to the driver (cache trims, the
  // out-of-memory ladder, the system allocator's frees, the destructor), so that commands still
  // queued on freed blocks complete first (Note [Stream-ordered release] in
  // instructions/instructions.cc). It must not throw. An empty guard (the default) runs nothing.
  virtual void set_segment_release_guard(std::function<void()> guard) { guard_ = std::move(guard); }

 protected:
  // Gives `segment` back to its backend after the guard ran. Never throws.
  void release_to_driver(MemoryBackend& backend, Segment* segment) noexcept {
    if (guard_) guard_();
    backend.release_segment(segment);
  }

 private:
  std::function<void()> guard_;
};

// An allocator that takes its segments from one MemoryBackend and keeps its own statistics and
// memory limit: the system, caching and buddy allocators. They move the statistics through
// tracker_ and read the limit from memory_limit_; set_memory_limit stays theirs, since what a
// lowered limit gives back depends on the cache.
class BackendAllocator : public Allocator {
 public:
  MemoryBackend& backend() const final { return backend_; }
  DeviceStats stats() const final { return tracker_.stats(); }
  void reset_peak_stats() final { tracker_.reset_peak(); }
  void reset_accumulated_stats() final { tracker_.reset_accumulated(); }
  uint64_t memory_limit() const final { return memory_limit_; }

 protected:
  BackendAllocator(MemoryBackend& backend, uint64_t memory_limit)
      : backend_(backend), memory_limit_(memory_limit) {}

  MemoryBackend& backend_;      // fixed for the allocator's life
  uint64_t memory_limit_;       // 0: none
  DeviceStatsTracker tracker_;  // the statistics stats() returns
};

// Bytes `allocator` could still take from its device: its memory limit (the device's global
// memory when it has none) minus what it has reserved; 0 when reserved is over it.
uint64_t device_free_bytes(const Allocator& allocator);

// Sorts segment snapshots by address (what Allocator::segments promises).
void sort_by_address(std::vector<SegmentSnapshot>& segments);

// Rounds `bytes` up to a multiple of `alignment` (a power of two). Throws InvalidArgument if the
// result would overflow size_t (SIZE_MAX and its neighbours).
size_t round_up_checked(size_t bytes, size_t alignment, const Device& device);

}  // namespace oclvm
