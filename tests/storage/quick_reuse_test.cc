// tests/storage/quick_reuse_test.cc — the caching allocator's quick reuse (Note [Quick reuse] in
// storage/caching_allocator.h) on opencl:0 (PoCL): a freed small block parks on the list of its
// size, the next request of that size takes it back, and parked blocks merge before a new segment
// is made, before the cache is emptied and under a memory limit.
//
// Every test checks exact statistics and calls check_invariants() after each step.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "oclvm/storage/caching_allocator.h"
#include "oclvm/storage/errors.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

class QuickReuseTest : public testing::LeakCheckedTest {
 protected:
  static MemoryBackend& device() { return testing::opencl_backend(0); }
};

TEST_F(QuickReuseTest, ASameSizeRequestTakesTheParkedBlockBack) {
  CachingAllocator allocator(device());
  Allocation a = allocator.allocate(4096);
  Allocation b = allocator.allocate(4096);
  const int64_t tail = static_cast<int64_t>(2 * kMiB - 8 * kKiB);
  allocator.deallocate(a);  // parked, not merged: a is free between the live b and nothing
  allocator.check_invariants();
  EXPECT_EQ(allocator.parked_block_count(), 1u);
  EXPECT_EQ(allocator.free_block_count(), 2u);  // the tail and the parked block
  DeviceStats s = allocator.stats();
  expect_stat(s.allocation[kSmall], 1, 2, 2, 1);
  expect_stat(s.inactive_split[kSmall], 2, 2, 2, 0);
  EXPECT_EQ(s.inactive_split_bytes[kSmall].current, tail + 4096);
  EXPECT_EQ(allocator.cached_bytes(), 2 * kMiB - 4096);

  Allocation c = allocator.allocate(4000);  // rounds to 4096: the parked block
  allocator.check_invariants();
  EXPECT_EQ(c.ptr, a.ptr);
  EXPECT_NE(c.id, a.id);
  EXPECT_EQ(allocator.parked_block_count(), 0u);
  EXPECT_EQ(allocator.allocated_size(c), 4096u);
  s = allocator.stats();
  expect_stat(s.allocation[kSmall], 2, 2, 3, 1);
  expect_stat(s.requested_bytes[kSmall], 4096 + 4000, 8192, 4096 * 2 + 4000, 4096);
  expect_stat(s.inactive_split[kSmall], 1, 2, 2, 1);
  EXPECT_EQ(s.inactive_split_bytes[kSmall].current, tail);
  EXPECT_EQ(s.num_device_alloc, 1);

  allocator.deallocate(b);
  allocator.deallocate(c);
  allocator.check_invariants();
  testing::expect_nothing_live(allocator);
}

TEST_F(QuickReuseTest, TheLastParkedBlockOfASizeComesBackFirst) {
  CachingAllocator allocator(device());
  Allocation a = allocator.allocate(1024);
  Allocation b = allocator.allocate(1024);
  Allocation keep = allocator.allocate(1024);
  void* const a_ptr = a.ptr;
  void* const b_ptr = b.ptr;
  allocator.deallocate(a);
  allocator.deallocate(b);
  Allocation first = allocator.allocate(1024);
  Allocation second = allocator.allocate(1024);
  allocator.check_invariants();
  EXPECT_EQ(first.ptr, b_ptr);
  EXPECT_EQ(second.ptr, a_ptr);
  // Another size does not take a parked block: it comes from the free index.
  allocator.deallocate(first);
  Allocation other = allocator.allocate(2048);
  EXPECT_NE(other.ptr, b_ptr);
  EXPECT_EQ(allocator.parked_block_count(), 1u);
  allocator.check_invariants();
  for (const Allocation& x : {second, keep, other}) allocator.deallocate(x);
  testing::expect_nothing_live(allocator);
}

TEST_F(QuickReuseTest, AHandleToAParkedBlockIsRefusedAndChangesNothing) {
  CachingAllocator allocator(device());
  Allocation a = allocator.allocate(512);
  allocator.deallocate(a);
  const DeviceStats before = allocator.stats();
  EXPECT_THROW(allocator.deallocate(a), InvalidArgument);  // a double free
  EXPECT_THROW(allocator.allocated_size(a), InvalidArgument);
  EXPECT_TRUE(same_stats(before, allocator.stats()));
  EXPECT_EQ(allocator.parked_block_count(), 1u);
  // Once the block is handed out again, the old handle (its id) is still refused.
  Allocation b = allocator.allocate(512);
  ASSERT_EQ(b.ptr, a.ptr);
  EXPECT_THROW(allocator.deallocate(a), InvalidArgument);
  allocator.check_invariants();
  allocator.deallocate(b);
  testing::expect_nothing_live(allocator);
}

