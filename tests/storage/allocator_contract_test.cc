// tests/storage/allocator_contract_test.cc — the contract of storage/allocator.h, run against every
// built-in allocator (system, caching, buddy) on PoCL and on the host, each created through
// AllocatorRegistry::instance() by name.
//
// What every allocator must do: allocate(0) is empty and touches nothing; odd sizes give blocks
// aligned to 512 bytes and to the device's base address alignment, inside their segment, with
// unique increasing ids, that never overlap and hold their own data; every interior address
// resolves through the AddressSpace to (segment, offset + k); bad sizes, double frees and other
// allocators' handles are rejected with statistics unchanged; and allocators of two devices
// (opencl:0 and opencl:1 when there are two, cpu and opencl:0 always) have disjoint address ranges
// and independent statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/allocator_registry.h"
#include "oclvm/storage/errors.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

using ContractParam = std::tuple<std::string, DeviceType>;

class AllocatorContractTest : public testing::LeakCheckedTest,
                              public ::testing::WithParamInterface<ContractParam> {
 protected:
  const std::string& allocator_name() const { return std::get<0>(GetParam()); }
  MemoryBackend& backend() const {
    return std::get<1>(GetParam()) == DeviceType::kCpu ? host_backend() : opencl_backend(0);
  }
  std::unique_ptr<Allocator> make(MemoryBackend& backend) const {
    Options options;
    options.allocator = allocator_name();
    std::unique_ptr<Allocator> allocator = AllocatorRegistry::instance().create(backend, options);
    EXPECT_EQ(allocator->name(), allocator_name());
    EXPECT_EQ(&allocator->backend(), &backend);
    return allocator;
  }
  size_t alignment() const {
    return std::max<size_t>(512, backend().properties().base_addr_align_bytes);
  }
};

TEST_P(AllocatorContractTest, ZeroBytesIsEmptyAndTouchesNothing) {
  std::unique_ptr<Allocator> allocator = make(backend());
  const size_t segments = backend().live_segments();
  const DeviceStats before = allocator->stats();
  Allocation a = allocator->allocate(0);
  EXPECT_FALSE(a);
  EXPECT_EQ(a.ptr, nullptr);
  EXPECT_EQ(a.id, 0u);
  allocator->deallocate(a);
  EXPECT_EQ(backend().live_segments(), segments);
  EXPECT_TRUE(same_stats(before, allocator->stats())) << allocator->stats().to_string();
  testing::expect_nothing_live(*allocator);
}

TEST_P(AllocatorContractTest, OddSizesAreAlignedDisjointResolvableAndHoldTheirData) {
  std::unique_ptr<Allocator> allocator = make(backend());
  std::vector<size_t> sizes = {
      1, 3, 7, 99, 511, 513, 1001, 4095, 65537, (size_t{1} << 20) + 1, (size_t{3} << 20) + 7};
  for (size_t i = 0; i < 40; ++i) sizes.push_back(1 + 97 * i);  // many small blocks share segments
  std::vector<Allocation> blocks;
  std::vector<AddressRange> ranges;
  uint64_t last_id = 0;
  for (size_t n : sizes) {
    Allocation a = allocator->allocate(n);
    allocator->check_invariants();
    ASSERT_TRUE(a) << n;
    const auto address = reinterpret_cast<uintptr_t>(a.ptr);
    EXPECT_EQ(a.size, n);
    EXPECT_EQ(allocator->requested_size(a), n);
    const size_t allocated = allocator->allocated_size(a);
    EXPECT_GE(allocated, n);
    EXPECT_EQ(a.segment->backend, &backend());
    EXPECT_EQ(address, a.segment->address + a.offset);
    EXPECT_EQ(a.offset % alignment(), 0u) << n;
    EXPECT_EQ(address % alignment(), 0u) << n;
    EXPECT_LE(a.offset + allocated, a.segment->size) << n;
    EXPECT_GT(a.id, last_id) << n;
    last_id = a.id;
    for (size_t k : {size_t{0}, size_t{1}, n / 2, n - 1}) {
      if (k >= n) continue;
      ResolvedAddress r = AddressSpace::instance().resolve(address + k);
      EXPECT_EQ(r.segment, a.segment) << n << " +" << k;
      EXPECT_EQ(r.offset, a.offset + k) << n << " +" << k;
    }
    ranges.emplace_back(address, address + allocated);
    blocks.push_back(a);
  }
  expect_disjoint(ranges);
  for (size_t i = 0; i < blocks.size(); ++i) write_pattern(backend(), blocks[i], i);
  for (size_t i = 0; i < blocks.size(); ++i) expect_pattern(backend(), blocks[i], i);

  const DeviceStats s = allocator->stats();
  int64_t requested = 0;
  for (size_t n : sizes) requested += static_cast<int64_t>(n);
  EXPECT_EQ(s.allocation.aggregate().current, static_cast<int64_t>(sizes.size()));
  EXPECT_EQ(s.requested_bytes.aggregate().current, requested);
  EXPECT_GE(s.allocated_bytes.aggregate().current, requested);
  EXPECT_GE(s.reserved_bytes.aggregate().current, s.allocated_bytes.aggregate().current);

  // Free every other block, allocate again, and check that the survivors kept their data.
  for (size_t i = 0; i < blocks.size(); i += 2) allocator->deallocate(blocks[i]);
  std::vector<Allocation> again;
  for (size_t i = 0; i < blocks.size(); i += 2) {
    again.push_back(allocator->allocate(blocks[i].size));
    EXPECT_GT(again.back().id, last_id);
    last_id = again.back().id;
    write_pattern(backend(), again.back(), 1000 + i);
  }
  allocator->check_invariants();
  for (size_t i = 1; i < blocks.size(); i += 2) expect_pattern(backend(), blocks[i], i);
  for (size_t j = 0; j < again.size(); ++j) expect_pattern(backend(), again[j], 1000 + 2 * j);

  for (size_t i = 1; i < blocks.size(); i += 2) allocator->deallocate(blocks[i]);
  for (const Allocation& a : again) allocator->deallocate(a);
  allocator->check_invariants();
  testing::expect_nothing_live(*allocator);
}

