// adapters/torch/tests/allocator_contract_test.cc — the contract of CLDeviceAllocator, the
// c10::DeviceAllocator of PrivateUse1 ("opencl"), on the real libtorch and real PoCL devices.
//
// What is checked, one TEST each (adapters/torch/allocator.h states the promises):
//   - allocate(0): an empty DataPtr on the current device; nothing runs, nothing is recorded.
//   - allocate(n): a device address, a TensorStorage context, raw_deleter(), the current device;
//     the statistics move by exactly the rounded size and return when the DataPtr dies (the
//     release is synchronous: no waiting before the check).
//   - registration at load: c10::GetAllocator(PrivateUse1) is the instance; at::empty uses it.
//   - the block registry: find() of start, interior and past-the-end addresses.
//   - copy_data: whole blocks, interior addresses, within one block, across devices.
//   - getDeviceStats: exact numbers of every field after known allocations (aggregate and both
//     pools), equal field by field to oclvm's QueryStats; resetPeakStats, resetAccumulatedStats,
//     emptyCache; getMemoryInfo; unknown device indices refused (c10::IndexError).
//   - requests beyond the device's largest single allocation (c10::OutOfMemoryError before the
//     allocator, nothing recorded),
//     and a real out of memory under OCLVM_MEMORY_LIMIT (c10::OutOfMemoryError, num_ooms + 1).
//   - 4 threads x 1000 allocations; the current device per thread; blocks on the device current
//     at allocate time (two devices); the PrivateUse1 hooks' getDeviceFromPtr.
//   - streams: torch stream ids map to VM streams and back; a block is produced on the current
//     stream; recordStream makes the block a read operand of the other stream (the VM's
//     dependence record), is a no-op for the producer stream and an empty DataPtr, and refuses
//     stream ids that name nothing.
//
// Exact byte counts assume oclvm's default allocator, CachingAllocator with its default options
// (storage/caching_allocator.h, Note [Caching policy]): blocks rounded up to 512 bytes (PoCL's
// base address alignment is 128), small pool for rounded sizes <= 1 MiB in 2 MiB segments, a
// large segment the rounded request rounded up to 1 MiB. Under another OCLVM_ALLOCATOR those
// tests skip.
//
// Devices are named by c10::DeviceType::PrivateUse1, never by the string "opencl": without
// c10::register_privateuse1_backend("opencl") (which the Python package's rename does), the
// parser reads "opencl" as the legacy DeviceType::OPENCL. Nothing here parses device strings, and
// the allocator, guard and hooks work on PrivateUse1 either way, so the binary registers no name.
//
// ctest runs the binary three times (adapters/torch/CMakeLists.txt): one PoCL device, two
// (POCL_DEVICES="pthread pthread"; the two-device tests skip otherwise), and one device under
// OCLVM_MEMORY_LIMIT (the out-of-memory test skips without a limit).
//
// Every test starts with nothing live, nothing cached and peaks reset on every device, and the
// fixture proves at the end that it left nothing behind (no live block, zero allocated bytes,
// and zero reserved bytes once the cache is emptied).
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/device.h"
#include "adapters/torch/streams.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/stats.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter {
namespace {

using Stats = c10::CachingDeviceAllocator::DeviceStats;
using C10Stat = c10::CachingAllocator::Stat;
using C10StatArray = c10::CachingAllocator::StatArray;

constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
constexpr size_t kSmall = static_cast<size_t>(c10::CachingAllocator::StatType::SMALL_POOL);
constexpr size_t kLarge = static_cast<size_t>(c10::CachingAllocator::StatType::LARGE_POOL);
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kQuantum = 512;          // CachingAllocatorOptions::round_bytes
constexpr int64_t kSmallSegment = 2 * kMiB;  // CachingAllocatorOptions::small_segment_bytes

int64_t rounded(int64_t bytes) { return (bytes + kQuantum - 1) / kQuantum * kQuantum; }

CLDeviceAllocator& allocator() { return CLDeviceAllocator::instance(); }
Stats stats(c10::DeviceIndex device) { return allocator().getDeviceStats(device); }
c10::Device opencl(c10::DeviceIndex index) { return c10::Device(c10::DeviceType::PrivateUse1, index); }

const DeviceProperties& properties(c10::DeviceIndex device) {
  return runtime().properties(to_oclvm(device));
}

// The exact byte counts below hold for CachingAllocator only; OCLVM_ALLOCATOR may pick another.
bool caching_allocator_in_use() {
  const std::string& name = runtime().options().allocator;
  return name.empty() || name == "caching";
}
constexpr const char* kNeedsCaching = "exact sizes of CachingAllocator (OCLVM_ALLOCATOR is set)";

// ---------------------------------------------------------------------------------------------
// Comparing statistics

constexpr const char* kPoolNames[] = {"all", "small_pool", "large_pool"};

std::string stat_text(const C10Stat& s) {
  return "{current " + std::to_string(s.current) + ", peak " + std::to_string(s.peak) +
         ", allocated " + std::to_string(s.allocated) + ", freed " + std::to_string(s.freed) + "}";
}

bool same_stat(const C10Stat& a, const C10Stat& b) {
  return a.current == b.current && a.peak == b.peak && a.allocated == b.allocated &&
         a.freed == b.freed;
}

// Every field of two snapshots equal, except the counters named in `except`; the failure message
// lists each field that differs.
::testing::AssertionResult same_stats(const Stats& expected, const Stats& actual,
                                      const std::vector<std::string>& except = {}) {
  std::string diff;
  for (const auto& array : kC10StatArrayFields) {
    for (size_t p = 0; p < 3; ++p) {
      const C10Stat& e = (expected.*array.member)[p];
      const C10Stat& a = (actual.*array.member)[p];
      if (!same_stat(e, a)) {
        diff += std::string("\n  ") + array.name + "." + kPoolNames[p] + ": expected " +
                stat_text(e) + ", got " + stat_text(a);
      }
    }
  }
  for (const auto& counter : kC10CounterFields) {
    if (std::find(except.begin(), except.end(), counter.name) != except.end()) continue;
    if (expected.*counter.member != actual.*counter.member) {
      diff += std::string("\n  ") + counter.name + ": expected " +
              std::to_string(expected.*counter.member) + ", got " +
              std::to_string(actual.*counter.member);
    }
  }
  for (const auto& stat : kC10StatFields) {
    const C10Stat& e = expected.*stat.member;
    const C10Stat& a = actual.*stat.member;
    if (!same_stat(e, a)) {
      diff += std::string("\n  ") + stat.name + ": expected " + stat_text(e) + ", got " +
              stat_text(a);
    }
  }
  if (actual.reserved_bytes_by_private_pools.size() !=
      expected.reserved_bytes_by_private_pools.size()) {
    diff += "\n  reserved_bytes_by_private_pools differ";
  }
  if (diff.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "statistics differ:" << diff;
}

// The four numbers of one Stat.
void expect_stat(const C10Stat& s, int64_t current, int64_t peak, int64_t allocated,
                 int64_t freed, const std::string& what) {
  EXPECT_EQ(s.current, current) << what << " " << stat_text(s);
  EXPECT_EQ(s.peak, peak) << what << " " << stat_text(s);
  EXPECT_EQ(s.allocated, allocated) << what << " " << stat_text(s);
  EXPECT_EQ(s.freed, freed) << what << " " << stat_text(s);
}

// ---------------------------------------------------------------------------------------------
// Block contents, through the oclvm instructions on the blob the registry finds

void write_bytes(void* address, const std::vector<uint8_t>& bytes) {
  const BlobRef where = allocator().find(address);
  InstructionsBuilder builder = runtime().builder();
  builder.copy_host_to_device(bytes.data(), where.blob, where.offset, bytes.size());
  runtime().run(builder.take());
}

std::vector<uint8_t> read_bytes(const void* address, size_t count) {
  const BlobRef where = allocator().find(address);
  std::vector<uint8_t> bytes(count);
  InstructionsBuilder builder = runtime().builder();
  builder.copy_device_to_host(where.blob, where.offset, bytes.data(), count);
  runtime().run(builder.take());
  return bytes;
}

std::vector<uint8_t> pattern(size_t count, uint8_t seed) {
  std::vector<uint8_t> bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return bytes;
}

void* at_offset(void* address, size_t offset) { return static_cast<char*>(address) + offset; }

// ---------------------------------------------------------------------------------------------

class CLDeviceAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(device_count(), 0) << "Expected PoCL to provide at least one OpenCL device";
    set_current_device(0);
    ASSERT_EQ(allocator().live_blocks(), 0u) << "an earlier test left blocks alive";
    allocator().emptyCache();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      allocator().resetPeakStats(d);
      const Stats s = stats(d);
      ASSERT_EQ(s.allocated_bytes[kAll].current, 0) << "opencl:" << int{d};
      ASSERT_EQ(s.reserved_bytes[kAll].current, 0) << "opencl:" << int{d};
    }
  }

  void TearDown() override {
    set_current_device(0);
    EXPECT_EQ(allocator().live_blocks(), 0u) << "the test leaked blocks";
    allocator().emptyCache();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      const Stats s = stats(d);
      EXPECT_EQ(s.allocation[kAll].current, 0) << "opencl:" << int{d};
      EXPECT_EQ(s.allocated_bytes[kAll].current, 0) << "opencl:" << int{d};
      EXPECT_EQ(s.requested_bytes[kAll].current, 0) << "opencl:" << int{d};
      EXPECT_EQ(s.reserved_bytes[kAll].current, 0) << "opencl:" << int{d};
      EXPECT_EQ(s.segment[kAll].current, 0) << "opencl:" << int{d};
    }
  }
};

