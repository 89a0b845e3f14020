// tests/storage/buddy_allocator_test.cc — BuddyAllocator on PoCL and on the host: power-of-two
// rounding, exact split and buddy-merge sequences, arenas of their own for large requests, the
// cache and the out-of-memory ladder (memory limit and a refusing driver), exact statistics and
// bad input that must change nothing.
#include "oclvm/storage/buddy_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <vector>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/system_allocator.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

BuddyAllocatorOptions small_arenas(uint64_t memory_limit = 0) {
  BuddyAllocatorOptions options;
  options.memory_limit = memory_limit;
  options.min_block = 512;
  options.arena_bytes = 4 * kKiB;  // orders 0..3: 512, 1 KiB, 2 KiB, 4 KiB
  return options;
}

// Free blocks of the allocator as (offset, size), ignoring the arena, for arenas known to be one.
std::vector<std::pair<size_t, size_t>> free_offsets(const BuddyAllocator& allocator) {
  std::vector<std::pair<size_t, size_t>> blocks;
  for (const BuddyFreeBlock& b : allocator.free_blocks()) blocks.emplace_back(b.offset, b.size);
  return blocks;
}

using Blocks = std::vector<std::pair<size_t, size_t>>;

class BuddyAllocatorTest : public testing::DeviceTypeTest {};

TEST_P(BuddyAllocatorTest, OptionsAreCheckedAtConstruction) {
  auto with = [](size_t min_block, size_t arena_bytes) {
    BuddyAllocatorOptions options;
    options.min_block = min_block;
    options.arena_bytes = arena_bytes;
    return options;
  };
  EXPECT_THROW(BuddyAllocator(backend(), with(256, 4096)), InvalidArgument);   // below 512
  EXPECT_THROW(BuddyAllocator(backend(), with(768, 4096)), InvalidArgument);   // not a power of two
  EXPECT_THROW(BuddyAllocator(backend(), with(512, 3000)), InvalidArgument);   // not a power of two
  EXPECT_THROW(BuddyAllocator(backend(), with(4096, 2048)), InvalidArgument);  // arena < block
  const size_t too_big = std::bit_ceil(backend().properties().max_alloc_bytes + 1);
  EXPECT_THROW(BuddyAllocator(backend(), with(512, too_big)), InvalidArgument);  // > max alloc
  try {
    BuddyAllocator(backend(), with(512, 3000));
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "arena_bytes");
    EXPECT_CONTAINS(e.what(), "3000");
  }
  BuddyAllocator defaults(backend());
  EXPECT_EQ(defaults.name(), "buddy");
  EXPECT_EQ(defaults.arena_bytes(), 16 * kMiB);
  EXPECT_EQ(defaults.min_block(),
            std::max<size_t>(512, backend().properties().base_addr_align_bytes));
  EXPECT_EQ(defaults.memory_limit(), 0u);
}

TEST_P(BuddyAllocatorTest, ZeroBytesGivesAnEmptyHandleAndTouchesNothing) {
  BuddyAllocator allocator(backend(), small_arenas());
  const size_t segments = backend().live_segments();
  Allocation a = allocator.allocate(0);
  EXPECT_FALSE(a);
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(allocator.allocated_size(a), 0u);
  allocator.deallocate(a);
  EXPECT_EQ(backend().live_segments(), segments);
  EXPECT_TRUE(same_stats(DeviceStats{}, allocator.stats())) << allocator.stats().to_string();
  testing::expect_nothing_live(allocator);
}

