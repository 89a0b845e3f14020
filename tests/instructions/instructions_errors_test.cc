// tests/instructions/instructions_errors_test.cc — the VM's errors at the sync point (out of
// memory under a limit, a released or twice-released blob, a list or blob of another VM, work
// after shutdown), and ownership: a TensorStorage's releaser runs ReleaseTensor after the
// instructions that use it, and on the caller's thread after shutdown. The fixture is VmTest
// (vm_fixture.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
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

using namespace oclvm::testing;

// ---------------------------------------------------------------------------------------------
// Errors at the sync point.

class LimitedVmTest : public VmTest {
 protected:
  Options vm_options() const override {
    Options options;
    options.memory_limit = 4 << 20;
    return options;
  }
};

TEST_F(LimitedVmTest, OutOfMemorySurfacesAtItsRunAndTheVmKeepsWorking) {
  auto small = allocate(kOpenCL0, 4096);
  const DeviceStats before = stats(kOpenCL0);

  InstructionsBuilder builder(vm());
  auto huge = builder.allocate_blob(builder.stream(kOpenCL0), 8 << 20);
  const std::string message = message_of<OutOfMemoryError>([&] { vm().run(builder.take()); });
  EXPECT_CONTAINS(message, "AllocateBlob");
  EXPECT_CONTAINS(message, "opencl:0");
  EXPECT_EQ(huge->storage(), nullptr);

  const DeviceStats after = stats(kOpenCL0);
  EXPECT_EQ(after.num_ooms, 1);
  EXPECT_EQ(after.allocated_bytes.aggregate().current, before.allocated_bytes.aggregate().current);
  EXPECT_EQ(after.reserved_bytes.aggregate().current, before.reserved_bytes.aggregate().current);

  // The VM goes on: more work on the same device succeeds.
  auto more = allocate(kOpenCL0, 1 << 20);
  const std::vector<uint8_t> data = pattern_bytes(1 << 20, 8);
  write(more, 0, data);
  EXPECT_EQ(read(more, 0, data.size()), data);
  // The failed blob has no storage: releasing it is a no-op (Note [Releasing a blob without
  // storage]); using it is an error naming the problem.
  release(huge);
  std::vector<uint8_t> sink(16);
  builder.copy_device_to_host(huge, 0, sink.data(), 16);
  const std::string use = message_of<InvalidArgument>([&] { vm().run(builder.take()); });
  EXPECT_CONTAINS(use, "CopyBlob");
  EXPECT_CONTAINS(use, "has none");
  release(more);
  release(small);
  EXPECT_EQ(stats(kOpenCL0).num_ooms, 1);
}

TEST_F(LimitedVmTest, FailedInstructionDoesNotStopTheRestOfItsList) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(kOpenCL0);
  auto ok = builder.allocate_blob(stream, 4096);
  auto huge = builder.allocate_blob(stream, 64 << 20);
  builder.fill(ok, 0, 4096, 0x42, 1);
  EXPECT_THROW(vm().run(builder.take()), OutOfMemoryError);
  EXPECT_EQ(read(ok, 0, 4096), std::vector<uint8_t>(4096, 0x42));
  builder.release(ok);
  builder.release(huge);
  vm().run(builder.take());
}

TEST_F(LimitedVmTest, TensorStorageWhoseAllocationFailsHoldsNothing) {
  EXPECT_THROW(make_tensor_storage(vm(), kOpenCL0, {8 << 20}, DType::kF32), OutOfMemoryError);
  const DeviceStats s = stats(kOpenCL0);
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.allocated_bytes.aggregate().current, 0);
}