// --- allocate --------------------------------------------------------------------------------

TEST_F(CLDeviceAllocatorTest, AllocateZeroGivesEmptyPointerOnCurrentDeviceAndRecordsNothing) {
  const c10::DeviceIndex device = device_count() - 1;  // not only the default device
  set_current_device(device);
  const Stats before = stats(device);

  std::optional<c10::DataPtr> ptr = allocator().allocate(0);
  EXPECT_EQ(ptr->get(), nullptr);
  EXPECT_EQ(ptr->get_context(), nullptr);
  EXPECT_EQ(ptr->device(), opencl(device));
  EXPECT_EQ(allocator().live_blocks(), 0u);
  EXPECT_TRUE(same_stats(before, stats(device)));

  ptr.reset();  // the deleter with a null context does nothing
  EXPECT_TRUE(same_stats(before, stats(device)));
  EXPECT_EQ(stats(device).allocation[kAll].allocated, before.allocation[kAll].allocated);
}

TEST_F(CLDeviceAllocatorTest, AllocateGivesDeviceBlockOnCurrentDeviceReleasedSynchronously) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  constexpr size_t kBytes = 1000;
  const Stats before = stats(0);

  std::optional<c10::DataPtr> ptr = allocator().allocate(kBytes);
  ASSERT_NE(ptr->get(), nullptr);
  EXPECT_NE(ptr->get_context(), nullptr);
  EXPECT_EQ(ptr->get_deleter(), allocator().raw_deleter());
  EXPECT_EQ(ptr->device(), opencl(0));
  EXPECT_EQ(allocator().live_blocks(), 1u);
  // The data is the blob's device address, the context its TensorStorage.
  const auto* storage = static_cast<const TensorStorage*>(ptr->get_context());
  EXPECT_EQ(storage->blob()->storage()->device_address(),
            reinterpret_cast<uintptr_t>(ptr->get()));
  EXPECT_EQ(storage->blob()->storage()->size(), kBytes);

  const Stats during = stats(0);
  const int64_t block = rounded(kBytes);
  EXPECT_GE(block, static_cast<int64_t>(kBytes));
  EXPECT_EQ(during.allocated_bytes[kAll].current - before.allocated_bytes[kAll].current, block);
  EXPECT_EQ(during.active_bytes[kAll].current - before.active_bytes[kAll].current, block);
  EXPECT_EQ(during.requested_bytes[kAll].current - before.requested_bytes[kAll].current,
            static_cast<int64_t>(kBytes));
  EXPECT_EQ(during.allocation[kAll].current - before.allocation[kAll].current, 1);
  EXPECT_EQ(during.allocation[kAll].allocated - before.allocation[kAll].allocated, 1);

  ptr.reset();  // the release is synchronous: checked at once, no waiting
  const Stats after = stats(0);
  EXPECT_EQ(allocator().live_blocks(), 0u);
  EXPECT_EQ(after.allocated_bytes[kAll].current, before.allocated_bytes[kAll].current);
  EXPECT_EQ(after.active_bytes[kAll].current, before.active_bytes[kAll].current);
  EXPECT_EQ(after.requested_bytes[kAll].current, before.requested_bytes[kAll].current);
  EXPECT_EQ(after.allocation[kAll].current, before.allocation[kAll].current);
  EXPECT_EQ(after.allocated_bytes[kAll].freed - before.allocated_bytes[kAll].freed, block);
}