// Four smallest blocks carved from one 4 KiB arena, then freed: every step of the split and merge
// sequence is checked block by block.
TEST_P(BuddyAllocatorTest, ExactSplitAndBuddyMergeSequence) {
  BuddyAllocator allocator(backend(), small_arenas());
  auto expect_split = [&](int64_t count, int64_t bytes, const char* step) {
    allocator.check_invariants();
    const DeviceStats s = allocator.stats();
    EXPECT_EQ(s.inactive_split.aggregate().current, count) << step;
    EXPECT_EQ(s.inactive_split_bytes.aggregate().current, bytes) << step;
    EXPECT_EQ(s.reserved_bytes.aggregate().current, 4096) << step;
  };

  Allocation a = allocator.allocate(1);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(free_offsets(allocator), (Blocks{{512, 512}, {1024, 1024}, {2048, 2048}}));
  expect_split(3, 3584, "after a");
  Allocation b = allocator.allocate(100);
  EXPECT_EQ(b.offset, 512u);
  EXPECT_EQ(free_offsets(allocator), (Blocks{{1024, 1024}, {2048, 2048}}));
  expect_split(2, 3072, "after b");
  Allocation c = allocator.allocate(512);
  EXPECT_EQ(c.offset, 1024u);
  EXPECT_EQ(free_offsets(allocator), (Blocks{{1536, 512}, {2048, 2048}}));
  expect_split(2, 2560, "after c");
  Allocation d = allocator.allocate(300);
  EXPECT_EQ(d.offset, 1536u);
  EXPECT_EQ(free_offsets(allocator), (Blocks{{2048, 2048}}));
  expect_split(1, 2048, "after d");
  for (const Allocation* x : {&a, &b, &c, &d}) {
    EXPECT_EQ(x->segment, a.segment);
    EXPECT_EQ(allocator.allocated_size(*x), 512u);
  }
  EXPECT_EQ(allocator.stats().segment.aggregate().current, 1);

  allocator.deallocate(b);  // buddy a is live: no merge
  EXPECT_EQ(free_offsets(allocator), (Blocks{{512, 512}, {2048, 2048}}));
  expect_split(2, 2560, "free b");
  allocator.deallocate(c);  // buddy d is live: no merge
  EXPECT_EQ(free_offsets(allocator), (Blocks{{512, 512}, {1024, 512}, {2048, 2048}}));
  expect_split(3, 3072, "free c");
  allocator.deallocate(a);  // merges with b into [0, 1024); its buddy [1024, 2048) is split
  EXPECT_EQ(free_offsets(allocator), (Blocks{{0, 1024}, {1024, 512}, {2048, 2048}}));
  expect_split(3, 3584, "free a");
  allocator.deallocate(d);  // d+c, then +[0,1024), then +[2048,4096): the whole arena
  EXPECT_EQ(free_offsets(allocator), (Blocks{{0, 4096}}));
  expect_split(0, 0, "free d");
  EXPECT_EQ(allocator.stats().segment.aggregate().current, 1);  // cached, not given back

  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, 0);
  EXPECT_TRUE(allocator.free_blocks().empty());
  testing::expect_nothing_live(allocator);
}

// Every order of freeing the four blocks ends in one free block covering the arena, with the
// invariants (tiling, no free buddy pairs, exact statistics) holding after every step.
TEST_P(BuddyAllocatorTest, EveryFreeOrderMergesBackToTheWholeArena) {
  BuddyAllocator allocator(backend(), small_arenas());
  std::vector<int> order = {0, 1, 2, 3};
  int permutations = 0;
  do {
    std::vector<Allocation> blocks;
    for (size_t n : {512, 1, 511, 257}) blocks.push_back(allocator.allocate(n));
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(blocks[i].offset, 512u * i);
    for (int i : order) {
      allocator.deallocate(blocks[static_cast<size_t>(i)]);
      allocator.check_invariants();
    }
    ASSERT_EQ(free_offsets(allocator), (Blocks{{0, 4096}}));
    EXPECT_EQ(allocator.stats().inactive_split.aggregate().current, 0);
    EXPECT_EQ(allocator.stats().num_device_alloc, 1);  // the one arena is reused every time
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 24);
  testing::expect_nothing_live(allocator);
}

