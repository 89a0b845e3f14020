// tests/storage/caching_allocator_test.cc — CachingAllocator on opencl:0 (PoCL), on the host
// device, and on a FaultInjectionBackend (test_util.h) whose driver refuses memory on demand.
//
// Every test checks exact statistics and calls check_invariants() after each step; fixtures
// derive from LeakCheckedTest (no segment or address range may outlive a test) and end with
// expect_nothing_live.
#include "oclvm/storage/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "oclvm/storage/errors.h"
#include "tests/storage/caching_allocator_test_util.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

std::string hex(const void* ptr) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%jx",
                static_cast<uintmax_t>(reinterpret_cast<uintptr_t>(ptr)));
  return text;
}

// ---------------------------------------------------------------------------------------------
// Sizes and alignment.

TEST_F(CachingAllocatorTest, ZeroBytesGivesAnEmptyHandleAndTouchesNothing) {
  CachingAllocator allocator(device());
  const DeviceStats before = allocator.stats();
  Allocation a = allocator.allocate(0);
  EXPECT_FALSE(a);
  EXPECT_EQ(a.ptr, nullptr);
  EXPECT_EQ(a.size, 0u);
  EXPECT_EQ(a.segment, nullptr);
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(allocator.allocated_size(a), 0u);
  allocator.deallocate(a);
  EXPECT_TRUE(same_stats(before, allocator.stats()));
  EXPECT_EQ(allocator.segment_count(), 0u);
  EXPECT_EQ(allocator.name(), "caching");
  EXPECT_EQ(allocator.memory_limit(), 0u);
  allocator.check_invariants();
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, EverySizeIsRoundedAndEveryBlockAligned) {
  CachingAllocator allocator(device());
  const size_t align = device().properties().base_addr_align_bytes;
  const size_t quantum = std::max<size_t>(512, align);
  EXPECT_EQ(allocator.quantum(), quantum);
  const std::vector<size_t> sizes = {1,         3,       511,         512,     513,
                                     1000,      4097,    65537,       kMiB - 1, kMiB,
                                     kMiB + 1,  3 * kMiB + 5, 7777777, 2,       kMiB / 2 + 3};
  std::vector<Allocation> live;
  int64_t requested = 0, allocated = 0;
  uint64_t last_id = 0;
  for (size_t n : sizes) {
    Allocation a = allocator.allocate(n);
    ASSERT_TRUE(a);
    EXPECT_EQ(a.size, n);
    EXPECT_EQ(allocator.requested_size(a), n);
    EXPECT_EQ(allocator.allocated_size(a), round_up(n, quantum)) << n;
    EXPECT_EQ(a.offset % 512, 0u) << n;
    EXPECT_EQ(a.offset % align, 0u) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr) % quantum, 0u) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr), a.segment->address + a.offset);
    EXPECT_LE(a.offset + allocator.allocated_size(a), a.segment->size);
    EXPECT_GT(a.id, last_id);
    EXPECT_NE(a.block, nullptr);
    last_id = a.id;
    requested += static_cast<int64_t>(n);
    allocated += static_cast<int64_t>(round_up(n, quantum));
    live.push_back(a);
    allocator.check_invariants();
  }
  const DeviceStats s = allocator.stats();
  EXPECT_EQ(s.requested_bytes.aggregate().current, requested);
  EXPECT_EQ(s.allocated_bytes.aggregate().current, allocated);
  EXPECT_EQ(s.allocation.aggregate().current, static_cast<int64_t>(sizes.size()));
  for (const Allocation& a : live) {
    allocator.deallocate(a);
    allocator.check_invariants();
  }
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, RoundBytesAboveTheDeviceAlignmentWins) {
  CachingAllocatorOptions options;
  options.round_bytes = 4096;
  CachingAllocator allocator(device(), options);
  EXPECT_EQ(allocator.quantum(), 4096u);
  Allocation a = allocator.allocate(1);
  Allocation b = allocator.allocate(4097);
  EXPECT_EQ(allocator.allocated_size(a), 4096u);
  EXPECT_EQ(allocator.allocated_size(b), 8192u);
  EXPECT_EQ(b.offset, 4096u);
  allocator.check_invariants();
  allocator.deallocate(a);
  allocator.deallocate(b);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, RejectsOptionsThatAreNotPowersOfTwo) {
  for (size_t bad : {size_t{0}, size_t{3}, size_t{768}}) {
    CachingAllocatorOptions options;
    options.round_bytes = bad;
    expect_invalid_argument([&] { CachingAllocator allocator(device(), options); },
                            {"round_bytes", std::to_string(bad)});
  }
  CachingAllocatorOptions options;
  options.large_segment_round = 3 * kMiB;
  expect_invalid_argument([&] { CachingAllocator allocator(device(), options); },
                          {"large_segment_round"});
  options = {};
  options.small_segment_bytes = 0;
  expect_invalid_argument([&] { CachingAllocator allocator(device(), options); },
                          {"small_segment_bytes"});
}