TEST_F(CLDeviceAllocatorTest, RegisteredForPrivateUse1AtLoad) {
  EXPECT_EQ(c10::GetAllocator(c10::DeviceType::PrivateUse1), &allocator());
  EXPECT_EQ(c10::getDeviceAllocator(c10::DeviceType::PrivateUse1), &allocator());
}

TEST_F(CLDeviceAllocatorTest, EmptyTensorStorageIsABlockOfThisAllocator) {
  std::optional<at::Tensor> t =
      at::empty({1000}, at::TensorOptions().dtype(at::kByte).device(opencl(0)));
  const c10::DataPtr& data = t->storage().data_ptr();
  EXPECT_EQ(data.get_deleter(), allocator().raw_deleter());
  EXPECT_EQ(data.device(), opencl(0));
  EXPECT_EQ(allocator().live_blocks(), 1u);
  EXPECT_EQ(allocator().find(data.get()).offset, 0u);
  EXPECT_EQ(stats(0).requested_bytes[kAll].current, 1000);
  t.reset();
  EXPECT_EQ(allocator().live_blocks(), 0u);
}

TEST_F(CLDeviceAllocatorTest, InitializedWhenADeviceExists) {
  EXPECT_GT(device_count(), 0);
  EXPECT_TRUE(allocator().initialized());
}