// Among free blocks of the same order, the one in the oldest arena at the lowest offset is taken.
TEST_P(BuddyAllocatorTest, LowestArenaAndOffsetIsTakenFirst) {
  BuddyAllocator allocator(backend(), small_arenas());
  std::vector<Allocation> first;
  for (int i = 0; i < 8; ++i) first.push_back(allocator.allocate(512));  // arena 1: 0..3584
  Allocation second_arena = allocator.allocate(512);                     // arena 2 at 0
  ASSERT_NE(second_arena.segment, first[0].segment);
  // Free non-buddies: arena 1 offsets 1024 and 3072, so two free 512-byte blocks there, plus
  // arena 2's own free 512-byte block at 512.
  allocator.deallocate(first[6]);
  allocator.deallocate(first[2]);
  allocator.check_invariants();
  Allocation a = allocator.allocate(100);
  EXPECT_EQ(a.segment, first[0].segment);
  EXPECT_EQ(a.offset, 1024u);
  Allocation b = allocator.allocate(100);
  EXPECT_EQ(b.segment, first[0].segment);
  EXPECT_EQ(b.offset, 3072u);
  Allocation c = allocator.allocate(100);
  EXPECT_EQ(c.segment, second_arena.segment);
  EXPECT_EQ(c.offset, 512u);
  for (size_t i : {0, 1, 3, 4, 5, 7}) allocator.deallocate(first[i]);
  for (const Allocation& x : {a, b, c, second_arena}) allocator.deallocate(x);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, MixedSizesRoundToPowersOfTwoAndOpenNewArenas) {
  BuddyAllocator allocator(backend(), small_arenas());
  Allocation a = allocator.allocate(512);   // [0, 512)
  Allocation b = allocator.allocate(2000);  // 2 KiB at 2048
  Allocation c = allocator.allocate(1025);  // 2 KiB: none left in arena 1 -> arena 2 at 0
  Allocation d = allocator.allocate(700);   // 1 KiB at 1024 of arena 1
  allocator.check_invariants();
  EXPECT_EQ(b.segment, a.segment);
  EXPECT_EQ(b.offset, 2048u);
  EXPECT_NE(c.segment, a.segment);
  EXPECT_EQ(c.offset, 0u);
  EXPECT_EQ(d.segment, a.segment);
  EXPECT_EQ(d.offset, 1024u);
  EXPECT_EQ(allocator.allocated_size(b), 2048u);
  EXPECT_EQ(allocator.allocated_size(c), 2048u);
  EXPECT_EQ(allocator.allocated_size(d), 1024u);
  const DeviceStats s = allocator.stats();
  expect_stat(s.allocated_bytes.aggregate(), 512 + 2048 + 2048 + 1024, 5632, 5632, 0,
              "allocated_bytes");
  expect_stat(s.requested_bytes.aggregate(), 512 + 2000 + 1025 + 700, 4237, 4237, 0,
              "requested_bytes");
  expect_stat(s.reserved_bytes.aggregate(), 8192, 8192, 8192, 0, "reserved_bytes");
  expect_stat(s.segment[kSmall], 2, 2, 2, 0, "small segment");
  // Arena 1: [512, 1024) free; arena 2: [2048, 4096) free.
  EXPECT_EQ(s.inactive_split.aggregate().current, 2);
  EXPECT_EQ(s.inactive_split_bytes.aggregate().current, 512 + 2048);
  for (const Allocation& x : {a, b, c, d}) allocator.deallocate(x);
  allocator.check_invariants();
  EXPECT_EQ(allocator.free_blocks().size(), 2u);  // two whole cached arenas
  EXPECT_EQ(allocator.stats().inactive_split.aggregate().current, 0);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, LargeRequestGetsItsOwnArenaThatIsReusedAfterwards) {
  BuddyAllocator allocator(backend(), small_arenas());
  Allocation big = allocator.allocate(5000);  // -> 8 KiB arena of its own
  EXPECT_EQ(allocator.allocated_size(big), 8192u);
  EXPECT_EQ(big.segment->size, 8192u);
  EXPECT_EQ(big.offset, 0u);
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, 8192);
  EXPECT_EQ(allocator.stats().inactive_split.aggregate().current, 0);
  allocator.deallocate(big);
  EXPECT_EQ(free_offsets(allocator), (Blocks{{0, 8192}}));

  // A small request splits the cached big arena instead of creating a new one.
  Allocation small = allocator.allocate(600);
  allocator.check_invariants();
  EXPECT_EQ(small.segment, big.segment);
  EXPECT_EQ(allocator.stats().num_device_alloc, 1);
  EXPECT_EQ(free_offsets(allocator), (Blocks{{1024, 1024}, {2048, 2048}, {4096, 4096}}));
  allocator.deallocate(small);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, StatisticsWithDefaultArenasAreExact) {
  BuddyAllocator allocator(backend());
  if (allocator.min_block() != 512) GTEST_SKIP() << "device alignment above 512 bytes";
  Allocation a = allocator.allocate(1);
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  // One 16 MiB arena (large pool) split down to 512 B: free halves of 512 B .. 8 MiB.
  expect_stat(s.segment[kLarge], 1, 1, 1, 0, "large segment");
  expect_stat(s.reserved_bytes[kLarge], 16 * kMiB, 16 * kMiB, 16 * kMiB, 0, "large reserved");
  expect_stat(s.reserved_bytes[kSmall], 0, 0, 0, 0, "small reserved");
  expect_stat(s.allocated_bytes[kSmall], 512, 512, 512, 0, "small allocated");
  expect_stat(s.requested_bytes[kSmall], 1, 1, 1, 0, "small requested");
  expect_stat(s.allocation.aggregate(), 1, 1, 1, 0, "allocation");
  // 512 B .. 512 KiB are small, 1 MiB .. 8 MiB large (kSmallSize, storage/stats.h).
  expect_stat(s.inactive_split[kSmall], 11, 11, 11, 0, "small inactive_split");
  expect_stat(s.inactive_split[kLarge], 4, 4, 4, 0, "large inactive_split");
  expect_stat(s.inactive_split_bytes.aggregate(), 16 * kMiB - 512, 16 * kMiB - 512,
              16 * kMiB - 512, 0, "inactive_split_bytes");
  EXPECT_EQ(s.num_device_alloc, 1);

  Allocation b = allocator.allocate(3 * kMiB);  // 4 MiB block: the free 4 MiB half, no split
  allocator.check_invariants();
  s = allocator.stats();
  EXPECT_EQ(allocator.allocated_size(b), 4 * kMiB);
  EXPECT_EQ(b.offset, 4 * kMiB);
  expect_stat(s.allocated_bytes[kLarge], 4 * kMiB, 4 * kMiB, 4 * kMiB, 0, "large allocated");
  expect_stat(s.requested_bytes.aggregate(), 1 + 3 * kMiB, 1 + 3 * kMiB, 1 + 3 * kMiB, 0,
              "requested");
  expect_stat(s.inactive_split[kLarge], 3, 4, 4, 1, "large inactive_split");
  EXPECT_EQ(s.num_device_alloc, 1);

  allocator.deallocate(a);
  allocator.check_invariants();
  s = allocator.stats();
  // a merged up to the free 2 MiB block: [0, 4 MiB) is one free block.
  EXPECT_EQ(free_offsets(allocator), (Blocks{{0, 4 * kMiB}, {8 * kMiB, 8 * kMiB}}));
  EXPECT_EQ(s.inactive_split.aggregate().current, 2);
  expect_stat(s.allocated_bytes[kSmall], 0, 512, 512, 512, "small allocated after free");

  allocator.reset_peak_stats();
  allocator.reset_accumulated_stats();
  s = allocator.stats();
  expect_stat(s.allocated_bytes.aggregate(), 4 * kMiB, 4 * kMiB, 0, 0, "allocated after resets");
  expect_stat(s.inactive_split.aggregate(), 2, 2, 0, 0, "inactive_split after resets");
  EXPECT_EQ(s.num_device_alloc, 0);

  allocator.deallocate(b);
  s = allocator.stats();
  expect_stat(s.inactive_split.aggregate(), 0, 2, 0, 2, "inactive_split at the end");
  expect_stat(s.reserved_bytes.aggregate(), 16 * kMiB, 16 * kMiB, 0, 0, "reserved: cached arena");
  allocator.empty_cache();
  s = allocator.stats();
  expect_stat(s.reserved_bytes.aggregate(), 0, 16 * kMiB, 0, 16 * kMiB,
              "reserved after empty_cache");
  EXPECT_EQ(s.num_device_free, 1);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, EmptyCacheKeepsArenasThatHoldLiveBlocks) {
  BuddyAllocator allocator(backend(), small_arenas());
  Allocation a = allocator.allocate(4096);  // arena 1, whole
  Allocation b = allocator.allocate(100);   // arena 2
  allocator.deallocate(a);
  allocator.empty_cache();
  allocator.check_invariants();
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, 4096);
  EXPECT_EQ(allocator.stats().segment.aggregate().current, 1);
  EXPECT_EQ(allocator.stats().num_device_free, 1);
  allocator.deallocate(b);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, DataLandsAndNeighboursDoNotOverlap) {
  BuddyAllocator allocator(backend(), small_arenas());
  const size_t align = std::max<size_t>(512, backend().properties().base_addr_align_bytes);
  const std::vector<size_t> sizes = {1, 3, 511, 512, 513, 1000, 1024, 2047, 4096, 5000, 700};
  std::vector<Allocation> blocks;
  uint64_t last_id = 0;
  for (size_t n : sizes) {
    Allocation a = allocator.allocate(n);
    ASSERT_TRUE(a);
    EXPECT_GT(a.id, last_id);
    last_id = a.id;
    EXPECT_EQ(a.size, n);
    EXPECT_EQ(a.offset % align, 0u);
    // Buddy blocks sit at multiples of their own size.
    EXPECT_EQ(a.offset % allocator.allocated_size(a), 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr), a.segment->address + a.offset);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr) % align, 0u);
    EXPECT_EQ(allocator.allocated_size(a), std::bit_ceil(std::max<size_t>(n, 512)));
    ResolvedAddress r =
        AddressSpace::instance().resolve(reinterpret_cast<uintptr_t>(a.ptr) + n - 1);
    EXPECT_EQ(r.segment, a.segment);
    EXPECT_EQ(r.offset, a.offset + n - 1);
    blocks.push_back(a);
  }
  allocator.check_invariants();
  // Every byte of every (rounded) block holds its own pattern.
  auto pattern = [](size_t i, size_t k) { return static_cast<uint8_t>(i * 37 + k); };
  for (size_t i = 0; i < blocks.size(); ++i) {
    write_pattern(backend(), blocks[i], i, allocator.allocated_size(blocks[i]), pattern);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(
        expect_pattern(backend(), blocks[i], i, allocator.allocated_size(blocks[i]), pattern));
  }
  std::vector<AddressRange> ranges;
  for (const Allocation& a : blocks) ranges.push_back(address_range(allocator, a));
  expect_disjoint(ranges);
  for (const Allocation& a : blocks) allocator.deallocate(a);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, MemoryLimitOutOfMemoryChangesOnlyNumOoms) {
  BuddyAllocator allocator(backend(), small_arenas(8 * kKiB));
  Allocation a = allocator.allocate(4096);
  Allocation b = allocator.allocate(4096);
  const DeviceStats before = allocator.stats();
  const size_t segments = backend().live_segments();
  try {
    allocator.allocate(1);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(backend().device().str()), std::string::npos) << message;
    EXPECT_NE(message.find("allocate 1 B"), std::string::npos) << message;
    EXPECT_NE(message.find("limit 8.00 KiB"), std::string::npos) << message;
    EXPECT_NE(message.find("8.00 KiB allocated"), std::string::npos) << message;
    EXPECT_NE(message.find("8.00 KiB reserved"), std::string::npos) << message;
  }
  DeviceStats after = allocator.stats();
  EXPECT_EQ(after.num_ooms, 1);
  after.num_ooms = 0;
  EXPECT_TRUE(same_stats(before, after)) << after.to_string();
  EXPECT_EQ(backend().live_segments(), segments);
  allocator.check_invariants();

  // Freeing makes room again: the cached arena is split, no new segment, no retry.
  allocator.deallocate(a);
  Allocation c = allocator.allocate(1);
  EXPECT_EQ(c.segment, a.segment);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 0);
  EXPECT_EQ(allocator.stats().num_device_alloc, 2);
  allocator.deallocate(b);
  allocator.deallocate(c);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, LimitLadderFreesCachedArenasOnlyWhenThatHelps) {
  BuddyAllocator allocator(backend(), small_arenas(8 * kKiB));
  Allocation a = allocator.allocate(4096);
  Allocation b = allocator.allocate(4096);
  allocator.deallocate(a);  // 4 KiB cached, 4 KiB live: an 8 KiB arena cannot fit even if emptied
  const DeviceStats before = allocator.stats();
  EXPECT_THROW(allocator.allocate(8192), OutOfMemoryError);
  DeviceStats after = allocator.stats();
  EXPECT_EQ(after.num_ooms, 1);
  after.num_ooms = 0;
  EXPECT_TRUE(same_stats(before, after)) << "the cache must not be given back for nothing\n"
                                         << after.to_string();

  allocator.deallocate(b);  // 8 KiB cached: emptying it makes room for an 8 KiB arena
  Allocation big = allocator.allocate(8192);
  allocator.check_invariants();
  const DeviceStats s = allocator.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(s.num_device_alloc, 3);
  EXPECT_EQ(s.reserved_bytes.aggregate().current, 8192);
  EXPECT_EQ(s.segment.aggregate().current, 1);
  allocator.deallocate(big);
  testing::expect_nothing_live(allocator);
}

