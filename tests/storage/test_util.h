// tests/storage/test_util.h — shared fixtures and helpers for the storage tests.
//
// Every allocator test runs on a real device (PoCL through OpenCL, or the host device). The
// LeakCheckedTest fixture records the backends' live segments and the address space's live
// reservations at SetUp and asserts at TearDown that every test gave back exactly what it took:
// zero live bytes and zero live segments. DeviceTypeTest runs such a test once on opencl:0 and once
// on the host device.
//
// For what a real device never does, FaultInjectionBackend is a test-only MemoryBackend in host
// memory whose driver refuses memory on demand: beyond a fixed capacity, or the next N creations
// whatever their size. The out-of-memory ladders of the allocators are tested with it.
//
// stats_equal / same_stats compare two DeviceStats snapshots field by field ("changes nothing"
// checks); expect_stat checks the four numbers of one Stat; kSmall / kLarge index a StatArray.
// write_pattern / expect_pattern prove that a block holds its own data, and expect_disjoint that
// blocks do not overlap. message_of<E>(f) runs f and returns the message of the E it must throw;
// EXPECT_CONTAINS(text, part) expects `part` in `text` and prints the whole text when it is not.
// A test file takes them all with `using namespace oclvm::testing;`.
//
// This file is compiled into more than one test binary (see CMakeLists.txt): it registers no tests,
// environments or listeners and holds no global state of its own.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "oclvm/storage/allocator.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/stats.h"

// Expects `part` in `text`; the failure prints all of `text`.
#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

namespace oclvm::testing {

// Runs `f`, expects an exception of type E and returns its message ("" and a failure otherwise).
template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// The pools of a StatArray (array[kSmall]; the whole device is array.aggregate()), and byte units,
// for writing expected values.
inline constexpr StatType kSmall = StatType::kSmallPool;
inline constexpr StatType kLarge = StatType::kLargePool;
inline constexpr size_t kKiB = 1024;
inline constexpr size_t kMiB = 1024 * kKiB;

// opencl:index of the process-wide DeviceManager.
MemoryBackend& opencl_backend(int index = 0);
MemoryBackend& host_backend();
// Number of OpenCL devices (1 with the default environment, 2 with POCL_DEVICES="x x").
size_t opencl_device_count();
// opencl:0 for DeviceType::kOpenCL, the host device for DeviceType::kCpu.
MemoryBackend& backend_of(DeviceType type);

// Asserts, in the allocator's terms, that nothing is live: allocated_bytes, allocation and
// requested_bytes current are 0, and after empty_cache reserved_bytes and segment are 0 too.
void expect_nothing_live(Allocator& allocator);

class LeakCheckedTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

 private:
  std::vector<size_t> segments_at_start_;
  size_t ranges_at_start_ = 0;
};

// A LeakCheckedTest parameterized over the device type; backend() is backend_of(GetParam()).
// Instantiate with ::testing::Values(DeviceType::kOpenCL, DeviceType::kCpu) and device_type_name.
class DeviceTypeTest : public LeakCheckedTest, public ::testing::WithParamInterface<DeviceType> {
 protected:
  MemoryBackend& backend() { return backend_of(GetParam()); }
};

// Parameter names "opencl" and "cpu" for INSTANTIATE_TEST_SUITE_P over DeviceType.
std::string device_type_name(const ::testing::TestParamInfo<DeviceType>& info);

// True when every field of `a` equals the same field of `b`.
bool stats_equal(const DeviceStats& a, const DeviceStats& b);
// For EXPECT_TRUE: success when stats_equal(a, b); otherwise a failure that names every field that
// differs with both values, as "num_ooms: 0 vs 1" or "reserved_bytes[large_pool].peak: 0 vs 4096".
::testing::AssertionResult same_stats(const DeviceStats& a, const DeviceStats& b);

// Expects the four numbers of `s`; `what` names the statistic in a failure message.
void expect_stat(const Stat& s, int64_t current, int64_t peak, int64_t allocated, int64_t freed,
                 const char* what = "");

// The addresses a block owns: [ptr, ptr + allocator.allocated_size(a)).
using AddressRange = std::pair<uintptr_t, uintptr_t>;
AddressRange address_range(const Allocator& allocator, const Allocation& a);
// Expects that no two of `ranges` overlap, whatever their order.
void expect_disjoint(std::vector<AddressRange> ranges);

// Byte k of the test pattern of block number `index`. A test may bring its own.
using BytePattern = uint8_t (*)(size_t index, size_t k);
uint8_t default_pattern(size_t index, size_t k);  // index * 131 + k * 7 + 1, truncated to a byte

// Writes pattern(index, k) for k in [0, bytes) into block `a`; the short form writes a.size bytes
// of default_pattern.
void write_pattern(MemoryBackend& backend, const Allocation& a, size_t index, size_t bytes,
                   BytePattern pattern);
void write_pattern(MemoryBackend& backend, const Allocation& a, size_t index);
// Reads the same bytes back and asserts each one; the first wrong byte ends the check with a fatal
// failure (wrap the call in ASSERT_NO_FATAL_FAILURE to end the test there).
void expect_pattern(MemoryBackend& backend, const Allocation& a, size_t index, size_t bytes,
                    BytePattern pattern);
void expect_pattern(MemoryBackend& backend, const Allocation& a, size_t index);

// What a FaultInjectionBackend shows to an allocator.
struct FaultInjectionConfig {
  Device device{DeviceType::kCpu, 0};  // the device it claims to be (its str() is in messages)
  // Bytes of live segments the driver gives out: properties().global_mem_bytes. A creation that
  // would hold more is refused.
  uint64_t capacity = uint64_t{1} << 30;
  // properties().max_alloc_bytes, the largest segment; 0 stands for `capacity`.
  uint64_t max_alloc_bytes = 0;
};

// A device in host memory whose driver refuses (OutOfMemoryError) a segment creation
//   - when it is one of the next N creations scripted by refuse_next(N), whatever its size:
//     "scripted driver refusal of B bytes"; such a refusal is used up, checked first;
//   - when the segment does not fit into what the capacity leaves: "small device refuses B bytes
//     (L of C bytes live)".
// Segments are zero-filled host memory, so write / read / fill / copy work. It has no command
// queues (create_queue throws Error). The properties are: name "fault injection test device",
// platform "test", version "1", global_mem_bytes = capacity, max_alloc_bytes as configured,
// base_addr_align_bytes = 128.
//
// Invariant: live_bytes() is the sum of the sizes of the live segments and at most capacity.
// Thread-safety: thread-compatible (one test thread).
class FaultInjectionBackend final : public MemoryBackend {
 public:
  explicit FaultInjectionBackend(const FaultInjectionConfig& config);

  // The next `count` segment creations are refused, on top of those still scripted.
  void refuse_next(int count);
  // Scripted refusals not used up yet.
  int refusals_left() const { return refusals_left_; }
  // Bytes of the live segments.
  uint64_t live_bytes() const { return live_bytes_; }

  std::unique_ptr<DeviceQueue> create_queue() override;

 protected:
  void* do_create(size_t bytes) override;
  bool do_release(void* native, size_t bytes) noexcept override;
  void do_write(void* native, size_t offset, const void* src, size_t n) override;
  void do_read(void* native, size_t offset, void* dst, size_t n) override;
  void do_fill(void* native, size_t offset, uint8_t value, size_t n) override;
  void do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) override;

 private:
  const uint64_t capacity_;

  int refusals_left_ = 0;
  uint64_t live_bytes_ = 0;
};

}  // namespace oclvm::testing
