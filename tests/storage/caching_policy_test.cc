// tests/storage/caching_policy_test.cc — the caching allocator's placement rules beyond plain best
// fit (storage/caching_allocator.h): large segments kept whole (Note [Segments kept whole]),
// unfit segments given back only as far as the high-water mark (Note [Unfit segments given back]),
// first fit in the small pool under a memory limit (Note [First fit under a limit]), and the
// 1 MiB pool boundary. On opencl:0 (PoCL).
//
// Every test checks exact statistics and calls check_invariants() after each step.
#include <gtest/gtest.h>

#include <vector>

#include "oclvm/storage/caching_allocator.h"
#include "tests/storage/caching_allocator_test_util.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

class CachingPolicyTest : public CachingAllocatorTest {};

// A convolutional network's pattern: a 16 MiB activation is freed, then a block of a quarter of
// it is asked for. That block leaves the free segment whole, so the next 16 MiB activation takes
// it; with the rule off the block carves it, and the activation needs a new segment.
TEST_F(CachingPolicyTest, ARequestUnderAThirdOfAFreeSegmentLeavesItWhole) {
  for (bool keep_whole : {true, false}) {
    SCOPED_TRACE(keep_whole ? "keep_large_segments_whole" : "plain best fit");
    CachingAllocatorOptions options = merge_at_once();
    options.keep_large_segments_whole = keep_whole;
    CachingAllocator allocator(device(), options);
    Allocation x = allocator.allocate(16 * kMiB);
    Allocation y = allocator.allocate(16 * kMiB);
    allocator.deallocate(allocator.allocate(12 * kMiB));
    allocator.empty_cache();  // 32 MiB reserved, 44 MiB the high-water mark
    void* const y_segment = y.segment;
    allocator.deallocate(y);  // a wholly free 16 MiB segment
    Allocation quarter = allocator.allocate(4 * kMiB);
    allocator.check_invariants();
    Allocation activation = allocator.allocate(16 * kMiB);
    allocator.check_invariants();
    const DeviceStats s = allocator.stats();
    EXPECT_EQ(s.num_device_alloc, 4);
    if (keep_whole) {
      EXPECT_EQ(quarter.segment->size, 4 * kMiB);  // a segment of its own
      EXPECT_EQ(activation.segment, y_segment);
      EXPECT_EQ(s.reserved_bytes[kLarge].current, i64(36 * kMiB));
      EXPECT_EQ(s.inactive_split[kLarge].current, 0);
    } else {
      EXPECT_EQ(quarter.segment, y_segment);  // carved from the freed segment
      EXPECT_NE(activation.segment, y_segment);
      EXPECT_EQ(s.reserved_bytes[kLarge].current, i64(48 * kMiB));
      EXPECT_EQ(s.inactive_split[kLarge].current, 1);
    }
    allocator.deallocate(activation);
    allocator.deallocate(quarter);
    allocator.deallocate(x);
    testing::expect_nothing_live(allocator);
  }
}

// A request of at least a third of a wholly free segment takes it; so does any request for a
// block of a segment that is already split.
TEST_F(CachingPolicyTest, AThirdOfAFreeSegmentOrASplitOneIsTaken) {
  CachingAllocator allocator(device(), merge_at_once());
  allocator.deallocate(allocator.allocate(18 * kMiB));
  Allocation third = allocator.allocate(6 * kMiB);  // exactly a third: carved from the segment
  Allocation piece = allocator.allocate(2 * kMiB);  // from the split segment's free 12 MiB
  allocator.check_invariants();
  EXPECT_EQ(third.segment, piece.segment);
  EXPECT_EQ(piece.offset, 6 * kMiB);
  EXPECT_EQ(allocator.stats().num_device_alloc, 1);
  allocator.deallocate(piece);
  allocator.deallocate(third);
  testing::expect_nothing_live(allocator);
}

