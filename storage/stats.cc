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

template <typename Self, typename Fn>
void DeviceStatsTracker::for_each_tallies(Self& self, Fn&& fn) {
  for (auto* t : {&self.allocation_, &self.segment_, &self.inactive_split_,
                  &self.allocated_bytes_, &self.reserved_bytes_, &self.inactive_split_bytes_,
                  &self.requested_bytes_, &self.oversize_allocations_,
                  &self.oversize_segments_}) {
    fn(*t);
  }
}

StatArray DeviceStatsTracker::assemble(const Tallies& t) {
  StatArray array;
  Stat& all = array.aggregate();
  for (StatType pool : {StatType::kSmallPool, StatType::kLargePool}) {
    const Tally& p = t.pools[stat_index(pool) - 1];
    Stat& s = array[pool];
    s.current = p.current;
    s.peak = p.peak;
    s.allocated = p.increased;
    s.freed = p.increased - (p.current - p.base);
    all.current += s.current;
    all.allocated += s.allocated;
    all.freed += s.freed;
  }
  all.peak = t.aggregate_peak;
  return array;
}

DeviceStats DeviceStatsTracker::stats() const {
  DeviceStats s = counters_;
  s.allocation = assemble(allocation_);
  s.segment = assemble(segment_);
  s.active = s.allocation;
  s.inactive_split = assemble(inactive_split_);
  s.allocated_bytes = assemble(allocated_bytes_);
  s.reserved_bytes = assemble(reserved_bytes_);
  s.active_bytes = s.allocated_bytes;
  s.inactive_split_bytes = assemble(inactive_split_bytes_);
  s.requested_bytes = assemble(requested_bytes_);
  s.oversize_allocations = assemble(oversize_allocations_);
  s.oversize_segments = assemble(oversize_segments_);
  return s;
}

void DeviceStatsTracker::on_segment_create(StatType pool, size_t bytes) {
  increase(segment_, pool, 1);
  increase(reserved_bytes_, pool, static_cast<int64_t>(bytes));
  ++counters_.num_device_alloc;
}

void DeviceStatsTracker::on_segment_release(StatType pool, size_t bytes) {
  decrease(segment_, pool, 1);
  decrease(reserved_bytes_, pool, static_cast<int64_t>(bytes));
  ++counters_.num_device_free;
}

void DeviceStatsTracker::reset_peak() {
  for_each_tallies(*this, [](Tallies& t) {
    for (Tally& p : t.pools) p.peak = p.current;
    t.aggregate_peak = current(t);
  });
}

void DeviceStatsTracker::reset_accumulated() {
  for_each_tallies(*this, [](Tallies& t) {
    for (Tally& p : t.pools) {
      p.increased = 0;
      p.base = p.current;
    }
  });
  counters_.num_alloc_retries = 0;
  counters_.num_ooms = 0;
  counters_.num_sync_all_streams = 0;
  counters_.num_device_alloc = 0;
  counters_.num_device_free = 0;
}

void DeviceStatsTracker::check_invariants() const {
  const DeviceStats s = stats();
  for_each_array(s, [](const StatArray& a) {
    for (const Stat& stat : a) {
      OCLVM_DCHECK(stat.current >= 0);
      OCLVM_DCHECK(stat.current <= stat.peak);
    }
    const Stat& all = a.aggregate();
    const Stat& small = a[StatType::kSmallPool];
    const Stat& large = a[StatType::kLargePool];
    OCLVM_DCHECK(all.peak >= small.peak && all.peak >= large.peak);
    OCLVM_DCHECK(all.peak <= small.peak + large.peak);
  });
  OCLVM_DCHECK(s.reserved_bytes.aggregate().current >= s.allocated_bytes.aggregate().current);
  OCLVM_DCHECK(s.allocated_bytes.aggregate().current >= s.requested_bytes.aggregate().current);
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
