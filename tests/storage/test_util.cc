// tests/storage/test_util.cc — shared fixtures and helpers for the storage tests (test_util.h).
#include "tests/storage/test_util.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <sstream>
#include <type_traits>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/queue.h"

namespace oclvm::testing {

MemoryBackend& opencl_backend(int index) {
  return DeviceManager::instance().backend(Device{DeviceType::kOpenCL, static_cast<DeviceIndex>(index)});
}

MemoryBackend& host_backend() { return DeviceManager::instance().backend(Device{DeviceType::kCpu, 0}); }

size_t opencl_device_count() { return DeviceManager::instance().opencl_device_count(); }

MemoryBackend& backend_of(DeviceType type) {
  return type == DeviceType::kCpu ? host_backend() : opencl_backend(0);
}

void expect_nothing_live(Allocator& allocator) {
  DeviceStats s = allocator.stats();
  EXPECT_EQ(s.allocation.aggregate().current, 0) << allocator.name() << "\n" << s.to_string();
  EXPECT_EQ(s.allocated_bytes.aggregate().current, 0) << allocator.name() << "\n" << s.to_string();
  EXPECT_EQ(s.requested_bytes.aggregate().current, 0) << allocator.name() << "\n" << s.to_string();
  allocator.empty_cache();
  s = allocator.stats();
  EXPECT_EQ(s.reserved_bytes.aggregate().current, 0) << allocator.name() << "\n" << s.to_string();
  EXPECT_EQ(s.segment.aggregate().current, 0) << allocator.name() << "\n" << s.to_string();
  allocator.check_invariants();
}

void LeakCheckedTest::SetUp() {
  auto& manager = DeviceManager::instance();
  for (Device d : manager.devices()) segments_at_start_.push_back(manager.backend(d).live_segments());
  ranges_at_start_ = AddressSpace::instance().live_ranges();
}

void LeakCheckedTest::TearDown() {
  auto& manager = DeviceManager::instance();
  auto devices = manager.devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(manager.backend(devices[i]).live_segments(), segments_at_start_[i])
        << "segments leaked on " << devices[i].str();
  }
  EXPECT_EQ(AddressSpace::instance().live_ranges(), ranges_at_start_) << "address ranges leaked";
}

std::string device_type_name(const ::testing::TestParamInfo<DeviceType>& info) {
  return info.param == DeviceType::kCpu ? "cpu" : "opencl";
}

// ---------------------------------------------------------------------------------------------
// Statistics.

namespace {

constexpr const char* kStatTypeNames[kNumStatTypes] = {"aggregate", "small_pool", "large_pool"};

}  // namespace

bool stats_equal(const DeviceStats& a, const DeviceStats& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

::testing::AssertionResult same_stats(const DeviceStats& a, const DeviceStats& b) {
  if (stats_equal(a, b)) return ::testing::AssertionSuccess();
  std::ostringstream diff;
  diff << "DeviceStats differ (first vs second):";
  auto field = [&](const std::string& name, int64_t x, int64_t y) {
    if (x != y) diff << "\n  " << name << ": " << x << " vs " << y;
  };
  for (const StatArrayField& f : kStatArrayFields) {
    for (size_t i = 0; i < kNumStatTypes; ++i) {
      const std::string name = std::string(f.name) + "[" + kStatTypeNames[i] + "].";
      const Stat& x = (a.*f.member)[i];
      const Stat& y = (b.*f.member)[i];
      field(name + "current", x.current, y.current);
      field(name + "peak", x.peak, y.peak);
      field(name + "allocated", x.allocated, y.allocated);
      field(name + "freed", x.freed, y.freed);
    }
  }
  for (const StatCounterField& f : kStatCounterFields) field(f.name, a.*f.member, b.*f.member);
  return ::testing::AssertionFailure() << diff.str();
}

void expect_stat(const Stat& s, int64_t current, int64_t peak, int64_t allocated, int64_t freed,
                 const char* what) {
  EXPECT_EQ(s.current, current) << what;
  EXPECT_EQ(s.peak, peak) << what;
  EXPECT_EQ(s.allocated, allocated) << what;
  EXPECT_EQ(s.freed, freed) << what;
}

// ---------------------------------------------------------------------------------------------
// Blocks: address ranges and data patterns.

AddressRange address_range(const Allocator& allocator, const Allocation& a) {
  const auto start = reinterpret_cast<uintptr_t>(a.ptr);
  return {start, start + allocator.allocated_size(a)};
}

void expect_disjoint(std::vector<AddressRange> ranges) {
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first)
        << "ranges " << i - 1 << " and " << i << " overlap";
  }
}