// --- the block registry ----------------------------------------------------------------------

TEST_F(CLDeviceAllocatorTest, FindGivesBlobAndOffsetOfAddressesInsideLiveBlocksOnly) {
  constexpr size_t kBytes = 1000;
  std::optional<c10::DataPtr> a = allocator().allocate(kBytes);
  std::optional<c10::DataPtr> b = allocator().allocate(kBytes);
  const auto* owner = static_cast<const TensorStorage*>(a->get_context());

  EXPECT_EQ(allocator().find(a->get()).blob, owner->blob());
  EXPECT_EQ(allocator().find(a->get()).offset, 0u);
  EXPECT_EQ(allocator().find(at_offset(a->get(), 1)).offset, 1u);
  EXPECT_EQ(allocator().find(at_offset(a->get(), kBytes - 1)).blob, owner->blob());
  EXPECT_EQ(allocator().find(at_offset(a->get(), kBytes - 1)).offset, kBytes - 1);
  // Past the requested bytes (the rounding padding) is no block's byte.
  EXPECT_THROW(allocator().find(at_offset(a->get(), kBytes)), c10::Error);
  int on_stack = 0;
  EXPECT_THROW(allocator().find(&on_stack), c10::Error);
  EXPECT_THROW(allocator().find(nullptr), c10::Error);

  void* released = a->get();
  a.reset();
  EXPECT_THROW(allocator().find(released), c10::Error);
  EXPECT_EQ(allocator().find(b->get()).offset, 0u);
}

// --- copy_data -------------------------------------------------------------------------------

TEST_F(CLDeviceAllocatorTest, CopyDataCopiesWholeBlocks) {
  constexpr size_t kBytes = 4096;
  std::optional<c10::DataPtr> src = allocator().allocate(kBytes);
  std::optional<c10::DataPtr> dst = allocator().allocate(kBytes);
  const std::vector<uint8_t> data = pattern(kBytes, 3);
  write_bytes(src->get(), data);
  write_bytes(dst->get(), std::vector<uint8_t>(kBytes, 0));

  allocator().copy_data(dst->get(), src->get(), kBytes);
  EXPECT_EQ(read_bytes(dst->get(), kBytes), data);
  EXPECT_EQ(read_bytes(src->get(), kBytes), data);  // the source is untouched
}