TEST_F(VmTest, UseOfAReleasedBlobFailsAtTheSyncPointAndChangesNothing) {
  auto blob = allocate(kOpenCL0, 4096);
  release(blob);
  const std::string before = stats(kOpenCL0).to_string();
  std::vector<uint8_t> data(4096, 1);

  InstructionsBuilder builder(vm());
  builder.copy_host_to_device(data.data(), blob, 0, 4096);
  std::string message = message_of<InvalidArgument>([&] { vm().run(builder.take()); });
  EXPECT_CONTAINS(message, "CopyBlob");
  EXPECT_CONTAINS(message, "opencl:0");
  EXPECT_CONTAINS(message, "already released");

  builder.fill(blob, 0, 4096, 0, 1);
  message = message_of<InvalidArgument>([&] { vm().run(builder.take()); });
  EXPECT_CONTAINS(message, "FillBlob");
  EXPECT_CONTAINS(message, "already released");

  builder.access(blob, 0, 16, HostAccess::kRead, [](void*, size_t) {});
  message = message_of<InvalidArgument>([&] { vm().run(builder.take()); });
  EXPECT_CONTAINS(message, "AccessBlobByCallback");

  EXPECT_EQ(stats(kOpenCL0).to_string(), before);
}

TEST_F(VmTest, DoubleReleaseFailsAtTheSyncPointAndChangesNothing) {
  auto blob = allocate(kOpenCL0, 4096);
  release(blob);
  const std::string before = stats(kOpenCL0).to_string();
  const std::string message = message_of<InvalidArgument>([&] { release(blob); });
  EXPECT_CONTAINS(message, "ReleaseTensor");
  EXPECT_CONTAINS(message, "opencl:0");
  EXPECT_CONTAINS(message, "already released");
  EXPECT_EQ(stats(kOpenCL0).to_string(), before);

  // Both releases in one list: the first frees, the second fails.
  auto other = allocate(kCpu, 512);
  InstructionsBuilder builder(vm());
  builder.release(other);
  builder.release(other);
  EXPECT_THROW(vm().run(builder.take()), InvalidArgument);
  EXPECT_EQ(stats(kCpu).allocated_bytes.aggregate().current, 0);
}

TEST_F(VmTest, AllocatingTheSameBlobTwiceFails) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(kOpenCL0);
  auto blob = builder.allocate_blob(stream, 4096);
  vm().run(builder.take());
  const std::string before = stats(kOpenCL0).to_string();
  vm::InstructionList list;
  list.push_back(std::make_unique<AllocateBlob>(stream, blob));
  const std::string message = message_of<InvalidArgument>([&] { vm().run(std::move(list)); });
  EXPECT_CONTAINS(message, "AllocateBlob");
  EXPECT_CONTAINS(message, "already has storage");
  EXPECT_EQ(stats(kOpenCL0).to_string(), before);
  release(blob);
}

TEST_F(VmTest, ReleasingABlobThroughAnotherVmFailsAndLeavesItAlone) {
  auto blob = allocate(kOpenCL0, 4096);
  {
    vm::VirtualMachine other(DeviceManager::instance(), Options{});
    InstructionsBuilder builder(other);
    builder.stream(kOpenCL0);  // stream ids of both VMs then name opencl:0/compute first
    builder.release(blob);
    const std::string message = message_of<InvalidArgument>([&] { other.run(builder.take()); });
    EXPECT_CONTAINS(message, "ReleaseTensor");
    EXPECT_CONTAINS(message, "another VM");
  }
  EXPECT_FALSE(blob->storage()->released());
  EXPECT_EQ(stats(kOpenCL0).allocated_bytes.aggregate().current, 4096);
  release(blob);
}

TEST_F(VmTest, AListBuiltForAnotherVmIsRefusedWholeAndRunsNothing) {
  vm::VirtualMachine other(DeviceManager::instance(), Options{});
  InstructionsBuilder builder(other);
  auto blob = builder.allocate_blob(builder.stream(kOpenCL0), 4096);
  builder.fill(blob, 0, 4096, 0x11);
  const std::string message = message_of<InvalidArgument>([&] { vm().run(builder.take()); });
  EXPECT_CONTAINS(message, "Expected instructions built for this VM");
  EXPECT_CONTAINS(message, "AllocateBlob on opencl:0/compute");
  EXPECT_EQ(blob->storage(), nullptr) << "nothing of the list ran";
  EXPECT_EQ(stats(kOpenCL0).allocation.aggregate().allocated, 0);
}