// See Note [Arenas under a memory limit].
TEST_P(BuddyAllocatorTest, ArenaShrinksToWhatIsLeftUnderTheLimit) {
  BuddyAllocator allocator(backend(), small_arenas(6 * kKiB));
  Allocation a = allocator.allocate(4096);  // 4 KiB arena; 2 KiB left under the limit
  Allocation b = allocator.allocate(512);   // a 2 KiB arena, not an ordinary 4 KiB one
  Allocation c = allocator.allocate(512);   // from the 2 KiB arena
  allocator.check_invariants();
  EXPECT_EQ(b.segment->size, 2048u);
  EXPECT_EQ(c.segment, b.segment);
  EXPECT_EQ(c.offset, 512u);
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, 6144);
  EXPECT_THROW(allocator.allocate(2048), OutOfMemoryError);
  for (const Allocation& x : {a, b, c}) allocator.deallocate(x);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, BadSizesThrowInvalidArgumentAndChangeNothing) {
  BuddyAllocator allocator(backend(), small_arenas());
  Allocation live = allocator.allocate(100);
  const DeviceStats before = allocator.stats();
  const size_t segments = backend().live_segments();
  const size_t max_alloc = backend().properties().max_alloc_bytes;
  std::vector<size_t> sizes = {SIZE_MAX, SIZE_MAX - 1, max_alloc + 1};
  // Fits the device, but its power of two does not.
  if (!std::has_single_bit(max_alloc)) sizes.push_back(std::bit_floor(max_alloc) + 1);
  for (size_t n : sizes) {
    EXPECT_THROW(allocator.allocate(n), InvalidArgument) << n;
    EXPECT_TRUE(same_stats(before, allocator.stats())) << n << "\n"
                                                       << allocator.stats().to_string();
  }
  EXPECT_EQ(backend().live_segments(), segments);
  allocator.deallocate(live);
  testing::expect_nothing_live(allocator);
}