TEST_F(CLDeviceAllocatorTest, CopyDataAtInteriorAddresses) {
  constexpr size_t kBytes = 4096;
  std::optional<c10::DataPtr> src = allocator().allocate(kBytes);
  std::optional<c10::DataPtr> dst = allocator().allocate(kBytes);
  const std::vector<uint8_t> data = pattern(kBytes, 11);
  const std::vector<uint8_t> background(kBytes, 0xEE);
  write_bytes(src->get(), data);
  write_bytes(dst->get(), background);

  // Bytes [1000, 1500) of src go to [100, 600) of dst; nothing else of dst changes.
  allocator().copy_data(at_offset(dst->get(), 100), at_offset(src->get(), 1000), 500);
  std::vector<uint8_t> expected = background;
  std::copy(data.begin() + 1000, data.begin() + 1500, expected.begin() + 100);
  EXPECT_EQ(read_bytes(dst->get(), kBytes), expected);

  // Up to the last byte of both blocks.
  allocator().copy_data(at_offset(dst->get(), kBytes - 7), at_offset(src->get(), kBytes - 7), 7);
  std::copy(data.end() - 7, data.end(), expected.end() - 7);
  EXPECT_EQ(read_bytes(dst->get(), kBytes), expected);

  // Within one block: disjoint ranges are copied, overlapping ones refused (InvalidArgument from
  // the builder, a c10::ValueError here) with nothing written.
  allocator().copy_data(at_offset(src->get(), 2048), src->get(), 1024);
  std::vector<uint8_t> src_expected = data;
  std::copy(data.begin(), data.begin() + 1024, src_expected.begin() + 2048);
  EXPECT_EQ(read_bytes(src->get(), kBytes), src_expected);
  EXPECT_THROW(allocator().copy_data(at_offset(src->get(), 10), src->get(), 100), c10::ValueError);
  EXPECT_EQ(read_bytes(src->get(), kBytes), src_expected);
}

TEST_F(CLDeviceAllocatorTest, CopyDataRefusesRangesOutsideLiveBlocks) {
  constexpr size_t kBytes = 4096;
  std::optional<c10::DataPtr> src = allocator().allocate(kBytes);
  std::optional<c10::DataPtr> dst = allocator().allocate(kBytes);
  const std::vector<uint8_t> before = pattern(kBytes, 5);
  write_bytes(dst->get(), before);

  // Running past the end of the destination block (InvalidArgument from the builder).
  EXPECT_THROW(allocator().copy_data(at_offset(dst->get(), 100), src->get(), kBytes),
               c10::ValueError);
  // An address no live block holds (the registry).
  int on_stack = 0;
  EXPECT_THROW(allocator().copy_data(dst->get(), &on_stack, 4), c10::Error);
  EXPECT_EQ(read_bytes(dst->get(), kBytes), before);
  // A zero-byte copy looks at nothing, not even the addresses.
  allocator().copy_data(nullptr, nullptr, 0);
}

TEST_F(CLDeviceAllocatorTest, CopyDataAcrossDevices) {
  if (device_count() < 2) GTEST_SKIP() << "needs two devices (POCL_DEVICES='pthread pthread')";
  constexpr size_t kBytes = 8192;
  set_current_device(0);
  std::optional<c10::DataPtr> on0 = allocator().allocate(kBytes);
  set_current_device(1);
  std::optional<c10::DataPtr> on1 = allocator().allocate(kBytes);
  set_current_device(0);
  const std::vector<uint8_t> data = pattern(kBytes, 17);
  write_bytes(on0->get(), data);
  write_bytes(on1->get(), std::vector<uint8_t>(kBytes, 0));

  allocator().copy_data(at_offset(on1->get(), 512), at_offset(on0->get(), 256), 4096);
  std::vector<uint8_t> expected(kBytes, 0);
  std::copy(data.begin() + 256, data.begin() + 256 + 4096, expected.begin() + 512);
  EXPECT_EQ(read_bytes(on1->get(), kBytes), expected);
}

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

// --- refusals and out of memory --------------------------------------------------------------

// More than the device's largest single allocation is refused before anything runs: the builder
// throws InvalidArgument, which the adapter turns into c10::ValueError — not an OutOfMemoryError,
// and num_ooms does not move.
// Torch code catches OutOfMemoryError to shrink its batch: a request larger than one allocation
// may hold is one, raised before the allocator sees it (so no statistic changes, num_ooms
// included).
TEST_F(CLDeviceAllocatorTest, AllocateBeyondLargestSingleAllocationIsOutOfMemoryChangingNothing) {
  const uint64_t max_alloc = properties(0).max_alloc_bytes;
  ASSERT_LT(max_alloc, uint64_t{1} << 60);
  const Stats before = stats(0);
  for (const size_t bytes : {static_cast<size_t>(max_alloc) + 1, size_t{1} << 60, SIZE_MAX}) {
    try {
      c10::DataPtr ptr = allocator().allocate(bytes);
      ADD_FAILURE() << "allocate(" << bytes << ") succeeded";
    } catch (const c10::OutOfMemoryError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("OpenCL out of memory. opencl:0: tried to allocate " +
                             std::to_string(bytes) +
                             " bytes, more than the device's largest single allocation (" +
                             std::to_string(max_alloc) + " bytes)"),
                std::string::npos)
          << message;
    }
  }
  EXPECT_TRUE(same_stats(before, stats(0)));
  EXPECT_EQ(allocator().live_blocks(), 0u);

  std::optional<c10::DataPtr> ptr = allocator().allocate(1000);  // the device still works
  EXPECT_NE(ptr->get(), nullptr);
  ptr.reset();
  EXPECT_EQ(stats(0).allocated_bytes[kAll].current, 0);
}

