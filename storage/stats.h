// storage/stats.h — per-device memory statistics with the fields of PyTorch's DeviceStats.
//
// `DeviceStats` is a plain snapshot; `DeviceStatsTracker` updates one as an allocator works. Every
// allocator owns one tracker for its device. The meaning of each field follows PyTorch's
// CUDACachingAllocator so that the torch adapter can copy them one to one:
//
//   allocation / allocated_bytes     blocks handed to users and their (rounded) bytes
//   requested_bytes                  the bytes users asked for (<= allocated_bytes)
//   active / active_bytes            blocks in use; equal to allocation here (a freed block is
//                                    reusable at once in its stream's order)
//   segment / reserved_bytes         segments held from the driver and their bytes
//   inactive_split / _bytes          free blocks that are pieces of a split segment (fragments)
//
// Invariants (checked by DeviceStatsTracker::check_invariants and by the allocators' own checks):
//   for every Stat:        0 <= current <= peak; current == allocated - freed until the first
//                          reset_accumulated (which zeroes allocated and freed, not current)
//   per array:             AGGREGATE == SMALL_POOL + LARGE_POOL   (current, allocated, freed)
//   reserved_bytes.current >= allocated_bytes.current >= requested_bytes.current
//   reserved == allocated for an allocator without a cache (SystemAllocator)
//
// Thread-safety: thread-compatible. A tracker is owned by one allocator and touched only by the one
// thread that owns that allocator (storage/allocator.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace oclvm {

// Which pool a block or segment belongs to. Requests of fewer than kSmallSize bytes are "small".
enum class StatType : uint8_t { kAggregate = 0, kSmallPool = 1, kLargePool = 2 };
inline constexpr size_t kNumStatTypes = 3;
// 1 MiB. PyTorch counts a request of exactly 1 MiB as small; here it is large: in a 2 MiB small
// segment it would leave room for one more such block only while no smaller block lands in the
// other half (design/storage.md, "The pool boundary").
inline constexpr size_t kSmallSize = 1 << 20;

// The position of `type` in anything indexed by StatType: a StatArray, an allocator's own per-pool
// tallies. The one place that turns a StatType into a number.
constexpr size_t stat_index(StatType type) { return static_cast<size_t>(type); }

inline StatType pool_of_size(size_t bytes) {
  return bytes < kSmallSize ? StatType::kSmallPool : StatType::kLargePool;
}

struct Stat {
  int64_t current = 0;    // value now
  int64_t peak = 0;       // highest `current` since construction or the last reset_peak
  int64_t allocated = 0;  // sum of increases since construction or the last reset_accumulated
  int64_t freed = 0;      // sum of decreases since construction or the last reset_accumulated

  void add(int64_t delta) {
    current += delta;
    if (delta > 0) allocated += delta; else freed -= delta;
    if (current > peak) peak = current;
  }
  void reset_accumulated() { allocated = 0; freed = 0; }
  void reset_peak() { peak = current; }
};

// One statistic per StatType. Index it by StatType (array[pool]) or take aggregate(), the whole
// device; an index by number (array[0]) and iteration are std::array's.
struct StatArray : std::array<Stat, kNumStatTypes> {
  using std::array<Stat, kNumStatTypes>::operator[];
  constexpr Stat& operator[](StatType type) { return (*this)[stat_index(type)]; }
  constexpr const Stat& operator[](StatType type) const { return (*this)[stat_index(type)]; }
  constexpr Stat& aggregate() { return (*this)[StatType::kAggregate]; }
  constexpr const Stat& aggregate() const { return (*this)[StatType::kAggregate]; }
};

struct DeviceStats {
  StatArray allocation;            // count of live user blocks
  StatArray segment;               // count of segments held from the driver
  StatArray active;                // count of blocks in use
  StatArray inactive_split;        // count of free pieces of split segments
  StatArray allocated_bytes;       // bytes of live user blocks (after rounding)
  StatArray reserved_bytes;        // bytes of segments held from the driver
  StatArray active_bytes;          // bytes of blocks in use
  StatArray inactive_split_bytes;  // bytes of free pieces of split segments
  StatArray requested_bytes;       // bytes users asked for, before rounding

  int64_t num_alloc_retries = 0;     // times an allocation gave back cached segments and tried again
                                     // (PyTorch's meaning: counted whether or not the retry succeeded)
  int64_t num_ooms = 0;              // allocations that ended in OutOfMemoryError
  int64_t num_sync_all_streams = 0;  // device-wide synchronizations done to free memory
  int64_t num_device_alloc = 0;      // segments created from the driver (backend allocations)
  int64_t num_device_free = 0;       // segments given back to the driver
  StatArray oversize_allocations{};  // blocks of at least max_split_size (caching allocator)
  StatArray oversize_segments{};     // segments of at least max_split_size (caching allocator)
  int64_t max_split_size = 0;        // 0: blocks of every size may be split

  // Multi-line text for people and test failure messages: a "name: current, peak, allocated,
  // freed" line of each StatArray's aggregate, then the counters on one line.
  std::string to_string() const;
};