TEST_P(BuddyAllocatorTest, BadHandlesThrowInvalidArgumentAndChangeNothing) {
  BuddyAllocator allocator(backend(), small_arenas());
  BuddyAllocator other(backend(), small_arenas());
  SystemAllocator system(backend());
  Allocation a = allocator.allocate(1000);
  Allocation neighbour = allocator.allocate(1000);
  Allocation gone = allocator.allocate(10);
  allocator.deallocate(gone);
  Allocation foreign = other.allocate(1000);
  Allocation from_system = system.allocate(1000);
  const DeviceStats before = allocator.stats();
  const size_t segments = backend().live_segments();
  const auto free_before = allocator.free_blocks();

  auto expect_rejected = [&](const Allocation& handle, const char* what) {
    EXPECT_THROW(allocator.deallocate(handle), InvalidArgument) << what;
    EXPECT_THROW(allocator.allocated_size(handle), InvalidArgument) << what;
    EXPECT_TRUE(same_stats(before, allocator.stats())) << what << "\n"
                                                       << allocator.stats().to_string();
    EXPECT_EQ(allocator.free_blocks(), free_before) << what;
    EXPECT_EQ(backend().live_segments(), segments) << what;
    allocator.check_invariants();
  };
  expect_rejected(gone, "double free");
  expect_rejected(foreign, "another buddy allocator's handle");
  expect_rejected(from_system, "a system allocator's handle");
  Allocation forged = a;
  forged.ptr = static_cast<char*>(a.ptr) + 512;
  expect_rejected(forged, "interior address");
  forged = a;
  forged.id = neighbour.id;
  expect_rejected(forged, "a neighbour's id");
  forged = a;
  forged.size = 1001;
  expect_rejected(forged, "wrong size");
  forged = a;
  forged.offset = neighbour.offset;
  expect_rejected(forged, "wrong offset");
  forged = a;
  forged.block = nullptr;
  expect_rejected(forged, "wrong block record");

  allocator.deallocate(a);
  allocator.deallocate(neighbour);
  other.deallocate(foreign);
  system.deallocate(from_system);
  testing::expect_nothing_live(allocator);
  testing::expect_nothing_live(other);
  testing::expect_nothing_live(system);
}

