// storage/system_allocator.h — SystemAllocator: one driver segment per allocation, no cache.
//
// The seed semantics of a device allocator (one cl::Buffer per allocation): allocate(n) creates a
// backend segment of n rounded up to 512 bytes and hands out its byte 0; deallocate gives the
// segment straight back to the driver. Nothing is cached, so reserved bytes always equal allocated
// bytes, and empty_cache has nothing to do.
//
//   SystemAllocator         the allocator.
//   out_of_memory_message   the text of every OutOfMemoryError raised by SystemAllocator and
//   invalid_handle_message  BuddyAllocator (and of their rejected handles), so both read the same.
//
// Promises (beyond the contract in storage/allocator.h):
//   - every block is a whole segment at offset 0, so its device address is 2 MiB aligned;
//   - statistics: reserved == allocated and segment == allocation, per pool (pool_of_size of the
//     rounded size); requested counts the exact bytes asked for; num_device_alloc / num_device_free
//     move with every allocate / deallocate; inactive_split stays 0;
//   - a memory limit (0 = none) bounds reserved bytes: a request that would pass it, and a
//     driver that refuses memory, both count one num_ooms and throw OutOfMemoryError naming what
//     was asked, the limit, allocated and reserved bytes and the device;
//   - deallocate checks the handle against the table of live allocations, so a double free, another
//     allocator's handle or a forged one throws InvalidArgument and changes nothing.
//
// Invariants (check_invariants):
//   live_.size() == stats.allocation.current == stats.segment.current
//   sum of live segment sizes == allocated_bytes.current == reserved_bytes.current
//   sum of live requested sizes == requested_bytes.current
//
// Thread-safety: thread-compatible (storage/allocator.h): confined to one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "oclvm/storage/allocator.h"

namespace oclvm {

// Builds the message of an OutOfMemoryError: the device, the bytes asked for (`requested`), the
// segment the allocator needed to create for them (`segment_bytes`), why it could not (`cause`,
// e.g. the driver's own message), the memory limit (0 = none) and the allocated and reserved bytes
// of `stats` at the time.
std::string out_of_memory_message(const Device& device, size_t requested, size_t segment_bytes,
                                  uint64_t memory_limit, const DeviceStats& stats,
                                  std::string_view cause);

// Builds the message of the InvalidArgument thrown for a handle that `allocator` did not hand out
// or has already taken back: the allocator, the device, the handle's fields and `why`.
std::string invalid_handle_message(const Allocator& allocator, const Allocation& allocation,
                                   std::string_view why);

class SystemAllocator final : public BackendAllocator {
 public:
  // Segments are multiples of this many bytes (PyTorch's rounding); also the block alignment.
  static constexpr size_t kRounding = 512;

  explicit SystemAllocator(MemoryBackend& backend, uint64_t memory_limit = 0);
  // Gives back the segments of allocations still live (their handles become dangling).
  ~SystemAllocator() override;

  std::string name() const override { return "system"; }

  Allocation allocate(size_t bytes) override;
  void deallocate(const Allocation& allocation) override;
  // The segment size of a live allocation; 0 for an empty one. Throws InvalidArgument for a
  // handle that is not live here.
  size_t allocated_size(const Allocation& allocation) const override;

  // No cache to give back: only later allocations see the new limit.
  void set_memory_limit(uint64_t bytes) override { memory_limit_ = bytes; }
  void check_invariants() const override;
  std::vector<SegmentSnapshot> segments() const override;

 private:
  // One live allocation. Valid from allocate until deallocate; the handle must match it field for
  // field to be accepted back.
  struct LiveBlock {
    Segment* segment;  // the allocation's own segment; the block is its byte 0 onwards
    size_t requested;  // bytes the caller asked for (Allocation::size)
    uint64_t id;       // Allocation::id
  };

  // Returns the live record that `allocation` names, or throws InvalidArgument saying why not.
  const LiveBlock& live_block_of(const Allocation& allocation) const;

  // Mutable state (the backend, the limit and the statistics are BackendAllocator's).
  std::unordered_map<uintptr_t, LiveBlock> live_;  // device address -> live allocation
  uint64_t next_id_ = 1;  // id of the next allocation; ids start at 1 (0 marks an empty handle)
};

}  // namespace oclvm
