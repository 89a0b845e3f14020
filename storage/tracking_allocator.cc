// storage/tracking_allocator.cc — forwarding, the live records and the leak report.
#include "oclvm/storage/tracking_allocator.h"

#include <cstdio>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/hex.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/system_allocator.h"

namespace oclvm {

TrackingAllocator::TrackingAllocator(std::unique_ptr<Allocator> inner) : inner_(std::move(inner)) {
  if (inner_ == nullptr) {
    throw InvalidArgument("Expected an allocator for TrackingAllocator to wrap, but got nullptr");
  }
}

std::string TrackingAllocator::name() const { return "tracking(" + inner_->name() + ")"; }

Allocation TrackingAllocator::allocate(size_t bytes) {
  Allocation allocation = inner_->allocate(bytes);
  if (!allocation) return allocation;
  AllocationRecord record;
  record.id = allocation.id;
  record.requested = allocation.size;
  record.ptr = allocation.ptr;
  record.stream = stream_;
  try {
    record.allocated = inner_->allocated_size(allocation);
    record.when = std::chrono::steady_clock::now();
    records_.emplace(record.id, record);
  } catch (...) {
    inner_->deallocate(allocation);  // keep the promise: nothing held without a record
    throw;
  }
  return allocation;
}

void TrackingAllocator::deallocate(const Allocation& allocation) {
  if (!allocation) return;
  auto it = records_.find(allocation.id);
  if (it == records_.end() || it->second.ptr != allocation.ptr) {
    throw InvalidArgument(invalid_handle_message(
        *this, allocation, "no live allocation with that id and address was made through it"));
  }
  inner_->deallocate(allocation);  // validates the rest of the handle; on a throw, nothing changed
  records_.erase(it);
}

std::vector<AllocationRecord> TrackingAllocator::live_records() const {
  std::vector<AllocationRecord> records;
  records.reserve(records_.size());
  for (const auto& [id, record] : records_) records.push_back(record);
  return records;
}

std::string TrackingAllocator::leak_report() const {
  const auto now = std::chrono::steady_clock::now();
  std::string report = "live allocations of " + name() + " on " + device().str() + ":\n";
  uint64_t requested = 0;
  uint64_t allocated = 0;
  for (const auto& [id, record] : records_) {
    const double age_ms = std::chrono::duration<double, std::milli>(now - record.when).count();
    char age[32];
    std::snprintf(age, sizeof age, "%.1f ms", age_ms);
    report += "  #" + std::to_string(id) + " at " +
              hex(reinterpret_cast<uintptr_t>(record.ptr)) + ": " +
              format_bytes(record.requested) + " requested, " + format_bytes(record.allocated) +
              " allocated, stream " + std::to_string(record.stream) + ", age " + age + "\n";
    requested += record.requested;
    allocated += record.allocated;
  }
  report += "total: " + std::to_string(records_.size()) +
            (records_.size() == 1 ? " live allocation, " : " live allocations, ") +
            format_bytes(requested) + " requested, " + format_bytes(allocated) + " allocated\n";
  return report;
}

void TrackingAllocator::check_invariants() const {
  inner_->check_invariants();
  const DeviceStats stats = inner_->stats();
  int64_t requested = 0;
  uint64_t previous_id = 0;
  for (const auto& [id, record] : records_) {
    OCLVM_DCHECK(record.id == id && id > previous_id);
    OCLVM_DCHECK(record.ptr != nullptr && record.requested > 0);
    OCLVM_DCHECK(record.allocated >= record.requested);
    requested += static_cast<int64_t>(record.requested);
    previous_id = id;
  }
  OCLVM_DCHECK(stats.allocation.aggregate().current == static_cast<int64_t>(records_.size()));
  OCLVM_DCHECK(stats.requested_bytes.aggregate().current == requested);
}

}  // namespace oclvm
