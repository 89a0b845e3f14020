// tests/storage/caching_allocator_limits_test.cc — CachingAllocator at its limits: out of memory
// under a memory limit and when the driver refuses (a FaultInjectionBackend, test_util.h), and
// PyTorch's settings (roundup_power2_divisions, max_split_size_mb, garbage_collection_threshold).
//
// As in caching_allocator_test.cc: exact statistics and check_invariants() after each step, and
// no segment or address range outlives a test (LeakCheckedTest).
#include "oclvm/storage/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "oclvm/storage/errors.h"
#include "tests/storage/caching_allocator_test_util.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

class CachingAllocatorLimitsTest : public CachingAllocatorTest {};

// ---------------------------------------------------------------------------------------------
// Out of memory.

TEST_F(CachingAllocatorLimitsTest, OutOfMemoryUnderALimitChangesOnlyNumOoms) {
  CachingAllocatorOptions options = merge_at_once();
  options.memory_limit = 8 * kMiB;
  CachingAllocator allocator(device(), options);
  EXPECT_EQ(allocator.memory_limit(), 8 * kMiB);
  Allocation big = allocator.allocate(6 * kMiB);    // 6 MiB segment
  Allocation small = allocator.allocate(kMiB / 2);  // 2 MiB small segment: 8 MiB reserved
  allocator.check_invariants();

  const DeviceStats before = allocator.stats();
  try {
    allocator.allocate(2 * kMiB);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("opencl:0"), std::string::npos) << text;
    EXPECT_NE(text.find("2.00 MiB (2097152 bytes)"), std::string::npos) << text;
    EXPECT_NE(text.find("limit 8.00 MiB"), std::string::npos) << text;
    EXPECT_NE(text.find("6.50 MiB allocated"), std::string::npos) << text;
    EXPECT_NE(text.find("8.00 MiB reserved"), std::string::npos) << text;
  }
  allocator.check_invariants();
  DeviceStats expected = before;
  expected.num_ooms = 1;
  EXPECT_TRUE(same_stats(expected, allocator.stats()));

  // Freeing the small block makes 2 MiB cached, but the 6 MiB segment is still live: the limit
  // cannot be met even with an empty cache, so nothing is released and only num_ooms moves.
  allocator.deallocate(small);
  const DeviceStats cached = allocator.stats();
  EXPECT_THROW(allocator.allocate(3 * kMiB), OutOfMemoryError);
  expected = cached;
  expected.num_ooms = 2;
  EXPECT_TRUE(same_stats(expected, allocator.stats()));
  allocator.check_invariants();

  // Still works: a small request is served from the cached small segment.
  Allocation again = allocator.allocate(kMiB / 2);
  allocator.check_invariants();
  EXPECT_EQ(allocator.stats().num_device_alloc, 2);
  allocator.deallocate(again);
  allocator.deallocate(big);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorLimitsTest, LimitRetryReleasesCachedSegmentsAndSucceeds) {
  CachingAllocatorOptions options;
  options.memory_limit = 8 * kMiB;
  CachingAllocator allocator(device(), options);
  Allocation small = allocator.allocate(kMiB / 2);  // 2 MiB small segment
  Allocation big = allocator.allocate(6 * kMiB);    // 6 MiB large segment: 8 MiB reserved
  allocator.deallocate(small);                      // the small segment is cached, wholly free
  allocator.check_invariants();

  Allocation more = allocator.allocate(2 * kMiB);   // needs 2 MiB more: retry after empty cache
  allocator.check_invariants();
  const DeviceStats s = allocator.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.num_device_alloc, 3);
  EXPECT_EQ(s.segment[kSmall].current, 0);
  EXPECT_EQ(s.reserved_bytes.aggregate().current, static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(s.reserved_bytes.aggregate().peak, static_cast<int64_t>(8 * kMiB));
  allocator.deallocate(more);
  allocator.deallocate(big);
  testing::expect_nothing_live(allocator);
}