// ---------------------------------------------------------------------------------------------
// Reuse, best fit, splitting and coalescing.

TEST_F(CachingAllocatorTest, FreedBlockIsReusedWithoutTheDriver) {
  CachingAllocator allocator(device());
  for (size_t n : {size_t{4096}, size_t{3 * kMiB}}) {
    Allocation a = allocator.allocate(n);
    const int64_t device_allocs = allocator.stats().num_device_alloc;
    allocator.deallocate(a);
    allocator.check_invariants();
    Allocation b = allocator.allocate(n);
    allocator.check_invariants();
    EXPECT_EQ(b.ptr, a.ptr) << n;
    EXPECT_EQ(b.segment, a.segment);
    EXPECT_GT(b.id, a.id);
    EXPECT_EQ(allocator.stats().num_device_alloc, device_allocs);
    allocator.deallocate(b);
  }
  EXPECT_EQ(allocator.stats().num_device_alloc, 2);
  EXPECT_EQ(allocator.stats().num_device_free, 0);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, SplitAndCoalesceKeepInactiveSplitExact) {
  CachingAllocator allocator(device(), merge_at_once());
  Allocation a = allocator.allocate(256 * kKiB);
  Allocation b = allocator.allocate(128 * kKiB);
  Allocation c = allocator.allocate(512 * kKiB);
  allocator.check_invariants();
  ASSERT_EQ(allocator.segment_count(), 1u);
  EXPECT_EQ(a.segment, b.segment);
  EXPECT_EQ(b.segment, c.segment);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(b.offset, 256 * kKiB);
  EXPECT_EQ(c.offset, 384 * kKiB);
  const int64_t tail = static_cast<int64_t>(2 * kMiB - 896 * kKiB);
  DeviceStats s = allocator.stats();
  // The first allocation split the whole segment (+1 piece); the next two only shrank that piece
  // (its bytes moved, the count did not: the net change per operation, as PyTorch counts).
  expect_stat(s.inactive_split[kSmall], 1, 1, 1, 0);
  expect_stat(s.inactive_split_bytes[kSmall], tail, i64(2 * kMiB - 256 * kKiB),
              i64(2 * kMiB - 256 * kKiB), i64(2 * kMiB - 256 * kKiB) - tail);
  EXPECT_EQ(s.inactive_split_bytes[kSmall].current, tail);
  EXPECT_EQ(allocator.free_block_count(), 1u);

  allocator.deallocate(b);
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.inactive_split[kSmall], 2, 2, 2, 0);
  EXPECT_EQ(s.inactive_split_bytes[kSmall].current, tail + static_cast<int64_t>(128 * kKiB));

  allocator.deallocate(a);  // merges with B into one 384 KiB free block at offset 0
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.inactive_split[kSmall], 2, 2, 2, 0);  // B grew into A+B: no count change
  EXPECT_EQ(s.inactive_split_bytes[kSmall].current, tail + static_cast<int64_t>(384 * kKiB));
  EXPECT_EQ(allocator.free_block_count(), 2u);
  EXPECT_EQ(allocator.cached_bytes(), 2 * kMiB - 512 * kKiB);
  EXPECT_EQ(allocator.largest_free_block(), static_cast<size_t>(tail));

  // Best fit: the merged 384 KiB block fits exactly and wins over the larger tail.
  Allocation d = allocator.allocate(384 * kKiB);
  EXPECT_EQ(d.ptr, a.ptr);
  allocator.check_invariants();
  allocator.deallocate(d);
  allocator.check_invariants();

  allocator.deallocate(c);  // everything merges: the whole segment is free, not a split piece
  allocator.check_invariants();
  s = allocator.stats();
  EXPECT_EQ(s.inactive_split[kSmall].current, 0);
  EXPECT_EQ(s.inactive_split.aggregate().current, 0);
  EXPECT_EQ(s.inactive_split_bytes.aggregate().current, 0);
  EXPECT_EQ(s.inactive_split[kSmall].peak, 2);
  EXPECT_EQ(s.inactive_split_bytes[kSmall].peak, static_cast<int64_t>(2 * kMiB - 256 * kKiB));
  // +1 (first split), +1 (B freed), +1 (D freed); -1 (D allocated), -2 (C merged everything).
  expect_stat(s.inactive_split[kSmall], 0, 2, 3, 3);
  EXPECT_EQ(allocator.free_block_count(), 1u);
  EXPECT_EQ(allocator.largest_free_block(), 2 * kMiB);
  EXPECT_EQ(allocator.segment_count(), 1u);
  EXPECT_EQ(s.reserved_bytes.aggregate().current, static_cast<int64_t>(2 * kMiB));
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, BestFitPrefersSmallestThenLowestSegmentAndOffset) {
  // Two full small segments of two blocks each (the largest small size, 1 MiB - 512).
  constexpr size_t kHalf = kMiB - 512;
  CachingAllocatorOptions options = merge_at_once();
  options.small_segment_bytes = 2 * kHalf;
  CachingAllocator allocator(device(), options);
  Allocation a1 = allocator.allocate(kHalf), a2 = allocator.allocate(kHalf);
  Allocation b1 = allocator.allocate(kHalf), b2 = allocator.allocate(kHalf);
  ASSERT_EQ(allocator.segment_count(), 2u);
  ASSERT_EQ(a1.segment, a2.segment);
  ASSERT_EQ(b1.segment, b2.segment);
  ASSERT_LT(a1.segment->id, b1.segment->id);
  allocator.deallocate(b1);  // segment 2, offset 0
  allocator.deallocate(a2);  // segment 1, offset 1 MiB: lower segment id wins the tie
  allocator.check_invariants();
  Allocation x = allocator.allocate(kHalf);
  EXPECT_EQ(x.ptr, a2.ptr);
  Allocation y = allocator.allocate(kHalf);
  EXPECT_EQ(y.ptr, b1.ptr);
  allocator.check_invariants();

  // Smallest fitting block wins over a lower address: free 128 KiB at offset 0 and a 64 KiB
  // block after an allocated one.
  allocator.deallocate(x);
  allocator.deallocate(y);
  allocator.deallocate(a1);
  allocator.deallocate(b2);
  allocator.check_invariants();
  Allocation p = allocator.allocate(128 * kKiB);
  Allocation q = allocator.allocate(64 * kKiB);
  Allocation r = allocator.allocate(64 * kKiB);
  Allocation t = allocator.allocate(64 * kKiB);
  allocator.deallocate(p);  // 128 KiB free at the start of the segment
  allocator.deallocate(r);  // 64 KiB free between q and t
  allocator.check_invariants();
  Allocation u = allocator.allocate(60 * kKiB);
  EXPECT_EQ(u.ptr, r.ptr);
  allocator.deallocate(u);
  allocator.deallocate(q);
  allocator.deallocate(t);
  allocator.check_invariants();
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, SmallAndLargePoolsAreKeptApart) {
  CachingAllocator allocator(device());
  Allocation small = allocator.allocate(kMiB - 1000);  // rounds to 1 MiB - 512: small
  Allocation large = allocator.allocate(kMiB + 1);  // 1 MiB + 512: large, 2 MiB segment
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  expect_stat(s.segment[kSmall], 1, 1, 1, 0);
  expect_stat(s.segment[kLarge], 1, 1, 1, 0);
  expect_stat(s.segment.aggregate(), 2, 2, 2, 0);
  EXPECT_EQ(s.reserved_bytes[kSmall].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.reserved_bytes[kLarge].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.allocated_bytes[kSmall].current, static_cast<int64_t>(kMiB - 512));
  EXPECT_EQ(s.allocated_bytes[kLarge].current, static_cast<int64_t>(kMiB + 512));
  EXPECT_EQ(s.requested_bytes[kSmall].current, static_cast<int64_t>(kMiB - 1000));
  EXPECT_EQ(s.requested_bytes[kLarge].current, static_cast<int64_t>(kMiB + 1));
  EXPECT_EQ(s.allocation[kSmall].current, 1);
  EXPECT_EQ(s.allocation[kLarge].current, 1);
  // The large segment's free tail (1 MiB - 512) is a large-pool split piece.
  EXPECT_EQ(s.inactive_split[kLarge].current, 1);
  EXPECT_EQ(s.inactive_split_bytes[kLarge].current, static_cast<int64_t>(kMiB - 512));
  EXPECT_EQ(s.inactive_split[kSmall].current, 1);
  EXPECT_EQ(s.inactive_split_bytes[kSmall].current, static_cast<int64_t>(kMiB + 512));

  // A small request never takes large-pool space, even though the large segment has a free 1 MiB
  // tail: it comes from the small segment.
  allocator.deallocate(large);
  Allocation tiny = allocator.allocate(4096);
  EXPECT_EQ(tiny.segment, small.segment);
  allocator.deallocate(tiny);
  allocator.deallocate(small);
  allocator.check_invariants();
  // Both segments are wholly free now. A large request reuses the large one...
  Allocation l1 = allocator.allocate(2 * kMiB);
  EXPECT_EQ(l1.segment, large.segment);
  // ...and the next one gets a new segment, although the small pool holds a free 2 MiB segment.
  Allocation l2 = allocator.allocate(2 * kMiB);
  EXPECT_NE(l2.segment, small.segment);
  allocator.check_invariants();
  s = allocator.stats();
  EXPECT_EQ(s.num_device_alloc, 3);
  EXPECT_EQ(s.segment[kSmall].current, 1);
  EXPECT_EQ(s.segment[kLarge].current, 2);
  // A request of exactly 1 MiB is large (storage/stats.h, kSmallSize): it takes the tail of
  // neither the small segment nor a new one.
  Allocation exact = allocator.allocate(kMiB);
  EXPECT_EQ(allocator.stats().allocation[kLarge].current, 3);
  EXPECT_NE(exact.segment, small.segment);
  allocator.deallocate(exact);
  allocator.deallocate(l1);
  allocator.deallocate(l2);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, LargeSegmentIsRoundedToLargeSegmentRound) {
  CachingAllocator allocator(device());
  Allocation a = allocator.allocate(5 * kMiB + 1);
  EXPECT_EQ(a.segment->size, 6 * kMiB);
  EXPECT_EQ(allocator.allocated_size(a), 5 * kMiB + 512);
  CachingAllocatorOptions options;
  options.small_segment_bytes = 4 * kMiB;
  options.large_segment_round = 4 * kMiB;
  CachingAllocator other(device(), options);
  Allocation b = other.allocate(100);
  Allocation c = other.allocate(5 * kMiB);
  EXPECT_EQ(b.segment->size, 4 * kMiB);
  EXPECT_EQ(c.segment->size, 8 * kMiB);
  allocator.check_invariants();
  other.check_invariants();
  allocator.deallocate(a);
  other.deallocate(b);
  other.deallocate(c);
  testing::expect_nothing_live(allocator);
  testing::expect_nothing_live(other);
}

