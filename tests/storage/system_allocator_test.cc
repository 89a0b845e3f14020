// tests/storage/system_allocator_test.cc — SystemAllocator on PoCL and on the host: one segment per
// allocation, exact statistics after every step, the memory limit, a refusing driver, and bad
// handles that must change nothing.
#include "oclvm/storage/system_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

class SystemAllocatorTest : public testing::DeviceTypeTest {};

TEST_P(SystemAllocatorTest, ZeroBytesGivesAnEmptyHandleAndTouchesNothing) {
  SystemAllocator allocator(backend());
  const size_t segments = backend().live_segments();
  const DeviceStats before = allocator.stats();
  Allocation a = allocator.allocate(0);
  EXPECT_FALSE(a);
  EXPECT_EQ(a.ptr, nullptr);
  EXPECT_EQ(a.segment, nullptr);
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(allocator.allocated_size(a), 0u);
  allocator.deallocate(a);  // an empty handle is a no-op
  EXPECT_EQ(backend().live_segments(), segments);
  EXPECT_TRUE(same_stats(before, allocator.stats())) << allocator.stats().to_string();
  EXPECT_EQ(allocator.name(), "system");
  EXPECT_EQ(&allocator.backend(), &backend());
  EXPECT_EQ(allocator.memory_limit(), 0u);
  testing::expect_nothing_live(allocator);
}

TEST_P(SystemAllocatorTest, StatisticsAreExactAfterEveryStep) {
  SystemAllocator allocator(backend());
  constexpr size_t kBig = (size_t{2} << 20) + 1;  // large pool
  constexpr size_t kBigRounded = (size_t{2} << 20) + 512;

  Allocation a = allocator.allocate(1);
  allocator.check_invariants();
  DeviceStats s = allocator.stats();
  expect_stat(s.allocation.aggregate(), 1, 1, 1, 0, "allocation");
  expect_stat(s.allocated_bytes.aggregate(), 512, 512, 512, 0, "allocated_bytes");
  expect_stat(s.reserved_bytes.aggregate(), 512, 512, 512, 0, "reserved_bytes");
  expect_stat(s.requested_bytes.aggregate(), 1, 1, 1, 0, "requested_bytes");
  expect_stat(s.segment.aggregate(), 1, 1, 1, 0, "segment");
  expect_stat(s.active_bytes.aggregate(), 512, 512, 512, 0, "active_bytes");
  expect_stat(s.allocated_bytes[kSmall], 512, 512, 512, 0, "small allocated_bytes");
  expect_stat(s.allocated_bytes[kLarge], 0, 0, 0, 0, "large allocated_bytes");
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.num_device_free, 0);

  Allocation b = allocator.allocate(kBig);
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.allocation.aggregate(), 2, 2, 2, 0, "allocation");
  expect_stat(s.allocated_bytes.aggregate(), 512 + kBigRounded, 512 + kBigRounded,
              512 + kBigRounded, 0, "allocated_bytes");
  expect_stat(s.reserved_bytes[kLarge], kBigRounded, kBigRounded, kBigRounded, 0, "large reserved");
  expect_stat(s.requested_bytes.aggregate(), 1 + kBig, 1 + kBig, 1 + kBig, 0, "requested_bytes");
  expect_stat(s.segment[kLarge], 1, 1, 1, 0, "large segment");
  EXPECT_EQ(allocator.allocated_size(b), kBigRounded);
  EXPECT_EQ(allocator.requested_size(b), kBig);
  EXPECT_EQ(s.num_device_alloc, 2);

  allocator.deallocate(b);
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.allocation.aggregate(), 1, 2, 2, 1, "allocation");
  expect_stat(s.allocated_bytes.aggregate(), 512, 512 + kBigRounded, 512 + kBigRounded, kBigRounded,
              "allocated_bytes");
  expect_stat(s.reserved_bytes.aggregate(), 512, 512 + kBigRounded, 512 + kBigRounded, kBigRounded,
              "reserved_bytes");
  expect_stat(s.requested_bytes.aggregate(), 1, 1 + kBig, 1 + kBig, kBig, "requested_bytes");
  expect_stat(s.segment[kLarge], 0, 1, 1, 1, "large segment");
  EXPECT_EQ(s.num_device_free, 1);

  allocator.reset_peak_stats();
  s = allocator.stats();
  expect_stat(s.allocated_bytes.aggregate(), 512, 512, 512 + kBigRounded, kBigRounded,
              "after reset_peak");
  expect_stat(s.segment[kLarge], 0, 0, 1, 1, "large segment after reset_peak");

  allocator.reset_accumulated_stats();
  s = allocator.stats();
  expect_stat(s.allocated_bytes.aggregate(), 512, 512, 0, 0, "after reset_accumulated");
  expect_stat(s.allocation.aggregate(), 1, 1, 0, 0, "allocation after reset_accumulated");
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.num_device_free, 0);

  allocator.deallocate(a);
  allocator.check_invariants();
  s = allocator.stats();
  expect_stat(s.allocated_bytes.aggregate(), 0, 512, 0, 512, "allocated_bytes at the end");
  expect_stat(s.requested_bytes.aggregate(), 0, 1, 0, 1, "requested_bytes at the end");
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.inactive_split.aggregate().peak, 0);
  testing::expect_nothing_live(allocator);
}

