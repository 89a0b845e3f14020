// storage/caching_allocator.cc — CachingAllocator: construction, the hit path (parked blocks,
// the handle check, best fit, split, hand out, free and merge), the block records, and the
// invariant walk. The slow path is in caching_allocator_segments.cc; storage/caching_allocator.h
// holds the policy notes.
#include "oclvm/storage/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <iterator>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/hex.h"
#include "oclvm/storage/log.h"
#include "oclvm/storage/options.h"

namespace oclvm {
namespace {

// Block records come in chunks of 256, then twice as many as the last chunk, up to 64 Ki
// records: a few chunks cover a million blocks, which keeps is_record short.
constexpr size_t kFirstChunkBlocks = 256;
constexpr size_t kMaxChunkBlocks = size_t{64} << 10;

bool is_power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

size_t quantum_for(const CachingAllocatorOptions& options, const MemoryBackend& backend) {
  if (!is_power_of_two(options.round_bytes)) {
    throw InvalidArgument(
        "Expected CachingAllocatorOptions::round_bytes to be a power of two, but got " +
        std::to_string(options.round_bytes));
  }
  if (!is_power_of_two(options.large_segment_round)) {
    throw InvalidArgument(
        "Expected CachingAllocatorOptions::large_segment_round to be a power of two, but got " +
        std::to_string(options.large_segment_round));
  }
  if (options.small_segment_bytes == 0) {
    throw InvalidArgument("Expected CachingAllocatorOptions::small_segment_bytes > 0, but got 0");
  }
  if (options.roundup_power2_divisions > 1 && !is_power_of_two(options.roundup_power2_divisions)) {
    throw InvalidArgument(
        "Expected CachingAllocatorOptions::roundup_power2_divisions to be a power of two, but "
        "got " + std::to_string(options.roundup_power2_divisions));
  }
  if (!(options.garbage_collection_threshold >= 0.0 && options.garbage_collection_threshold < 1.0)) {
    throw InvalidArgument(
        "Expected CachingAllocatorOptions::garbage_collection_threshold in [0, 1), but got " +
        std::to_string(options.garbage_collection_threshold));
  }
  const size_t align = backend.properties().base_addr_align_bytes;
  if (align != 0 && !is_power_of_two(align)) {
    throw InvalidArgument("Expected the base address alignment of " + backend.device().str() +
                          " to be a power of two, but got " + std::to_string(align));
  }
  return std::max(options.round_bytes, align);
}

// Note [Quick reuse]: the largest parked size, a multiple of the quantum in the small pool and
// below the oversize threshold; 0 turns parking off.
size_t quick_until_for(const CachingAllocatorOptions& options, size_t quantum,
                       size_t oversize_from) {
  const size_t limit = std::min({options.quick_reuse_bytes, kSmallSize - 1, oversize_from - 1});
  return limit & ~(quantum - 1);
}

}  // namespace

CachingAllocator::CachingAllocator(MemoryBackend& backend, const CachingAllocatorOptions& options)
    : BackendAllocator(backend, options.memory_limit),
      options_(options),
      quantum_(quantum_for(options, backend)),
      max_request_(static_cast<size_t>(std::min<uint64_t>(backend.properties().max_alloc_bytes,
                                                          SIZE_MAX)) &
                   ~(quantum_ - 1)),
      oversize_from_(options.max_split_bytes != 0 ? options.max_split_bytes : SIZE_MAX),
      step_from_(options.roundup_power2_divisions > 1 ? quantum_ * options.roundup_power2_divisions
                                                      : SIZE_MAX),
      quick_until_(quick_until_for(options, quantum_, oversize_from_)),
      quantum_shift_(static_cast<unsigned>(std::countr_zero(quantum_))),
      parked_(quick_until_ == 0 ? 0 : (quick_until_ >> quantum_shift_) + 1, nullptr),
      parked_bits_((parked_.size() + 63) / 64, 0) {}

CachingAllocator::~CachingAllocator() {
  const auto leaked = static_cast<size_t>(tracker_.stats().allocation.aggregate().current);
  small_free_.clear();
  large_free_.clear();
  for (auto& [id, info] : segments_) release_to_driver(backend_, info.segment);
  segments_.clear();
  if (leaked != 0) {
    log_message(LogLevel::kWarning,
                "caching allocator on %s destroyed with %zu live block(s); their memory was "
                "released anyway",
                backend_.device().str().c_str(), leaked);
  }
}

// =================================================================================================
// Fast path.

// The functions of the hit path are forced inline into allocate and deallocate, which then need
// no stack frame of their own; everything else is out of line (design/performance.md, "Measured
// choices in the code").
#define OCLVM_HOT [[gnu::always_inline]] inline

OCLVM_HOT Allocation CachingAllocator::mark_allocated(Block* block, size_t requested) {
  block->allocated = true;
  block->requested = requested;
  block->id = next_id_++;
  tracker_.on_allocate(block->pool, block->size, requested);
  if (oversize(block->size)) tracker_.on_oversize_allocation(block->pool, +1);

  Allocation allocation;
  allocation.ptr = reinterpret_cast<void*>(block->address);
  allocation.size = requested;
  allocation.segment = block->segment;
  allocation.offset = block->offset;
  allocation.id = block->id;
  allocation.block = block;
  return allocation;
}

// Note [Quick reuse]: handing out a parked block touches no index. A parked block is always a
// small-pool one, which the statistics calls below spell out.
OCLVM_HOT Allocation CachingAllocator::take_parked(Block*& head, size_t requested) {
  Block* block = head;
  head = block->parked_next;
  block->parked = false;
  --parked_count_;
  if (block->whole()) {
    whole_free_bytes_[stat_index(StatType::kSmallPool)] -= block->size;
  } else {
    tracker_.on_inactive_split(StatType::kSmallPool, -1, -static_cast<int64_t>(block->size));
  }
  return mark_allocated(block, requested);
}

// Note [Quick reuse]: the freed block goes on the list of its size, unmerged.
OCLVM_HOT void CachingAllocator::park(Block* block) {
  const size_t list = block->size >> quantum_shift_;
  block->parked = true;
  block->parked_next = parked_[list];
  parked_[list] = block;
  parked_bits_[list >> 6] |= uint64_t{1} << (list & 63);
  ++parked_count_;
  if (block->whole()) {
    whole_free_bytes_[stat_index(StatType::kSmallPool)] += block->size;
  } else {
    tracker_.on_inactive_split(StatType::kSmallPool, 1, static_cast<int64_t>(block->size));
  }
}

// Note [Handles checked by their record]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A handle names its block record (Allocation::block). The record is trusted only once
// is_record() has found it inside one of this allocator's record chunks, at a record boundary;
// only then is it read, and it must be allocated with the handle's id (unique per hand-out, so a
// stale handle to a block handed out again is refused), address, segment, offset and size. A
// double free, another allocator's handle or a forged one is refused without reading memory the
// allocator does not own. The chunks grow geometrically, so the search is a few comparisons.
OCLVM_HOT bool CachingAllocator::is_record(const void* record) const {
  const auto at = reinterpret_cast<uintptr_t>(record);
  for (auto chunk = block_chunks_.rbegin(); chunk != block_chunks_.rend(); ++chunk) {
    const uintptr_t from = reinterpret_cast<uintptr_t>(chunk->blocks.get());
    if (at - from < chunk->count * sizeof(Block)) return (at - from) % sizeof(Block) == 0;
  }
  return false;
}

OCLVM_HOT CachingAllocator::Block* CachingAllocator::find_live(const Allocation& allocation) const {
  if (is_record(allocation.block)) {
    const Block& b = *static_cast<const Block*>(allocation.block);
    if (b.allocated && b.address == reinterpret_cast<uintptr_t>(allocation.ptr) &&
        allocation.id == b.id && allocation.segment == b.segment &&
        allocation.offset == b.offset && allocation.size == b.requested) {
      return const_cast<Block*>(&b);
    }
  }
  throw_not_live(allocation);
}

void CachingAllocator::throw_not_live(const Allocation& allocation) const {
  throw InvalidArgument("Expected a live allocation of the caching allocator on " +
                        backend_.device().str() + ", but got address " +
                        hex(reinterpret_cast<uintptr_t>(allocation.ptr)) + " (id " +
                        std::to_string(allocation.id) +
                        "), which it does not hold: a double free, another allocator's handle or "
                        "a forged one");
}

// A parked hit (Note [Quick reuse]) costs a few loads and stores and the statistics; any other
// request goes to allocate_unparked.
Allocation CachingAllocator::allocate(size_t bytes) {
  if (bytes - 1 >= max_request_) [[unlikely]] {  // bytes == 0 wraps around
    if (bytes == 0) return {};
    throw_bad_size(bytes);  // InvalidArgument; nothing changed
  }
  const size_t size = rounded(bytes);
  if (size <= quick_until_) {
    Block*& head = parked_[size >> quantum_shift_];
    if (head != nullptr) return take_parked(head, bytes);
  }
  return allocate_unparked(bytes, size);
}

Allocation CachingAllocator::allocate_unparked(size_t bytes, size_t size) {
  // Take every record this call may need up front, so that nothing below can fail halfway
  // through a split (a std::bad_alloc here leaves the state as it was).
  if (spare_blocks_ == nullptr || spare_blocks_->next == nullptr) grow_block_pool();
  const StatType pool = pool_of_size(size);
  // Under a memory limit, where a block lands decides what fits later: a request that its parked
  // list cannot serve merges every parked block first (Note [Quick reuse]).
  if (parked_count_ != 0 && memory_limit_ != 0) flush_parked();
  Block* block = take_best_fit(pool, size);
  if (block == nullptr && parked_count_ != 0) {
    flush_parked();
    block = take_best_fit(pool, size);
  }
  if (block == nullptr) block = grow_and_take(pool, size, bytes);
  return mark_allocated(block, bytes);
}

// Cost: the handle check (Note [Handles checked by their record]) and the statistics. A block of
// at most quick_until_ bytes is parked (Note [Quick reuse]); any other goes to free_into_index.
void CachingAllocator::deallocate(const Allocation& allocation) {
  if (!allocation) return;
  Block* block = find_live(allocation);  // throws InvalidArgument; nothing changed yet
  tracker_.on_free(block->pool, block->size, block->requested);
  block->allocated = false;
  if (block->size <= quick_until_) {
    park(block);
    return;
  }
  free_into_index(block);
}

// Merges a freed block with its free neighbours, usually with no tree search at all (See Note
// [Free index updated in place]), otherwise with up to two erases and one insert (O(log free
// blocks)).
void CachingAllocator::free_into_index(Block* block) {
  if (oversize(block->size)) tracker_.on_oversize_allocation(block->pool, -1);
  FreeDelta delta;
  merge_into_index(block, delta);
  commit(block->pool, delta);
}

// roundup_power2_divisions: a quantum multiple `size` over step_from_ becomes the next of that many
// steps between the powers of two around it (a power of two stays).
size_t CachingAllocator::step_up(size_t size) const {
  if (is_power_of_two(size)) return size;
  // size > quantum * divisions (a power of two), so the step is a power of two >= the quantum.
  const size_t floor = std::bit_floor(size);
  const size_t step = floor / options_.roundup_power2_divisions;
  const size_t stepped = (size + step - 1) & ~(step - 1);
  return stepped <= max_request_ ? stepped : size;
}

// The hit path. Cost: one lower_bound in the pool's red-black tree (O(log free blocks)). Without a
// split, one erase. With a split, one pooled record, which usually takes over the chosen block's
// tree node in place (See Note [Free index updated in place]), otherwise one erase and one insert.
// No heap allocation.
CachingAllocator::Block* CachingAllocator::take_best_fit(StatType pool, size_t size) {
  FreeSet& free = free_set(pool);
  auto it = free.lower_bound(size, SizeOrder{});
  // Note [Segments kept whole]: a wholly free large segment more than three times the request is
  // passed over. Only such segments are skipped, so the walk is bounded by the pool's segments.
  if (pool == StatType::kLargePool && options_.keep_large_segments_whole) {
    while (it != free.end() && it->whole() && it->size - size > 2 * size) ++it;
  } else if (pool == StatType::kSmallPool && memory_limit_ != 0) {
    it = first_fit(free, it);
  }
  if (it == free.end()) return nullptr;
  Block* block = &*it;
  // Note [Oversize blocks]: the best fit is the smallest that fits, so when it is out of reach
  // every larger one is too.
  const bool whole = oversize(size);
  if (oversize(block->size) && (!whole || block->size - size > kOversizeSlack)) [[unlikely]] {
    return nullptr;
  }
  FreeDelta delta;
  note_leaving(block, delta);
  if (whole || block->size - size < quantum_) {
    free.erase(it);
    commit(pool, delta);
    return block;
  }
  Block* rest = split_off(block, size);
  // rest sorts below the block's old key (it is smaller), so it may take the block's node when it
  // still sorts above the block's predecessor.
  if (it == free.begin() || FreeOrder{}(*std::prev(it), *rest)) {
    free.replace_node(it, *rest);
  } else {
    free.erase(it);
    free.insert(*rest);
  }
  note_entering(rest, delta);
  commit(pool, delta);
  return block;
}

// Note [First fit under a limit]: of the blocks from `from` (the best fit) to the end of the
// size order, the one at the lowest (segment id, offset). O(free blocks of the pool).
CachingAllocator::FreeSet::iterator CachingAllocator::first_fit(FreeSet& free,
                                                                FreeSet::iterator from) {
  auto first = from;
  for (auto it = from; it != free.end(); ++it) {
    if (it->segment_id < first->segment_id ||
        (it->segment_id == first->segment_id && it->offset < first->offset)) {
      first = it;
    }
  }
  return first;
}

// Shortens `block` to `size` and links a new record for the rest right after it. Touches neither
// the free index nor the statistics.
CachingAllocator::Block* CachingAllocator::split_off(Block* block, size_t size) {
  OCLVM_DCHECK(block->size >= size + quantum_);
  Block* rest = new_block();
  rest->segment = block->segment;
  rest->segment_id = block->segment_id;
  rest->offset = block->offset + size;
  rest->address = block->address + size;
  rest->size = block->size - size;
  rest->pool = block->pool;
  rest->allocated = false;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next != nullptr) rest->next->prev = rest;
  block->next = rest;
  block->size = size;
  return rest;
}