TEST_F(CachingAllocatorTest, LargeSegmentIsCappedByTheDevicesLargestAllocation) {
  testing::FaultInjectionBackend backend(
      {.device = kScriptedDevice, .max_alloc_bytes = 3 * kMiB + 512});
  CachingAllocator allocator(backend);
  Allocation a = allocator.allocate(3 * kMiB + 1);  // 4 MiB by the rounding rule, capped
  EXPECT_EQ(a.segment->size, 3 * kMiB + 512);
  EXPECT_EQ(allocator.allocated_size(a), 3 * kMiB + 512);
  allocator.check_invariants();
  expect_invalid_argument([&] { allocator.allocate(3 * kMiB + 513); }, {"opencl:99"});
  allocator.deallocate(a);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, ThousandsOfLiveBlocksCoalesceBackIntoOneSegment) {
  // More live blocks than the first block-record chunk and the first live-table size hold.
  CachingAllocator allocator(device(), merge_at_once());
  constexpr size_t kBlocks = 4096;  // 4096 x 512 B: exactly one 2 MiB small segment
  std::vector<Allocation> live;
  for (size_t k = 0; k < kBlocks; ++k) live.push_back(allocator.allocate(512));
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  EXPECT_EQ(s.segment.aggregate().current, 1);
  EXPECT_EQ(s.allocation[kSmall].current, static_cast<int64_t>(kBlocks));
  EXPECT_EQ(s.inactive_split.aggregate().current, 0);  // the segment is used up to its last byte
  EXPECT_EQ(allocator.free_block_count(), 0u);
  std::mt19937 rng(42);
  std::shuffle(live.begin(), live.end(), rng);
  for (size_t k = 0; k < kBlocks; ++k) {
    allocator.deallocate(live[k]);
    if (k % 256 == 0) allocator.check_invariants();
  }
  allocator.check_invariants();
  s = allocator.stats();
  EXPECT_EQ(allocator.free_block_count(), 1u);
  EXPECT_EQ(allocator.largest_free_block(), 2 * kMiB);
  EXPECT_EQ(s.inactive_split.aggregate().current, 0);
  EXPECT_EQ(s.num_device_alloc, 1);
  testing::expect_nothing_live(allocator);
}

