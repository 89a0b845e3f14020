// adapters/torch/tests/allocator_stats_test.cc — CLDeviceAllocator's statistics against known
// allocations: getDeviceStats exact in every field (aggregate and both pools) and equal field by
// field to oclvm's QueryStats; resetPeakStats, resetAccumulatedStats, emptyCache, getMemoryInfo;
// unknown device indices refused (c10::IndexError). On the real libtorch and PoCL; the fixture and
// the sizes that CachingAllocator's default options give are in allocator_fixture.h.
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/device.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/stats.h"
#include "oclvm/vm/virtual_machine.h"
#include "adapters/torch/tests/allocator_fixture.h"

namespace oclvm::torch_adapter {
namespace {

using namespace oclvm::torch_adapter::testing;

// --- statistics ------------------------------------------------------------------------------

// Three blocks on device 0: two small (1000 and 4096 bytes, one 2 MiB small segment) and one
// large (3 MiB + 1 byte: a 4 MiB large segment).
constexpr int64_t kSmallA = 1000;
constexpr int64_t kSmallB = 4096;
constexpr int64_t kLargeC = 3 * kMiB + 1;

struct ThreeBlocks {
  std::optional<c10::DataPtr> a = allocator().allocate(kSmallA);
  std::optional<c10::DataPtr> b = allocator().allocate(kSmallB);
  std::optional<c10::DataPtr> c = allocator().allocate(kLargeC);
};

TEST_F(CLDeviceAllocatorTest, DeviceStatsAreExactAfterKnownAllocations) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  allocator().resetAccumulatedStats(0);
  allocator().resetPeakStats(0);
  EXPECT_TRUE(same_stats(Stats{}, stats(0))) << "expected all zero with nothing live or cached";

  ThreeBlocks blocks;
  const Stats s = stats(0);
  const int64_t small = rounded(kSmallA) + rounded(kSmallB);  // 1024 + 4096
  const int64_t large = rounded(kLargeC);                     // 3 MiB + 512
  const int64_t large_segment = 4 * kMiB;
  ASSERT_EQ(small, 5120);
  ASSERT_EQ(large, 3 * kMiB + 512);

  for (auto [array, name] : {std::pair{&Stats::allocation, "allocation"},
                             std::pair{&Stats::active, "active"}}) {
    expect_stat((s.*array)[kAll], 3, 3, 3, 0, std::string(name) + ".all");
    expect_stat((s.*array)[kSmall], 2, 2, 2, 0, std::string(name) + ".small_pool");
    expect_stat((s.*array)[kLarge], 1, 1, 1, 0, std::string(name) + ".large_pool");
  }
  for (auto [array, name] : {std::pair{&Stats::allocated_bytes, "allocated_bytes"},
                             std::pair{&Stats::active_bytes, "active_bytes"}}) {
    expect_stat((s.*array)[kAll], small + large, small + large, small + large, 0,
                std::string(name) + ".all");
    expect_stat((s.*array)[kSmall], small, small, small, 0, std::string(name) + ".small_pool");
    expect_stat((s.*array)[kLarge], large, large, large, 0, std::string(name) + ".large_pool");
  }
  const int64_t requested = kSmallA + kSmallB + kLargeC;
  expect_stat(s.requested_bytes[kAll], requested, requested, requested, 0, "requested_bytes.all");
  expect_stat(s.requested_bytes[kSmall], kSmallA + kSmallB, kSmallA + kSmallB, kSmallA + kSmallB,
              0, "requested_bytes.small_pool");
  expect_stat(s.requested_bytes[kLarge], kLargeC, kLargeC, kLargeC, 0,
              "requested_bytes.large_pool");

  expect_stat(s.segment[kAll], 2, 2, 2, 0, "segment.all");
  expect_stat(s.segment[kSmall], 1, 1, 1, 0, "segment.small_pool");
  expect_stat(s.segment[kLarge], 1, 1, 1, 0, "segment.large_pool");
  const int64_t reserved = kSmallSegment + large_segment;
  expect_stat(s.reserved_bytes[kAll], reserved, reserved, reserved, 0, "reserved_bytes.all");
  expect_stat(s.reserved_bytes[kSmall], kSmallSegment, kSmallSegment, kSmallSegment, 0,
              "reserved_bytes.small_pool");
  expect_stat(s.reserved_bytes[kLarge], large_segment, large_segment, large_segment, 0,
              "reserved_bytes.large_pool");