// Cuts a block that is not in the free index (a new segment's) down to `size`, returning the rest
// to the free index when it is at least one quantum.
void CachingAllocator::carve(Block* block, size_t size) {
  OCLVM_DCHECK(!block->free_hook.is_linked() && block->size >= size);
  if (block->size - size < quantum_ || oversize(size)) return;
  insert_free(split_off(block, size));
}

// Puts a free block that is in no index (just freed, or leaving a quick-reuse list) into the free
// index of its pool, merged with the neighbours that are there.
void CachingAllocator::merge_into_index(Block* block, FreeDelta& delta) {
  Block* const prev = block->prev;
  Block* const next = block->next;
  const bool merge_prev = prev != nullptr && prev->indexed();
  const bool merge_next = next != nullptr && next->indexed();
  FreeSet& free = free_set(block->pool);

  if (merge_prev) {
    // prev absorbs the block (and next). Its key only grows, so it keeps its node when it still
    // sorts below its successor.
    note_leaving(prev, delta);
    if (merge_next) erase_free(next, delta);
    Block* const last = merge_next ? next : block;
    prev->size += block->size + (merge_next ? next->size : 0);
    prev->next = last->next;
    if (prev->next != nullptr) prev->next->prev = prev;
    recycle_block(block);
    if (merge_next) recycle_block(next);
    auto it = free.iterator_to(*prev);
    if (auto succ = std::next(it); succ != free.end() && !FreeOrder{}(*prev, *succ)) {
      free.erase(it);
      free.insert(*prev);
    }
    note_entering(prev, delta);
  } else if (merge_next) {
    // The block absorbs next and takes over its node when it still sorts below next's successor
    // (its key is larger than next's: same segment, larger size).
    note_leaving(next, delta);
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    auto it = free.iterator_to(*next);
    if (auto succ = std::next(it); succ == free.end() || FreeOrder{}(*block, *succ)) {
      free.replace_node(it, *block);
    } else {
      free.erase(it);
      free.insert(*block);
    }
    recycle_block(next);
    note_entering(block, delta);
  } else {
    free.insert(*block);
    note_entering(block, delta);
  }
}