// Note [Segments that fit under a limit]: the usual 2 MiB small segment would pass the limit, so
// the segment is the room left; out of memory comes only once the bytes are not there.
TEST_F(CachingAllocatorLimitsTest, ASegmentShrinksToTheRoomLeftUnderTheLimit) {
  CachingAllocatorOptions options;
  options.memory_limit = 3 * kMiB;
  CachingAllocator allocator(device(), options);
  Allocation big = allocator.allocate(2 * kMiB);  // a 2 MiB large segment
  Allocation first = allocator.allocate(512);     // a small segment of the 1 MiB left
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  EXPECT_EQ(s.reserved_bytes[kSmall].current, i64(kMiB));
  EXPECT_EQ(s.reserved_bytes.aggregate().current, i64(3 * kMiB));
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.num_ooms, 0);

  Allocation second = allocator.allocate(kMiB / 2);  // from the same small segment
  allocator.check_invariants();
  EXPECT_EQ(allocator.stats().num_device_alloc, 2);

  // What is left of the small segment (512 KiB - 512 B) cannot hold 600 KiB, and no byte is left
  // under the limit: a real out-of-memory, and nothing else changes.
  const DeviceStats before = allocator.stats();
  EXPECT_THROW(allocator.allocate(600 * 1024), OutOfMemoryError);
  DeviceStats expected = before;
  expected.num_ooms = 1;
  EXPECT_TRUE(same_stats(expected, allocator.stats()));
  allocator.check_invariants();

  allocator.deallocate(second);
  allocator.deallocate(first);
  allocator.deallocate(big);
  testing::expect_nothing_live(allocator);
}

// When the request fits the room left, the smaller segment is made without giving the cache back.
TEST_F(CachingAllocatorLimitsTest, AShrunkSegmentKeepsTheCachedSegments) {
  CachingAllocatorOptions options;
  options.memory_limit = 3 * kMiB + kMiB / 2;
  CachingAllocator allocator(device(), options);
  allocator.deallocate(allocator.allocate(2 * kMiB));  // a wholly free 2 MiB large segment
  Allocation small = allocator.allocate(kMiB - 512);  // 2 MiB would pass: 1.5 MiB instead
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  EXPECT_EQ(s.reserved_bytes[kSmall].current, i64(kMiB + kMiB / 2));
  EXPECT_EQ(s.reserved_bytes[kLarge].current, i64(2 * kMiB));
  EXPECT_EQ(s.num_device_free, 0);
  EXPECT_EQ(s.num_alloc_retries, 0);

  // 768 KiB fits neither the 512.5 KiB left in the small segment nor the room under the limit: the
  // cached large segment goes back first, then a small segment of the usual size fits.
  Allocation more = allocator.allocate(768 * 1024);
  allocator.check_invariants();
  s = allocator.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.reserved_bytes[kSmall].current, i64(3 * kMiB + kMiB / 2));
  EXPECT_EQ(s.reserved_bytes[kLarge].current, 0);
  allocator.deallocate(more);
  allocator.deallocate(small);
  testing::expect_nothing_live(allocator);
}

TEST_F(CachingAllocatorLimitsTest, DriverRefusalEmptiesTheCacheAndRetriesOnce) {
  testing::FaultInjectionBackend backend({.device = kScriptedDevice, .max_alloc_bytes = 64 * kMiB});
  CachingAllocator allocator(backend);

  // Nothing cached: the refusal becomes OutOfMemoryError at once, no retry, nothing else changes.
  backend.refuse_next(1);
  DeviceStats before = allocator.stats();
  try {
    allocator.allocate(4 * kMiB);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("scripted driver refusal"), std::string::npos) << text;
    EXPECT_NE(text.find("opencl:99"), std::string::npos) << text;
    EXPECT_NE(text.find("4.00 MiB (4194304 bytes)"), std::string::npos) << text;
    EXPECT_NE(text.find("no limit"), std::string::npos) << text;
  }
  DeviceStats expected = before;
  expected.num_ooms = 1;
  EXPECT_TRUE(same_stats(expected, allocator.stats()));
  allocator.check_invariants();

  // A cached small segment: one refusal, then the retry after empty_cache succeeds.
  allocator.deallocate(allocator.allocate(100));
  backend.refuse_next(1);
  Allocation a = allocator.allocate(4 * kMiB);
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.segment.aggregate().current, 1);

  // Refused twice: the cache is given back, the retry fails too, OutOfMemoryError.
  allocator.deallocate(allocator.allocate(100));
  backend.refuse_next(2);
  EXPECT_THROW(allocator.allocate(8 * kMiB), OutOfMemoryError);
  allocator.check_invariants();
  s = allocator.stats();
  EXPECT_EQ(s.num_alloc_retries, 2);
  EXPECT_EQ(s.num_ooms, 2);
  EXPECT_EQ(s.segment.aggregate().current, 1);  // only the live 4 MiB one
  EXPECT_EQ(backend.refusals_left(), 0);

  allocator.deallocate(a);
  testing::expect_nothing_live(allocator);
}