  // One free remainder per segment. The small one was first 2 MiB - 1024 bytes (after a), then
  // shrank by b's 4096 bytes: its count moved once, its bytes twice (net change per operation).
  expect_stat(s.inactive_split[kAll], 2, 2, 2, 0, "inactive_split.all");
  expect_stat(s.inactive_split[kSmall], 1, 1, 1, 0, "inactive_split.small_pool");
  expect_stat(s.inactive_split[kLarge], 1, 1, 1, 0, "inactive_split.large_pool");
  const int64_t small_rest = kSmallSegment - small;
  const int64_t large_rest = large_segment - large;
  const int64_t small_first = kSmallSegment - rounded(kSmallA);
  expect_stat(s.inactive_split_bytes[kSmall], small_rest, small_first, small_first,
              rounded(kSmallB), "inactive_split_bytes.small_pool");
  expect_stat(s.inactive_split_bytes[kLarge], large_rest, large_rest, large_rest, 0,
              "inactive_split_bytes.large_pool");
  expect_stat(s.inactive_split_bytes[kAll], small_rest + large_rest, small_rest + large_rest,
              small_first + large_rest, rounded(kSmallB), "inactive_split_bytes.all");

  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 0);
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_sync_all_streams, 0);
  EXPECT_EQ(s.max_split_size, 0);
  expect_stat(s.oversize_allocations, 0, 0, 0, 0, "oversize_allocations");
  expect_stat(s.oversize_segments, 0, 0, 0, 0, "oversize_segments");
  EXPECT_TRUE(s.reserved_bytes_by_private_pools.empty());

  // Freeing the large block: allocated bytes fall, the segment stays cached (reserved unchanged)
  // and becomes wholly free (no longer an inactive split), the peaks stay.
  blocks.c.reset();
  const Stats f = stats(0);
  expect_stat(f.allocation[kAll], 2, 3, 3, 1, "allocation.all after free");
  expect_stat(f.allocation[kLarge], 0, 1, 1, 1, "allocation.large_pool after free");
  expect_stat(f.allocated_bytes[kAll], small, small + large, small + large, large,
              "allocated_bytes.all after free");
  expect_stat(f.requested_bytes[kLarge], 0, kLargeC, kLargeC, kLargeC,
              "requested_bytes.large_pool after free");
  expect_stat(f.reserved_bytes[kAll], reserved, reserved, reserved, 0,
              "reserved_bytes.all after free");
  expect_stat(f.segment[kLarge], 1, 1, 1, 0, "segment.large_pool after free");
  expect_stat(f.inactive_split[kLarge], 0, 1, 1, 1, "inactive_split.large_pool after free");
  expect_stat(f.inactive_split_bytes[kLarge], 0, large_rest, large_rest, large_rest,
              "inactive_split_bytes.large_pool after free");
  EXPECT_EQ(f.num_device_free, 0);

  // A negative index is the current device.
  EXPECT_TRUE(same_stats(f, allocator().getDeviceStats(-1)));
}

