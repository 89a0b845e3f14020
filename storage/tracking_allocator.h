// storage/tracking_allocator.h — TrackingAllocator: any allocator, plus a record per live block.
//
// Wraps an allocator it owns and forwards every call to it unchanged (same blocks, same
// statistics, same errors). On the side it keeps one AllocationRecord per live allocation — size,
// id, stream tag and time — for leak reports and memory snapshots.
//
//   AllocationRecord   what is known about one live allocation.
//   TrackingAllocator  the wrapper.
//
// Promises:
//   - a record exists exactly for the allocations made through this wrapper and not yet given
//     back through it; allocate(0) makes none;
//   - a call the inner allocator rejects (InvalidArgument, OutOfMemoryError, ...) leaves the
//     records unchanged; a handle without a record here is rejected before the inner allocator
//     sees it;
//   - the stream tag of a record is the value of set_stream() when the allocation was made.
// Allocating or freeing through inner() directly bypasses the records and breaks the invariant
// below; inner() is for inspection (statistics, the concrete type's own methods).
//
// Invariants (check_invariants): the inner allocator's own, and
//   records_.size() == inner stats allocation.current
//   sum of records' requested == inner stats requested_bytes.current
//
// Thread-safety: thread-compatible, like the allocator it wraps.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "oclvm/storage/allocator.h"

namespace oclvm {

struct AllocationRecord {
  uint64_t id = 0;       // Allocation::id from the inner allocator (unique, increasing)
  size_t requested = 0;  // bytes asked for (Allocation::size)
  size_t allocated = 0;  // inner allocated_size() of the block (>= requested)
  void* ptr = nullptr;   // device address of the block
  int stream = 0;        // stream tag current when it was allocated (see set_stream)
  std::chrono::steady_clock::time_point when;  // when allocate returned it
};

class TrackingAllocator final : public Allocator {
 public:
  // Throws InvalidArgument for a null `inner`.
  explicit TrackingAllocator(std::unique_ptr<Allocator> inner);

  // "tracking(<inner name>)".
  std::string name() const override;
  MemoryBackend& backend() const override { return inner_->backend(); }

  Allocation allocate(size_t bytes) override;
  void deallocate(const Allocation& allocation) override;
  size_t allocated_size(const Allocation& allocation) const override {
    return inner_->allocated_size(allocation);
  }

  DeviceStats stats() const override { return inner_->stats(); }
  void reset_peak_stats() override { inner_->reset_peak_stats(); }
  void reset_accumulated_stats() override { inner_->reset_accumulated_stats(); }
  void empty_cache() override { inner_->empty_cache(); }
  uint64_t memory_limit() const override { return inner_->memory_limit(); }
  void set_memory_limit(uint64_t bytes) override { inner_->set_memory_limit(bytes); }
  void set_segment_release_guard(std::function<void()> guard) override {
    inner_->set_segment_release_guard(std::move(guard));
  }
  void check_invariants() const override;
  std::vector<SegmentSnapshot> segments() const override { return inner_->segments(); }

  // The stream tag recorded with later allocations (the VM sets it to the stream it runs on).
  void set_stream(int stream) { stream_ = stream; }
  int stream() const { return stream_; }

  // Live allocations, sorted by id.
  std::vector<AllocationRecord> live_records() const;
  size_t live_count() const { return records_.size(); }
  // One line per live allocation (id, address, requested and allocated sizes, stream, age) and a
  // line with the totals. Readable by people; not a stable format.
  std::string leak_report() const;

  Allocator& inner() { return *inner_; }
  const Allocator& inner() const { return *inner_; }

 private:
  // Immutable after construction.
  const std::unique_ptr<Allocator> inner_;

  // Mutable state.
  std::map<uint64_t, AllocationRecord> records_;  // Allocation::id -> record of a live allocation
  int stream_ = 0;                                // tag for the next allocations
};

}  // namespace oclvm
