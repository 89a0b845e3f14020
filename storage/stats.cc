// storage/stats.cc — DeviceStatsTracker updates, resets and invariant checks.
#include "oclvm/storage/stats.h"

#include <iterator>
#include <sstream>
#include <type_traits>

#include "oclvm/storage/errors.h"

namespace oclvm {
namespace {

template <typename Fn>
void for_each_array(DeviceStats& s, Fn&& fn) {
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                       &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes,
                       &s.requested_bytes, &s.oversize_allocations, &s.oversize_segments}) {
    fn(*a);
  }
}

}  // namespace

void DeviceStatsTracker::on_allocate(StatType pool, size_t allocated, size_t requested) {
  add(stats_.allocation, pool, 1);
  add(stats_.active, pool, 1);
  add(stats_.allocated_bytes, pool, static_cast<int64_t>(allocated));
  add(stats_.active_bytes, pool, static_cast<int64_t>(allocated));
  add(stats_.requested_bytes, pool, static_cast<int64_t>(requested));
}

void DeviceStatsTracker::on_free(StatType pool, size_t allocated, size_t requested) {
  add(stats_.allocation, pool, -1);
  add(stats_.active, pool, -1);
  add(stats_.allocated_bytes, pool, -static_cast<int64_t>(allocated));
  add(stats_.active_bytes, pool, -static_cast<int64_t>(allocated));
  add(stats_.requested_bytes, pool, -static_cast<int64_t>(requested));
}

void DeviceStatsTracker::on_segment_create(StatType pool, size_t bytes) {
  add(stats_.segment, pool, 1);
  add(stats_.reserved_bytes, pool, static_cast<int64_t>(bytes));
  ++stats_.num_device_alloc;
}

void DeviceStatsTracker::on_segment_release(StatType pool, size_t bytes) {
  add(stats_.segment, pool, -1);
  add(stats_.reserved_bytes, pool, -static_cast<int64_t>(bytes));
  ++stats_.num_device_free;
}

void DeviceStatsTracker::on_inactive_split(StatType pool, int64_t count, int64_t bytes) {
  if (count != 0) add(stats_.inactive_split, pool, count);
  if (bytes != 0) add(stats_.inactive_split_bytes, pool, bytes);
}

void DeviceStatsTracker::reset_peak() {
  for_each_array(stats_, [](StatArray& a) {
    for (Stat& s : a) s.reset_peak();
  });
}

void DeviceStatsTracker::reset_accumulated() {
  for_each_array(stats_, [](StatArray& a) {
    for (Stat& s : a) s.reset_accumulated();
  });
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_sync_all_streams = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
}

void DeviceStatsTracker::check_invariants() const {
  DeviceStats copy = stats_;
  for_each_array(copy, [](StatArray& a) {
    for (const Stat& s : a) {
      OCLVM_DCHECK(s.current >= 0);
      OCLVM_DCHECK(s.current <= s.peak);
    }
    const Stat& all = a[0];
    OCLVM_DCHECK(all.current == a[1].current + a[2].current);
    OCLVM_DCHECK(all.allocated == a[1].allocated + a[2].allocated);
    OCLVM_DCHECK(all.freed == a[1].freed + a[2].freed);
  });
  constexpr size_t kAll = static_cast<size_t>(StatType::kAggregate);
  OCLVM_DCHECK(stats_.reserved_bytes[kAll].current >= stats_.allocated_bytes[kAll].current);
  OCLVM_DCHECK(stats_.allocated_bytes[kAll].current >= stats_.requested_bytes[kAll].current);
  OCLVM_DCHECK(stats_.allocation[kAll].current == stats_.active[kAll].current);
}

// No padding, so equal bytes are equal fields; and the field tables of stats.h name every field.
static_assert(std::has_unique_object_representations_v<DeviceStats>);
static_assert(sizeof(DeviceStats) == std::size(kStatArrayFields) * sizeof(StatArray) +
                                         std::size(kStatCounterFields) * sizeof(int64_t));

std::string DeviceStats::to_string() const {
  std::ostringstream out;
  auto row = [&](const char* name, const StatArray& a) {
    const Stat& s = a[0];
    out << name << ": current " << s.current << ", peak " << s.peak << ", allocated "
        << s.allocated << ", freed " << s.freed << "\n";
  };
  row("allocation", allocation);
  row("segment", segment);
  row("active", active);
  row("inactive_split", inactive_split);
  row("allocated_bytes", allocated_bytes);
  row("reserved_bytes", reserved_bytes);
  row("active_bytes", active_bytes);
  row("inactive_split_bytes", inactive_split_bytes);
  row("requested_bytes", requested_bytes);
  out << "num_alloc_retries " << num_alloc_retries << ", num_ooms " << num_ooms
      << ", num_device_alloc " << num_device_alloc << ", num_device_free " << num_device_free
      << "\n";
  return out.str();
}

}  // namespace oclvm