// Every field of DeviceStats by name (PyTorch's memory_stats names), for code that walks the
// statistics: scripts, comparisons in tests, printing. static_asserts in stats.cc fail when a
// field is added without a row here.
struct StatArrayField {
  const char* name;
  StatArray DeviceStats::*member;
};
struct StatCounterField {
  const char* name;
  int64_t DeviceStats::*member;
};
inline constexpr StatArrayField kStatArrayFields[] = {
    {"allocation", &DeviceStats::allocation},
    {"segment", &DeviceStats::segment},
    {"active", &DeviceStats::active},
    {"inactive_split", &DeviceStats::inactive_split},
    {"allocated_bytes", &DeviceStats::allocated_bytes},
    {"reserved_bytes", &DeviceStats::reserved_bytes},
    {"active_bytes", &DeviceStats::active_bytes},
    {"inactive_split_bytes", &DeviceStats::inactive_split_bytes},
    {"requested_bytes", &DeviceStats::requested_bytes},
    {"oversize_allocations", &DeviceStats::oversize_allocations},
    {"oversize_segments", &DeviceStats::oversize_segments},
};
inline constexpr StatCounterField kStatCounterFields[] = {
    {"num_alloc_retries", &DeviceStats::num_alloc_retries},
    {"num_ooms", &DeviceStats::num_ooms},
    {"num_sync_all_streams", &DeviceStats::num_sync_all_streams},
    {"num_device_alloc", &DeviceStats::num_device_alloc},
    {"num_device_free", &DeviceStats::num_device_free},
    {"max_split_size", &DeviceStats::max_split_size},
};

// Keeps the statistics of one allocator with the fewest writes per event: an allocate or free
// touches three tallies (active and active_bytes are allocation and allocated_bytes, read twice),
// and a decrease writes one word. Each tally keeps, per pool, current, peak, the sum of increases
// and `base` (current at the last reset_accumulated), so that freed = increased - (current -
// base); the aggregate is the sum of the pools but for its peak, which every increase updates.
// stats() assembles a DeviceStats from them; every field means what it means in DeviceStats.
class DeviceStatsTracker {
 public:
  DeviceStats stats() const;
  // Aggregate current values, without assembling a DeviceStats.
  int64_t reserved_bytes() const { return current(reserved_bytes_); }
  int64_t allocated_bytes() const { return current(allocated_bytes_); }

  // A user block of `allocated` bytes (for `requested` bytes) was handed out / given back.
  void on_allocate(StatType pool, size_t allocated, size_t requested) {
    increase(allocation_, pool, 1);
    increase(allocated_bytes_, pool, static_cast<int64_t>(allocated));
    increase(requested_bytes_, pool, static_cast<int64_t>(requested));
  }
  void on_free(StatType pool, size_t allocated, size_t requested) {
    decrease(allocation_, pool, 1);
    decrease(allocated_bytes_, pool, static_cast<int64_t>(allocated));
    decrease(requested_bytes_, pool, static_cast<int64_t>(requested));
  }
  // A segment of `bytes` was created from / given back to the driver.
  void on_segment_create(StatType pool, size_t bytes);
  void on_segment_release(StatType pool, size_t bytes);
  // Free split pieces changed by `count` blocks and `bytes` bytes (either sign).
  void on_inactive_split(StatType pool, int64_t count, int64_t bytes) {
    change(inactive_split_, pool, count);
    change(inactive_split_bytes_, pool, bytes);
  }
  // A block or segment of at least max_split_size (Note [Oversize blocks]) came (+1) or went (-1).
  void on_oversize_allocation(StatType pool, int64_t delta) {
    change(oversize_allocations_, pool, delta);
  }
  void on_oversize_segment(StatType pool, int64_t delta) {
    change(oversize_segments_, pool, delta);
  }
  void on_oom() { ++counters_.num_ooms; }
  void on_alloc_retry() { ++counters_.num_alloc_retries; }

  // PyTorch's resetPeakStats: every peak := current.
  void reset_peak();
  // PyTorch's resetAccumulatedStats: every allocated/freed := 0 and the num_* counters := 0.
  void reset_accumulated();

  // Checks the invariants listed at the top of this file; aborts via OCLVM_DCHECK on violation.
  void check_invariants() const;

 private:
  // One statistic of one pool. freed is increased - (current - base).
  struct Tally {
    int64_t current = 0;
    int64_t peak = 0;
    int64_t increased = 0;  // sum of increases since construction or the last reset_accumulated
    int64_t base = 0;       // current at the last reset_accumulated
  };
  // One statistic: the small and the large pool, and the peak of their sum.
  struct Tallies {
    std::array<Tally, 2> pools;  // [stat_index(pool) - 1]
    int64_t aggregate_peak = 0;
  };
  static Tally& of(Tallies& t, StatType pool) { return t.pools[stat_index(pool) - 1]; }
  static int64_t current(const Tallies& t) { return t.pools[0].current + t.pools[1].current; }
  static void increase(Tallies& t, StatType pool, int64_t delta) {
    Tally& p = of(t, pool);
    p.current += delta;
    p.increased += delta;
    if (p.current > p.peak) p.peak = p.current;
    if (const int64_t all = current(t); all > t.aggregate_peak) t.aggregate_peak = all;
  }
  static void decrease(Tallies& t, StatType pool, int64_t delta) { of(t, pool).current -= delta; }
  static void change(Tallies& t, StatType pool, int64_t delta) {
    if (delta > 0) {
      increase(t, pool, delta);
    } else if (delta < 0) {
      decrease(t, pool, -delta);
    }
  }
  // The StatArray of `t`; active and active_bytes are built from allocation_ and
  // allocated_bytes_.
  static StatArray assemble(const Tallies& t);
  // Every Tallies member, for resets and checks.
  template <typename Self, typename Fn>
  static void for_each_tallies(Self& self, Fn&& fn);

  Tallies allocation_, segment_, inactive_split_, allocated_bytes_, reserved_bytes_,
      inactive_split_bytes_, requested_bytes_, oversize_allocations_, oversize_segments_;
  DeviceStats counters_;  // only the num_* counters and max_split_size are kept here
};

}  // namespace oclvm