// ---------------------------------------------------------------------------------------------
// PyTorch's settings (PYTORCH_ALLOC_CONF): roundup_power2_divisions, max_split_size_mb,
// garbage_collection_threshold. Each test shows the setting's effect against the default policy.

TEST_F(CachingAllocatorLimitsTest, RoundupPower2DivisionsRoundsToEqualSteps) {
  CachingAllocatorOptions options;
  options.roundup_power2_divisions = 4;
  CachingAllocator allocator(device(), options);
  CachingAllocator plain(device());
  // 1100 KiB lies between 1 MiB and 2 MiB, whose quarters are 256 KiB: it takes 1280 KiB.
  Allocation a = allocator.allocate(1100 * kKiB);
  Allocation p = plain.allocate(1100 * kKiB);
  allocator.check_invariants();
  EXPECT_EQ(allocator.stats().allocated_bytes.aggregate().current, i64(1280 * kKiB));
  EXPECT_EQ(allocator.stats().requested_bytes.aggregate().current, i64(1100 * kKiB));
  EXPECT_EQ(plain.stats().allocated_bytes.aggregate().current, i64(1100 * kKiB));
  // So a request a little larger gets the same block size (the default gives every size its own).
  allocator.deallocate(a);
  plain.deallocate(p);
  Allocation b = allocator.allocate(1200 * kKiB);
  Allocation q = plain.allocate(1200 * kKiB);
  allocator.check_invariants();
  EXPECT_EQ(b.ptr, a.ptr);
  EXPECT_EQ(allocator.stats().num_device_alloc, 1);
  EXPECT_EQ(allocator.stats().allocated_bytes.aggregate().current, i64(1280 * kKiB));
  EXPECT_EQ(plain.stats().allocated_bytes.aggregate().current, i64(1200 * kKiB));
  allocator.deallocate(b);
  plain.deallocate(q);
  // Powers of two and sizes up to quantum * divisions keep the plain rounding.
  for (size_t n : {size_t{1000}, size_t{2048}, size_t{2 * kMiB}, size_t{64 * kMiB}}) {
    Allocation c = allocator.allocate(n);
    EXPECT_EQ(allocator.stats().allocated_bytes.aggregate().current, i64(round_up(n, 512))) << n;
    allocator.deallocate(c);
  }
  allocator.check_invariants();
  allocator.empty_cache();
  plain.empty_cache();
  testing::expect_nothing_live(allocator);
  testing::expect_nothing_live(plain);

  options.roundup_power2_divisions = 3;
  expect_invalid_argument([&] { CachingAllocator bad(device(), options); },
                          {"roundup_power2_divisions", "3"});
}