size_t CachingAllocator::allocated_size(const Allocation& allocation) const {
  if (!allocation) return 0;
  return find_live(allocation)->size;
}

// Every free block that enters or leaves the free index is noted here, which keeps
// whole_free_bytes_ and gathers the change of the inactive-split statistics; commit() hands the
// net change of one operation to the tracker in one call (as PyTorch counts it: a split piece that
// only shrinks or grows changes inactive_split_bytes, not inactive_split). Leaving is noted before
// the block's neighbours or size change, entering after: whole() and size are those of the block
// as it sits in the index.
void CachingAllocator::note_entering(const Block* block, FreeDelta& delta) {
  if (block->whole()) {
    whole_free_bytes_[stat_index(block->pool)] += block->size;
  } else {
    delta.count += 1;
    delta.bytes += static_cast<int64_t>(block->size);
  }
}

void CachingAllocator::note_leaving(const Block* block, FreeDelta& delta) {
  if (block->whole()) {
    whole_free_bytes_[stat_index(block->pool)] -= block->size;
  } else {
    delta.count -= 1;
    delta.bytes -= static_cast<int64_t>(block->size);
  }
}

void CachingAllocator::commit(StatType pool, const FreeDelta& delta) {
  if (delta.count != 0 || delta.bytes != 0) {
    tracker_.on_inactive_split(pool, delta.count, delta.bytes);
  }
}

