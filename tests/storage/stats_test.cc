// tests/storage/stats_test.cc — Stat, DeviceStatsTracker and their invariants (storage/stats.h).
//
// Drives a tracker through the updates an allocator makes (blocks, segments, split pieces, OOMs,
// retries), and checks exact values per pool and in the aggregate, the two resets (peak := current;
// allocated / freed / num_* := 0), and that check_invariants passes after every step, and aborts
// when a sequence breaks an invariant (death tests, when invariant checks are compiled in).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "oclvm/storage/stats.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

// Every array of DeviceStats (by the field table of stats.h), for checks that must hold for all.
std::vector<const StatArray*> all_arrays(const DeviceStats& s) {
  std::vector<const StatArray*> arrays;
  for (const StatArrayField& field : kStatArrayFields) arrays.push_back(&(s.*field.member));
  return arrays;
}

// The per-array equation AGGREGATE == SMALL + LARGE for current, allocated and freed.
void expect_aggregate_is_sum(const DeviceStats& s) {
  for (const StatArray* a : all_arrays(s)) {
    EXPECT_EQ(a->aggregate().current, (*a)[kSmall].current + (*a)[kLarge].current);
    EXPECT_EQ(a->aggregate().allocated, (*a)[kSmall].allocated + (*a)[kLarge].allocated);
    EXPECT_EQ(a->aggregate().freed, (*a)[kSmall].freed + (*a)[kLarge].freed);
  }
}

TEST(StatTest, AddTracksCurrentPeakAllocatedAndFreed) {
  Stat s;
  expect_stat(s, 0, 0, 0, 0);
  s.add(5);
  expect_stat(s, 5, 5, 5, 0);
  s.add(-3);
  expect_stat(s, 2, 5, 5, 3);
  s.add(10);
  expect_stat(s, 12, 12, 15, 3);
  s.add(-12);
  expect_stat(s, 0, 12, 15, 15);
  s.add(0);
  expect_stat(s, 0, 12, 15, 15);
}

TEST(StatTest, Resets) {
  Stat s;
  s.add(8);
  s.add(-6);
  s.reset_peak();
  expect_stat(s, 2, 2, 8, 6);
  s.reset_accumulated();
  expect_stat(s, 2, 2, 0, 0);
  s.add(1);
  expect_stat(s, 3, 3, 1, 0);
}

TEST(StatsTest, PoolOfSizeSplitsAtOneMiB) {
  EXPECT_EQ(pool_of_size(0), StatType::kSmallPool);
  EXPECT_EQ(pool_of_size(512), StatType::kSmallPool);
  EXPECT_EQ(pool_of_size(kSmallSize - 1), StatType::kSmallPool);
  EXPECT_EQ(pool_of_size(kSmallSize), StatType::kLargePool);
}

TEST(DeviceStatsTrackerTest, StartsAtZero) {
  DeviceStatsTracker tracker;
  const DeviceStats s = tracker.stats();  // a snapshot: all_arrays points into it
  for (const StatArray* a : all_arrays(s)) {
    for (const Stat& s : *a) expect_stat(s, 0, 0, 0, 0);
  }
  EXPECT_EQ(tracker.stats().num_ooms, 0);
  EXPECT_EQ(tracker.stats().num_device_alloc, 0);
  tracker.check_invariants();
}