// A real out of memory needs a limit: ctest's oclvm_torch_tests.memory_limit sets
// OCLVM_MEMORY_LIMIT. A request that not even an empty cache could make room for is refused
// before anything is touched (Note [Out-of-memory ladder]): c10::OutOfMemoryError with oclvm's
// message, num_ooms + 1, every other statistic unchanged (the cache is kept), nothing held.
TEST_F(CLDeviceAllocatorTest, OutOfMemoryUnderLimitIsOutOfMemoryErrorCountedInNumOoms) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  const uint64_t limit = runtime().options().memory_limit;
  if (limit == 0) GTEST_SKIP() << "needs OCLVM_MEMORY_LIMIT (ctest oclvm_torch_tests.memory_limit)";
  ASSERT_EQ(limit % kMiB, 0u) << "the test's sizes assume a limit of whole MiB";
  ASSERT_LE(limit, properties(0).max_alloc_bytes);
  ASSERT_GE(limit, uint64_t{16 * kMiB});

  std::optional<c10::DataPtr> held = allocator().allocate(1000);  // a 2 MiB small segment
  { c10::DataPtr cached = allocator().allocate(4 * kMiB); }  // then a cached 4 MiB segment
  const Stats before = stats(0);
  ASSERT_EQ(before.reserved_bytes[kAll].current, kSmallSegment + 4 * kMiB);

  // Even with the 4 MiB given back: 2 MiB + (limit - 1 MiB) > limit.
  const size_t bytes = static_cast<size_t>(limit) - kMiB;
  try {
    c10::DataPtr ptr = allocator().allocate(bytes);
    ADD_FAILURE() << "allocate(" << bytes << ") succeeded under a limit of " << limit;
  } catch (const c10::OutOfMemoryError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("OpenCL out of memory. opencl:0: tried to allocate", 0), 0u)
        << message;
    EXPECT_NE(message.find("(" + std::to_string(bytes) + " bytes)"), std::string::npos) << message;
  }
  const Stats after = stats(0);
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  EXPECT_TRUE(same_stats(before, after, {"num_ooms"}));
  EXPECT_EQ(allocator().live_blocks(), 1u);

  std::optional<c10::DataPtr> again = allocator().allocate(4096);  // the device still works
  EXPECT_NE(again->get(), nullptr);
  again.reset();
  held.reset();
  EXPECT_EQ(stats(0).num_ooms, before.num_ooms + 1);
}

// --- threads and devices ---------------------------------------------------------------------

// Both pools, sizes at and around the rounding quantum and the small/large boundary.
constexpr size_t kThreadSizes[] = {1, 100, 511, 512, 513, 4096, 65536, 200000, kSmallSize + 1};

TEST_F(CLDeviceAllocatorTest, FourThreadsAllocatingAndFreeingLeaveNothingBehind) {
  constexpr int kThreads = 4;
  constexpr int kBlocksPerThread = 1000;
  std::vector<Stats> before;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) before.push_back(stats(d));
  const size_t live_before = allocator().live_blocks();

  std::atomic<int> wrong_device{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &wrong_device, &failures] {
      try {
        const auto device = static_cast<c10::DeviceIndex>(t % device_count());
        set_current_device(device);
        std::mt19937 rng(static_cast<unsigned>(t) + 1);
        std::vector<c10::DataPtr> held;
        for (int i = 0; i < kBlocksPerThread; ++i) {
          const size_t bytes = kThreadSizes[rng() % std::size(kThreadSizes)] + rng() % 64;
          held.push_back(allocator().allocate(bytes));
          if (held.back().device() != opencl(device) || held.back().get() == nullptr) {
            ++wrong_device;
          }
          if (held.size() > 4) held.erase(held.begin() + static_cast<ptrdiff_t>(rng() % 5));
        }
      } catch (const std::exception& e) {
        ++failures;
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong_device.load(), 0);
  EXPECT_EQ(allocator().live_blocks(), live_before);
  int64_t allocations = 0;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    const Stats s = stats(d);
    EXPECT_EQ(s.allocated_bytes[kAll].current, before[d].allocated_bytes[kAll].current);
    EXPECT_EQ(s.requested_bytes[kAll].current, before[d].requested_bytes[kAll].current);
    EXPECT_EQ(s.allocation[kAll].current, before[d].allocation[kAll].current);
    EXPECT_EQ(s.allocation[kAll].freed - before[d].allocation[kAll].freed,
              s.allocation[kAll].allocated - before[d].allocation[kAll].allocated);
    allocations += s.allocation[kAll].allocated - before[d].allocation[kAll].allocated;
  }
  EXPECT_EQ(allocations, kThreads * kBlocksPerThread) << "every allocate counted exactly once";
}

