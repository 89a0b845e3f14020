// storage/caching_allocator.h — CachingAllocator: best fit with splitting and coalescing over
// segments carved into blocks by offset.
//
// The allocator obtains segments from one device's MemoryBackend and never gives a block's memory
// back to the driver when the block is freed: the block returns to a free index and is reused by a
// later request that fits. Segments go back to the driver only when they are wholly free and
// memory is wanted (empty_cache, the out-of-memory ladder, or release_unfit_on_grow).
//
//   CachingAllocatorOptions  the policy knobs, with the defaults tuned on two earlier recorded
//                            training traces, a transformer's and a CNN's, that were not kept
//                            (see Note [Caching policy]).
//   CachingAllocator         the Allocator; name() is "caching".
//
// Blocks are ranges [offset, offset + size) of a segment; Allocation::ptr is
// segment->address + offset. No OpenCL sub-buffer is created: the backend reads and writes a
// block through (segment, offset).
//
// Note [Caching policy]
//   - Every request is rounded up to the allocation quantum: max(round_bytes, the device's
//     base_addr_align_bytes), both powers of two. Every block offset and every block size is a
//     multiple of it, so every block satisfies the Allocator alignment contract.
//   - Two pools that never exchange blocks: small (rounded size < kSmallSize, 1 MiB) and large.
//     Small segments are small_segment_bytes (2 MiB) each; a large segment is the rounded request
//     rounded up to large_segment_round (1 MiB), capped by the device's max_alloc_bytes.
//   - Best fit within the pool: the smallest free block that is large enough, ties broken by the
//     lowest (segment id, offset), except that a large request passes over a wholly free segment
//     more than three times its size (Note [Segments kept whole]). The free index is an ordered
//     tree keyed by (size, segment id, offset), so a lookup is O(log free blocks).
//   - A block is split when the remainder is at least one quantum (both pools). On free a block
//     merges with its free neighbours in the segment (blocks are doubly linked in address order).
//   - When nothing fits in the pool a segment is created. Before creating a large segment, wholly
//     free large segments go back to the driver, the largest first, as far as keeps reserved
//     bytes at their high-water mark (release_unfit_on_grow; Note [Unfit segments given back] in
//     caching_allocator_segments.cc).
//   design/storage.md ("The caching policy on the shipped traces") gives what each rule does on
//   the traces in traces/.
//
// Note [Segments kept whole]
//   A convolutional network frees a large activation and then asks for blocks of a quarter and a
//   half of its size (a pooling layer's output and indices). Best fit alone carves them out of
//   the freed activation's segment, and while they live the next activation of the first size
//   finds no segment wholly free, so a new one is made: the old one is left in slivers. So a
//   large request passes over a wholly free large segment more than three times its size; it
//   takes a block of a segment already split, or a new segment of its own size, and the whole
//   segment stays for a request of its size. (Passing over segments more than twice the request
//   does as well on the CNN and, on a transformer's trace, makes and releases more segments in
//   later steps: design/storage.md.) The walk past such segments is bounded by the number of
//   segments. Under a memory limit nothing is refused for it: the ladder gives the passed-over
//   segments back before a request fails.
//
// Note [First fit under a limit]
//   Under a memory limit a small pool's segments may not grow, and where blocks land decides
//   what fits later. Best fit scatters long-lived small blocks over the holes that short-lived
//   ones left, until no hole fits a later request although the bytes are there (a trace of a
//   small MLP, traces/mlp_sgd.trace, failed 19 requests under 1.15 times its live peak). So under
//   a limit a small request takes, of the free blocks large enough, the one at the lowest
//   (segment id, offset): long-lived blocks gather at the low end and the high end stays whole.
//   It costs a walk of the pool's free blocks at least the request's size, only under a limit.
//
// Note [Free index updated in place]
//   A split and a merge change one free block into another whose key is close to the old one:
//   the remainder of a split is smaller than the block it came from, a merged block larger than
//   the free neighbour it absorbed. When the new key still sorts between the old node's
//   neighbours in the tree, the new block takes over the node (replace_node, O(1), no
//   rebalancing) or keeps it with its size updated; otherwise it is erased and inserted. In the
//   steady state (free a block, allocate the same size again) this is the common case, so a cache
//   hit pair costs one tree search instead of three.
//
// Note [Quick reuse]
//   A small-pool block of at most quick_reuse_bytes is not merged when it is freed: it is parked
//   on a LIFO list of its size (one list per quantum multiple), still counted as free and cached,
//   and a request of the same rounded size takes the most recently parked one with no tree search
//   and no split (a handle to a parked block is refused like any freed one). Parked blocks are
//   merged (flushed) when it matters: before a new segment is made or the cache is emptied, when
//   a request finds nothing in the free index, and, under a memory limit, before every request
//   that its own list cannot serve. A segment is therefore made only when the fully merged pool
//   has no block that fits, as without parking, and under a limit only a request of a parked
//   size is placed otherwise than without parking. Snapshots show parked blocks as the free
//   blocks they are, unmerged, and inactive_split counts them one by one.
//   On the shipped traces (traces/) this leaves every replay figure as it was, with and without a
//   limit, and serves 94-99% of the small requests of a warm replay from the lists
//   (design/storage.md, "Quick reuse", has the figures and the policies that lost).
//
// Note [Out-of-memory ladder]
//   A segment of the usual size that would take reserved bytes over memory_limit is made smaller,
//   down to the request itself (Note [Segments that fit under a limit] in
//   caching_allocator_segments.cc).
//   A request that does not fit the room left, or a segment that the driver refuses, first makes
//   the allocator give back every wholly free segment of both pools and try once more (counted
//   in num_alloc_retries). If that cannot help or fails again, num_ooms is counted and
//   OutOfMemoryError says what was asked, the limit, what is allocated and what is reserved.
//   Under a limit the allocator predicts the outcome before touching anything: when even an empty
//   cache could not make room for the request, it throws at once and only num_ooms changes. When
//   the driver itself refuses, the cache has already been given back by the time the error is
//   thrown.
//
// Statistics (storage/stats.h), per pool and in aggregate:
//   allocation / active and their bytes, requested_bytes   move on allocate and deallocate;
//   segment / reserved_bytes, num_device_alloc / _free     move when a segment is created or
//                                                          released;
//   inactive_split / _bytes   free blocks that are not a whole segment. Counted as the net change
//                             of each operation, as PyTorch does: a split piece that only shrinks
//                             (a split of an already split block) or grows (a merge into it)
//                             changes the bytes, not the count;
//   num_alloc_retries         segment creations retried after emptying the cache;
//   num_ooms                  OutOfMemoryErrors thrown.
//
// Thread-safety: thread-compatible. The allocator is confined to the one thread that owns it at a
// time (storage/allocator.h) and takes no lock.
#pragma once

