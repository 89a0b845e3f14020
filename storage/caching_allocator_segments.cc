// storage/caching_allocator_segments.cc — CachingAllocator's slow path: sizing and creating
// segments, the out-of-memory ladder, merging parked blocks back, empty_cache and
// collect_garbage, releasing segments and the memory limit. The hit path and the block records
// are in caching_allocator.cc; storage/caching_allocator.h holds the policy notes.
#include "oclvm/storage/caching_allocator.h"

#include <algorithm>
#include <iterator>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"

namespace oclvm {

void CachingAllocator::throw_bad_size(size_t bytes) const {
  const uint64_t max_alloc = backend_.properties().max_alloc_bytes;
  if (bytes > max_alloc) {
    throw InvalidArgument("Expected an allocation of at most " + std::to_string(max_alloc) +
                          " bytes (the largest single allocation of " + backend_.device().str() +
                          "), but got " + std::to_string(bytes) + " bytes");
  }
  throw InvalidArgument("Expected an allocation that fits the largest single allocation of " +
                        backend_.device().str() + " (" + std::to_string(max_alloc) +
                        " bytes) once rounded to " + std::to_string(quantum_) +
                        " bytes, but got " + std::to_string(bytes) + " bytes");
}

// Segment bytes for a request of `size` (already rounded and <= max_alloc_bytes). A multiple of
// the quantum, so that every block of the segment stays aligned.
size_t CachingAllocator::segment_size_for(StatType pool, size_t size) const {
  const size_t max_alloc =
      static_cast<size_t>(backend_.properties().max_alloc_bytes) & ~(quantum_ - 1);
  size_t bytes;
  if (pool == StatType::kSmallPool) {
    bytes = std::max(options_.small_segment_bytes, size);
    bytes = (bytes + quantum_ - 1) / quantum_ * quantum_;
  } else {
    const size_t round = std::max(options_.large_segment_round, quantum_);
    bytes = size > SIZE_MAX - (round - 1) ? max_alloc : (size + round - 1) & ~(round - 1);
  }
  return std::min(bytes, std::max(max_alloc, size));
}

uint64_t CachingAllocator::whole_free_bytes() const {
  return whole_free_bytes_[stat_index(StatType::kSmallPool)] +
         whole_free_bytes_[stat_index(StatType::kLargePool)];
}

// Nothing in the pool fits: create a segment (Note [Out-of-memory ladder], Note [Segments that
// fit under a limit]) and carve the block from it.
CachingAllocator::Block* CachingAllocator::grow_and_take(StatType pool, size_t size,
                                                         size_t requested) {
  size_t segment_bytes = segment_size_for(pool, size);
  const uint64_t limit = memory_limit_;
  const auto reserved = [&] {
    return static_cast<uint64_t>(tracker_.reserved_bytes());
  };

  // Under a limit, decide before touching anything whether even an empty cache could make room
  // for the block itself.
  if (limit != 0 && reserved() - whole_free_bytes() + size > limit) {
    throw_out_of_memory(requested, size, "");
  }
  if (pool == StatType::kLargePool && options_.release_unfit_on_grow) {
    release_unfit_segments(segment_bytes);
  }
  if (limit != 0 && options_.garbage_collection_threshold > 0.0) {
    collect_garbage(static_cast<uint64_t>(options_.garbage_collection_threshold *
                                          static_cast<double>(limit)),
                    segment_bytes);
  }
  bool retried = false;
  if (limit != 0 && reserved() + segment_bytes > limit) {
    if (reserved() + size > limit) {
      empty_cache();
      tracker_.on_alloc_retry();
      retried = true;
      // The check above guaranteed that an empty cache makes room for the block.
      OCLVM_DCHECK(reserved() + size <= limit);
    }
    segment_bytes = std::max(size, fitting_segment_bytes(limit - reserved(), segment_bytes));
  }
  Segment* segment = create_segment_or_throw(segment_bytes, requested, &retried);
  Block* block = adopt_segment(segment, pool);
  carve(block, size);
  return block;
}

// Note [Segments that fit under a limit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A segment of the usual size (small_segment_bytes, or the request rounded up to
// large_segment_round) may not fit under the memory limit although the request does. The
// allocator then makes the largest segment that fits, a multiple of the quantum and at least the
// request, without emptying the cache when the room is there already; only when even the request
// does not fit the room left does it give back the wholly free segments first (the ladder). So an
// out-of-memory error under a limit means the bytes are not there, not that the segment size is
// too coarse.
size_t CachingAllocator::fitting_segment_bytes(uint64_t room, size_t usual) const {
  const uint64_t fitting = room & ~static_cast<uint64_t>(quantum_ - 1);
  return fitting < usual ? static_cast<size_t>(fitting) : usual;
}

// Asks the backend for a segment; on the driver's out-of-memory, empties the cache and asks once
// more (unless that was already done for the limit).
Segment* CachingAllocator::create_segment_or_throw(size_t segment_bytes, size_t requested,
                                                   bool* retried) {
  try {
    return backend_.create_segment(segment_bytes);
  } catch (const OutOfMemoryError& e) {
    if (*retried || whole_free_bytes() == 0) {
      throw_out_of_memory(requested, segment_bytes, e.what());
    }
  }
  empty_cache();
  tracker_.on_alloc_retry();
  *retried = true;
  try {
    return backend_.create_segment(segment_bytes);
  } catch (const OutOfMemoryError& e) {
    throw_out_of_memory(requested, segment_bytes, e.what());
  }
}

void CachingAllocator::throw_out_of_memory(size_t requested, size_t segment_bytes,
                                           const std::string& driver_message) {
  tracker_.on_oom();
  const DeviceStats s = tracker_.stats();
  const auto allocated = static_cast<uint64_t>(s.allocated_bytes.aggregate().current);
  const auto reserved = static_cast<uint64_t>(s.reserved_bytes.aggregate().current);
  const std::string limit = memory_limit_ != 0
                                ? "limit " + format_bytes(memory_limit_)
                                : std::string("no limit");
  std::string message = "Out of memory on " + backend_.device().str() + ": tried to allocate " +
                        format_bytes(requested) + " (" + std::to_string(requested) + " bytes); " +
                        limit + ", " + format_bytes(allocated) + " allocated, " +
                        format_bytes(reserved) +
                        " reserved by oclvm's caching allocator (it needed a new segment of " +
                        format_bytes(segment_bytes) + ")";
  if (!driver_message.empty()) message += "; the driver said: " + driver_message;
  throw OutOfMemoryError(message);
}

// Takes ownership of a fresh segment: one free block covering it, not in the free index (the
// caller carves it at once).
CachingAllocator::Block* CachingAllocator::adopt_segment(Segment* segment, StatType pool) {
  Block* block = new_block();
  try {
    segments_.emplace(segment->id, SegmentInfo{segment, block, pool});
  } catch (...) {  // std::bad_alloc: hold nothing
    recycle_block(block);
    backend_.release_segment(segment);
    throw;
  }
  segment->owner = this;
  block->segment = segment;
  block->segment_id = segment->id;
  block->address = segment->address;
  block->offset = 0;
  block->size = segment->size;
  block->pool = pool;
  block->allocated = false;
  block->prev = nullptr;
  block->next = nullptr;
  tracker_.on_segment_create(pool, segment->size);
  reserved_high_water_ =
      std::max(reserved_high_water_, static_cast<uint64_t>(tracker_.reserved_bytes()));
  if (oversize(segment->size)) tracker_.on_oversize_segment(pool, +1);
  return block;
}

// Note [Quick reuse]: merges every parked block into the free index, in size order.
// O(parked blocks + lists / 64).
void CachingAllocator::flush_parked() {
  for (size_t word = 0; word < parked_bits_.size() && parked_count_ != 0; ++word) {
    for (uint64_t bits = parked_bits_[word]; bits != 0; bits &= bits - 1) {
      Block*& head = parked_[word * 64 + static_cast<size_t>(std::countr_zero(bits))];
      while (Block* block = head) {
        head = block->parked_next;
        block->parked = false;
        --parked_count_;
        FreeDelta delta;
        note_leaving(block, delta);
        merge_into_index(block, delta);
        commit(StatType::kSmallPool, delta);
      }
    }
    parked_bits_[word] = 0;
  }
}

void CachingAllocator::empty_cache() {
  flush_parked();
  release_free_segments(StatType::kSmallPool);
  release_free_segments(StatType::kLargePool);
}

// garbage_collection_threshold: gives back wholly free segments, the oldest (lowest id) first,
// until `incoming` more bytes would keep reserved bytes at or under `threshold`.
// O(segments log segments), only on the way to a new segment.
void CachingAllocator::collect_garbage(uint64_t threshold, size_t incoming) {
  auto reserved = [&] {
    return static_cast<uint64_t>(
        tracker_.reserved_bytes());
  };
  if (reserved() + incoming <= threshold) return;
  flush_parked();
  if (whole_free_bytes() == 0) return;
  std::vector<Block*> whole_free;  // segments_ is ordered by id: the oldest come first
  for (auto& [id, info] : segments_) {
    Block* first = info.first;
    if (first->whole() && first->indexed()) whole_free.push_back(first);
  }
  for (Block* block : whole_free) {
    if (reserved() + incoming <= threshold) break;
    release_segment(block);
  }
}

// Note [Unfit segments given back]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Before a large segment of `incoming` bytes is made, best fit has found no wholly free large
// segment it could take: each is too small, or more than three times the request (Note
// [Segments kept whole]). Giving them back lowers what is reserved, but a later request of their
// size then costs a driver allocation again. So they go back, the largest first, only as far as
// keeps reserved bytes at or under the most the allocator has held before (reserved_high_water_);
// when the new segment raises that mark anyway, every one of them goes back. O(free large
// blocks).
void CachingAllocator::release_unfit_segments(size_t incoming) {
  if (whole_free_bytes_[stat_index(StatType::kLargePool)] == 0) return;
  const auto over = [&] {
    return static_cast<uint64_t>(tracker_.reserved_bytes()) + incoming > reserved_high_water_;
  };
  FreeSet& free = large_free_;
  // `it` follows the last block kept; erasing the block before it leaves it valid.
  for (auto it = free.end(); it != free.begin() && over();) {
    const auto block = std::prev(it);
    if (block->whole()) {
      release_segment(&*block);
    } else {
      it = block;
    }
  }
}

// Gives back every wholly free segment of `pool`. O(free blocks of the pool).
void CachingAllocator::release_free_segments(StatType pool) {
  if (whole_free_bytes_[stat_index(pool)] == 0) return;
  FreeSet& free = free_set(pool);
  for (auto it = free.begin(); it != free.end();) {
    Block* block = &*it;
    ++it;
    if (block->whole()) release_segment(block);
  }
}

void CachingAllocator::release_segment(Block* whole_block) {
  OCLVM_DCHECK(whole_block->whole() && whole_block->indexed());
  FreeDelta delta;
  erase_free(whole_block, delta);
  OCLVM_DCHECK(delta.count == 0 && delta.bytes == 0);  // a whole segment is no split piece
  Segment* segment = whole_block->segment;
  tracker_.on_segment_release(whole_block->pool, segment->size);
  if (oversize(segment->size)) tracker_.on_oversize_segment(whole_block->pool, -1);
  segments_.erase(segment->id);
  recycle_block(whole_block);
  release_to_driver(backend_, segment);
  if (reserved_over_limit_ != 0) note_reserved_over_limit();
}

void CachingAllocator::set_memory_limit(uint64_t bytes) {
  memory_limit_ = bytes;
  reserved_over_limit_ = 0;
  note_reserved_over_limit();
  if (reserved_over_limit_ != 0) empty_cache();
}

void CachingAllocator::note_reserved_over_limit() {
  const auto reserved = static_cast<uint64_t>(
      tracker_.reserved_bytes());
  reserved_over_limit_ = memory_limit_ != 0 && reserved > memory_limit_ ? reserved : 0;
}

}  // namespace oclvm
