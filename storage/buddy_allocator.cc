// storage/buddy_allocator.cc — power-of-two splits, buddy merges and the arena slow path.
#include "oclvm/storage/buddy_allocator.h"

#include <algorithm>
#include <array>
#include <bit>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/system_allocator.h"

namespace oclvm {
namespace {

constexpr size_t kMinBlockFloor = 512;  // the contract's alignment (storage/allocator.h)

bool is_power_of_two(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

uint64_t reserved_bytes(const DeviceStatsTracker& tracker) {
  return static_cast<uint64_t>(tracker.reserved_bytes());
}

}  // namespace

BuddyAllocator::BuddyAllocator(MemoryBackend& backend, const BuddyAllocatorOptions& options)
    : BackendAllocator(backend, options.memory_limit) {
  const DeviceProperties& properties = backend.properties();
  const std::string on = " on " + backend.device().str();
  if (!is_power_of_two(options.min_block) || options.min_block < kMinBlockFloor) {
    throw InvalidArgument(
        "Expected BuddyAllocatorOptions::min_block to be a power of two of at least " +
        std::to_string(kMinBlockFloor) + " bytes" + on + ", but got " +
        std::to_string(options.min_block));
  }
  min_block_ = options.min_block;
  if (properties.base_addr_align_bytes > min_block_) {
    min_block_ = std::bit_ceil(properties.base_addr_align_bytes);
  }
  const uint64_t max_alloc = properties.max_alloc_bytes;
  if (max_alloc < min_block_) {
    throw InvalidArgument("Expected a device whose largest allocation holds at least one " +
                          std::to_string(min_block_) + "-byte block" + on + ", but got " +
                          std::to_string(max_alloc) + " bytes");
  }
  if (!is_power_of_two(options.arena_bytes) || options.arena_bytes < min_block_ ||
      options.arena_bytes > max_alloc) {
    throw InvalidArgument(
        "Expected BuddyAllocatorOptions::arena_bytes to be a power of two between " +
        std::to_string(min_block_) + " and " + std::to_string(max_alloc) +
        " bytes (the smallest block and the largest allocation" + on + "), but got " +
        std::to_string(options.arena_bytes));
  }
  arena_bytes_ = options.arena_bytes;
  max_order_ = std::countr_zero(std::bit_floor(max_alloc)) - std::countr_zero(min_block_);
  OCLVM_DCHECK(max_order_ >= 0 && max_order_ < 64);
  free_.resize(static_cast<size_t>(max_order_) + 1);
}

BuddyAllocator::~BuddyAllocator() {
  for (auto& [id, arena] : arenas_) release_to_driver(backend_, arena->segment);
}

int BuddyAllocator::order_for(size_t bytes) const {
  const uint64_t max_alloc = backend_.properties().max_alloc_bytes;
  if (bytes > max_alloc) {
    throw InvalidArgument("Expected an allocation of at most " + std::to_string(max_alloc) +
                          " bytes (the largest single allocation of " + device().str() +
                          "), but got " + std::to_string(bytes) + " bytes");
  }
  const size_t largest_block = block_size(max_order_);
  if (bytes > largest_block) {
    throw InvalidArgument(
        "Expected an allocation of at most " + std::to_string(largest_block) +
        " bytes (the largest power of two " + device().str() +
        " can allocate; the buddy allocator rounds up to powers of two), but got " +
        std::to_string(bytes) + " bytes");
  }
  const size_t size = std::bit_ceil(std::max(bytes, min_block_));
  return std::countr_zero(size) - std::countr_zero(min_block_);
}

// --- fast path ---------------------------------------------------------------------------------

int BuddyAllocator::smallest_free_order(int order) const {
  const uint64_t candidates = nonempty_orders_ & (~uint64_t{0} << order);
  return candidates == 0 ? -1 : std::countr_zero(candidates);
}

std::pair<BuddyAllocator::Arena*, size_t> BuddyAllocator::take_and_split(int from, int order) {
  auto it = free_[static_cast<size_t>(from)].begin();
  Arena* arena = it->second;
  const size_t offset = it->first.offset;
  erase_free(it, from);
  // Keep the lower half each time; the upper half becomes a free block one order down.
  for (int k = from; k > order; --k) insert_free(arena, offset + block_size(k - 1), k - 1);
  return {arena, offset};
}

Allocation BuddyAllocator::allocate(size_t bytes) {
  if (bytes == 0) return {};
  const int order = order_for(bytes);
  int from = smallest_free_order(order);
  if (from < 0) {
    add_arena(order, bytes);
    from = smallest_free_order(order);
    OCLVM_DCHECK(from >= 0);
  }
  auto [arena, offset] = take_and_split(from, order);
  ++arena->live_blocks;
  const uint64_t id = next_id_;
  const uintptr_t address = arena->segment->address + offset;
  try {
    live_.emplace(address, LiveBlock{arena, offset, order, bytes, id});
  } catch (...) {  // host memory ran out: merge the block back, hand out nothing
    release_block(arena, offset, order);
    throw;
  }
  ++next_id_;
  const size_t size = block_size(order);
  tracker_.on_allocate(pool_of_size(size), size, bytes);

  Allocation allocation;
  allocation.ptr = reinterpret_cast<void*>(address);
  allocation.size = bytes;
  allocation.segment = arena->segment;
  allocation.offset = offset;
  allocation.id = id;
  allocation.block = arena;
  return allocation;
}

const BuddyAllocator::LiveBlock& BuddyAllocator::live_block_of(const Allocation& allocation) const {
  auto it = live_.find(reinterpret_cast<uintptr_t>(allocation.ptr));
  if (it == live_.end()) {
    throw InvalidArgument(invalid_handle_message(
        *this, allocation,
        "no live allocation starts there (already freed, or not from this allocator)"));
  }
  const LiveBlock& block = it->second;
  if (allocation.segment != block.arena->segment || allocation.offset != block.offset ||
      allocation.id != block.id || allocation.size != block.requested ||
      allocation.block != block.arena) {
    throw InvalidArgument(invalid_handle_message(
        *this, allocation,
        "its fields do not match the live allocation at that address (id " +
            std::to_string(block.id) + ", size " + std::to_string(block.requested) + ")"));
  }
  return block;
}

void BuddyAllocator::deallocate(const Allocation& allocation) {
  if (!allocation) return;
  const LiveBlock block = live_block_of(allocation);
  live_.erase(reinterpret_cast<uintptr_t>(allocation.ptr));
  tracker_.on_free(pool_of_size(block_size(block.order)), block_size(block.order), block.requested);
  release_block(block.arena, block.offset, block.order);
}

void BuddyAllocator::release_block(Arena* arena, size_t offset, int order) {
  --arena->live_blocks;
  // Merge with the buddy while it is free at the same order; the merged block starts at the lower
  // of the two offsets.
  while (order < arena->order) {
    const size_t size = block_size(order);
    FreeList& list = free_[static_cast<size_t>(order)];
    auto buddy = list.find(FreeKey{arena->segment->id, offset ^ size});
    if (buddy == list.end()) break;
    erase_free(buddy, order);
    offset &= ~size;
    ++order;
  }
  insert_free(arena, offset, order);
  OCLVM_DCHECK((arena->live_blocks == 0) == (order == arena->order));
}

size_t BuddyAllocator::allocated_size(const Allocation& allocation) const {
  if (!allocation) return 0;
  return block_size(live_block_of(allocation).order);
}

// --- free lists --------------------------------------------------------------------------------

void BuddyAllocator::count_inactive_split(const Arena& arena, int order, int sign) {
  if (order == arena.order) return;  // a whole arena is cached, not a fragment
  const size_t size = block_size(order);
  tracker_.on_inactive_split(pool_of_size(size), sign, sign * static_cast<int64_t>(size));
}

void BuddyAllocator::insert_free(Arena* arena, size_t offset, int order) {
  free_[static_cast<size_t>(order)].emplace(FreeKey{arena->segment->id, offset}, arena);
  nonempty_orders_ |= uint64_t{1} << order;
  count_inactive_split(*arena, order, +1);
}

void BuddyAllocator::erase_free(FreeList::iterator it, int order) {
  count_inactive_split(*it->second, order, -1);
  FreeList& list = free_[static_cast<size_t>(order)];
  list.erase(it);
  if (list.empty()) nonempty_orders_ &= ~(uint64_t{1} << order);
}

// --- slow path: arenas and the out-of-memory ladder ---------------------------------------------

// Note [Arenas under a memory limit]
// An ordinary arena (arena_bytes) may not fit in what is left under the memory limit although the
// block that is asked for would. Then the new arena is the largest power of two that fits in what
// is left (never smaller than the block), so a limit below arena_bytes still lets every byte under
// it be used, in smaller arenas. Only when even the block does not fit does the out-of-memory
// ladder run.
size_t BuddyAllocator::arena_size_for(int order) const {
  const size_t block = block_size(order);
  const size_t ordinary = std::max(arena_bytes_, block);
  if (memory_limit_ == 0) return ordinary;
  const uint64_t reserved = reserved_bytes(tracker_);
  const uint64_t left = reserved < memory_limit_ ? memory_limit_ - reserved : 0;
  if (ordinary <= left) return ordinary;
  if (block > left) return 0;
  return static_cast<size_t>(std::bit_floor(left));
}

void BuddyAllocator::set_memory_limit(uint64_t bytes) {
  memory_limit_ = bytes;
  if (bytes != 0 && reserved_bytes(tracker_) > bytes) empty_cache();
}

uint64_t BuddyAllocator::cached_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [id, arena] : arenas_) {
    if (arena->live_blocks == 0) bytes += arena->size;
  }
  return bytes;
}