void CachingAllocator::insert_free(Block* block) {
  free_set(block->pool).insert(*block);
  FreeDelta delta;
  note_entering(block, delta);
  commit(block->pool, delta);
}

void CachingAllocator::erase_free(Block* block, FreeDelta& delta) {
  note_leaving(block, delta);
  FreeSet& free = free_set(block->pool);
  free.erase(free.iterator_to(*block));
}

CachingAllocator::Block* CachingAllocator::new_block() {
  OCLVM_DCHECK(spare_blocks_ != nullptr);  // allocate() keeps two in stock
  Block* block = spare_blocks_;
  spare_blocks_ = block->next;
  block->next = nullptr;
  return block;
}

void CachingAllocator::recycle_block(Block* block) {
  OCLVM_DCHECK(!block->free_hook.is_linked() && !block->allocated && !block->parked);
  block->segment = nullptr;
  block->prev = nullptr;
  block->next = spare_blocks_;
  spare_blocks_ = block;
}

// An allocation needs at most two records (a new segment's block and a split remainder).
void CachingAllocator::grow_block_pool() {
  const size_t count =
      block_chunks_.empty() ? kFirstChunkBlocks
                            : std::min(block_chunks_.back().count * 2, kMaxChunkBlocks);
  BlockChunk chunk{std::make_unique<Block[]>(count), count};
  block_chunks_.reserve(block_chunks_.size() + 1);  // may throw; then nothing changed
  for (size_t i = 0; i < count; ++i) {
    chunk.blocks[i].next = i + 1 < count ? &chunk.blocks[i + 1] : spare_blocks_;
  }
  spare_blocks_ = &chunk.blocks[0];
  block_chunks_.push_back(std::move(chunk));
}

