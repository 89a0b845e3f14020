// storage/buddy_allocator.h — BuddyAllocator: a true binary buddy system over backend segments.
//
// The alternative policy that trace replay compares against the caching allocator. Memory comes
// from arenas (backend segments whose size is a power of two). Every block is a power of two,
// `min_block << order`, at an offset that is a multiple of its own size, so a block's buddy (the
// other half of the block it was split from) sits at `offset XOR size`:
//
//   allocate   rounds the request up to a power of two >= the smallest block, takes a free block of
//              the smallest order that has one, and splits it in halves down to the needed order
//              (the upper halves become free blocks of the lower orders);
//   deallocate merges the block with its buddy while the buddy is free and of the same order, up
//              to the whole arena.
//
//   BuddyAllocatorOptions  the knobs, with documented defaults.
//   BuddyAllocator         the allocator.
//   BuddyFreeBlock         one free block, as free_blocks() reports it for tests and debugging.
//
// Arenas: an ordinary arena has options.arena_bytes; a request larger than that gets an arena of
// its own of the request's power of two (InvalidArgument when that power of two is above the
// device's largest allocation). A wholly free arena (one free block covering it) stays cached until
// empty_cache() or the out-of-memory ladder gives it back. See Note [Arenas under a memory limit].
//
// Out-of-memory ladder (only when a new arena is needed): if the arena would pass the memory limit
// or the driver refuses it, give back every wholly free arena and try once more (counted in
// num_alloc_retries, whether or not the retry succeeds); if that fails too, or freeing could not help, count
// num_ooms and throw OutOfMemoryError (storage/system_allocator.h's message). When the limit alone
// rules the arena out and freeing the cache could not bring it under, nothing is freed.
//
// Costs: allocate finds the smallest non-empty order in O(1) (a bit mask of non-empty orders), then
// O(log F) per order it splits (F = free blocks of an order); deallocate is one hash lookup plus
// O(log F) per merge. Creating an arena is the slow path.
//
// Statistics (storage/stats.h), pools by size (pool_of_size): allocation / allocated_bytes /
// active count blocks by their rounded power-of-two size, requested_bytes the bytes asked for,
// segment / reserved_bytes the arenas (pool by arena size), inactive_split the free blocks that are
// not a whole arena (pool by block size).
//
// Invariants (check_invariants, linear in the number of blocks):
//   - the blocks (free and live) of each arena tile it exactly, each at a multiple of its size;
//   - no free block has a free buddy of the same order (they would have been merged);
//   - an arena with no live block is exactly one free block; Arena::live_blocks is exact;
//   - nonempty_orders_ bit k is set iff free_[k] is not empty;
//   - the tracker's current values equal the sums over arenas, free and live blocks, per pool.
//
// Thread-safety: thread-compatible (storage/allocator.h): confined to one thread at a time.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "oclvm/storage/allocator.h"

namespace oclvm {

struct BuddyAllocatorOptions {
  // Limit on reserved bytes (the arenas held); 0 means none.
  uint64_t memory_limit = 0;
  // Smallest block, a power of two of at least 512 bytes. Raised to the device's base address
  // alignment when that is larger.
  size_t min_block = 512;
  // Size of an ordinary arena, a power of two, at least the smallest block and at most the
  // device's largest allocation.
  size_t arena_bytes = size_t{16} << 20;
};

struct BuddyFreeBlock {
  uint64_t arena = 0;  // id of the arena's segment (Segment::id)
  size_t offset = 0;   // offset of the block in its arena
  size_t size = 0;     // bytes of the block, a power of two

  friend bool operator==(const BuddyFreeBlock&, const BuddyFreeBlock&) = default;
};

class BuddyAllocator final : public BackendAllocator {
 public:
  // Throws InvalidArgument when an option breaks the rules stated on BuddyAllocatorOptions.
  explicit BuddyAllocator(MemoryBackend& backend, const BuddyAllocatorOptions& options = {});
  // Gives back every arena, including ones that still hold live blocks (their handles dangle).
  ~BuddyAllocator() override;

  std::string name() const override { return "buddy"; }

  Allocation allocate(size_t bytes) override;
  void deallocate(const Allocation& allocation) override;
  // The power-of-two block size of a live allocation. Throws InvalidArgument for a handle that is
  // not live here.
  size_t allocated_size(const Allocation& allocation) const override;