TEST_P(AllocatorContractTest, BadInputIsRejectedWithStatisticsUnchanged) {
  std::unique_ptr<Allocator> allocator = make(backend());
  std::unique_ptr<Allocator> other = make(backend());
  Allocation a = allocator->allocate(3000);
  Allocation gone = allocator->allocate(300);
  allocator->deallocate(gone);
  Allocation foreign = other->allocate(3000);
  const DeviceStats before = allocator->stats();
  const DeviceStats other_before = other->stats();
  const size_t segments = backend().live_segments();

  EXPECT_THROW(allocator->allocate(SIZE_MAX), InvalidArgument);
  EXPECT_THROW(allocator->allocate(backend().properties().max_alloc_bytes + 1), InvalidArgument);
  EXPECT_THROW(allocator->deallocate(gone), InvalidArgument) << "double free";
  EXPECT_THROW(allocator->deallocate(foreign), InvalidArgument) << "another allocator's handle";
  Allocation forged = a;
  forged.ptr = static_cast<char*>(a.ptr) + alignment();
  EXPECT_THROW(allocator->deallocate(forged), InvalidArgument) << "forged address";
  forged = a;
  forged.id += 1000;
  EXPECT_THROW(allocator->deallocate(forged), InvalidArgument) << "forged id";

  EXPECT_TRUE(same_stats(before, allocator->stats())) << allocator->stats().to_string();
  EXPECT_TRUE(same_stats(other_before, other->stats())) << other->stats().to_string();
  EXPECT_EQ(backend().live_segments(), segments);
  allocator->check_invariants();
  other->check_invariants();

  allocator->deallocate(a);
  other->deallocate(foreign);
  testing::expect_nothing_live(*allocator);
  testing::expect_nothing_live(*other);
}

// set_memory_limit: a limit under what is reserved gives the cache back, keeps live blocks usable
// and refuses new segments (out of memory, counted); lifting it makes the device usable again.
TEST_P(AllocatorContractTest, LoweringTheLimitFreesTheCacheAndRefusesNewSegments) {
  std::unique_ptr<Allocator> allocator = make(backend());
  EXPECT_EQ(allocator->memory_limit(), 0u);
  Allocation live = allocator->allocate(3000);
  write_pattern(backend(), live, 7);
  Allocation cached = allocator->allocate(2 * kMiB);
  allocator->deallocate(cached);
  const int64_t reserved_with_cache = allocator->stats().reserved_bytes.aggregate().current;

  allocator->set_memory_limit(1);
  allocator->check_invariants();
  EXPECT_EQ(allocator->memory_limit(), 1u);
  const DeviceStats lowered = allocator->stats();
  EXPECT_LE(lowered.reserved_bytes.aggregate().current, reserved_with_cache);
  // Larger than everything reserved: only a new segment could hold it.
  EXPECT_THROW(allocator->allocate(static_cast<size_t>(reserved_with_cache) + 1), OutOfMemoryError);
  EXPECT_EQ(allocator->stats().num_ooms, lowered.num_ooms + 1);
  allocator->check_invariants();
  expect_pattern(backend(), live, 7);

  allocator->deallocate(live);
  allocator->set_memory_limit(1);  // nothing live: every byte reserved is cache and goes back
  EXPECT_EQ(allocator->stats().reserved_bytes.aggregate().current, 0);
  EXPECT_THROW(allocator->allocate(1), OutOfMemoryError);

  allocator->set_memory_limit(0);
  EXPECT_EQ(allocator->memory_limit(), 0u);
  Allocation again = allocator->allocate(4 * kMiB);
  EXPECT_TRUE(again);
  allocator->deallocate(again);
  allocator->check_invariants();
  testing::expect_nothing_live(*allocator);
}