void BuddyAllocator::fail_out_of_memory(size_t requested, size_t arena_bytes,
                                        const std::string& cause) {
  tracker_.on_oom();
  throw OutOfMemoryError(out_of_memory_message(device(), requested, arena_bytes, memory_limit_,
                                               tracker_.stats(), cause));
}

void BuddyAllocator::add_arena(int order, size_t requested) {
  bool emptied_cache = false;
  size_t size = arena_size_for(order);
  if (size == 0) {
    // Even the block is over the limit. Emptying the cache helps only if it brings it under.
    const uint64_t reserved = reserved_bytes(tracker_);
    const uint64_t left = reserved < memory_limit_ ? memory_limit_ - reserved : 0;
    const uint64_t cached = cached_bytes();
    if (cached == 0 || block_size(order) > left + cached) {
      fail_out_of_memory(requested, block_size(order),
                         "only " + format_bytes(left) + " left under the memory limit (" +
                             format_bytes(cached) + " of it cached in free arenas)");
    }
    empty_cache();
    emptied_cache = true;
    tracker_.on_alloc_retry();
    size = arena_size_for(order);
    OCLVM_DCHECK(size != 0);
  }
  Segment* segment = nullptr;
  try {
    segment = backend_.create_segment(size);
  } catch (const OutOfMemoryError& refused) {
    if (emptied_cache || cached_bytes() == 0) {
      fail_out_of_memory(requested, size, std::string("a refusal: ") + refused.what());
    }
    empty_cache();
    emptied_cache = true;
    tracker_.on_alloc_retry();
    try {
      segment = backend_.create_segment(size);
    } catch (const OutOfMemoryError& refused_again) {
      fail_out_of_memory(requested, size, std::string("a refusal: ") + refused_again.what());
    }
  }
  segment->owner = this;
  auto arena = std::make_unique<Arena>();
  arena->segment = segment;
  arena->size = size;
  arena->order = std::countr_zero(size) - std::countr_zero(min_block_);
  Arena* raw = arena.get();
  bool registered = false;
  try {
    arenas_.emplace(segment->id, std::move(arena));
    registered = true;
    insert_free(raw, 0, raw->order);  // a whole arena: no statistic moves
  } catch (...) {                     // host memory ran out: hold nothing
    if (registered) arenas_.erase(segment->id);
    backend_.release_segment(segment);
    throw;
  }
  tracker_.on_segment_create(pool_of_size(size), size);
}