// ---------------------------------------------------------------------------------------------
// Statistics.

TEST_F(CachingAllocatorTest, StatisticsAreExactAfterEveryStep) {
  CachingAllocator allocator(device());
  Allocation a = allocator.allocate(1000);  // 1024 B, new 2 MiB small segment
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  expect_stat(s.allocation.aggregate(), 1, 1, 1, 0);
  expect_stat(s.allocation[kSmall], 1, 1, 1, 0);
  expect_stat(s.active.aggregate(), 1, 1, 1, 0);
  expect_stat(s.allocated_bytes.aggregate(), 1024, 1024, 1024, 0);
  expect_stat(s.active_bytes.aggregate(), 1024, 1024, 1024, 0);
  expect_stat(s.requested_bytes.aggregate(), 1000, 1000, 1000, 0);
  expect_stat(s.reserved_bytes.aggregate(), i64(2 * kMiB), i64(2 * kMiB), i64(2 * kMiB), 0);
  expect_stat(s.segment.aggregate(), 1, 1, 1, 0);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.num_device_free, 0);

  const int64_t both = i64(1024 + 3 * kMiB), both_requested = i64(1000 + 3 * kMiB);
  Allocation b = allocator.allocate(3 * kMiB);  // large, 3 MiB segment, no split
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.allocation.aggregate(), 2, 2, 2, 0);
  expect_stat(s.allocation[kLarge], 1, 1, 1, 0);
  expect_stat(s.allocated_bytes.aggregate(), both, both, both, 0);
  expect_stat(s.allocated_bytes[kLarge], i64(3 * kMiB), i64(3 * kMiB), i64(3 * kMiB), 0);
  expect_stat(s.reserved_bytes.aggregate(), i64(5 * kMiB), i64(5 * kMiB), i64(5 * kMiB), 0);
  expect_stat(s.reserved_bytes[kLarge], i64(3 * kMiB), i64(3 * kMiB), i64(3 * kMiB), 0);
  expect_stat(s.segment[kLarge], 1, 1, 1, 0);
  expect_stat(s.inactive_split[kLarge], 0, 0, 0, 0);
  EXPECT_EQ(s.num_device_alloc, 2);

  allocator.deallocate(b);
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.allocation.aggregate(), 1, 2, 2, 1);
  expect_stat(s.allocation[kLarge], 0, 1, 1, 1);
  expect_stat(s.allocated_bytes.aggregate(), 1024, both, both, i64(3 * kMiB));
  expect_stat(s.requested_bytes.aggregate(), 1000, both_requested, both_requested, i64(3 * kMiB));
  // Cached:
  expect_stat(s.reserved_bytes.aggregate(), i64(5 * kMiB), i64(5 * kMiB), i64(5 * kMiB), 0);
  EXPECT_EQ(allocator.cached_bytes(), 5 * kMiB - 1024);

  allocator.deallocate(a);
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.allocation.aggregate(), 0, 2, 2, 2);
  expect_stat(s.allocated_bytes.aggregate(), 0, both, both, both);
  expect_stat(s.requested_bytes.aggregate(), 0, both_requested, both_requested, both_requested);
  expect_stat(s.segment.aggregate(), 2, 2, 2, 0);

  allocator.empty_cache();
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.reserved_bytes.aggregate(), 0, i64(5 * kMiB), i64(5 * kMiB), i64(5 * kMiB));
  expect_stat(s.reserved_bytes[kSmall], 0, i64(2 * kMiB), i64(2 * kMiB), i64(2 * kMiB));
  expect_stat(s.segment.aggregate(), 0, 2, 2, 2);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_alloc_retries, 0);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, ResetPeakAndResetAccumulated) {
  CachingAllocator allocator(device());
  Allocation a = allocator.allocate(3 * kMiB);
  Allocation b = allocator.allocate(4096);
  allocator.deallocate(a);
  allocator.check_invariants();

  allocator.reset_peak_stats();
  DeviceStats s = allocator.stats();
  expect_stat(s.allocated_bytes.aggregate(), 4096, 4096, i64(3 * kMiB + 4096), i64(3 * kMiB));
  expect_stat(s.allocation[kLarge], 0, 0, 1, 1);
  EXPECT_EQ(s.reserved_bytes.aggregate().peak, s.reserved_bytes.aggregate().current);
  EXPECT_EQ(s.num_device_alloc, 2);

  allocator.reset_accumulated_stats();
  s = allocator.stats();
  expect_stat(s.allocated_bytes.aggregate(), 4096, 4096, 0, 0);
  expect_stat(s.reserved_bytes.aggregate(), i64(5 * kMiB), i64(5 * kMiB), 0, 0);
  expect_stat(s.allocation.aggregate(), 1, 1, 0, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.num_device_free, 0);
  allocator.check_invariants();

  // Counting resumes from zero.
  allocator.deallocate(b);
  allocator.empty_cache();
  s = allocator.stats();
  expect_stat(s.allocated_bytes.aggregate(), 0, 4096, 0, 4096);
  expect_stat(s.segment.aggregate(), 0, 2, 0, 2);
  EXPECT_EQ(s.num_device_free, 2);
  testing::expect_nothing_live(allocator);
}