TEST_F(QuickReuseTest, ParkedBlocksMergeBeforeANewSegmentIsMade) {
  CachingAllocator allocator(device());
  constexpr size_t kBlocks = 4096;  // 4096 x 512 B: exactly one 2 MiB small segment
  std::vector<Allocation> live;
  for (size_t k = 0; k < kBlocks; ++k) live.push_back(allocator.allocate(512));
  std::shuffle(live.begin(), live.end(), std::mt19937(7));
  for (size_t k = 0; k < kBlocks; ++k) {
    allocator.deallocate(live[k]);
    if (k % 512 == 0) allocator.check_invariants();
  }
  allocator.check_invariants();
  EXPECT_EQ(allocator.parked_block_count(), kBlocks);
  DeviceStats s = allocator.stats();
  EXPECT_EQ(s.inactive_split[kSmall].current, static_cast<int64_t>(kBlocks));
  EXPECT_EQ(s.inactive_split_bytes[kSmall].current, static_cast<int64_t>(2 * kMiB));

  // Nothing of 1 MiB - 512 (the largest small size) is parked or in the free index: the parked
  // blocks merge back into the whole segment, which serves the request, and no segment is made.
  Allocation big = allocator.allocate(kMiB - 512);
  allocator.check_invariants();
  s = allocator.stats();
  EXPECT_EQ(allocator.parked_block_count(), 0u);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(big.segment, live[0].segment);
  EXPECT_EQ(big.offset, 0u);
  EXPECT_EQ(s.inactive_split[kSmall].current, 1);
  EXPECT_EQ(s.inactive_split_bytes[kSmall].current, static_cast<int64_t>(kMiB + 512));
  allocator.deallocate(big);
  testing::expect_nothing_live(allocator);
}

TEST_F(QuickReuseTest, EmptyCacheGivesBackTheSegmentsOfParkedBlocks) {
  CachingAllocator allocator(device());
  Allocation a = allocator.allocate(512);
  Allocation b = allocator.allocate(128 * kKiB);  // the largest parked size by default
  allocator.deallocate(a);
  allocator.deallocate(b);
  EXPECT_EQ(allocator.parked_block_count(), 2u);
  allocator.empty_cache();
  allocator.check_invariants();
  const DeviceStats s = allocator.stats();
  EXPECT_EQ(allocator.parked_block_count(), 0u);
  EXPECT_EQ(allocator.segment_count(), 0u);
  EXPECT_EQ(s.reserved_bytes.aggregate().current, 0);
  EXPECT_EQ(s.inactive_split.aggregate().current, 0);
  EXPECT_EQ(s.num_device_free, 1);
  testing::expect_nothing_live(allocator);
}

TEST_F(QuickReuseTest, UnderALimitParkedBlocksMergeBeforeOutOfMemory) {
  CachingAllocatorOptions options;
  options.memory_limit = 2 * kMiB;
  CachingAllocator allocator(device(), options);
  std::vector<Allocation> live;
  for (int k = 0; k < 16; ++k) live.push_back(allocator.allocate(128 * kKiB));
  for (const Allocation& a : live) allocator.deallocate(a);
  EXPECT_EQ(allocator.parked_block_count(), 16u);
  // 1 MiB - 512 fits only in the merged segment; the limit leaves no room for another one.
  Allocation big = allocator.allocate(kMiB - 512);
  EXPECT_EQ(big.offset, 0u);
  allocator.check_invariants();
  EXPECT_EQ(allocator.stats().num_device_alloc, 1);
  EXPECT_EQ(allocator.stats().num_ooms, 0);
  // Now the bytes are not there: out of memory, and the user's allocations are as they were.
  const DeviceStats before = allocator.stats();
  EXPECT_THROW(allocator.allocate(1536 * kKiB), OutOfMemoryError);
  const DeviceStats after = allocator.stats();
  EXPECT_EQ(after.num_ooms, 1);
  EXPECT_EQ(after.allocated_bytes.aggregate().current, before.allocated_bytes.aggregate().current);
  EXPECT_EQ(after.reserved_bytes.aggregate().current, before.reserved_bytes.aggregate().current);
  allocator.deallocate(big);
  testing::expect_nothing_live(allocator);
}

TEST_F(QuickReuseTest, OnlySmallBlocksBelowTheOversizeThresholdPark) {
  CachingAllocatorOptions options;
  options.quick_reuse_bytes = kMiB;
  options.max_split_bytes = 512 * kKiB;  // blocks of 512 KiB and more are oversize
  CachingAllocator allocator(device(), options);
  Allocation small = allocator.allocate(256 * kKiB);
  Allocation oversize = allocator.allocate(600 * kKiB);
  Allocation large = allocator.allocate(3 * kMiB);
  allocator.deallocate(small);
  allocator.deallocate(oversize);
  allocator.deallocate(large);
  allocator.check_invariants();
  EXPECT_EQ(allocator.parked_block_count(), 1u);  // only the 256 KiB block

  options.max_split_bytes = 0;
  options.quick_reuse_bytes = 64 * kKiB;
  CachingAllocator limited(device(), options);
  Allocation under = limited.allocate(64 * kKiB);
  Allocation over = limited.allocate(64 * kKiB + 1);
  limited.deallocate(under);
  limited.deallocate(over);
  limited.check_invariants();
  EXPECT_EQ(limited.parked_block_count(), 1u);
  allocator.empty_cache();
  limited.empty_cache();
  testing::expect_nothing_live(allocator);
  testing::expect_nothing_live(limited);
}

}  // namespace
}  // namespace oclvm