#include <boost/intrusive/set.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "oclvm/storage/allocator.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/stats.h"

namespace oclvm {

struct CachingAllocatorOptions {
  // Per-device limit on reserved bytes (what the allocator holds from the driver); 0 = none.
  uint64_t memory_limit = 0;
  // Every request is rounded up to this (a power of two), or to the device's base address
  // alignment if that is larger.
  size_t round_bytes = 512;
  // Requests whose rounded size is <= kSmallSize (1 MiB, storage/stats.h) come from a pool of
  // segments of this many bytes (raised to the rounded request if that is larger).
  size_t small_segment_bytes = 2 << 20;
  // A large-pool segment is the rounded request rounded up to this (a power of two).
  size_t large_segment_round = 1 << 20;
  // Before creating a new large segment, give back wholly free large segments that best fit
  // passed over, as far as keeps reserved bytes under their high-water mark (Note [Unfit segments
  // given back] in caching_allocator_segments.cc).
  bool release_unfit_on_grow = true;
  // Note [Segments kept whole]: a large request passes over a wholly free large segment more
  // than three times its size.
  bool keep_large_segments_whole = true;
  // Note [Quick reuse]: a freed small-pool block of at most this many bytes is parked in a list of
  // its size instead of merging with its neighbours, and the next request of that size takes it
  // back. Used up to kSmallSize (1 MiB) and below max_split_bytes; 0: off.
  size_t quick_reuse_bytes = size_t{128} << 10;

