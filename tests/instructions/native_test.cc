// tests/instructions/native_test.cc — NativeCall on PoCL: a body enqueues plain OpenCL commands on
// the stream's queue and the blobs' cl_mem ranges, in stream order with the VM's own commands;
// the builder's checks; a body's failure and the injected `launch` fault reach the sync point and
// change nothing else; submit_here dispatches on the submitting thread (a body tells where it
// runs). This suite talks to the driver itself, as a BLAS library would.
#include <gtest/gtest.h>

#include <CL/cl.h>

#include <cstdint>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/vm/virtual_machine.h"
#include "tests/instructions/vm_fixture.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using testing::kCpu;
using testing::kOpenCL0;
using testing::VmTest;

using testing::message_of;

// A body that copies its first buffer's range into its second with clEnqueueCopyBuffer.
void copy_with_opencl(const NativeCallContext& call) {
  const NativeBuffer& src = call.buffers[0];
  const NativeBuffer& dst = call.buffers[1];
  const cl_int status = clEnqueueCopyBuffer(
      static_cast<cl_command_queue>(call.queue), static_cast<cl_mem>(src.memory),
      static_cast<cl_mem>(dst.memory), src.offset, dst.offset, src.bytes, 0, nullptr, nullptr);
  if (status != CL_SUCCESS) {
    throw std::runtime_error("clEnqueueCopyBuffer failed: " + std::to_string(status));
  }
}

class NativeCallTest : public VmTest {
 protected:
  void TearDown() override {
    DeviceManager::instance().backend(kOpenCL0).faults().configure(FaultOptions{});
    VmTest::TearDown();
  }

  std::shared_ptr<BlobObject> upload(const std::vector<int32_t>& values) {
    return upload_values(kOpenCL0, values, DType::kI32);
  }
  std::vector<int32_t> download(const std::shared_ptr<BlobObject>& blob, size_t n) {
    return download_values<int32_t>(blob, n);
  }
  // A native copy of `words` int32 from src[src_word] to dst[dst_word].
  static std::vector<NativeArg> copy_args(const std::shared_ptr<BlobObject>& src, size_t src_word,
                                          const std::shared_ptr<BlobObject>& dst, size_t dst_word,
                                          size_t words) {
    return {NativeArg{src, src_word * 4, words * 4, KernelAccess::kRead},
            NativeArg{dst, dst_word * 4, words * 4, KernelAccess::kWrite}};
  }
};

TEST_F(NativeCallTest, ABodyEnqueuesInStreamOrderOnTheBlobsRanges) {
  std::vector<int32_t> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i);
  auto src = upload(values);
  auto dst = upload(std::vector<int32_t>(64, -1));
  InstructionsBuilder builder(*vm_);
  // A fill of src word 9, the native copy of src words 8..23 to dst 40..55, then a fill of dst
  // word 40, submitted without waiting: dst[41] shows the first fill ran before the copy, dst[40]
  // that the last ran after it.
  builder.fill(src, 9 * 4, 4, 0x7f);
  builder.native(builder.stream(kOpenCL0), "clEnqueueCopyBuffer", copy_args(src, 8, dst, 40, 16),
                 copy_with_opencl);
  builder.fill(dst, 40 * 4, 4, 0);
  vm::Ticket ticket = vm_->submit(builder.take());
  std::vector<int32_t> expected(64, -1);
  for (size_t i = 0; i < 16; ++i) expected[40 + i] = values[8 + i];
  expected[40] = 0;
  expected[41] = 0x7f7f7f7f;
  EXPECT_EQ(download(dst, 64), expected);
  ticket.wait();
  release(src);
  release(dst);
}

TEST_F(NativeCallTest, DescribeNamesTheLabelAndEveryRange) {
  auto a = upload(std::vector<int32_t>(8, 1));
  auto b = upload(std::vector<int32_t>(8, 2));
  NativeCall call(vm_->stream(kOpenCL0), "my_blas", copy_args(a, 1, b, 2, 3), copy_with_opencl);
  EXPECT_CONTAINS(call.describe(), "'my_blas'");
  EXPECT_CONTAINS(call.describe(), "+4 12 B read");
  EXPECT_CONTAINS(call.describe(), "+8 12 B write");
  // One blob named twice is one operand, written.
  NativeCall twice(vm_->stream(kOpenCL0), "in_place",
                   {NativeArg{a, 0, 4, KernelAccess::kRead}, NativeArg{a, 4, 4, KernelAccess::kWrite}},
                   copy_with_opencl);
  ASSERT_EQ(twice.operands().size(), 1u);
  EXPECT_EQ(twice.operands()[0].access, vm::Access::kWrite);
  release(a);
  release(b);
}

TEST_F(NativeCallTest, TheBuilderRefusesBadCallsAndKeepsItsList) {
  auto a = upload(std::vector<int32_t>(8, 1));
  InstructionsBuilder builder(*vm_);
  builder.fill(a, 0, 4, 0);
  auto refused = [&](auto&& call) {
    const std::string message = message_of<InvalidArgument>(call);
    EXPECT_EQ(builder.size(), 1u) << message;
    return message;
  };
  EXPECT_CONTAINS(refused([&] {
                    builder.native(builder.stream(kCpu), "x", {}, copy_with_opencl);
                  }),
                  "Expected a stream of an OpenCL device");
  EXPECT_CONTAINS(refused([&] {
                    builder.native(builder.stream(kOpenCL0), "x", {}, NativeBody{});
                  }),
                  "Expected a body for native call 'x'");
  EXPECT_CONTAINS(refused([&] {
                    builder.native(builder.stream(kOpenCL0), "x",
                                   {NativeArg{nullptr, 0, 4, KernelAccess::kRead}},
                                   copy_with_opencl);
                  }),
                  "null pointer");
  EXPECT_CONTAINS(refused([&] {
                    builder.native(builder.stream(kOpenCL0), "x", copy_args(a, 6, a, 0, 4),
                                   copy_with_opencl);
                  }),
                  "native call argument");
  vm_->run(builder.take());
  release(a);
}