// ---------------------------------------------------------------------------------------------
// Giving memory back.

TEST_F(CachingAllocatorTest, EmptyCacheReleasesOnlyWhollyFreeSegments) {
  const size_t live_at_start = device().live_segments();
  CachingAllocator allocator(device());
  Allocation keep = allocator.allocate(4096);  // pins its small segment
  std::vector<Allocation> rest;
  for (size_t n : {size_t{3 * kMiB}, size_t{5 * kMiB}, size_t{kMiB}, size_t{kMiB}}) {
    rest.push_back(allocator.allocate(n));
  }
  for (const Allocation& a : rest) allocator.deallocate(a);
  allocator.check_invariants();
  const size_t segments = allocator.segment_count();
  EXPECT_EQ(device().live_segments(), live_at_start + segments);

  allocator.empty_cache();
  allocator.check_invariants();
  EXPECT_EQ(allocator.segment_count(), 1u);
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(device().live_segments(), live_at_start + 1);
  Allocation again = allocator.allocate(4096);  // still works from the pinned segment
  EXPECT_EQ(again.segment, keep.segment);
  allocator.deallocate(again);
  allocator.deallocate(keep);

  allocator.empty_cache();
  allocator.check_invariants();
  const DeviceStats s = allocator.stats();
  EXPECT_EQ(s.reserved_bytes.aggregate().current, 0);
  EXPECT_EQ(s.segment.aggregate().current, 0);
  EXPECT_EQ(s.num_device_free, s.num_device_alloc);
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  EXPECT_EQ(device().live_segments(), live_at_start);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, ReleaseUnfitOnGrowGivesBackTooSmallLargeSegments) {
  for (bool release_unfit : {true, false}) {
    SCOPED_TRACE(release_unfit ? "release_unfit_on_grow" : "keep unfit segments");
    CachingAllocatorOptions options;
    options.release_unfit_on_grow = release_unfit;
    CachingAllocator allocator(device(), options);
    Allocation a = allocator.allocate(3 * kMiB);   // 3 MiB segment
    Allocation p = allocator.allocate(1536 * kKiB);  // 2 MiB segment, stays partly used
    Allocation q = allocator.allocate(4 * kMiB);     // 4 MiB segment
    Allocation small = allocator.allocate(4096);   // small segment, wholly free later
    allocator.deallocate(small);
    allocator.deallocate(a);                       // 3 MiB segment wholly free
    allocator.deallocate(q);                       // 4 MiB segment wholly free
    allocator.check_invariants();
    ASSERT_EQ(allocator.segment_count(), 4u);

    Allocation b = allocator.allocate(5 * kMiB);   // fits none: a new 5 MiB segment
    allocator.check_invariants();
    const DeviceStats s = allocator.stats();
    if (release_unfit) {
      // The two wholly free large segments went back first; the partly used one and the small
      // pool's free segment stayed.
      EXPECT_EQ(s.num_device_free, 2);
      EXPECT_EQ(s.segment[kLarge].current, 2);
      EXPECT_EQ(s.reserved_bytes[kLarge].current, static_cast<int64_t>(7 * kMiB));
      EXPECT_EQ(s.reserved_bytes[kLarge].peak, static_cast<int64_t>(9 * kMiB));
    } else {
      EXPECT_EQ(s.num_device_free, 0);
      EXPECT_EQ(s.segment[kLarge].current, 4);
      EXPECT_EQ(s.reserved_bytes[kLarge].current, static_cast<int64_t>(14 * kMiB));
      EXPECT_EQ(s.reserved_bytes[kLarge].peak, static_cast<int64_t>(14 * kMiB));
    }
    EXPECT_EQ(s.segment[kSmall].current, 1);
    EXPECT_EQ(s.num_device_alloc, 5);
    allocator.deallocate(b);
    allocator.deallocate(p);
    testing::expect_nothing_live(allocator);
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input: InvalidArgument, and stats() byte for byte unchanged.

TEST_F(CachingAllocatorTest, BadSizesAreInvalidArgumentsAndChangeNothing) {
  CachingAllocator allocator(device());
  Allocation keep = allocator.allocate(4096);
  const uint64_t max_alloc = device().properties().max_alloc_bytes;
  const DeviceStats before = allocator.stats();
  for (size_t bad : {SIZE_MAX, SIZE_MAX - 100, static_cast<size_t>(max_alloc) + 1}) {
    expect_invalid_argument([&] { allocator.allocate(bad); }, {"opencl:0", std::to_string(bad)});
    EXPECT_TRUE(same_stats(before, allocator.stats()));
    allocator.check_invariants();
  }
  EXPECT_EQ(allocator.stats().num_ooms, 0);
  allocator.deallocate(keep);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, BadHandlesAreInvalidArgumentsAndChangeNothing) {
  CachingAllocator allocator(device());
  CachingAllocator other(device());
  Allocation a = allocator.allocate(4096);
  Allocation b = allocator.allocate(8192);
  Allocation foreign = other.allocate(4096);
  Allocation dead = allocator.allocate(512);
  allocator.deallocate(dead);
  allocator.check_invariants();

  const DeviceStats before = allocator.stats();
  const DeviceStats other_before = other.stats();
  const auto rejects = [&](const Allocation& handle, const char* what) {
    SCOPED_TRACE(what);
    expect_invalid_argument([&] { allocator.deallocate(handle); }, {"opencl:0", hex(handle.ptr)});
    expect_invalid_argument([&] { (void)allocator.allocated_size(handle); }, {hex(handle.ptr)});
    EXPECT_TRUE(same_stats(before, allocator.stats()));
    allocator.check_invariants();
  };
  rejects(dead, "double free");
  rejects(foreign, "another allocator's handle");
  Allocation forged = a;
  forged.id += 1000;
  rejects(forged, "forged id");
  forged = a;
  forged.ptr = static_cast<char*>(a.ptr) + 512;
  forged.offset += 512;
  rejects(forged, "interior address");
  forged = a;
  forged.block = b.block;
  rejects(forged, "another block's record");
  forged = a;
  forged.size = 1;
  rejects(forged, "wrong size");
  forged = a;
  forged.segment = foreign.segment;
  rejects(forged, "wrong segment");
  EXPECT_TRUE(same_stats(other_before, other.stats()));

  // The genuine handles still work.
  allocator.deallocate(a);
  allocator.deallocate(b);
  other.deallocate(foreign);
  allocator.check_invariants();
  other.check_invariants();
  testing::expect_nothing_live(allocator);
  testing::expect_nothing_live(other);
}

// ---------------------------------------------------------------------------------------------
// Data.

void expect_neighbours_hold_their_bytes(MemoryBackend& backend) {
  CachingAllocator allocator(backend, merge_at_once());
  constexpr size_t kBytes = 4096;
  Allocation a = allocator.allocate(kBytes);
  Allocation b = allocator.allocate(kBytes);
  ASSERT_EQ(a.segment, b.segment);
  ASSERT_EQ(b.offset, a.offset + kBytes);  // neighbours: any overlap would show below
  std::vector<uint8_t> pattern_a(kBytes), pattern_b(kBytes);
  for (size_t i = 0; i < kBytes; ++i) {
    pattern_a[i] = static_cast<uint8_t>(i * 7 + 1);
    pattern_b[i] = static_cast<uint8_t>(255 - i * 3);
  }
  backend.write(*a.segment, a.offset, pattern_a.data(), kBytes);
  backend.write(*b.segment, b.offset, pattern_b.data(), kBytes);
  std::vector<uint8_t> back_a(kBytes), back_b(kBytes);
  backend.read(*a.segment, a.offset, back_a.data(), kBytes);
  backend.read(*b.segment, b.offset, back_b.data(), kBytes);
  EXPECT_EQ(back_a, pattern_a);
  EXPECT_EQ(back_b, pattern_b);

  // After a free and a reuse by another size, the neighbour is still intact.
  allocator.deallocate(a);
  Allocation c = allocator.allocate(1000);
  EXPECT_EQ(c.ptr, a.ptr);
  backend.fill(*c.segment, c.offset, 0xEE, allocator.allocated_size(c));
  backend.read(*b.segment, b.offset, back_b.data(), kBytes);
  EXPECT_EQ(back_b, pattern_b);
  allocator.check_invariants();
  allocator.deallocate(b);
  allocator.deallocate(c);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, DataLandsInNeighbouringBlocksWithoutOverlap) {
  expect_neighbours_hold_their_bytes(device());
}

TEST_F(CachingAllocatorTest, HostDataLandsInNeighbouringBlocksWithoutOverlap) {
  expect_neighbours_hold_their_bytes(testing::host_backend());
}

TEST_F(CachingAllocatorTest, HostBackendReusesAndAligns) {
  MemoryBackend& host = testing::host_backend();
  CachingAllocator allocator(host);
  EXPECT_EQ(allocator.device(), (Device{DeviceType::kCpu, 0}));
  Allocation a = allocator.allocate(777);
  EXPECT_EQ(a.offset % std::max<size_t>(512, host.properties().base_addr_align_bytes), 0u);
  allocator.deallocate(a);
  Allocation b = allocator.allocate(777);
  EXPECT_EQ(b.ptr, a.ptr);
  EXPECT_EQ(allocator.stats().num_device_alloc, 1);
  allocator.check_invariants();
  allocator.deallocate(b);
  testing::expect_nothing_live(allocator);
}

// ---------------------------------------------------------------------------------------------
// Lifetime.

TEST_F(CachingAllocatorTest, DestructorReleasesLeakedBlocksWithOneWarning) {
  const size_t live_at_start = device().live_segments();
  {
    CachingAllocator allocator(device());
    (void)allocator.allocate(4096);
    (void)allocator.allocate(3 * kMiB);
    allocator.deallocate(allocator.allocate(100));
    ::testing::internal::CaptureStderr();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("2 live block(s)"), std::string::npos) << err;
  EXPECT_NE(err.find("opencl:0"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(device().live_segments(), live_at_start);
}

// ---------------------------------------------------------------------------------------------
// Randomized: fixed seed, every step checked.

void run_random_ops(MemoryBackend& backend, const CachingAllocatorOptions& options, uint32_t seed,
                    int steps) {
  CachingAllocator allocator(backend, options);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(0.0, std::log(4.0 * kMiB));
  std::uniform_int_distribution<int> coin(0, 99);
  std::vector<Allocation> live;
  int64_t requested = 0, allocated = 0, ooms = 0;
  constexpr int64_t kLiveCap = 96 * kMiB;
  for (int step = 0; step < steps; ++step) {
    const bool do_free = !live.empty() && (coin(rng) < 45 || requested > kLiveCap);
    if (do_free) {
      const size_t k = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      const Allocation a = live[k];
      allocated -= static_cast<int64_t>(allocator.allocated_size(a));
      requested -= static_cast<int64_t>(a.size);
      allocator.deallocate(a);
      live[k] = live.back();
      live.pop_back();
    } else if (coin(rng) < 2) {
      allocator.empty_cache();
    } else {
      const size_t n = std::max<size_t>(1, static_cast<size_t>(std::exp(log_size(rng))));
      try {
        const Allocation a = allocator.allocate(n);
        ASSERT_TRUE(a);
        ASSERT_EQ(a.offset % allocator.quantum(), 0u);
        allocated += static_cast<int64_t>(allocator.allocated_size(a));
        requested += static_cast<int64_t>(n);
        live.push_back(a);
      } catch (const OutOfMemoryError&) {
        ASSERT_NE(options.memory_limit, 0u) << "out of memory without a limit at step " << step;
        ++ooms;
      }
    }
    allocator.check_invariants();
    const DeviceStats s = allocator.stats();
    ASSERT_EQ(s.allocated_bytes.aggregate().current, allocated) << "step " << step;
    ASSERT_EQ(s.requested_bytes.aggregate().current, requested) << "step " << step;
    ASSERT_EQ(s.allocation.aggregate().current, static_cast<int64_t>(live.size()))
        << "step " << step;
    ASSERT_EQ(s.num_ooms, ooms) << "step " << step;
    if (options.memory_limit != 0) {
      ASSERT_LE(s.reserved_bytes.aggregate().current, static_cast<int64_t>(options.memory_limit));
    }
    if (step % 500 == 0) {  // live blocks never overlap
      std::vector<std::pair<uintptr_t, size_t>> ranges;
      for (const Allocation& a : live) {
        ranges.emplace_back(reinterpret_cast<uintptr_t>(a.ptr), allocator.allocated_size(a));
      }
      std::sort(ranges.begin(), ranges.end());
      for (size_t i = 1; i < ranges.size(); ++i) {
        ASSERT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first) << "step " << step;
      }
    }
  }
  if (options.memory_limit != 0) {
    EXPECT_GT(ooms, 0) << "the limit was never reached";
  }
  for (const Allocation& a : live) allocator.deallocate(a);
  allocator.check_invariants();
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorTest, RandomizedOperationsKeepEveryInvariant) {
  run_random_ops(device(), CachingAllocatorOptions{}, 20240601u, 20000);
}

TEST_F(CachingAllocatorTest, RandomizedOperationsMergingAtOnceKeepEveryInvariant) {
  run_random_ops(device(), merge_at_once(), 20261128u, 20000);
}

TEST_F(CachingAllocatorTest, RandomizedOperationsUnderALimitKeepEveryInvariant) {
  CachingAllocatorOptions options;
  options.memory_limit = 48 * kMiB;
  options.release_unfit_on_grow = false;
  run_random_ops(testing::host_backend(), options, 7u, 20000);
}

}  // namespace
}  // namespace oclvm