TEST_P(SystemAllocatorTest, OddSizesAreAlignedDisjointAndHoldTheirData) {
  SystemAllocator allocator(backend());
  const size_t align = std::max<size_t>(512, backend().properties().base_addr_align_bytes);
  const std::vector<size_t> sizes = {1, 3, 511, 512, 513, 1000, 4097, 65537, (size_t{1} << 20) + 7};
  std::vector<Allocation> blocks;
  const size_t segments = backend().live_segments();
  uint64_t last_id = 0;
  for (size_t n : sizes) {
    Allocation a = allocator.allocate(n);
    allocator.check_invariants();
    ASSERT_TRUE(a);
    EXPECT_EQ(a.size, n);
    EXPECT_EQ(a.offset, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr), a.segment->address + a.offset);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr) % align, 0u);
    EXPECT_EQ(allocator.allocated_size(a), (n + 511) / 512 * 512);
    EXPECT_EQ(a.segment->size, allocator.allocated_size(a));  // one segment per allocation
    EXPECT_GT(a.id, last_id);
    last_id = a.id;
    ResolvedAddress r =
        AddressSpace::instance().resolve(reinterpret_cast<uintptr_t>(a.ptr) + n - 1);
    EXPECT_EQ(r.segment, a.segment);
    EXPECT_EQ(r.offset, n - 1);
    blocks.push_back(a);
  }
  EXPECT_EQ(backend().live_segments(), segments + sizes.size());
  // Fill every block with its own pattern, then read every one back.
  auto pattern = [](size_t i, size_t k) { return static_cast<uint8_t>(i * 31 + k); };
  for (size_t i = 0; i < blocks.size(); ++i) {
    write_pattern(backend(), blocks[i], i, blocks[i].size, pattern);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(expect_pattern(backend(), blocks[i], i, blocks[i].size, pattern));
  }
  // Address ranges never overlap.
  std::vector<AddressRange> ranges;
  for (const Allocation& a : blocks) ranges.push_back(address_range(allocator, a));
  expect_disjoint(ranges);

  for (const Allocation& a : blocks) allocator.deallocate(a);
  EXPECT_EQ(backend().live_segments(), segments);  // released at once, nothing cached
  testing::expect_nothing_live(allocator);
}

TEST_P(SystemAllocatorTest, FreeGivesTheSegmentBackAtOnceAndIdsKeepGrowing) {
  SystemAllocator allocator(backend());
  const size_t segments = backend().live_segments();
  Allocation a = allocator.allocate(700);
  EXPECT_EQ(backend().live_segments(), segments + 1);
  const uint64_t first_id = a.id;
  allocator.deallocate(a);
  EXPECT_EQ(backend().live_segments(), segments);
  EXPECT_EQ(AddressSpace::instance().resolve(reinterpret_cast<uintptr_t>(a.ptr)).segment, nullptr);
  Allocation b = allocator.allocate(700);
  EXPECT_EQ(b.id, first_id + 1);
  allocator.empty_cache();  // nothing cached: a no-op that keeps b
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, 1024);
  allocator.deallocate(b);
  testing::expect_nothing_live(allocator);
}

TEST_P(SystemAllocatorTest, MemoryLimitThrowsOutOfMemoryAndCountsIt) {
  SystemAllocator allocator(backend(), 4096);
  EXPECT_EQ(allocator.memory_limit(), 4096u);
  Allocation a = allocator.allocate(2048);
  Allocation b = allocator.allocate(1500);  // 1536 reserved; 512 left
  const DeviceStats before = allocator.stats();
  const size_t segments = backend().live_segments();
  try {
    allocator.allocate(600);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(backend().device().str()), std::string::npos) << message;
    EXPECT_NE(message.find("600 B"), std::string::npos) << message;           // what was asked
    EXPECT_NE(message.find("limit 4.00 KiB"), std::string::npos) << message;  // the limit
    EXPECT_NE(message.find("3.50 KiB allocated"), std::string::npos) << message;
    EXPECT_NE(message.find("3.50 KiB reserved"), std::string::npos) << message;
    EXPECT_NE(message.find("512 B left"), std::string::npos) << message;
  }
  DeviceStats after = allocator.stats();
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  after.num_ooms = before.num_ooms;
  EXPECT_TRUE(same_stats(before, after)) << after.to_string();
  EXPECT_EQ(backend().live_segments(), segments);
  allocator.check_invariants();

  // Exactly at the limit is fine, and the allocator keeps working after an OOM.
  Allocation c = allocator.allocate(512);
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, 4096);
  allocator.deallocate(b);
  Allocation d = allocator.allocate(1536);
  EXPECT_TRUE(d);
  EXPECT_EQ(allocator.stats().num_ooms, 1);
  allocator.deallocate(a);
  allocator.deallocate(c);
  allocator.deallocate(d);
  testing::expect_nothing_live(allocator);
}

