// storage/stats.cc — DeviceStatsTracker updates, resets and invariant checks.
#include "oclvm/storage/stats.h"

#include <iterator>
#include <sstream>
#include <type_traits>

#include "oclvm/storage/errors.h"

namespace oclvm {
namespace {

// fn(array) for every StatArray of `stats` (a DeviceStats, const or not), by the field table.
template <typename Stats, typename Fn>
void for_each_array(Stats& stats, Fn&& fn) {
  for (const StatArrayField& field : kStatArrayFields) fn(stats.*field.member);
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
  for_each_array(stats_, [](const StatArray& a) {
    for (const Stat& s : a) {
      OCLVM_DCHECK(s.current >= 0);
      OCLVM_DCHECK(s.current <= s.peak);
    }
    const Stat& all = a.aggregate();
    const Stat& small = a[StatType::kSmallPool];
    const Stat& large = a[StatType::kLargePool];
    OCLVM_DCHECK(all.current == small.current + large.current);
    OCLVM_DCHECK(all.allocated == small.allocated + large.allocated);
    OCLVM_DCHECK(all.freed == small.freed + large.freed);
  });
  const DeviceStats& s = stats_;
  OCLVM_DCHECK(s.reserved_bytes.aggregate().current >= s.allocated_bytes.aggregate().current);
  OCLVM_DCHECK(s.allocated_bytes.aggregate().current >= s.requested_bytes.aggregate().current);
  OCLVM_DCHECK(s.allocation.aggregate().current == s.active.aggregate().current);
}

// No padding, so equal bytes are equal fields; and the field tables of stats.h name every field.
static_assert(std::has_unique_object_representations_v<DeviceStats>);
static_assert(sizeof(DeviceStats) == std::size(kStatArrayFields) * sizeof(StatArray) +
                                         std::size(kStatCounterFields) * sizeof(int64_t));

std::string DeviceStats::to_string() const {
  std::ostringstream out;
  for (const StatArrayField& field : kStatArrayFields) {
    const Stat& s = (this->*field.member).aggregate();
    out << field.name << ": current " << s.current << ", peak " << s.peak << ", allocated "
        << s.allocated << ", freed " << s.freed << "\n";
  }
  const char* separator = "";
  for (const StatCounterField& field : kStatCounterFields) {
    out << separator << field.name << " " << this->*field.member;
    separator = ", ";
  }
  out << "\n";
  return out.str();
}

}  // namespace oclvm