// The OpenCL parameter pairs opencl:0 with opencl:1 (skipped with a single OpenCL device); the
// cpu parameter pairs cpu with opencl:0.
TEST_P(AllocatorContractTest, TwoDevicesHaveDisjointRangesAndIndependentStatistics) {
  const bool on_cpu = std::get<1>(GetParam()) == DeviceType::kCpu;
  if (!on_cpu && testing::opencl_device_count() < 2) {
    GTEST_SKIP() << "needs two OpenCL devices (POCL_DEVICES=\"pthread pthread\")";
  }
  MemoryBackend& first = on_cpu ? host_backend() : opencl_backend(0);
  MemoryBackend& second = on_cpu ? opencl_backend(0) : opencl_backend(1);
  std::unique_ptr<Allocator> a0 = make(first);
  std::unique_ptr<Allocator> a1 = make(second);
  EXPECT_EQ(a1->device(), second.device());
  EXPECT_NE(a0->device(), a1->device());

  std::vector<Allocation> on_first;
  std::vector<Allocation> on_second;
  std::vector<AddressRange> ranges;
  for (size_t n : {1, 1000, 70000, 3 << 20}) {
    on_first.push_back(a0->allocate(n));
    const DeviceStats first_stats = a0->stats();
    on_second.push_back(a1->allocate(n + 1));
    EXPECT_TRUE(same_stats(first_stats, a0->stats()))
        << "the second device changed the first's statistics";
  }
  for (const auto& [allocator, list] :
       {std::pair{a0.get(), &on_first}, std::pair{a1.get(), &on_second}}) {
    for (const Allocation& a : *list) ranges.push_back(address_range(*allocator, a));
  }
  expect_disjoint(ranges);
  for (const Allocation& a : on_first) EXPECT_EQ(a.segment->backend, &first);
  for (const Allocation& a : on_second) EXPECT_EQ(a.segment->backend, &second);
  for (size_t i = 0; i < on_first.size(); ++i) {
    write_pattern(first, on_first[i], i);
    write_pattern(second, on_second[i], 100 + i);
  }
  for (size_t i = 0; i < on_first.size(); ++i) {
    expect_pattern(first, on_first[i], i);
    expect_pattern(second, on_second[i], 100 + i);
  }
  // A handle of one device is foreign to the other device's allocator.
  const DeviceStats second_stats = a1->stats();
  EXPECT_THROW(a1->deallocate(on_first[0]), InvalidArgument);
  EXPECT_TRUE(same_stats(second_stats, a1->stats()));

  EXPECT_EQ(a0->stats().requested_bytes.aggregate().current, 1 + 1000 + 70000 + (3 << 20));
  EXPECT_EQ(a1->stats().requested_bytes.aggregate().current, 2 + 1001 + 70001 + (3 << 20) + 1);
  for (const Allocation& a : on_second) a1->deallocate(a);
  // Freeing on the second device leaves the first alone.
  EXPECT_EQ(a0->stats().allocation.aggregate().current, 4);
  for (const Allocation& a : on_first) a0->deallocate(a);
  testing::expect_nothing_live(*a0);
  testing::expect_nothing_live(*a1);
}

INSTANTIATE_TEST_SUITE_P(
    Allocators, AllocatorContractTest,
    ::testing::Combine(::testing::Values(std::string("system"), std::string("caching"),
                                         std::string("buddy")),
                       ::testing::Values(DeviceType::kOpenCL, DeviceType::kCpu)),
    [](const ::testing::TestParamInfo<ContractParam>& info) {
      return std::get<0>(info.param) +
             (std::get<1>(info.param) == DeviceType::kCpu ? "_cpu" : "_opencl");
    });

}  // namespace
}  // namespace oclvm