TEST(DeviceStatsTrackerTest, AllocateAndFreeUpdateTheirPoolAndTheAggregate) {
  DeviceStatsTracker tracker;
  tracker.on_segment_create(StatType::kSmallPool, 2 << 20);
  tracker.on_allocate(StatType::kSmallPool, 512, 100);
  tracker.check_invariants();
  tracker.on_segment_create(StatType::kLargePool, 4 << 20);
  tracker.on_allocate(StatType::kLargePool, 4 << 20, (4 << 20) - 7);
  tracker.check_invariants();

  DeviceStats s = tracker.stats();
  expect_stat(s.allocation[kSmall], 1, 1, 1, 0);
  expect_stat(s.allocation[kLarge], 1, 1, 1, 0);
  expect_stat(s.allocation.aggregate(), 2, 2, 2, 0);
  expect_stat(s.active.aggregate(), 2, 2, 2, 0);
  expect_stat(s.allocated_bytes[kSmall], 512, 512, 512, 0);
  expect_stat(s.allocated_bytes[kLarge], 4 << 20, 4 << 20, 4 << 20, 0);
  expect_stat(s.allocated_bytes.aggregate(), 512 + (4 << 20), 512 + (4 << 20), 512 + (4 << 20), 0);
  expect_stat(s.active_bytes.aggregate(), 512 + (4 << 20), 512 + (4 << 20), 512 + (4 << 20), 0);
  expect_stat(s.requested_bytes[kSmall], 100, 100, 100, 0);
  expect_stat(s.requested_bytes.aggregate(), 100 + (4 << 20) - 7, 100 + (4 << 20) - 7,
              100 + (4 << 20) - 7, 0);
  expect_stat(s.segment.aggregate(), 2, 2, 2, 0);
  expect_stat(s.reserved_bytes[kSmall], 2 << 20, 2 << 20, 2 << 20, 0);
  expect_stat(s.reserved_bytes.aggregate(), 6 << 20, 6 << 20, 6 << 20, 0);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 0);
  expect_aggregate_is_sum(s);

  tracker.on_free(StatType::kSmallPool, 512, 100);
  tracker.check_invariants();
  s = tracker.stats();
  expect_stat(s.allocation[kSmall], 0, 1, 1, 1);
  expect_stat(s.allocation.aggregate(), 1, 2, 2, 1);
  expect_stat(s.allocated_bytes[kSmall], 0, 512, 512, 512);
  expect_stat(s.requested_bytes[kSmall], 0, 100, 100, 100);
  expect_stat(s.active_bytes.aggregate(), 4 << 20, 512 + (4 << 20), 512 + (4 << 20), 512);
  expect_aggregate_is_sum(s);

  tracker.on_free(StatType::kLargePool, 4 << 20, (4 << 20) - 7);
  tracker.on_segment_release(StatType::kLargePool, 4 << 20);
  tracker.on_segment_release(StatType::kSmallPool, 2 << 20);
  tracker.check_invariants();
  s = tracker.stats();
  expect_stat(s.allocation.aggregate(), 0, 2, 2, 2);
  expect_stat(s.segment.aggregate(), 0, 2, 2, 2);
  expect_stat(s.reserved_bytes.aggregate(), 0, 6 << 20, 6 << 20, 6 << 20);
  expect_stat(s.reserved_bytes[kLarge], 0, 4 << 20, 4 << 20, 4 << 20);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 2);
  expect_aggregate_is_sum(s);
}

TEST(DeviceStatsTrackerTest, InactiveSplitMovesBothWays) {
  DeviceStatsTracker tracker;
  tracker.on_segment_create(StatType::kLargePool, 20 << 20);
  tracker.on_inactive_split(StatType::kLargePool, 2, 3 << 20);
  tracker.check_invariants();
  DeviceStats s = tracker.stats();
  expect_stat(s.inactive_split[kLarge], 2, 2, 2, 0);
  expect_stat(s.inactive_split_bytes.aggregate(), 3 << 20, 3 << 20, 3 << 20, 0);
  tracker.on_inactive_split(StatType::kLargePool, -1, -(1 << 20));
  tracker.on_inactive_split(StatType::kLargePool, 0, 0);  // no change at all
  s = tracker.stats();
  expect_stat(s.inactive_split.aggregate(), 1, 2, 2, 1);
  expect_stat(s.inactive_split_bytes[kLarge], 2 << 20, 3 << 20, 3 << 20, 1 << 20);
  expect_stat(s.inactive_split[kSmall], 0, 0, 0, 0);
  tracker.on_inactive_split(StatType::kLargePool, -1, -(2 << 20));
  tracker.on_segment_release(StatType::kLargePool, 20 << 20);
  tracker.check_invariants();
  s = tracker.stats();
  expect_aggregate_is_sum(s);
}

TEST(DeviceStatsTrackerTest, CountersOfOomsAndRetries) {
  DeviceStatsTracker tracker;
  tracker.on_oom();
  tracker.on_oom();
  tracker.on_alloc_retry();
  EXPECT_EQ(tracker.stats().num_ooms, 2);
  EXPECT_EQ(tracker.stats().num_alloc_retries, 1);
  tracker.check_invariants();
}