// =================================================================================================
// Introspection and invariants.

size_t CachingAllocator::cached_bytes() const {
  return static_cast<size_t>(tracker_.reserved_bytes() - tracker_.allocated_bytes());
}

size_t CachingAllocator::largest_free_block() const {
  size_t largest = 0;
  for (size_t list = parked_.size(); list-- > 0;) {
    if (parked_[list] != nullptr) {
      largest = list << quantum_shift_;
      break;
    }
  }
  if (!small_free_.empty()) largest = std::max(largest, small_free_.rbegin()->size);
  if (!large_free_.empty()) largest = std::max(largest, large_free_.rbegin()->size);
  return largest;
}

void CachingAllocator::check_invariants() const {
  tracker_.check_invariants();
  struct Totals {
    int64_t segments = 0, reserved = 0, allocations = 0, allocated = 0, requested = 0;
    int64_t split_count = 0, split_bytes = 0, free_blocks = 0, whole_free = 0;
    int64_t oversize_allocations = 0, oversize_segments = 0;
  };
  std::array<Totals, kNumStatTypes> totals{};
  size_t parked_blocks = 0;

  for (const auto& [id, info] : segments_) {
    const Segment* segment = info.segment;
    OCLVM_DCHECK(segment != nullptr && segment->id == id && segment->owner == this);
    OCLVM_DCHECK(segment->backend == &backend_);
    OCLVM_DCHECK(segment->size % quantum_ == 0);
    Totals& t = totals[stat_index(info.pool)];
    ++t.segments;
    t.reserved += static_cast<int64_t>(segment->size);
    if (oversize(segment->size)) ++t.oversize_segments;

    size_t expected_offset = 0;
    const Block* prev = nullptr;
    for (const Block* b = info.first; b != nullptr; prev = b, b = b->next) {
      OCLVM_DCHECK(b->prev == prev);
      OCLVM_DCHECK(b->segment == segment && b->segment_id == segment->id);
      OCLVM_DCHECK(b->pool == info.pool);
      OCLVM_DCHECK(b->offset == expected_offset);
      OCLVM_DCHECK(b->address == segment->address + b->offset);
      OCLVM_DCHECK(b->size > 0 && b->size % quantum_ == 0 && b->offset % quantum_ == 0);
      expected_offset += b->size;
      OCLVM_DCHECK(expected_offset <= segment->size);
      OCLVM_DCHECK(is_record(b));
      if (b->allocated) {
        OCLVM_DCHECK(!b->parked && !b->free_hook.is_linked());
        OCLVM_DCHECK(b->requested > 0 && b->requested <= b->size);
        ++t.allocations;
        t.allocated += static_cast<int64_t>(b->size);
        t.requested += static_cast<int64_t>(b->requested);
        if (oversize(b->size)) ++t.oversize_allocations;
      } else if (b->parked) {
        OCLVM_DCHECK(!b->free_hook.is_linked());
        OCLVM_DCHECK(b->pool == StatType::kSmallPool && b->size <= quick_until_);
        ++parked_blocks;
      } else {
        OCLVM_DCHECK(b->free_hook.is_linked());
        OCLVM_DCHECK(prev == nullptr || !prev->indexed());  // no two neighbours in the index
        const FreeSet& free = free_set(b->pool);
        auto it = free.find(*b);
        OCLVM_DCHECK(it != free.end() && &*it == b);
        ++t.free_blocks;
      }
      if (!b->allocated) {
        if (b->whole()) {
          t.whole_free += static_cast<int64_t>(b->size);
        } else {
          ++t.split_count;
          t.split_bytes += static_cast<int64_t>(b->size);
        }
      }
    }
    OCLVM_DCHECK(expected_offset == segment->size);
  }

  // Note [Quick reuse]: every parked block is on the list of its size, and that list's bit is set.
  OCLVM_DCHECK(parked_count_ == parked_blocks);
  size_t listed = 0;
  for (size_t list = 0; list < parked_.size(); ++list) {
    if (parked_[list] != nullptr) OCLVM_DCHECK((parked_bits_[list >> 6] >> (list & 63)) & 1);
    for (const Block* b = parked_[list]; b != nullptr; b = b->parked_next) {
      OCLVM_DCHECK(b->parked && !b->allocated && b->size == list << quantum_shift_);
      ++listed;
    }
  }
  OCLVM_DCHECK(listed == parked_blocks);
  const DeviceStats s = tracker_.stats();
  for (StatType pool : {StatType::kSmallPool, StatType::kLargePool}) {
    const size_t p = stat_index(pool);
    const Totals& t = totals[p];
    OCLVM_DCHECK(free_set(pool).size() == static_cast<size_t>(t.free_blocks));
    const Block* before = nullptr;  // the index is strictly ordered by (size, segment id, offset)
    for (const Block& b : free_set(pool)) {
      OCLVM_DCHECK(!b.allocated && b.pool == pool);
      OCLVM_DCHECK(before == nullptr || FreeOrder{}(*before, b));
      before = &b;
    }
    OCLVM_DCHECK(static_cast<int64_t>(whole_free_bytes_[p]) == t.whole_free);
    OCLVM_DCHECK(s.segment[p].current == t.segments);
    OCLVM_DCHECK(s.reserved_bytes[p].current == t.reserved);
    OCLVM_DCHECK(s.allocation[p].current == t.allocations);
    OCLVM_DCHECK(s.active[p].current == t.allocations);
    OCLVM_DCHECK(s.allocated_bytes[p].current == t.allocated);
    OCLVM_DCHECK(s.active_bytes[p].current == t.allocated);
    OCLVM_DCHECK(s.requested_bytes[p].current == t.requested);
    OCLVM_DCHECK(s.inactive_split[p].current == t.split_count);
    OCLVM_DCHECK(s.inactive_split_bytes[p].current == t.split_bytes);
    OCLVM_DCHECK(s.oversize_allocations[p].current == t.oversize_allocations);
    OCLVM_DCHECK(s.oversize_segments[p].current == t.oversize_segments);
  }
  OCLVM_DCHECK(segments_.size() == static_cast<size_t>(s.segment.aggregate().current));
  if (memory_limit_ != 0) {
    OCLVM_DCHECK(static_cast<uint64_t>(s.reserved_bytes.aggregate().current) <=
                 std::max(memory_limit_, reserved_over_limit_));
  }
}

std::vector<SegmentSnapshot> CachingAllocator::segments() const {
  std::vector<SegmentSnapshot> out;
  out.reserve(segments_.size());
  for (const auto& [id, info] : segments_) {
    SegmentSnapshot segment{info.segment->address, info.segment->size,
                            info.pool == StatType::kSmallPool, {}};
    for (const Block* b = info.first; b != nullptr; b = b->next) {
      segment.blocks.push_back(
          {b->address, b->size, b->allocated ? b->requested : 0, b->allocated, nullptr});
    }
    out.push_back(std::move(segment));
  }
  sort_by_address(out);
  return out;
}

}  // namespace oclvm
