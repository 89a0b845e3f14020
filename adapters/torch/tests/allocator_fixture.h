// adapters/torch/tests/allocator_fixture.h — what the CLDeviceAllocator tests share
// (allocator_contract_test.cc, allocator_stats_test.cc): the fixture, statistics compared field by
// field, block contents read and written through oclvm instructions, and the sizes
// CachingAllocator's default options give.
//
// Every test starts with nothing live, nothing cached and peaks reset on every device, and the
// fixture proves at the end that it left nothing behind (no live block, zero allocated bytes, and
// zero reserved bytes once the cache is emptied).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/device.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/storage/backend.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter::testing {

using Stats = c10::CachingDeviceAllocator::DeviceStats;
using C10Stat = c10::CachingAllocator::Stat;
using C10StatArray = c10::CachingAllocator::StatArray;

constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
constexpr size_t kSmall = static_cast<size_t>(c10::CachingAllocator::StatType::SMALL_POOL);
constexpr size_t kLarge = static_cast<size_t>(c10::CachingAllocator::StatType::LARGE_POOL);
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kQuantum = 512;          // CachingAllocatorOptions::round_bytes
constexpr int64_t kSmallSegment = 2 * kMiB;  // CachingAllocatorOptions::small_segment_bytes

inline int64_t rounded(int64_t bytes) { return (bytes + kQuantum - 1) / kQuantum * kQuantum; }

inline CLDeviceAllocator& allocator() { return CLDeviceAllocator::instance(); }
inline Stats stats(c10::DeviceIndex device) { return allocator().getDeviceStats(device); }
inline c10::Device opencl(c10::DeviceIndex index) { return c10::Device(c10::DeviceType::PrivateUse1, index); }

inline const DeviceProperties& properties(c10::DeviceIndex device) {
  return runtime().properties(to_oclvm(device));
}

// The exact byte counts below hold for CachingAllocator only; OCLVM_ALLOCATOR may pick another.
inline bool caching_allocator_in_use() {
  const std::string& name = runtime().options().allocator;
  return name.empty() || name == "caching";
}
constexpr const char* kNeedsCaching = "exact sizes of CachingAllocator (OCLVM_ALLOCATOR is set)";

// ---------------------------------------------------------------------------------------------
// Comparing statistics

constexpr const char* kPoolNames[] = {"all", "small_pool", "large_pool"};

inline std::string stat_text(const C10Stat& s) {
  return "{current " + std::to_string(s.current) + ", peak " + std::to_string(s.peak) +
         ", allocated " + std::to_string(s.allocated) + ", freed " + std::to_string(s.freed) + "}";
}

inline bool same_stat(const C10Stat& a, const C10Stat& b) {
  return a.current == b.current && a.peak == b.peak && a.allocated == b.allocated &&
         a.freed == b.freed;
}

// Every field of two snapshots equal, except the counters named in `except`; the failure message
// lists each field that differs.
inline ::testing::AssertionResult same_stats(const Stats& expected, const Stats& actual,
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
inline void expect_stat(const C10Stat& s, int64_t current, int64_t peak, int64_t allocated,
                 int64_t freed, const std::string& what) {
  EXPECT_EQ(s.current, current) << what << " " << stat_text(s);
  EXPECT_EQ(s.peak, peak) << what << " " << stat_text(s);
  EXPECT_EQ(s.allocated, allocated) << what << " " << stat_text(s);
  EXPECT_EQ(s.freed, freed) << what << " " << stat_text(s);
}

// ---------------------------------------------------------------------------------------------
// Block contents, through the oclvm instructions on the blob the registry finds

inline void write_bytes(void* address, const std::vector<uint8_t>& bytes) {
  const BlobRef where = allocator().find(address);
  InstructionsBuilder builder = runtime().builder();
  builder.copy_host_to_device(bytes.data(), where.blob, where.offset, bytes.size());
  runtime().run(builder.take());
}

inline std::vector<uint8_t> read_bytes(const void* address, size_t count) {
  const BlobRef where = allocator().find(address);
  std::vector<uint8_t> bytes(count);
  InstructionsBuilder builder = runtime().builder();
  builder.copy_device_to_host(where.blob, where.offset, bytes.data(), count);
  runtime().run(builder.take());
  return bytes;
}

inline std::vector<uint8_t> pattern(size_t count, uint8_t seed) {
  std::vector<uint8_t> bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return bytes;
}

inline void* at_offset(void* address, size_t offset) { return static_cast<char*>(address) + offset; }

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

}  // namespace oclvm::torch_adapter::testing