void BuddyAllocator::empty_cache() {
  for (auto it = arenas_.begin(); it != arenas_.end();) {
    Arena& arena = *it->second;
    if (arena.live_blocks != 0) {
      ++it;
      continue;
    }
    FreeList& list = free_[static_cast<size_t>(arena.order)];
    auto whole = list.find(FreeKey{arena.segment->id, 0});
    OCLVM_DCHECK(whole != list.end());
    erase_free(whole, arena.order);
    tracker_.on_segment_release(pool_of_size(arena.size), arena.size);
    release_to_driver(backend_, arena.segment);
    it = arenas_.erase(it);
  }
}

// --- inspection --------------------------------------------------------------------------------

std::vector<BuddyFreeBlock> BuddyAllocator::free_blocks() const {
  std::vector<BuddyFreeBlock> blocks;
  for (size_t k = 0; k < free_.size(); ++k) {
    for (const auto& [key, arena] : free_[k]) {
      blocks.push_back({key.arena_id, key.offset, block_size(static_cast<int>(k))});
    }
  }
  std::sort(blocks.begin(), blocks.end(), [](const BuddyFreeBlock& a, const BuddyFreeBlock& b) {
    return a.arena != b.arena ? a.arena < b.arena : a.offset < b.offset;
  });
  return blocks;
}