TEST_P(BuddyAllocatorTest, DestructorGivesBackEveryArena) {
  const size_t segments = backend().live_segments();
  {
    BuddyAllocator allocator(backend(), small_arenas());
    allocator.allocate(100);
    allocator.deallocate(allocator.allocate(9000));  // a cached 16 KiB arena
    EXPECT_EQ(backend().live_segments(), segments + 2);
  }
  EXPECT_EQ(backend().live_segments(), segments);
}

INSTANTIATE_TEST_SUITE_P(Devices, BuddyAllocatorTest,
                         ::testing::Values(DeviceType::kOpenCL, DeviceType::kCpu),
                         testing::device_type_name);

// The ladder after a driver refusal: give back the cached arenas, try once more.
class BuddyAllocatorRefusalTest : public testing::LeakCheckedTest {};

TEST_F(BuddyAllocatorRefusalTest, RefusalEmptiesTheCacheAndRetriesOnce) {
  testing::FaultInjectionBackend device({.capacity = 8 * kKiB});
  {
    BuddyAllocator allocator(device, small_arenas());
    Allocation a = allocator.allocate(4096);
    Allocation b = allocator.allocate(4096);  // the device is full
    allocator.deallocate(a);                  // 4 KiB cached

    // 8 KiB refused; the cache goes back; 8 KiB refused again (b's arena is live): out of memory.
    try {
      allocator.allocate(8192);
      FAIL() << "expected OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("small device refuses 8192 bytes"), std::string::npos) << message;
      EXPECT_NE(message.find("4.00 KiB reserved"), std::string::npos) << message;
    }
    allocator.check_invariants();
    DeviceStats s = allocator.stats();
    EXPECT_EQ(s.num_ooms, 1);
    EXPECT_EQ(s.num_alloc_retries, 1);  // flushed and retried, even though the retry failed
    EXPECT_EQ(s.reserved_bytes.aggregate().current, 4096);  // the cache was given back on the way
    EXPECT_EQ(device.live_segments(), 1u);

    allocator.deallocate(b);  // 4 KiB cached; 8 KiB refused until it goes back, then fits
    Allocation big = allocator.allocate(8192);
    allocator.check_invariants();
    s = allocator.stats();
    EXPECT_EQ(s.num_alloc_retries, 2);
    EXPECT_EQ(s.num_ooms, 1);
    EXPECT_EQ(s.reserved_bytes.aggregate().current, 8192);
    EXPECT_EQ(device.live_bytes(), 8192u);
    allocator.deallocate(big);
    testing::expect_nothing_live(allocator);
  }
  EXPECT_EQ(device.live_segments(), 0u);
}

}  // namespace
}  // namespace oclvm