uint8_t default_pattern(size_t index, size_t k) {
  return static_cast<uint8_t>(index * 131 + k * 7 + 1);
}

void write_pattern(MemoryBackend& backend, const Allocation& a, size_t index, size_t bytes,
                   BytePattern pattern) {
  std::vector<uint8_t> data(bytes);
  for (size_t k = 0; k < data.size(); ++k) data[k] = pattern(index, k);
  backend.write(*a.segment, a.offset, data.data(), data.size());
}

void write_pattern(MemoryBackend& backend, const Allocation& a, size_t index) {
  write_pattern(backend, a, index, a.size, default_pattern);
}

void expect_pattern(MemoryBackend& backend, const Allocation& a, size_t index, size_t bytes,
                    BytePattern pattern) {
  std::vector<uint8_t> back(bytes);
  backend.read(*a.segment, a.offset, back.data(), back.size());
  for (size_t k = 0; k < back.size(); ++k) {
    ASSERT_EQ(back[k], pattern(index, k))
        << "block " << index << " (" << bytes << " bytes), byte " << k;
  }
}

void expect_pattern(MemoryBackend& backend, const Allocation& a, size_t index) {
  expect_pattern(backend, a, index, a.size, default_pattern);
}

// ---------------------------------------------------------------------------------------------
// FaultInjectionBackend.

namespace {

DeviceProperties fault_injection_properties(const FaultInjectionConfig& config) {
  DeviceProperties p;
  p.name = "fault injection test device";
  p.platform = "test";
  p.version = "1";
  p.global_mem_bytes = config.capacity;
  p.max_alloc_bytes = config.max_alloc_bytes == 0 ? config.capacity : config.max_alloc_bytes;
  p.base_addr_align_bytes = 128;
  return p;
}

std::byte* bytes_of(void* native) { return static_cast<std::byte*>(native); }

}  // namespace

FaultInjectionBackend::FaultInjectionBackend(const FaultInjectionConfig& config)
    : MemoryBackend(config.device, fault_injection_properties(config)),
      capacity_(config.capacity) {}

void FaultInjectionBackend::refuse_next(int count) {
  if (count < 0) {
    throw InvalidArgument("Expected a refusal count >= 0, but got " + std::to_string(count));
  }
  refusals_left_ += count;
}

std::unique_ptr<DeviceQueue> FaultInjectionBackend::create_queue() {
  throw Error("this test backend has no command queues");
}

void* FaultInjectionBackend::do_create(size_t bytes) {
  if (refusals_left_ > 0) {
    --refusals_left_;
    throw OutOfMemoryError("scripted driver refusal of " + std::to_string(bytes) + " bytes");
  }
  if (bytes > capacity_ - live_bytes_) {
    throw OutOfMemoryError("small device refuses " + std::to_string(bytes) + " bytes (" +
                           std::to_string(live_bytes_) + " of " + std::to_string(capacity_) +
                           " bytes live)");
  }
  void* native = new std::byte[bytes]();
  live_bytes_ += bytes;
  return native;
}

bool FaultInjectionBackend::do_release(void* native, size_t bytes) noexcept {
  OCLVM_DCHECK(bytes <= live_bytes_);
  live_bytes_ -= bytes;
  delete[] bytes_of(native);
  return true;
}

void FaultInjectionBackend::do_write(void* native, size_t offset, const void* src, size_t n) {
  std::memcpy(bytes_of(native) + offset, src, n);
}

void FaultInjectionBackend::do_read(void* native, size_t offset, void* dst, size_t n) {
  std::memcpy(dst, bytes_of(native) + offset, n);
}

void FaultInjectionBackend::do_fill(void* native, size_t offset, uint8_t value, size_t n) {
  std::memset(bytes_of(native) + offset, value, n);
}

void FaultInjectionBackend::do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset,
                                    size_t n) {
  std::memmove(bytes_of(dst) + dst_offset, bytes_of(src) + src_offset, n);
}

}  // namespace oclvm::testing
