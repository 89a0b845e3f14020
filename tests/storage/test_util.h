// tests/storage/test_util.h — shared fixtures for the storage tests.
//
// Every allocator test runs on a real device (PoCL through OpenCL, or the host device). The
// LeakCheckedTest fixture records the backends' live segments and the address space's live
// reservations at SetUp and asserts at TearDown that every test gave back exactly what it took:
// zero live bytes and zero live segments.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "storage/allocator.h"
#include "storage/backend.h"
#include "storage/device_manager.h"

namespace oclvm::testing {

// opencl:index of the process-wide DeviceManager.
MemoryBackend& opencl_backend(int index = 0);
MemoryBackend& host_backend();
// Number of OpenCL devices (1 with the default environment, 2 with POCL_DEVICES="x x").
size_t opencl_device_count();

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

}  // namespace oclvm::testing