  // Gives every wholly free arena back to the driver.
  void empty_cache() override;

  void set_memory_limit(uint64_t bytes) override;
  void check_invariants() const override;
  std::vector<SegmentSnapshot> segments() const override;

  // The smallest block size in effect (options.min_block, or the device's base address alignment
  // when larger) and the ordinary arena size.
  size_t min_block() const { return min_block_; }
  size_t arena_bytes() const { return arena_bytes_; }
  // Every free block, sorted by (arena, offset). Linear cost; for tests and debugging.
  std::vector<BuddyFreeBlock> free_blocks() const;

 private:
  // One backend segment carved into buddy blocks. Owned by arenas_; lives until given back.
  struct Arena {
    Segment* segment = nullptr;  // segment->size == size; segment->owner == the allocator
    size_t size = 0;             // bytes, == min_block_ << order
    int order = 0;               // order of the block that covers the whole arena
    size_t live_blocks = 0;      // blocks handed out; 0 iff the arena is one free block
  };

  // Names a free block: its arena's id and offset. Ordered so that the lowest arena id and the
  // lowest offset are taken first (old arenas fill before new ones, addresses grow).
  struct FreeKey {
    uint64_t arena_id;
    size_t offset;
    friend auto operator<=>(const FreeKey&, const FreeKey&) = default;
  };
  using FreeList = std::map<FreeKey, Arena*>;

  // One live allocation, valid from allocate until deallocate. The handle must match it field for
  // field to be accepted back.
  struct LiveBlock {
    Arena* arena;      // arena that holds the block (also Allocation::block)
    size_t offset;     // offset of the block in the arena (Allocation::offset)
    int order;         // the block has min_block_ << order bytes
    size_t requested;  // bytes asked for (Allocation::size)
    uint64_t id;       // Allocation::id
  };

  size_t block_size(int order) const { return min_block_ << order; }
  // The order of the block for a request of `bytes` (> 0). Throws InvalidArgument when the
  // device cannot hold it.
  int order_for(size_t bytes) const;

  // Fast path: the smallest order >= `order` that has a free block, or -1.
  int smallest_free_order(int order) const;
  // Takes the first free block of order `from` and splits it down to `order`; returns the block.
  std::pair<Arena*, size_t> take_and_split(int from, int order);
  // Gives a handed-out block back to its arena's free lists, merging it with free buddies.
  void release_block(Arena* arena, size_t offset, int order);

  // Slow path: creates an arena that holds a block of `order`, with the out-of-memory ladder.
  // `requested` is only for messages.
  void add_arena(int order, size_t requested);
  // Size of the arena to create for a block of `order` under the current reserved bytes; 0 when
  // even the block itself does not fit under the memory limit.
  size_t arena_size_for(int order) const;
  // Bytes of wholly free arenas (what empty_cache would give back).
  uint64_t cached_bytes() const;
  [[noreturn]] void fail_out_of_memory(size_t requested, size_t arena_bytes,
                                       const std::string& cause);

  // Free-list edits; they keep nonempty_orders_ and the inactive_split statistics in step.
  void insert_free(Arena* arena, size_t offset, int order);
  void erase_free(FreeList::iterator it, int order);
  void count_inactive_split(const Arena& arena, int order, int sign);

  const LiveBlock& live_block_of(const Allocation& allocation) const;

  // Immutable after construction (the backend, the limit and the statistics are
  // BackendAllocator's).
  size_t min_block_;    // power of two >= 512 and >= base address alignment
  size_t arena_bytes_;  // power of two >= min_block_, <= max_alloc_bytes
  int max_order_;       // largest order a block (or arena) can have on this device

  // Mutable state.
  std::map<uint64_t, std::unique_ptr<Arena>> arenas_;  // Segment::id -> arena
  std::vector<FreeList> free_;                         // free_[k]: free blocks of order k
  uint64_t nonempty_orders_ = 0;                       // bit k set iff free_[k] is not empty
  std::unordered_map<uintptr_t, LiveBlock> live_;      // device address -> live allocation
  uint64_t next_id_ = 1;  // id of the next allocation; ids start at 1 (0 marks an empty handle)
};

}  // namespace oclvm