void BuddyAllocator::check_invariants() const {
  tracker_.check_invariants();

  struct Piece {
    size_t offset;
    size_t size;
  };
  std::map<uint64_t, std::vector<Piece>> pieces;  // arena id -> its blocks, free and live
  std::map<uint64_t, size_t> live_in_arena;
  int64_t allocation[kNumStatTypes] = {}, allocated[kNumStatTypes] = {},
          requested[kNumStatTypes] = {};
  int64_t segment[kNumStatTypes] = {}, reserved[kNumStatTypes] = {};
  int64_t split[kNumStatTypes] = {}, split_bytes[kNumStatTypes] = {};
  auto pools_of = [](size_t bytes) {
    return std::array<size_t, 2>{stat_index(StatType::kAggregate),
                                 stat_index(pool_of_size(bytes))};
  };

  for (int k = 0; k < 64; ++k) {
    const bool nonempty = k <= max_order_ && !free_[static_cast<size_t>(k)].empty();
    OCLVM_DCHECK(((nonempty_orders_ >> k) & 1) == (nonempty ? 1u : 0u));
  }
  for (int k = 0; k <= max_order_; ++k) {
    const size_t size = block_size(k);
    const FreeList& list = free_[static_cast<size_t>(k)];
    for (const auto& [key, arena] : list) {
      auto owner = arenas_.find(key.arena_id);
      OCLVM_DCHECK(owner != arenas_.end() && owner->second.get() == arena);
      OCLVM_DCHECK(k <= arena->order);
      // A free block whose buddy is free at the same order should have been merged.
      if (k < arena->order) {
        OCLVM_DCHECK(list.count(FreeKey{key.arena_id, key.offset ^ size}) == 0);
        for (size_t pool : pools_of(size)) {
          split[pool] += 1;
          split_bytes[pool] += static_cast<int64_t>(size);
        }
      }
      pieces[key.arena_id].push_back({key.offset, size});
    }
  }
  for (const auto& [address, block] : live_) {
    const size_t size = block_size(block.order);
    OCLVM_DCHECK(address == block.arena->segment->address + block.offset);
    OCLVM_DCHECK(block.requested > 0 && block.requested <= size);
    OCLVM_DCHECK(block.order == 0 || block.requested > block_size(block.order - 1));
    OCLVM_DCHECK(block.id > 0 && block.id < next_id_);
    pieces[block.arena->segment->id].push_back({block.offset, size});
    live_in_arena[block.arena->segment->id] += 1;
    for (size_t pool : pools_of(size)) {
      allocation[pool] += 1;
      allocated[pool] += static_cast<int64_t>(size);
      requested[pool] += static_cast<int64_t>(block.requested);
    }
  }
  for (const auto& [id, arena] : arenas_) {
    OCLVM_DCHECK(arena->segment->id == id);
    OCLVM_DCHECK(arena->segment->owner == this);
    OCLVM_DCHECK(arena->segment->size == arena->size);
    OCLVM_DCHECK(arena->size == block_size(arena->order));
    OCLVM_DCHECK(live_in_arena[id] == arena->live_blocks);
    std::vector<Piece>& blocks = pieces[id];
    std::sort(blocks.begin(), blocks.end(),
              [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    size_t expected = 0;
    for (const Piece& piece : blocks) {
      OCLVM_DCHECK(piece.offset == expected);
      OCLVM_DCHECK(piece.offset % piece.size == 0);
      expected += piece.size;
    }
    OCLVM_DCHECK(expected == arena->size);
    if (arena->live_blocks == 0) OCLVM_DCHECK(blocks.size() == 1);
    for (size_t pool : pools_of(arena->size)) {
      segment[pool] += 1;
      reserved[pool] += static_cast<int64_t>(arena->size);
    }
  }
  OCLVM_DCHECK(pieces.size() == arenas_.size());

  const DeviceStats stats = tracker_.stats();
  for (size_t pool = 0; pool < kNumStatTypes; ++pool) {
    OCLVM_DCHECK(stats.allocation[pool].current == allocation[pool]);
    OCLVM_DCHECK(stats.active[pool].current == allocation[pool]);
    OCLVM_DCHECK(stats.allocated_bytes[pool].current == allocated[pool]);
    OCLVM_DCHECK(stats.active_bytes[pool].current == allocated[pool]);
    OCLVM_DCHECK(stats.requested_bytes[pool].current == requested[pool]);
    OCLVM_DCHECK(stats.segment[pool].current == segment[pool]);
    OCLVM_DCHECK(stats.reserved_bytes[pool].current == reserved[pool]);
    OCLVM_DCHECK(stats.inactive_split[pool].current == split[pool]);
    OCLVM_DCHECK(stats.inactive_split_bytes[pool].current == split_bytes[pool]);
  }
}

std::vector<SegmentSnapshot> BuddyAllocator::segments() const {
  std::map<uint64_t, SegmentSnapshot> by_arena;
  for (const auto& [id, arena] : arenas_) {
    by_arena[id] = {arena->segment->address, arena->size,
                    pool_of_size(arena->size) == StatType::kSmallPool, {}};
  }
  for (const auto& [address, block] : live_) {
    by_arena[block.arena->segment->id].blocks.push_back(
        {address, block_size(block.order), block.requested, true, nullptr});
  }
  for (size_t order = 0; order < free_.size(); ++order) {
    for (const auto& [key, arena] : free_[order]) {
      by_arena[key.arena_id].blocks.push_back({arena->segment->address + key.offset,
                                               block_size(static_cast<int>(order)), 0, false,
                                               nullptr});
    }
  }
  std::vector<SegmentSnapshot> out;
  out.reserve(by_arena.size());
  for (auto& [id, segment] : by_arena) {
    std::sort(
        segment.blocks.begin(), segment.blocks.end(),
        [](const BlockSnapshot& a, const BlockSnapshot& b) { return a.address < b.address; });
    out.push_back(std::move(segment));
  }
  sort_by_address(out);
  return out;
}

}  // namespace oclvm