// "Statistics come from the device's oclvm allocator (QueryStats), one to one": every field of
// getDeviceStats equals oclvm's own snapshot, taken with nothing changing in between.
TEST_F(CLDeviceAllocatorTest, DeviceStatsAreOclvmQueryStatsOneToOne) {
  ThreeBlocks blocks;
  blocks.b.reset();  // something freed too: allocated/freed differ from current
  DeviceStats own;
  InstructionsBuilder builder = runtime().builder();
  builder.query_stats(to_oclvm(0), &own);
  runtime().run(builder.take());
  const Stats s = stats(0);

  struct Pair {
    const char* name;
    StatArray DeviceStats::*own;
    C10StatArray Stats::*c10;
  };
  const Pair pairs[] = {
      {"allocation", &DeviceStats::allocation, &Stats::allocation},
      {"segment", &DeviceStats::segment, &Stats::segment},
      {"active", &DeviceStats::active, &Stats::active},
      {"inactive_split", &DeviceStats::inactive_split, &Stats::inactive_split},
      {"allocated_bytes", &DeviceStats::allocated_bytes, &Stats::allocated_bytes},
      {"reserved_bytes", &DeviceStats::reserved_bytes, &Stats::reserved_bytes},
      {"active_bytes", &DeviceStats::active_bytes, &Stats::active_bytes},
      {"inactive_split_bytes", &DeviceStats::inactive_split_bytes, &Stats::inactive_split_bytes},
      {"requested_bytes", &DeviceStats::requested_bytes, &Stats::requested_bytes},
  };
  for (const Pair& pair : pairs) {
    for (size_t p = 0; p < 3; ++p) {
      const Stat& o = (own.*pair.own)[p];
      const std::string what = std::string(pair.name) + "." + kPoolNames[p];
      expect_stat((s.*pair.c10)[p], o.current, o.peak, o.allocated, o.freed, what);
    }
  }
  EXPECT_EQ(s.num_alloc_retries, own.num_alloc_retries);
  EXPECT_EQ(s.num_ooms, own.num_ooms);
  EXPECT_EQ(s.num_sync_all_streams, own.num_sync_all_streams);
  EXPECT_EQ(s.num_device_alloc, own.num_device_alloc);
  EXPECT_EQ(s.num_device_free, own.num_device_free);
  EXPECT_EQ(s.max_split_size, own.max_split_size);
  const Stat& oversize_allocations = own.oversize_allocations.aggregate();
  const Stat& oversize_segments = own.oversize_segments.aggregate();
  expect_stat(s.oversize_allocations, oversize_allocations.current, oversize_allocations.peak,
              oversize_allocations.allocated, oversize_allocations.freed, "oversize_allocations");
  expect_stat(s.oversize_segments, oversize_segments.current, oversize_segments.peak,
              oversize_segments.allocated, oversize_segments.freed, "oversize_segments");
  EXPECT_EQ(s.num_oom_rejections, 0) << "oclvm has no OOM preemption policy";
}

TEST_F(CLDeviceAllocatorTest, ResetPeakStatsSetsEveryPeakToCurrent) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  ThreeBlocks blocks;
  blocks.c.reset();
  const Stats before = stats(0);
  ASSERT_GT(before.allocated_bytes[kAll].peak, before.allocated_bytes[kAll].current);

  allocator().resetPeakStats(0);
  const Stats after = stats(0);
  for (const auto& array : kC10StatArrayFields) {
    for (size_t p = 0; p < 3; ++p) {
      const C10Stat& b = (before.*array.member)[p];
      const C10Stat& a = (after.*array.member)[p];
      const std::string what = std::string(array.name) + "." + kPoolNames[p];
      EXPECT_EQ(a.peak, a.current) << what;
      EXPECT_EQ(a.current, b.current) << what;
      EXPECT_EQ(a.allocated, b.allocated) << what;
      EXPECT_EQ(a.freed, b.freed) << what;
    }
  }
  EXPECT_EQ(after.allocated_bytes[kAll].peak, rounded(kSmallA) + rounded(kSmallB));
  EXPECT_EQ(after.num_device_alloc, before.num_device_alloc);
}