  // PyTorch's settings (PYTORCH_ALLOC_CONF through AllocConf); each off by default.
  // Note [Oversize blocks] (max_split_size_mb): a block of at least max_split_bytes is oversize.
  // A request of that size takes its block whole (never split), and takes a cached block only
  // when that is at most kOversizeSlack larger; a smaller request never takes an oversize block.
  // Large requests then stop carving up each other's blocks, at the price of the slack.
  // Counted in oversize_allocations / oversize_segments. 0: no limit.
  size_t max_split_bytes = 0;
  // roundup_power2_divisions: a request over round_bytes * divisions is rounded up to the next of
  // `divisions` equal steps between the powers of two around it (with 4: 1280 KiB -> 1280 KiB,
  // 1100 KiB -> 1280 KiB), so that sizes that differ a little share blocks. A power of two; 0 or
  // 1: off.
  size_t roundup_power2_divisions = 0;
  // garbage_collection_threshold: under a memory limit, before a new segment would take reserved
  // bytes over this fraction of the limit, wholly free segments are given back, the oldest
  // first, until it would not (or none is left). In (0, 1); 0: off.
  double garbage_collection_threshold = 0.0;
};

// The waste an oversize request accepts in a cached block (Note [Oversize blocks]): PyTorch's.
inline constexpr size_t kOversizeSlack = size_t{20} << 20;

class CachingAllocator final : public BackendAllocator {
 public:
  // Throws InvalidArgument when round_bytes or large_segment_round is not a power of two or
  // small_segment_bytes is 0. Touches no driver.
  explicit CachingAllocator(MemoryBackend& backend, const CachingAllocatorOptions& options = {});
  // Gives every segment back to the driver. Blocks still live at this point are leaked by their
  // owners: their memory is released anyway and one warning line with their count goes to stderr.
  ~CachingAllocator() override;

  std::string name() const override { return "caching"; }

  // See the Allocator contract (storage/allocator.h), Note [Caching policy], Note [Quick reuse]
  // and Note [Out-of-memory ladder]. A request that finds a parked block of its size costs O(1);
  // any other cache hit O(log free blocks of the pool). In steady state no call allocates heap
  // memory (block records are pooled and only grow).
  // Its cost is measured by build/allocator_bench (the README gives the latest figures).
  Allocation allocate(size_t bytes) override;
  // Validates the handle by its record (Note [Handles checked by their record] in
  // caching_allocator.cc; its address, id, block, segment, offset and size must all match) and
  // parks the block or merges it with its free neighbours. Throws InvalidArgument naming the
  // address and the device otherwise, and then nothing changes; never throws anything else (it
  // allocates no memory).
  void deallocate(const Allocation& allocation) override;
  // The rounded size of a live allocation; 0 for an empty one. Throws InvalidArgument when the
  // handle is not live in this allocator.
  size_t allocated_size(const Allocation& allocation) const override;

  // Gives every wholly free segment of both pools back to the driver. Never throws.
  void empty_cache() override;
  void set_memory_limit(uint64_t bytes) override;

  // Walks every segment and checks the invariants written next to Block and below; also the
  // tracker's own. Aborts (OCLVM_DCHECK) on a violation. Linear in the number of blocks.
  void check_invariants() const override;
  std::vector<SegmentSnapshot> segments() const override;

  // Read-only introspection for tests and the replay tool.
  const CachingAllocatorOptions& options() const { return options_; }
  // The allocation quantum: every block offset and size is a multiple of it.
  size_t quantum() const { return quantum_; }
  // Bytes held from the driver but not handed out (reserved - allocated): every free block.
  size_t cached_bytes() const;
  // Segments held from the driver (both pools).
  size_t segment_count() const { return segments_.size(); }
  // Free blocks in the free index of both pools, and the largest of them (0 when none).
  // Parked blocks (Note [Quick reuse]) count as the free blocks they are.
  size_t free_block_count() const {
    return small_free_.size() + large_free_.size() + parked_count_;
  }
  // Blocks parked for quick reuse.
  size_t parked_block_count() const { return parked_count_; }
  size_t largest_free_block() const;

 private:
  using FreeHook = boost::intrusive::set_member_hook<
      boost::intrusive::link_mode<boost::intrusive::safe_link>>;