TEST(DeviceStatsTrackerTest, ResetPeakSetsEveryPeakToCurrent) {
  DeviceStatsTracker tracker;
  tracker.on_segment_create(StatType::kSmallPool, 2 << 20);
  tracker.on_allocate(StatType::kSmallPool, 1024, 1000);
  tracker.on_allocate(StatType::kSmallPool, 512, 512);
  tracker.on_free(StatType::kSmallPool, 1024, 1000);
  tracker.on_inactive_split(StatType::kSmallPool, 1, 1024);
  tracker.on_inactive_split(StatType::kSmallPool, -1, -1024);
  ASSERT_EQ(tracker.stats().allocated_bytes.aggregate().peak, 1536);

  tracker.reset_peak();
  tracker.check_invariants();
  DeviceStats s = tracker.stats();
  for (const StatArray* a : all_arrays(s)) {
    for (const Stat& stat : *a) EXPECT_EQ(stat.peak, stat.current);
  }
  // Only peaks changed.
  expect_stat(s.allocated_bytes.aggregate(), 512, 512, 1536, 1024);
  expect_stat(s.allocation[kSmall], 1, 1, 2, 1);
  expect_stat(s.inactive_split.aggregate(), 0, 0, 1, 1);
  expect_stat(s.reserved_bytes.aggregate(), 2 << 20, 2 << 20, 2 << 20, 0);
  EXPECT_EQ(s.num_device_alloc, 1);

  // Peaks grow again from the new base.
  tracker.on_allocate(StatType::kSmallPool, 2048, 2048);
  s = tracker.stats();
  expect_stat(s.allocated_bytes.aggregate(), 2560, 2560, 3584, 1024);
  tracker.on_free(StatType::kSmallPool, 2048, 2048);
  tracker.on_free(StatType::kSmallPool, 512, 512);
  tracker.on_segment_release(StatType::kSmallPool, 2 << 20);
  tracker.check_invariants();
  s = tracker.stats();
}

TEST(DeviceStatsTrackerTest, ResetAccumulatedClearsAllocatedFreedAndCounters) {
  DeviceStatsTracker tracker;
  tracker.on_segment_create(StatType::kLargePool, 4 << 20);
  tracker.on_segment_create(StatType::kSmallPool, 2 << 20);
  tracker.on_allocate(StatType::kLargePool, 4 << 20, 3 << 20);
  tracker.on_allocate(StatType::kSmallPool, 512, 1);
  tracker.on_free(StatType::kSmallPool, 512, 1);
  tracker.on_segment_release(StatType::kSmallPool, 2 << 20);
  tracker.on_oom();
  tracker.on_alloc_retry();

  tracker.reset_accumulated();
  tracker.check_invariants();
  DeviceStats s = tracker.stats();
  for (const StatArray* a : all_arrays(s)) {
    for (const Stat& stat : *a) {
      EXPECT_EQ(stat.allocated, 0);
      EXPECT_EQ(stat.freed, 0);
    }
  }
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_sync_all_streams, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.num_device_free, 0);
  // Current and peak survive.
  expect_stat(s.allocated_bytes.aggregate(), 4 << 20, (4 << 20) + 512, 0, 0);
  expect_stat(s.segment.aggregate(), 1, 2, 0, 0);
  expect_stat(s.requested_bytes[kLarge], 3 << 20, 3 << 20, 0, 0);

  // Counting restarts from zero.
  tracker.on_free(StatType::kLargePool, 4 << 20, 3 << 20);
  tracker.on_segment_release(StatType::kLargePool, 4 << 20);
  tracker.check_invariants();
  s = tracker.stats();
  expect_stat(s.allocated_bytes.aggregate(), 0, (4 << 20) + 512, 0, 4 << 20);
  EXPECT_EQ(s.num_device_free, 1);
  expect_aggregate_is_sum(s);
}

TEST(DeviceStatsTrackerTest, ToStringShowsAggregateRows) {
  DeviceStatsTracker tracker;
  tracker.on_segment_create(StatType::kSmallPool, 2 << 20);
  tracker.on_allocate(StatType::kSmallPool, 512, 100);
  const std::string text = tracker.stats().to_string();
  EXPECT_NE(text.find("allocated_bytes: current 512, peak 512, allocated 512, freed 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("reserved_bytes: current 2097152"), std::string::npos) << text;
  EXPECT_NE(text.find("num_device_alloc 1"), std::string::npos) << text;
}

#if defined(OCLVM_CHECKS) || !defined(NDEBUG)
// check_invariants must be able to fail: each sequence below breaks one invariant of stats.h.
TEST(DeviceStatsTrackerDeathTest, FreeWithoutAllocateBreaksNonNegativeCurrent) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DeviceStatsTracker tracker;
        tracker.on_free(StatType::kSmallPool, 512, 512);
        tracker.check_invariants();
      },
      "internal invariant violated");
}

TEST(DeviceStatsTrackerDeathTest, AllocatedBeyondReservedBreaksTheOrder) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DeviceStatsTracker tracker;
        tracker.on_allocate(StatType::kSmallPool, 512, 512);  // no segment holds it
        tracker.check_invariants();
      },
      "internal invariant violated");
}

TEST(DeviceStatsTrackerDeathTest, RequestedBeyondAllocatedBreaksTheOrder) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DeviceStatsTracker tracker;
        tracker.on_segment_create(StatType::kSmallPool, 2 << 20);
        tracker.on_allocate(StatType::kSmallPool, 512, 1024);
        tracker.check_invariants();
      },
      "internal invariant violated");
}
#endif

}  // namespace
}  // namespace oclvm