TEST_F(CLDeviceAllocatorTest, ResetAccumulatedStatsZeroesAllocatedFreedAndCounters) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  ThreeBlocks blocks;
  blocks.c.reset();
  const Stats before = stats(0);
  ASSERT_GT(before.allocation[kAll].freed, 0);
  ASSERT_GT(before.num_device_alloc, 0);

  allocator().resetAccumulatedStats(0);
  const Stats after = stats(0);
  for (const auto& array : kC10StatArrayFields) {
    for (size_t p = 0; p < 3; ++p) {
      const C10Stat& b = (before.*array.member)[p];
      const C10Stat& a = (after.*array.member)[p];
      const std::string what = std::string(array.name) + "." + kPoolNames[p];
      EXPECT_EQ(a.allocated, 0) << what;
      EXPECT_EQ(a.freed, 0) << what;
      EXPECT_EQ(a.current, b.current) << what;
      EXPECT_EQ(a.peak, b.peak) << what;
    }
  }
  EXPECT_EQ(after.num_device_alloc, 0);
  EXPECT_EQ(after.num_device_free, 0);
  EXPECT_EQ(after.num_alloc_retries, 0);
  EXPECT_EQ(after.num_ooms, 0);

  // Counting starts again from zero.
  blocks.a.reset();
  const Stats later = stats(0);
  expect_stat(later.allocation[kAll], 1, 3, 0, 1, "allocation.all after one more free");
  expect_stat(later.allocated_bytes[kSmall], rounded(kSmallB),
              rounded(kSmallA) + rounded(kSmallB), 0, rounded(kSmallA),
              "allocated_bytes.small_pool after one more free");
}

TEST_F(CLDeviceAllocatorTest, EmptyCacheGivesBackWhollyFreeSegmentsOnly) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  ThreeBlocks blocks;
  blocks.c.reset();  // its 4 MiB large segment is now wholly free
  allocator().resetAccumulatedStats(0);

  allocator().emptyCache();
  Stats s = stats(0);
  EXPECT_EQ(s.reserved_bytes[kAll].current, kSmallSegment) << "the small segment holds a and b";
  EXPECT_EQ(s.reserved_bytes[kLarge].current, 0);
  EXPECT_EQ(s.segment[kAll].current, 1);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.allocated_bytes[kAll].current, rounded(kSmallA) + rounded(kSmallB));

  blocks.a.reset();
  blocks.b.reset();
  s = stats(0);
  EXPECT_EQ(s.reserved_bytes[kAll].current, kSmallSegment) << "freed blocks stay cached";
  allocator().emptyCache();
  s = stats(0);
  EXPECT_EQ(s.reserved_bytes[kAll].current, 0);
  EXPECT_EQ(s.reserved_bytes[kSmall].current, 0);
  EXPECT_EQ(s.segment[kAll].current, 0);
  EXPECT_EQ(s.inactive_split[kAll].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[kAll].current, 0);
  EXPECT_EQ(s.num_device_free, 2);
}

TEST_F(CLDeviceAllocatorTest, StatisticsCallsRefuseDevicesThatDoNotExist) {
  const c10::DeviceIndex missing = device_count();
  EXPECT_THROW(allocator().getDeviceStats(missing), c10::IndexError);
  EXPECT_THROW(allocator().resetPeakStats(missing), c10::IndexError);
  EXPECT_THROW(allocator().resetAccumulatedStats(missing), c10::IndexError);
  EXPECT_THROW(allocator().getMemoryInfo(missing), c10::IndexError);
}

TEST_F(CLDeviceAllocatorTest, MemoryInfoIsTotalAndTotalMinusReserved) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  const uint64_t limit = runtime().options().memory_limit;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    const size_t total_expected =
        static_cast<size_t>(limit != 0 ? limit : properties(d).global_mem_bytes);
    const auto [free_bytes, total] = allocator().getMemoryInfo(d);
    EXPECT_GT(total, 0u);
    EXPECT_EQ(total, total_expected) << "the memory limit, else the device's global memory";
    EXPECT_EQ(free_bytes, total) << "nothing reserved";

    set_current_device(d);
    std::optional<c10::DataPtr> block = allocator().allocate(1000);  // one 2 MiB small segment
    const auto [free_now, total_now] = allocator().getMemoryInfo(d);
    EXPECT_EQ(total_now, total);
    EXPECT_LE(free_now, total_now);
    EXPECT_EQ(free_now, total - static_cast<size_t>(stats(d).reserved_bytes[kAll].current));
    EXPECT_EQ(free_now, total - static_cast<size_t>(kSmallSegment));
    EXPECT_EQ(allocator().getMemoryInfo(-1), allocator().getMemoryInfo(d)) << "-1: the current";
    block.reset();
    set_current_device(0);
  }
}

}  // namespace
}  // namespace oclvm::torch_adapter