TEST_F(VmTest, NonReleaseWorkAfterShutdownIsAnError) {
  vm().shutdown();
  EXPECT_THROW(
      {
        InstructionsBuilder builder(vm());
        builder.empty_cache(kOpenCL0);
        vm().run(builder.take());
      },
      Error);
}

TEST_F(VmTest, StatisticsCanBeReadAfterShutdown) {
  auto tensor = make_tensor_storage(vm(), kOpenCL0, {256}, DType::kU8);
  vm().shutdown();
  EXPECT_EQ(stats(kOpenCL0).allocation.aggregate().current, 1);  // a QueryStats on this thread
  tensor.reset();
  EXPECT_EQ(stats(kOpenCL0).allocation.aggregate().current, 0);
}

// ---------------------------------------------------------------------------------------------
// Ownership: TensorStorage -> releaser -> ReleaseTensor.

TEST_F(VmTest, DroppingTheLastTensorStorageRunsReleaseTensor) {
  std::shared_ptr<TensorStorage> tensor = make_tensor_storage(vm(), kOpenCL0, {16, 16}, DType::kF32);
  ASSERT_NE(tensor, nullptr);
  std::weak_ptr<BlobObject> blob = tensor->blob();
  std::weak_ptr<BlobStorage> storage = tensor->blob()->storage();
  ASSERT_FALSE(storage.expired());
  const Dims& shape = tensor->blob()->shape();
  EXPECT_EQ(std::vector<int64_t>(shape.begin(), shape.end()), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(stats(kOpenCL0).allocated_bytes.aggregate().current, 1024);

  std::shared_ptr<TensorStorage> view = tensor;  // a view shares the storage
  tensor.reset();
  EXPECT_EQ(stats(kOpenCL0).allocated_bytes.aggregate().current, 1024);
  EXPECT_FALSE(blob.expired());
  view.reset();  // the releaser runs a ReleaseTensor synchronously
  EXPECT_EQ(stats(kOpenCL0).allocated_bytes.aggregate().current, 0);
  EXPECT_TRUE(blob.expired());
  EXPECT_TRUE(storage.expired());
}

TEST_F(VmTest, TensorStorageUsedByInstructionsIsReleasedAfterThem) {
  auto tensor = make_tensor_storage(vm(), kCpu, {1024}, DType::kU8);
  const std::vector<uint8_t> data = pattern_bytes(1024, 2);
  std::vector<uint8_t> back(1024, 0);
  InstructionsBuilder builder(vm());
  builder.copy_host_to_device(data.data(), tensor->blob(), 0, 1024);
  builder.copy_device_to_host(tensor->blob(), 0, back.data(), 1024);
  vm().run(builder.take());
  EXPECT_EQ(back, data);
  std::weak_ptr<BlobStorage> storage = tensor->blob()->storage();
  tensor.reset();
  EXPECT_TRUE(storage.expired());
  EXPECT_EQ(stats(kCpu).allocated_bytes.aggregate().current, 0);
}

TEST_F(VmTest, TensorStorageDroppedAfterShutdownIsReleasedOnTheCallersThread) {
  auto tensor = make_tensor_storage(vm(), kOpenCL0, {4096}, DType::kU8);
  std::weak_ptr<BlobStorage> storage = tensor->blob()->storage();
  vm().shutdown();
  tensor.reset();  // ReleaseTensor runs after shutdown, here
  EXPECT_TRUE(storage.expired());
  // TearDown checks that it was a real release (no destructor fallback, no failed releaser).
}

}  // namespace
}  // namespace oclvm