TEST_P(SystemAllocatorTest, BadSizesThrowInvalidArgumentAndChangeNothing) {
  SystemAllocator allocator(backend(), 1 << 20);
  Allocation live = allocator.allocate(100);
  const DeviceStats before = allocator.stats();
  const size_t segments = backend().live_segments();
  const size_t max_alloc = backend().properties().max_alloc_bytes;
  for (size_t n : {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 511, max_alloc + 1}) {
    EXPECT_THROW(allocator.allocate(n), InvalidArgument) << n;
    EXPECT_TRUE(same_stats(before, allocator.stats())) << n << "\n"
                                                       << allocator.stats().to_string();
  }
  EXPECT_EQ(backend().live_segments(), segments);
  allocator.deallocate(live);
  testing::expect_nothing_live(allocator);
}

TEST_P(SystemAllocatorTest, BadHandlesThrowInvalidArgumentAndChangeNothing) {
  SystemAllocator allocator(backend());
  SystemAllocator other(backend());
  Allocation a = allocator.allocate(1000);
  Allocation gone = allocator.allocate(10);
  allocator.deallocate(gone);
  Allocation foreign = other.allocate(1000);
  const DeviceStats before = allocator.stats();
  const DeviceStats other_before = other.stats();
  const size_t segments = backend().live_segments();

  auto expect_rejected = [&](const Allocation& handle, const char* what) {
    EXPECT_THROW(allocator.deallocate(handle), InvalidArgument) << what;
    EXPECT_THROW(allocator.allocated_size(handle), InvalidArgument) << what;
    EXPECT_TRUE(same_stats(before, allocator.stats())) << what << "\n"
                                                       << allocator.stats().to_string();
    EXPECT_EQ(backend().live_segments(), segments) << what;
  };
  expect_rejected(gone, "double free");
  expect_rejected(foreign, "another allocator's handle");
  Allocation forged = a;
  forged.ptr = static_cast<char*>(a.ptr) + 512;
  expect_rejected(forged, "interior address");
  forged = a;
  forged.id += 1;
  expect_rejected(forged, "wrong id");
  forged = a;
  forged.size = 999;
  expect_rejected(forged, "wrong size");
  forged = a;
  forged.segment = foreign.segment;
  expect_rejected(forged, "wrong segment");
  forged = a;
  forged.offset = 512;
  expect_rejected(forged, "wrong offset");
  EXPECT_TRUE(same_stats(other_before, other.stats()));

  try {
    allocator.deallocate(gone);
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("Expected an allocation that is live"), std::string::npos) << message;
    EXPECT_NE(message.find(backend().device().str()), std::string::npos) << message;
  }

  allocator.deallocate(a);  // the real handle still works
  other.deallocate(foreign);
  testing::expect_nothing_live(allocator);
  testing::expect_nothing_live(other);
}

TEST_P(SystemAllocatorTest, DestructorGivesBackSegmentsOfLiveAllocations) {
  const size_t segments = backend().live_segments();
  {
    SystemAllocator allocator(backend());
    allocator.allocate(100);
    allocator.allocate(5000);
    EXPECT_EQ(backend().live_segments(), segments + 2);
  }
  EXPECT_EQ(backend().live_segments(), segments);  // and LeakCheckedTest checks the address space
}

INSTANTIATE_TEST_SUITE_P(Devices, SystemAllocatorTest,
                         ::testing::Values(DeviceType::kOpenCL, DeviceType::kCpu),
                         testing::device_type_name);

// A driver that refuses memory is counted like the limit: one num_ooms, nothing held.
class SystemAllocatorRefusalTest : public testing::LeakCheckedTest {};

TEST_F(SystemAllocatorRefusalTest, DriverRefusalIsCountedAsOutOfMemory) {
  testing::FaultInjectionBackend device({.capacity = 8192});
  {
    SystemAllocator allocator(device);
    Allocation a = allocator.allocate(6000);  // 6144 of 8192
    const DeviceStats before = allocator.stats();
    try {
      allocator.allocate(4096);
      FAIL() << "expected OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("small device refuses 4096 bytes"), std::string::npos) << message;
      EXPECT_NE(message.find("memory limit none"), std::string::npos) << message;
      EXPECT_NE(message.find("6.00 KiB reserved"), std::string::npos) << message;
    }
    DeviceStats after = allocator.stats();
    EXPECT_EQ(after.num_ooms, 1);
    after.num_ooms = 0;
    EXPECT_TRUE(same_stats(before, after)) << after.to_string();
    EXPECT_EQ(device.live_segments(), 1u);
    allocator.check_invariants();
    allocator.deallocate(a);
    Allocation b = allocator.allocate(4096);  // fits again
    allocator.deallocate(b);
    testing::expect_nothing_live(allocator);
  }
  EXPECT_EQ(device.live_segments(), 0u);
  EXPECT_EQ(device.live_bytes(), 0u);
}

}  // namespace
}  // namespace oclvm
