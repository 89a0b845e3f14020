// storage/system_allocator.cc — one segment per allocation; the shared out-of-memory message.
#include "oclvm/storage/system_allocator.h"

#include "oclvm/storage/errors.h"
#include "oclvm/storage/hex.h"
#include "oclvm/storage/options.h"

namespace oclvm {
namespace {

// The segment size for a request of `bytes` (> 0): rounded up to kRounding. Throws InvalidArgument
// when the device cannot hold it in one segment.
size_t segment_size_for(size_t bytes, const MemoryBackend& backend) {
  const uint64_t max_alloc = backend.properties().max_alloc_bytes;
  if (bytes > max_alloc) {
    throw InvalidArgument("Expected an allocation of at most " + std::to_string(max_alloc) +
                          " bytes (the largest single allocation of " + backend.device().str() +
                          "), but got " + std::to_string(bytes) + " bytes");
  }
  const size_t rounded = round_up_checked(bytes, SystemAllocator::kRounding, backend.device());
  if (rounded > max_alloc) {
    throw InvalidArgument("Expected an allocation of at most " + std::to_string(max_alloc) +
                          " bytes (the largest single allocation of " + backend.device().str() +
                          ") after rounding to " + std::to_string(SystemAllocator::kRounding) +
                          " bytes, but got " + std::to_string(bytes) + " bytes, which round to " +
                          std::to_string(rounded));
  }
  return rounded;
}

}  // namespace

std::string out_of_memory_message(const Device& device, size_t requested, size_t segment_bytes,
                                  uint64_t memory_limit, const DeviceStats& stats,
                                  std::string_view cause) {
  const auto allocated = static_cast<uint64_t>(stats.allocated_bytes.aggregate().current);
  const auto reserved = static_cast<uint64_t>(stats.reserved_bytes.aggregate().current);
  return "Out of memory on " + device.str() + ": expected room for a new " +
         format_bytes(segment_bytes) + " segment to allocate " + format_bytes(requested) + " (" +
         std::to_string(requested) + " bytes requested), but got " + std::string(cause) +
         "; memory limit " +
         (memory_limit == 0 ? std::string("none") : format_bytes(memory_limit)) + ", " +
         format_bytes(allocated) + " allocated, " + format_bytes(reserved) + " reserved on " +
         device.str();
}

std::string invalid_handle_message(const Allocator& allocator, const Allocation& allocation,
                                   std::string_view why) {
  return "Expected an allocation that is live in the " + allocator.name() + " allocator of " +
         allocator.device().str() + ", but got ptr " +
         hex(reinterpret_cast<uintptr_t>(allocation.ptr)) + " (size " +
         std::to_string(allocation.size) + ", id " + std::to_string(allocation.id) + ", offset " +
         std::to_string(allocation.offset) + "): " + std::string(why);
}

SystemAllocator::SystemAllocator(MemoryBackend& backend, uint64_t memory_limit)
    : BackendAllocator(backend, memory_limit) {}

SystemAllocator::~SystemAllocator() {
  for (auto& [address, block] : live_) release_to_driver(backend_, block.segment);
}

Allocation SystemAllocator::allocate(size_t bytes) {
  if (bytes == 0) return {};
  const size_t segment_bytes = segment_size_for(bytes, backend_);
  const StatType pool = pool_of_size(segment_bytes);
  const auto reserved = static_cast<uint64_t>(tracker_.reserved_bytes());
  if (memory_limit_ != 0 &&
      (segment_bytes > memory_limit_ || reserved > memory_limit_ - segment_bytes)) {
    tracker_.on_oom();
    const uint64_t left = reserved < memory_limit_ ? memory_limit_ - reserved : 0;
    throw OutOfMemoryError(
        out_of_memory_message(device(), bytes, segment_bytes, memory_limit_, tracker_.stats(),
                              "only " + format_bytes(left) + " left under the memory limit"));
  }
  Segment* segment = nullptr;
  try {
    segment = backend_.create_segment(segment_bytes);
  } catch (const OutOfMemoryError& e) {
    tracker_.on_oom();
    throw OutOfMemoryError(out_of_memory_message(device(), bytes, segment_bytes, memory_limit_,
                                                 tracker_.stats(),
                                                 std::string("a refusal: ") + e.what()));
  }
  segment->owner = this;
  const uint64_t id = next_id_;
  try {
    live_.emplace(segment->address, LiveBlock{segment, bytes, id});
  } catch (...) {  // host memory ran out: hold nothing
    backend_.release_segment(segment);
    throw;
  }
  ++next_id_;
  tracker_.on_segment_create(pool, segment_bytes);
  tracker_.on_allocate(pool, segment_bytes, bytes);

  Allocation allocation;
  allocation.ptr = reinterpret_cast<void*>(segment->address);
  allocation.size = bytes;
  allocation.segment = segment;
  allocation.offset = 0;
  allocation.id = id;
  allocation.block = segment;
  return allocation;
}

const SystemAllocator::LiveBlock& SystemAllocator::live_block_of(
    const Allocation& allocation) const {
  auto it = live_.find(reinterpret_cast<uintptr_t>(allocation.ptr));
  if (it == live_.end()) {
    throw InvalidArgument(invalid_handle_message(
        *this, allocation,
        "no live allocation starts there (already freed, or not from this allocator)"));
  }
  const LiveBlock& block = it->second;
  if (allocation.segment != block.segment || allocation.offset != 0 || allocation.id != block.id ||
      allocation.size != block.requested || allocation.block != block.segment) {
    throw InvalidArgument(invalid_handle_message(
        *this, allocation,
        "its fields do not match the live allocation at that address (id " +
            std::to_string(block.id) + ", size " + std::to_string(block.requested) + ")"));
  }
  return block;
}

void SystemAllocator::deallocate(const Allocation& allocation) {
  if (!allocation) return;
  const LiveBlock block = live_block_of(allocation);
  const size_t segment_bytes = block.segment->size;
  const StatType pool = pool_of_size(segment_bytes);
  live_.erase(block.segment->address);
  tracker_.on_free(pool, segment_bytes, block.requested);
  tracker_.on_segment_release(pool, segment_bytes);
  release_to_driver(backend_, block.segment);
}

size_t SystemAllocator::allocated_size(const Allocation& allocation) const {
  if (!allocation) return 0;
  return live_block_of(allocation).segment->size;
}

void SystemAllocator::check_invariants() const {
  tracker_.check_invariants();
  const DeviceStats stats = tracker_.stats();
  int64_t count[kNumStatTypes] = {};
  int64_t bytes[kNumStatTypes] = {};
  int64_t requested[kNumStatTypes] = {};
  for (const auto& [address, block] : live_) {
    OCLVM_DCHECK(block.segment->address == address);
    OCLVM_DCHECK(block.segment->owner == this);
    OCLVM_DCHECK(block.segment->backend == &backend_);
    OCLVM_DCHECK(block.segment->size % kRounding == 0);
    OCLVM_DCHECK(block.requested > 0 && block.requested <= block.segment->size);
    OCLVM_DCHECK(block.id > 0 && block.id < next_id_);
    const size_t own_pool = stat_index(pool_of_size(block.segment->size));
    for (size_t pool : {stat_index(StatType::kAggregate), own_pool}) {
      count[pool] += 1;
      bytes[pool] += static_cast<int64_t>(block.segment->size);
      requested[pool] += static_cast<int64_t>(block.requested);
    }
  }
  for (size_t pool = 0; pool < kNumStatTypes; ++pool) {
    OCLVM_DCHECK(stats.allocation[pool].current == count[pool]);
    OCLVM_DCHECK(stats.segment[pool].current == count[pool]);
    OCLVM_DCHECK(stats.active[pool].current == count[pool]);
    OCLVM_DCHECK(stats.allocated_bytes[pool].current == bytes[pool]);
    OCLVM_DCHECK(stats.reserved_bytes[pool].current == bytes[pool]);
    OCLVM_DCHECK(stats.active_bytes[pool].current == bytes[pool]);
    OCLVM_DCHECK(stats.requested_bytes[pool].current == requested[pool]);
    OCLVM_DCHECK(stats.inactive_split[pool].current == 0);
    OCLVM_DCHECK(stats.inactive_split_bytes[pool].current == 0);
  }
}

std::vector<SegmentSnapshot> SystemAllocator::segments() const {
  std::vector<SegmentSnapshot> out;
  out.reserve(live_.size());
  for (const auto& [address, block] : live_) {
    const size_t size = block.segment->size;
    out.push_back({address, size, pool_of_size(size) == StatType::kSmallPool,
                   {{address, size, block.requested, true, nullptr}}});
  }
  sort_by_address(out);
  return out;
}

}  // namespace oclvm