TEST_F(CLDeviceAllocatorTest, CurrentDeviceIsPerThread) {
  const c10::DeviceIndex last = device_count() - 1;
  set_current_device(last);
  c10::DeviceIndex seen_by_new_thread = -1;
  std::thread([&] {
    seen_by_new_thread = current_device();
    set_current_device(0);
  }).join();
  EXPECT_EQ(seen_by_new_thread, 0) << "every thread starts on device 0";
  EXPECT_EQ(current_device(), last) << "another thread's set_current_device leaked here";

  set_current_device(0);
  c10::DeviceIndex set_by_other = -1;
  std::thread([&] {
    set_current_device(last);
    set_by_other = current_device();
  }).join();
  EXPECT_EQ(set_by_other, last);
  EXPECT_EQ(current_device(), 0);

  EXPECT_THROW(set_current_device(device_count()), c10::IndexError);
  EXPECT_THROW(set_current_device(-1), c10::IndexError);
  EXPECT_EQ(current_device(), 0) << "a refused index changes nothing";
}

TEST_F(CLDeviceAllocatorTest, BlocksLandOnTheDeviceCurrentAtAllocateTime) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  if (device_count() < 2) GTEST_SKIP() << "needs two devices (POCL_DEVICES='pthread pthread')";
  const Stats before0 = stats(0);
  const Stats before1 = stats(1);

  set_current_device(1);
  std::optional<c10::DataPtr> on1 = allocator().allocate(1000);
  set_current_device(0);  // changing the current device afterwards does not move the block
  EXPECT_EQ(on1->device(), opencl(1));
  EXPECT_EQ(at::detail::getPrivateUse1Hooks().getDeviceFromPtr(on1->get()), opencl(1));
  EXPECT_TRUE(same_stats(before0, stats(0))) << "device 0 must not see device 1's block";
  const Stats mid1 = stats(1);
  EXPECT_EQ(mid1.allocation[kAll].current - before1.allocation[kAll].current, 1);
  EXPECT_EQ(mid1.allocated_bytes[kAll].current - before1.allocated_bytes[kAll].current,
            rounded(1000));
  EXPECT_EQ(mid1.reserved_bytes[kAll].current, kSmallSegment);

  std::optional<c10::DataPtr> on0 = allocator().allocate(4096);
  EXPECT_EQ(on0->device(), opencl(0));
  EXPECT_EQ(stats(0).allocated_bytes[kAll].current - before0.allocated_bytes[kAll].current, 4096);
  EXPECT_TRUE(same_stats(mid1, stats(1))) << "device 1 must not see device 0's block";

  on1.reset();  // released on device 1, whatever the current device is
  const Stats after1 = stats(1);
  EXPECT_EQ(after1.allocated_bytes[kAll].current, before1.allocated_bytes[kAll].current);
  EXPECT_EQ(after1.allocation[kAll].current, before1.allocation[kAll].current);
  EXPECT_EQ(stats(0).allocated_bytes[kAll].current - before0.allocated_bytes[kAll].current, 4096);
  on0.reset();
}

TEST_F(CLDeviceAllocatorTest, HooksGiveTheDeviceOfABlockAddress) {
  ASSERT_TRUE(at::isPrivateUse1HooksRegistered());
  const at::PrivateUse1HooksInterface& hooks = at::detail::getPrivateUse1Hooks();
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    set_current_device(d);
    std::optional<c10::DataPtr> block = allocator().allocate(1000);
    EXPECT_EQ(hooks.getDeviceFromPtr(block->get()), opencl(d));
    EXPECT_EQ(hooks.getDeviceFromPtr(at_offset(block->get(), 999)), opencl(d));
    block.reset();
  }
  set_current_device(0);
  int on_stack = 0;
  EXPECT_THROW(hooks.getDeviceFromPtr(&on_stack), c10::Error);
  EXPECT_THROW(hooks.getDeviceFromPtr(nullptr), c10::Error);
}