  // One block: a range of one segment, free or handed out. Records are pooled (block_chunks_) and
  // reused, so splitting and merging allocate no heap memory.
  //
  // Invariants (check_invariants):
  //   - the blocks of a segment tile it: linked by prev/next in address order, the first at
  //     offset 0, each starting where the previous ends, sizes summing to segment->size;
  //   - offset and size are multiples of quantum_; address == segment->address + offset;
  //   - no two neighbours are both in the free index (they merge at once);
  //   - a block is in one of three states: allocated, parked (Note [Quick reuse]: on the list of
  //     its size) or indexed (in the free index of its pool);
  //   - pool is the pool of the segment and never changes.
  struct alignas(64) Block {
    // The free-index key and hook come first: a best-fit lookup touches one cache line per node.
    FreeHook free_hook;          // in small_free_ / large_free_ while free
    size_t size = 0;             // bytes of the block (> 0)
    uint64_t segment_id = 0;     // segment->id, copied here for the free-index key
    size_t offset = 0;           // bytes from the start of the segment
    Block* prev = nullptr;       // neighbour at lower addresses in the segment; nullptr at offset 0
    Block* next = nullptr;       // neighbour at higher addresses; also links recycled records
    uintptr_t address = 0;       // segment->address + offset: the device address handed out
    Segment* segment = nullptr;  // the segment holding the block; fixed while the record is in use
    size_t requested = 0;        // bytes the user asked for; valid while allocated
    uint64_t id = 0;             // allocation id; valid while allocated
    Block* parked_next = nullptr;  // the next block on the same quick-reuse list while parked
    StatType pool = StatType::kSmallPool;
    bool allocated = false;      // handed out to a user
    bool parked = false;         // on a quick-reuse list (Note [Quick reuse])

    // True when the block is its whole segment; a free block that is not is an "inactive split".
    bool whole() const { return prev == nullptr && next == nullptr; }
    // In the free index: neither handed out nor parked.
    bool indexed() const { return !allocated && !parked; }
  };

  // Free-index order: (size, segment id, offset). Unique, since (segment id, offset) is.
  struct FreeOrder {
    bool operator()(const Block& a, const Block& b) const {
      if (a.size != b.size) return a.size < b.size;
      if (a.segment_id != b.segment_id) return a.segment_id < b.segment_id;
      return a.offset < b.offset;
    }
  };
  // Compares a block with a size only, for the best-fit lower_bound.
  struct SizeOrder {
    bool operator()(const Block& a, size_t size) const { return a.size < size; }
    bool operator()(size_t size, const Block& b) const { return size < b.size; }
  };
  using FreeSet = boost::intrusive::set<
      Block, boost::intrusive::member_hook<Block, FreeHook, &Block::free_hook>,
      boost::intrusive::compare<FreeOrder>, boost::intrusive::constant_time_size<true>>;


  // What the allocator knows about one segment it holds.
  struct SegmentInfo {
    Segment* segment = nullptr;
    Block* first = nullptr;  // the block at offset 0; the same record for the segment's lifetime
    StatType pool = StatType::kSmallPool;
  };

  // --- fast path ---------------------------------------------------------------------------------
  // Net change of the inactive-split statistics within one operation.
  struct FreeDelta {
    int64_t count = 0;
    int64_t bytes = 0;
  };
  // The size a request of `bytes` (<= max_request_) is served with: a multiple of the quantum,
  // then with roundup_power2_divisions stepped up (step_up). Inline, one comparison past the
  // quantum rounding: every allocate takes it (design/performance.md, "Measured choices in the
  // code").
  size_t rounded(size_t bytes) const {
    // max_request_ is a multiple of the quantum, so this cannot overflow.
    const size_t size = (bytes + quantum_ - 1) & ~(quantum_ - 1);
    return size <= step_from_ ? size : step_up(size);
  }
  size_t step_up(size_t size) const;
  // Note [Oversize blocks]. One comparison: the hit path asks it three times.
  bool oversize(size_t size) const { return size >= oversize_from_; }
  Block* take_best_fit(StatType pool, size_t size);
  static FreeSet::iterator first_fit(FreeSet& free, FreeSet::iterator from);
  Allocation take_parked(Block*& head, size_t requested);
  void park(Block* block);
  // Everything but a parked hit: best fit, merging the parked blocks, a new segment.
  Allocation allocate_unparked(size_t bytes, size_t size);
  void free_into_index(Block* block);
  void merge_into_index(Block* block, FreeDelta& delta);
  Block* split_off(Block* block, size_t size);
  void carve(Block* block, size_t size);
  Allocation mark_allocated(Block* block, size_t requested);
  Block* find_live(const Allocation& allocation) const;
  [[noreturn]] void throw_not_live(const Allocation& allocation) const;
  void note_entering(const Block* block, FreeDelta& delta);
  void note_leaving(const Block* block, FreeDelta& delta);
  void commit(StatType pool, const FreeDelta& delta);
  void insert_free(Block* block);
  void erase_free(Block* block, FreeDelta& delta);
  Block* new_block();
  void recycle_block(Block* block);
  FreeSet& free_set(StatType pool) {
    return pool == StatType::kSmallPool ? small_free_ : large_free_;
  }
  const FreeSet& free_set(StatType pool) const {
    return pool == StatType::kSmallPool ? small_free_ : large_free_;
  }