TEST_F(CachingAllocatorLimitsTest, MaxSplitSizeKeepsOversizeBlocksWhole) {
  CachingAllocatorOptions options;
  options.max_split_bytes = 32 * kMiB;
  CachingAllocator allocator(device(), options);
  CachingAllocator plain(device());

  // An oversize block is counted, and a smaller request does not carve it up: it gets a segment
  // of its own (the default policy splits the cached 40 MiB block).
  for (CachingAllocator* a : {&allocator, &plain}) {
    Allocation big = a->allocate(40 * kMiB);
    a->deallocate(big);
    Allocation smaller = a->allocate(30 * kMiB);
    a->check_invariants();
    const DeviceStats s = a->stats();
    if (a == &allocator) {
      EXPECT_EQ(s.oversize_segments[kLarge].peak, 1);
      EXPECT_EQ(s.oversize_allocations[kLarge].peak, 1);
      EXPECT_EQ(s.oversize_allocations[kLarge].current, 0);
      EXPECT_EQ(s.num_device_alloc, 2);
      EXPECT_EQ(s.inactive_split[kLarge].current, 0);
    } else {
      EXPECT_EQ(s.oversize_allocations[kLarge].peak, 0);
      EXPECT_EQ(s.num_device_alloc, 1);
      EXPECT_EQ(s.inactive_split[kLarge].current, 1);
    }
    a->deallocate(smaller);
    a->empty_cache();
  }

  // An oversize request takes a cached oversize block whole when it wastes at most 20 MiB...
  Allocation fifty = allocator.allocate(50 * kMiB);
  allocator.deallocate(fifty);
  const int64_t device_allocs = allocator.stats().num_device_alloc;
  Allocation forty = allocator.allocate(40 * kMiB);
  allocator.check_invariants();
  EXPECT_EQ(forty.ptr, fifty.ptr);
  EXPECT_EQ(allocator.stats().num_device_alloc, device_allocs);
  EXPECT_EQ(allocator.stats().allocated_bytes[kLarge].current, i64(50 * kMiB)) << "not split";
  EXPECT_EQ(allocator.stats().requested_bytes[kLarge].current, i64(40 * kMiB));
  EXPECT_EQ(allocator.stats().oversize_allocations[kLarge].current, 1);
  allocator.deallocate(forty);
  // ... and not when it would waste more: 50 MiB for 33 MiB wastes 17, for 29 MiB (not oversize)
  // nothing is taken, for 34 of a 60 MiB block 26 would be wasted.
  Allocation sixty = allocator.allocate(60 * kMiB);
  allocator.deallocate(sixty);
  const int64_t before = allocator.stats().num_device_alloc;
  Allocation thirty_four = allocator.allocate(34 * kMiB);
  allocator.check_invariants();
  EXPECT_EQ(allocator.stats().num_device_alloc, before + 1);
  EXPECT_EQ(allocator.stats().allocated_bytes[kLarge].current, i64(34 * kMiB));
  allocator.deallocate(thirty_four);
  allocator.check_invariants();
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().oversize_segments[kLarge].current, 0);
  testing::expect_nothing_live(allocator);
  testing::expect_nothing_live(plain);
}

TEST_F(CachingAllocatorLimitsTest, GarbageCollectionThresholdGivesBackTheOldestFreeSegments) {
  // Ten blocks of 1 MiB - 512 (the largest small size) in five 2 MiB small segments; the first
  // four segments then wholly free.
  // A 4 MiB large block comes next, under a 16 MiB limit: the default policy keeps the cache
  // (14 MiB fits the limit); with a threshold of 0.5 (8 MiB), three of the four free segments
  // go back first, the oldest first, so that 4 + 4 MiB stays at the threshold.
  for (double threshold : {0.0, 0.5}) {
    CachingAllocatorOptions options;
    options.memory_limit = 16 * kMiB;
    options.garbage_collection_threshold = threshold;
    CachingAllocator allocator(device(), options);
    std::vector<Allocation> blocks;
    for (int i = 0; i < 10; ++i) blocks.push_back(allocator.allocate(kMiB - 512));
    ASSERT_EQ(allocator.segment_count(), 5u);
    for (int i = 0; i < 8; ++i) allocator.deallocate(blocks[static_cast<size_t>(i)]);
    const void* newest_free = blocks[6].segment;
    Allocation large = allocator.allocate(4 * kMiB);
    allocator.check_invariants();
    const DeviceStats s = allocator.stats();
    if (threshold == 0.0) {
      EXPECT_EQ(s.num_device_free, 0);
      EXPECT_EQ(s.reserved_bytes.aggregate().current, i64(14 * kMiB));
    } else {
      EXPECT_EQ(s.num_device_free, 3);
      EXPECT_EQ(s.reserved_bytes.aggregate().current, i64(8 * kMiB));
      // The free segment kept is the newest of the four.
      Allocation again = allocator.allocate(kMiB - 512);
      EXPECT_EQ(again.segment, newest_free);
      allocator.deallocate(again);
    }
    allocator.deallocate(large);
    allocator.deallocate(blocks[8]);
    allocator.deallocate(blocks[9]);
    allocator.check_invariants();
    allocator.empty_cache();
    testing::expect_nothing_live(allocator);
  }
  CachingAllocatorOptions options;
  options.garbage_collection_threshold = 1.0;
  expect_invalid_argument([&] { CachingAllocator bad(device(), options); },
                          {"garbage_collection_threshold"});
}

}  // namespace
}  // namespace oclvm