// Before a new large segment, wholly free large segments go back, the largest first, only until
// the new one keeps reserved bytes at the most held before; the rest stay cached.
TEST_F(CachingPolicyTest, UnfitSegmentsGoBackOnlyAsFarAsTheHighWaterMark) {
  CachingAllocator allocator(device(), merge_at_once());
  Allocation a = allocator.allocate(2 * kMiB);
  Allocation b = allocator.allocate(3 * kMiB);
  Allocation c = allocator.allocate(4 * kMiB);
  allocator.deallocate(allocator.allocate(6 * kMiB));
  allocator.empty_cache();  // 9 MiB reserved; 15 MiB the high-water mark
  allocator.deallocate(a);
  allocator.deallocate(b);
  allocator.check_invariants();
  // 7 MiB fits neither free segment. 9 + 7 MiB would pass the mark; giving back the 3 MiB segment
  // is enough (13 MiB), so the 2 MiB one stays cached.
  Allocation d = allocator.allocate(7 * kMiB);
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  EXPECT_EQ(s.num_device_free, 2);  // the 6 MiB segment (empty_cache) and the 3 MiB one
  EXPECT_EQ(s.reserved_bytes[kLarge].current, i64(13 * kMiB));
  EXPECT_EQ(s.segment[kLarge].current, 3);
  // 6 MiB raises the mark whatever goes back: every unfit free segment goes back.
  Allocation e = allocator.allocate(6 * kMiB);
  allocator.check_invariants();
  s = allocator.stats();
  EXPECT_EQ(s.num_device_free, 3);
  EXPECT_EQ(s.reserved_bytes[kLarge].current, i64(17 * kMiB));
  EXPECT_EQ(s.segment[kLarge].current, 3);
  allocator.deallocate(e);
  allocator.deallocate(d);
  allocator.deallocate(c);
  testing::expect_nothing_live(allocator);
}

// Under a memory limit a small request takes the free block at the lowest address that fits,
// not the smallest; without a limit it takes the smallest.
TEST_F(CachingPolicyTest, UnderALimitTheSmallPoolPlacesFirstFit) {
  for (bool limited : {true, false}) {
    SCOPED_TRACE(limited ? "under a limit" : "no limit");
    CachingAllocatorOptions options = merge_at_once();
    options.memory_limit = limited ? 2 * kMiB : 0;
    CachingAllocator allocator(device(), options);
    Allocation low = allocator.allocate(64 * kKiB);     // offset 0
    Allocation keep1 = allocator.allocate(4 * kKiB);
    Allocation mid = allocator.allocate(16 * kKiB);     // a smaller hole further up
    Allocation keep2 = allocator.allocate(4 * kKiB);
    allocator.deallocate(low);
    allocator.deallocate(mid);
    allocator.check_invariants();
    Allocation x = allocator.allocate(8 * kKiB);
    allocator.check_invariants();
    EXPECT_EQ(x.offset, limited ? 0u : mid.offset);
    EXPECT_EQ(allocator.stats().num_device_alloc, 1);
    allocator.deallocate(x);
    allocator.deallocate(keep1);
    allocator.deallocate(keep2);
    testing::expect_nothing_live(allocator);
  }
}

// kSmallSize (storage/stats.h): the largest small request is 1 MiB - 512; 1 MiB is large and gets
// a 1 MiB segment of its own rather than half of a 2 MiB small segment.
TEST_F(CachingPolicyTest, OneMebibyteIsALargeRequest) {
  CachingAllocator allocator(device(), merge_at_once());
  Allocation small = allocator.allocate(kMiB - 512);
  Allocation large = allocator.allocate(kMiB);
  allocator.check_invariants();
  const DeviceStats s = allocator.stats();
  EXPECT_EQ(s.allocation[kSmall].current, 1);
  EXPECT_EQ(s.allocation[kLarge].current, 1);
  EXPECT_EQ(small.segment->size, 2 * kMiB);
  EXPECT_EQ(large.segment->size, kMiB);
  allocator.deallocate(large);
  allocator.deallocate(small);
  testing::expect_nothing_live(allocator);
}

}  // namespace
}  // namespace oclvm