  // --- slow path ---------------------------------------------------------------------------------
  [[noreturn]] void throw_bad_size(size_t bytes) const;
  size_t segment_size_for(StatType pool, size_t size) const;
  // The largest multiple of the quantum that is at most `room` and `usual` (Note [Segments that
  // fit under a limit] in caching_allocator_segments.cc).
  size_t fitting_segment_bytes(uint64_t room, size_t usual) const;
  Block* grow_and_take(StatType pool, size_t size, size_t requested);
  Segment* create_segment_or_throw(size_t segment_bytes, size_t requested, bool* retried);
  [[noreturn]] void throw_out_of_memory(size_t requested, size_t segment_bytes,
                                        const std::string& driver_message);
  Block* adopt_segment(Segment* segment, StatType pool);
  void flush_parked();
  void release_free_segments(StatType pool);
  void release_unfit_segments(size_t incoming);
  void collect_garbage(uint64_t threshold, size_t incoming);
  void release_segment(Block* whole_block);
  void grow_block_pool();
  // True when `record` points at a Block record of this allocator (Note [Handles checked by
  // their record] in caching_allocator.cc). O(record chunks), which grow geometrically.
  bool is_record(const void* record) const;
  uint64_t whole_free_bytes() const;

  // --- immutable after construction --------------------------------------------------------------
  // (The backend, the limit and the statistics are BackendAllocator's.)
  const CachingAllocatorOptions options_;
  // What stayed reserved above a lowered limit (0 when under it): the invariant is reserved <=
  // max(memory_limit_, reserved_over_limit_), since no segment is added while over the limit.
  uint64_t reserved_over_limit_ = 0;
  void note_reserved_over_limit();
  const size_t quantum_;      // max(options_.round_bytes, device base address alignment)
  const size_t max_request_;  // largest request: max_alloc_bytes rounded down to the quantum
  const size_t oversize_from_;  // options_.max_split_bytes, or SIZE_MAX without a limit
  // quantum_ * roundup_power2_divisions: sizes above it are stepped up; SIZE_MAX when it is off.
  const size_t step_from_;
  // The largest block size that is parked (Note [Quick reuse]); 0 when quick reuse is off.
  const size_t quick_until_;
  const unsigned quantum_shift_;  // log2(quantum_): a block of size s is parked on list s >> it

  // --- mutable state -----------------------------------------------------------------------------
  // Invariants, per pool P and in aggregate (check_invariants):
  //   reserved_bytes[P]   == sum of segment sizes of P           == allocated + cached
  //   allocated_bytes[P]  == sum of sizes of allocated blocks of P
  //   cached(P)           == sum of sizes of free blocks of P    == sizes in free_set(P)
  //   inactive_split[P]   == free blocks of P that are not whole segments (and their bytes)
  //   allocation[P]       == allocated blocks of P
  //   whole_free_bytes_[P]== bytes of the wholly free segments of P
  // Storage of every Block record: chunks of 256, 512, ... records (at most kMaxChunkBlocks).
  struct BlockChunk {
    std::unique_ptr<Block[]> blocks;
    size_t count = 0;
  };
  std::vector<BlockChunk> block_chunks_;
  Block* spare_blocks_ = nullptr;                        // recycled records, linked by `next`
  std::map<uint64_t, SegmentInfo> segments_;             // segment id -> info, every segment held
  FreeSet small_free_;
  FreeSet large_free_;
  std::array<uint64_t, kNumStatTypes> whole_free_bytes_{};  // indexed by StatType
  // Note [Quick reuse]: parked_[size >> quantum_shift_] heads the LIFO list of parked blocks of
  // that size; bit i of parked_bits_ is set while list i may be non-empty (set on park, cleared on
  // flush), so that a flush visits only lists that were used.
  std::vector<Block*> parked_;
  std::vector<uint64_t> parked_bits_;
  size_t parked_count_ = 0;
  uint64_t next_id_ = 1;
  // The most bytes ever reserved at once (unlike the statistics' peak, never reset): Note [Unfit
  // segments given back].
  uint64_t reserved_high_water_ = 0;
};

}  // namespace oclvm
