// tests/storage/opencl/cl_check_test.cc — OpenCL errors are reported with the call, the error
// name and the device; out-of-memory codes become OutOfMemoryError. Includes OpenCL headers, so it
// lives under tests/storage/opencl/, mirroring storage/opencl/.
#include <gtest/gtest.h>

#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/opencl/cl_check.h"
#include "oclvm/storage/opencl/opencl_backend.h"

namespace oclvm::opencl {
namespace {

TEST(ClCheckTest, NamesCallErrorAndDevice) {
  try {
    check_cl(CL_INVALID_VALUE, "clEnqueueWriteBuffer", "opencl:0");
    FAIL() << "expected BackendError";
  } catch (const BackendError& e) {
    EXPECT_STREQ(e.what(), "clEnqueueWriteBuffer failed with CL_INVALID_VALUE (-30) on opencl:0");
    EXPECT_EQ(e.code(), CL_INVALID_VALUE);
  }
  EXPECT_NO_THROW(check_cl(CL_SUCCESS, "clFinish", "opencl:0"));
}

TEST(ClCheckTest, OutOfMemoryCodesBecomeOutOfMemoryError) {
  for (cl_int code : {CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY}) {
    EXPECT_TRUE(is_out_of_memory(code));
    EXPECT_THROW(check_cl(code, "clCreateBuffer", "opencl:1"), OutOfMemoryError);
  }
  EXPECT_FALSE(is_out_of_memory(CL_INVALID_VALUE));
}

TEST(ClCheckTest, KnowsTheNamesOfCodes) {
  EXPECT_STREQ(cl_error_name(CL_INVALID_BUFFER_SIZE), "CL_INVALID_BUFFER_SIZE");
  EXPECT_STREQ(cl_error_name(CL_MISALIGNED_SUB_BUFFER_OFFSET), "CL_MISALIGNED_SUB_BUFFER_OFFSET");
  EXPECT_STREQ(cl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
  EXPECT_STREQ(cl_error_name(-12345), "CL_UNKNOWN_ERROR");
}

// A real driver error travels through the same door: a zero-size buffer is refused by PoCL.
TEST(ClCheckTest, RealDriverErrorIsReported) {
  auto& backend = static_cast<OpenCLBackend&>(
      DeviceManager::instance().backend(Device{DeviceType::kOpenCL, 0}));
  cl_int err = CL_SUCCESS;
  cl::Buffer buffer(backend.context(), CL_MEM_READ_WRITE, 0, nullptr, &err);
  try {
    check_cl(err, "clCreateBuffer", backend.device().str());
    FAIL() << "expected BackendError";
  } catch (const BackendError& e) {
    EXPECT_STREQ(e.what(), "clCreateBuffer failed with CL_INVALID_BUFFER_SIZE (-61) on opencl:0");
  }
}

// Segments are cl::Buffers of exactly the segment size (the CLAllocation record).
TEST(ClCheckTest, SegmentIsACLAllocation) {
  auto& backend = DeviceManager::instance().backend(Device{DeviceType::kOpenCL, 0});
  Segment* s = backend.create_segment(1000);
  CLAllocation& a = OpenCLBackend::allocation_of(*s);
  EXPECT_EQ(a.size, 1000u);
  EXPECT_EQ(a.device, 0);
  size_t size = 0;
  ASSERT_EQ(a.buffer.getInfo(CL_MEM_SIZE, &size), CL_SUCCESS);
  EXPECT_EQ(size, 1000u);
  backend.release_segment(s);
}

}  // namespace
}  // namespace oclvm::opencl