// ---------------------------------------------------------------------------------------------
// Streams and recordStream

// Makes `stream` this thread's current stream of its device for the scope.
const c10::impl::DeviceGuardImplInterface& guard_impl() {
  return *c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
}

class CurrentStream {
 public:
  explicit CurrentStream(c10::Stream stream) : previous_(guard_impl().exchangeStream(stream)) {}
  ~CurrentStream() { guard_impl().exchangeStream(previous_); }

 private:
  c10::Stream previous_;
};

TEST_F(CLDeviceAllocatorTest, TorchStreamIdsMapToVmStreamsAndBack) {
  Runtime& rt = runtime();
  const c10::Stream default_stream = guard_impl().getDefaultStream(opencl(0));
  EXPECT_EQ(default_stream.id(), 0);
  EXPECT_EQ(&vm_stream(default_stream), &rt.stream(to_oclvm(0)));
  EXPECT_EQ(guard_impl().getStream(opencl(0)), default_stream);

  const c10::Stream fresh = guard_impl().getNewStream(opencl(0), 0);
  vm::Stream& mapped = vm_stream(fresh);
  EXPECT_EQ(mapped.role(), vm::StreamRole::kUser);
  EXPECT_EQ(mapped.device(), to_oclvm(0));
  EXPECT_EQ(torch_stream(mapped), fresh);
  EXPECT_NE(guard_impl().getNewStream(opencl(0), 0), fresh);

  const c10::Stream unknown(c10::Stream::UNSAFE, opencl(0), 1 << 20);
  EXPECT_THROW(vm_stream(unknown), c10::Error);
  EXPECT_THROW(guard_impl().exchangeStream(unknown), c10::Error);
  EXPECT_EQ(guard_impl().getStream(opencl(0)), default_stream) << "a refused stream changes nothing";
}

TEST_F(CLDeviceAllocatorTest, BlocksAreProducedOnTheCurrentStream) {
  const c10::Stream user = guard_impl().getStreamFromGlobalPool(opencl(0), false);
  c10::DataPtr on_user;
  {
    CurrentStream scope(user);
    on_user = allocator().allocate(4096);
  }
  c10::DataPtr on_default = allocator().allocate(4096);
  EXPECT_EQ(vm::producer_stream(*blob_of_data(on_user).blob), vm_stream(user).id());
  EXPECT_EQ(vm::producer_stream(*blob_of_data(on_default).blob),
            runtime().stream(to_oclvm(0)).id());
}

TEST_F(CLDeviceAllocatorTest, RecordStreamMakesTheBlockAReadOperandOfTheOtherStream) {
  const c10::Stream user = guard_impl().getNewStream(opencl(0), 0);
  c10::DataPtr ptr = allocator().allocate(1 << 20);
  const std::shared_ptr<BlobObject> blob = blob_of_data(ptr).blob;
  // Only this thread uses the blob, and every list has reached its sync point, so reading the
  // VM's access records here races with nothing. The allocation made them (vm/dependence.h).
  const vm::BlobRecords& records = *vm::find_records(*blob);
  allocator().recordStream(ptr, guard_impl().getDefaultStream(opencl(0)));  // its producer
  EXPECT_TRUE(records.reads.empty());
  allocator().recordStream(ptr, user);
  ASSERT_EQ(records.reads.size(), 1u);
  EXPECT_EQ(records.reads[0].stream, vm_stream(user).id());
  guard_impl().recordDataPtrOnStream(ptr, user);  // the guard's entry point: same record
  EXPECT_EQ(records.reads.size(), 1u);

  allocator().recordStream(c10::DataPtr(nullptr, opencl(0)), user);  // empty: nothing to record
  const c10::Stream unknown(c10::Stream::UNSAFE, opencl(0), 1 << 20);
  EXPECT_THROW(allocator().recordStream(ptr, unknown), c10::Error);
  ptr.clear();  // the release waits for `user` (a soft sync) and still frees synchronously
  EXPECT_EQ(stats(0).allocated_bytes[kAll].current, 0);
}

}  // namespace
}  // namespace oclvm::torch_adapter
