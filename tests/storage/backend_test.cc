// tests/storage/backend_test.cc — MemoryBackend on PoCL and on the host: segments, transfers,
// argument checks, and the device manager.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using testing::opencl_backend;

class BackendTest : public testing::DeviceTypeTest {};

TEST_P(BackendTest, SegmentRoundTripsData) {
  MemoryBackend& b = backend();
  const size_t before = b.live_segments();
  Segment* s = b.create_segment(4096 + 3);
  EXPECT_EQ(b.live_segments(), before + 1);
  EXPECT_EQ(s->size, 4096u + 3);
  EXPECT_EQ(s->backend, &b);
  EXPECT_EQ(s->address % AddressSpace::kChunk, 0u);

  std::vector<uint8_t> data(s->size);
  std::iota(data.begin(), data.end(), uint8_t{7});
  b.write(*s, 0, data.data(), data.size());
  std::vector<uint8_t> back(s->size, 0);
  b.read(*s, 0, back.data(), back.size());
  EXPECT_EQ(back, data);

  b.fill(*s, 100, 0xAB, 50);
  b.read(*s, 0, back.data(), back.size());
  for (size_t i = 0; i < back.size(); ++i) {
    ASSERT_EQ(back[i], (i >= 100 && i < 150) ? 0xAB : data[i]) << "byte " << i;
  }

  Segment* t = b.create_segment(256);
  b.copy(*s, 100, *t, 10, 50);
  std::vector<uint8_t> small(256, 1);
  b.read(*t, 10, small.data(), 50);
  for (size_t i = 0; i < 50; ++i) ASSERT_EQ(small[i], 0xAB);

  b.release_segment(t);
  b.release_segment(s);
  EXPECT_EQ(b.live_segments(), before);
  EXPECT_EQ(b.release_failures(), 0u);
}

TEST_P(BackendTest, RejectsBadSizesAndRangesWithoutHoldingAnything) {
  MemoryBackend& b = backend();
  const size_t before = b.live_segments();
  const size_t ranges = AddressSpace::instance().live_ranges();
  EXPECT_THROW(b.create_segment(0), InvalidArgument);
  EXPECT_THROW(b.create_segment(SIZE_MAX), InvalidArgument);
  EXPECT_THROW(b.create_segment(b.properties().max_alloc_bytes + 1), InvalidArgument);
  EXPECT_EQ(b.live_segments(), before);
  EXPECT_EQ(AddressSpace::instance().live_ranges(), ranges);

  Segment* s = b.create_segment(1024);
  uint8_t byte = 0;
  EXPECT_THROW(b.read(*s, 1024, &byte, 1), InvalidArgument);
  EXPECT_THROW(b.write(*s, 1000, &byte, 25), InvalidArgument);
  EXPECT_THROW(b.fill(*s, SIZE_MAX, 0, 2), InvalidArgument);
  EXPECT_NO_THROW(b.read(*s, 1024, &byte, 0));  // empty range at the end is fine
  try {
    b.read(*s, 1000, &byte, 25);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("1024-byte segment on " + b.device().str()),
              std::string::npos)
        << e.what();
  }
  b.release_segment(s);
}

TEST_P(BackendTest, SegmentsHaveDisjointAddressRanges) {
  MemoryBackend& b = backend();
  std::vector<Segment*> segments;
  for (size_t size : {1u, 512u, 3u << 20, 4096u}) segments.push_back(b.create_segment(size));
  for (size_t i = 0; i < segments.size(); ++i) {
    for (size_t j = i + 1; j < segments.size(); ++j) {
      const Segment& x = *segments[i];
      const Segment& y = *segments[j];
      EXPECT_TRUE(x.address + x.size <= y.address || y.address + y.size <= x.address);
    }
    EXPECT_EQ(AddressSpace::instance().resolve(segments[i]->address + segments[i]->size - 1).segment,
              segments[i]);
  }
  for (Segment* s : segments) b.release_segment(s);
}

TEST_P(BackendTest, PropertiesAreFilledIn) {
  const DeviceProperties& p = backend().properties();
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.global_mem_bytes, 0u);
  EXPECT_GT(p.max_alloc_bytes, 0u);
  EXPECT_LE(p.max_alloc_bytes, p.global_mem_bytes);
  EXPECT_GT(p.base_addr_align_bytes, 0u);
  EXPECT_EQ(p.base_addr_align_bytes & (p.base_addr_align_bytes - 1), 0u) << "power of two";
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendTest,
                         ::testing::Values(DeviceType::kOpenCL, DeviceType::kCpu),
                         testing::device_type_name);

TEST(DeviceManagerTest, ListsOpenClDevicesThenCpu) {
  DeviceManager& m = DeviceManager::instance();
  ASSERT_GE(m.opencl_device_count(), 1u) << "PoCL must provide at least one device";
  auto devices = m.devices();
  ASSERT_EQ(devices.size(), m.opencl_device_count() + 1);
  for (size_t i = 0; i < m.opencl_device_count(); ++i) {
    EXPECT_EQ(devices[i], (Device{DeviceType::kOpenCL, static_cast<DeviceIndex>(i)}));
    EXPECT_EQ(&m.backend(devices[i]), &m.backend(devices[i]));
  }
  EXPECT_EQ(devices.back(), (Device{DeviceType::kCpu, 0}));
  EXPECT_NE(m.platform_name().find("Portable Computing Language"), std::string::npos)
      << m.platform_name();
}

TEST(DeviceManagerTest, UnknownDeviceNamesTheDevicesThatExist) {
  DeviceManager& m = DeviceManager::instance();
  try {
    m.backend(Device{DeviceType::kOpenCL, 40});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "opencl:0");
    EXPECT_CONTAINS(e.what(), "but got opencl:40");
  }
}

TEST(DeviceManagerTest, UnknownPlatformListsThePlatforms) {
  Options options;
  options.platform = "no such platform";
  try {
    DeviceManager manager(options);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Portable Computing Language"), std::string::npos)
        << e.what();
  }
}

TEST(DeviceManagerTest, PlatformChosenBySubstring) {
  Options options;
  options.platform = "Portable";
  DeviceManager manager(options);
  EXPECT_EQ(manager.opencl_device_count(), DeviceManager::instance().opencl_device_count());
}

TEST(DeviceManagerTest, TwoDevicesHoldIndependentMemory) {
  if (testing::opencl_device_count() < 2) GTEST_SKIP() << "needs POCL_DEVICES with two devices";
  MemoryBackend& a = opencl_backend(0);
  MemoryBackend& b = opencl_backend(1);
  Segment* sa = a.create_segment(64);
  Segment* sb = b.create_segment(64);
  a.fill(*sa, 0, 1, 64);
  b.fill(*sb, 0, 2, 64);
  uint8_t x = 0, y = 0;
  a.read(*sa, 63, &x, 1);
  b.read(*sb, 63, &y, 1);
  EXPECT_EQ(x, 1);
  EXPECT_EQ(y, 2);
  EXPECT_THROW(a.read(*sb, 0, &x, 1), InvalidArgument) << "a segment of another device";
  a.release_segment(sa);
  b.release_segment(sb);
}

}  // namespace
}  // namespace oclvm
