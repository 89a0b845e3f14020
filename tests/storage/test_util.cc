// tests/storage/test_util.cc — shared fixtures for the storage tests.
#include "tests/storage/test_util.h"

#include "storage/address_space.h"

namespace oclvm::testing {

MemoryBackend& opencl_backend(int index) {
  return DeviceManager::instance().backend(Device{DeviceType::kOpenCL, static_cast<DeviceIndex>(index)});
}

MemoryBackend& host_backend() { return DeviceManager::instance().backend(Device{DeviceType::kCpu, 0}); }

size_t opencl_device_count() { return DeviceManager::instance().opencl_device_count(); }

void expect_nothing_live(Allocator& allocator) {
  constexpr size_t kAll = 0;
  DeviceStats s = allocator.stats();
  EXPECT_EQ(s.allocation[kAll].current, 0) << allocator.name() << "\n" << s.to_string();
  EXPECT_EQ(s.allocated_bytes[kAll].current, 0) << allocator.name() << "\n" << s.to_string();
  EXPECT_EQ(s.requested_bytes[kAll].current, 0) << allocator.name() << "\n" << s.to_string();
  allocator.empty_cache();
  s = allocator.stats();
  EXPECT_EQ(s.reserved_bytes[kAll].current, 0) << allocator.name() << "\n" << s.to_string();
  EXPECT_EQ(s.segment[kAll].current, 0) << allocator.name() << "\n" << s.to_string();
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

}  // namespace oclvm::testing