TEST_F(NativeCallTest, ABodysFailureAndAnInjectedFaultReachTheSyncPoint) {
  auto a = upload(std::vector<int32_t>(8, 1));
  auto b = upload(std::vector<int32_t>(8, 2));
  InstructionsBuilder builder(*vm_);
  builder.native(builder.stream(kOpenCL0), "failing", copy_args(a, 0, b, 0, 8),
                 [](const NativeCallContext&) { throw std::runtime_error("the library refused"); });
  std::string message;
  try {
    vm_->run(builder.take());
    ADD_FAILURE() << "the body's failure was lost";
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_CONTAINS(message, "NativeCall");
  EXPECT_CONTAINS(message, "the library refused");

  DeviceManager::instance().backend(kOpenCL0).faults().configure(
      FaultOptions::parse("launch:every=1", "test"));
  builder.native(builder.stream(kOpenCL0), "copy", copy_args(a, 0, b, 0, 8), copy_with_opencl);
  EXPECT_THROW(vm_->run(builder.take()), BackendError);
  DeviceManager::instance().backend(kOpenCL0).faults().configure(FaultOptions{});
  EXPECT_EQ(download(b, 8), std::vector<int32_t>(8, 2)) << "nothing ran";
  builder.native(builder.stream(kOpenCL0), "copy", copy_args(a, 0, b, 0, 8), copy_with_opencl);
  vm_->run(builder.take());
  EXPECT_EQ(download(b, 8), std::vector<int32_t>(8, 1)) << "the VM went on";
  release(a);
  release(b);
}

// Note [Submitted here]: on an idle device the body runs on the submitting thread and the call
// returns with its copy enqueued; submit() runs it on the worker. Either way the ticket waits for
// the device, and what the copy wrote is there after it.
TEST_F(NativeCallTest, SubmitHereDispatchesOnTheCallingThread) {
  auto a = upload(std::vector<int32_t>(8, 7));
  auto b = upload(std::vector<int32_t>(8, 0));
  for (bool here : {true, false}) {
    SCOPED_TRACE(here ? "submit_here" : "submit");
    std::thread::id ran_on;
    InstructionsBuilder builder(*vm_);
    builder.native(builder.stream(kOpenCL0), "copy", copy_args(a, 0, b, 0, 8),
                   [&](const NativeCallContext& call) {
                     ran_on = std::this_thread::get_id();
                     copy_with_opencl(call);
                   });
    vm::Ticket ticket = here ? vm_->submit_here(builder.take()) : vm_->submit(builder.take());
    ticket.wait();
    EXPECT_EQ(ran_on == std::this_thread::get_id(), here);
    EXPECT_EQ(download(b, 8), std::vector<int32_t>(8, 7));
    builder.fill(b, 0, 32, 0);
    vm_->run(builder.take());
  }
  release(a);
  release(b);
}

// A failed dispatch is in the ticket when submit_here returns: rethrow_if_failed reports it
// without waiting, and the VM goes on.
TEST_F(NativeCallTest, SubmitHereReportsAFailedDispatchAtOnce) {
  auto a = upload(std::vector<int32_t>(8, 1));
  auto b = upload(std::vector<int32_t>(8, 2));
  InstructionsBuilder builder(*vm_);
  builder.native(builder.stream(kOpenCL0), "failing", copy_args(a, 0, b, 0, 8),
                 [](const NativeCallContext&) { throw std::runtime_error("the library refused"); });
  vm::Ticket ticket = vm_->submit_here(builder.take());
  const auto what_of = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(nothing thrown)";
  };
  EXPECT_CONTAINS(what_of([&] { ticket.rethrow_if_failed(); }), "the library refused");
  EXPECT_CONTAINS(what_of([&] { ticket.wait(); }), "the library refused");
  builder.native(builder.stream(kOpenCL0), "copy", copy_args(a, 0, b, 0, 8), copy_with_opencl);
  vm::Ticket next = vm_->submit_here(builder.take());
  next.rethrow_if_failed();
  next.wait();
  EXPECT_EQ(download(b, 8), std::vector<int32_t>(8, 1));
  release(a);
  release(b);
}

// A list with a Barrier goes to the worker: dispatched on the submitting thread, its callback
// would wait for this very thread to let it go.
TEST_F(NativeCallTest, SubmitHereLeavesAListThatWaitsOnTheHostToTheWorker) {
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::thread::id ran_on;
  InstructionsBuilder builder(*vm_);
  builder.barrier(builder.stream(kOpenCL0), [&] {
    ran_on = std::this_thread::get_id();
    gate.wait();
  });
  vm::Ticket ticket = vm_->submit_here(builder.take());
  go.set_value();
  ticket.wait();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

}  // namespace
}  // namespace oclvm
