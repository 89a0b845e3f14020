// tests/instructions/builder_test.cc — InstructionsBuilder: what it builds (kinds, streams,
// operands, describe()) and the build-time checks, which throw InvalidArgument before anything is
// added: the list keeps its size and, once run, the statistics are exactly those of the valid
// instructions alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/virtual_machine.h"
#include "tests/instructions/vm_fixture.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using testing::kCpu;
using testing::kOpenCL0;
using testing::message_of;
using testing::VmTest;

std::vector<std::string> names(const vm::InstructionList& list) {
  std::vector<std::string> out;
  for (const vm::Instruction& instruction : list.items()) out.push_back(instruction.name());
  return out;
}

class BuilderTest : public VmTest {
 protected:
  // Expects `bad` to throw InvalidArgument with "Expected" in its message and to leave the
  // builder's list as it was; returns the message.
  std::string expect_rejected(InstructionsBuilder& builder, const std::function<void()>& bad) {
    const size_t size = builder.size();
    const std::string message = message_of<InvalidArgument>(bad);
    EXPECT_EQ(builder.size(), size) << message;
    EXPECT_CONTAINS(message, "Expected");
    EXPECT_CONTAINS(message, "but got");
    return message;
  }
};

// ---------------------------------------------------------------------------------------------
// What gets built.

TEST_F(BuilderTest, BuildsTheInstructionsInOrderAndStartsOverOnTake) {
  InstructionsBuilder builder(vm());
  EXPECT_EQ(&builder.vm(), &vm());
  vm::Stream& stream = builder.stream(kOpenCL0);
  EXPECT_EQ(&stream, &vm().stream(kOpenCL0));
  std::vector<uint8_t> host(64, 1);
  DeviceStats out;
  auto a = builder.allocate_blob(stream, 64);
  auto b = builder.allocate_blob(stream, {16}, DType::kF32);
  builder.copy_host_to_device(host.data(), a, 0, 64);
  builder.copy(a, 0, b, 0, 64);
  builder.fill(b, 0, 64, 0, 4);
  builder.access(b, 0, 64, HostAccess::kRead, [](void*, size_t) {});
  builder.copy_device_to_host(b, 0, host.data(), 64);
  builder.barrier(stream, [] {});
  builder.soft_sync(stream, vm().stream(kOpenCL0, vm::StreamRole::kUser));
  builder.reset_stats(kOpenCL0, ResetKind::kPeak);
  builder.query_stats(kOpenCL0, &out);
  builder.empty_cache(kOpenCL0);
  builder.release(a);
  builder.release(b);
  EXPECT_EQ(builder.size(), 14u);
  vm::InstructionList list = builder.take();
  EXPECT_EQ(builder.size(), 0u);
  EXPECT_EQ(names(list),
            (std::vector<std::string>{"AllocateBlob", "AllocateBlob", "CopyBlob", "CopyBlob",
                                      "FillBlob", "AccessBlobByCallback", "CopyBlob", "Barrier",
                                      "SoftSyncStream", "ResetStats", "QueryStats", "EmptyCache",
                                      "ReleaseTensor", "ReleaseTensor"}));
  vm().run(std::move(list));
  EXPECT_EQ(host, std::vector<uint8_t>(64, 0));
  EXPECT_EQ(out.allocated_bytes.aggregate().current, 1024);
}

TEST_F(BuilderTest, OperandsSayWhatIsReadAndWritten) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(kCpu);
  auto a = builder.allocate_blob(stream, 64);
  auto b = builder.allocate_blob(stream, 64);
  builder.copy(a, 0, b, 0, 64);
  builder.access(a, 0, 8, HostAccess::kRead, [](void*, size_t) {});
  builder.access(a, 0, 8, HostAccess::kWrite, [](void*, size_t) {});
  builder.fill(a, 0, 8, 1, 1);
  builder.release(a);
  builder.release(b);
  vm::InstructionList list = builder.take();
  std::vector<std::vector<vm::Access>> access;
  std::vector<std::vector<BlobObject*>> blobs;
  for (const vm::Instruction& instruction : list.items()) {
    access.emplace_back();
    blobs.emplace_back();
    for (const vm::Operand& operand : instruction.operands()) {
      access.back().push_back(operand.access);
      blobs.back().push_back(operand.blob.get());
    }
  }
  using vm::Access;
  EXPECT_EQ(access, (std::vector<std::vector<Access>>{{Access::kWrite},
                                                      {Access::kWrite},
                                                      {Access::kRead, Access::kWrite},
                                                      {Access::kRead},
                                                      {Access::kWrite},
                                                      {Access::kWrite},
                                                      {Access::kWrite},
                                                      {Access::kWrite}}));
  EXPECT_EQ(blobs[2], (std::vector<BlobObject*>{a.get(), b.get()}));
  vm().run(std::move(list));
}

TEST_F(BuilderTest, AllocationSetsTheProducerStreamAndReleaseUsesIt) {
  InstructionsBuilder builder(vm());
  vm::Stream& user = vm().stream(kOpenCL0, vm::StreamRole::kUser, 2);
  auto blob = builder.allocate_blob(user, 4096);
  EXPECT_EQ(vm::producer_stream(*blob), user.id());
  EXPECT_EQ(blob->device(), kOpenCL0);
  EXPECT_EQ(blob->required_bytes(), 4096u);
  EXPECT_EQ(blob->dtype(), DType::kU8);
  EXPECT_EQ(blob->storage(), nullptr);  // pending until the AllocateBlob runs
  vm().run(builder.take());
  ASSERT_NE(blob->storage(), nullptr);

  builder.fill(blob, 0, 4096, 0, 1);  // on the compute stream
  builder.release(blob);
  vm::InstructionList list = builder.take();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(&list.items().front().stream(), &vm().stream(kOpenCL0));
  EXPECT_EQ(&list.items().back().stream(), &user);
  vm().run(std::move(list));
  EXPECT_TRUE(blob->storage()->released());
}

TEST_F(BuilderTest, ReleaseOfABlobWithoutProducerUsesTheComputeStream) {
  InstructionsBuilder builder(vm());
  auto blob = std::make_shared<BlobObject>(kCpu, Dims{8}, DType::kU8);
  EXPECT_EQ(vm::producer_stream(*blob), vm::kNoStream);
  builder.release(blob);
  vm::InstructionList list = builder.take();
  EXPECT_EQ(&list.items().front().stream(), &vm().stream(kCpu));
  vm().run(std::move(list));  // no storage: a no-op (Note [Releasing a blob without storage])
}

TEST_F(BuilderTest, DefaultStreamsAreTheComputeStreamsOfTheRightDevice) {
  InstructionsBuilder builder(vm());
  auto on_cl = builder.allocate_blob(builder.stream(kOpenCL0), 64);
  auto on_cpu = builder.allocate_blob(builder.stream(kCpu), 64);
  vm::InstructionList allocations = builder.take();
  std::vector<uint8_t> host(64);
  builder.copy_host_to_device(host.data(), on_cl, 0, 64);
  builder.copy_device_to_host(on_cpu, 0, host.data(), 64);
  builder.copy(on_cl, 0, on_cpu, 0, 64);   // across devices: the destination's stream
  builder.copy(on_cpu, 0, on_cl, 0, 64);
  builder.fill(on_cpu, 0, 64, 0, 1);
  builder.access(on_cl, 0, 64, HostAccess::kWrite, [](void*, size_t) {});
  vm::InstructionList list = builder.take();
  std::vector<Device> devices;
  for (const vm::Instruction& instruction : list.items()) {
    EXPECT_EQ(instruction.stream().role(), vm::StreamRole::kCompute);
    devices.push_back(instruction.stream().device());
  }
  EXPECT_EQ(devices, (std::vector<Device>{kOpenCL0, kCpu, kCpu, kOpenCL0, kCpu, kOpenCL0}));
  // Nothing was run: the pending blobs die without storage.
}

TEST_F(BuilderTest, DescribeNamesOperandsRangesAndSizes) {
  InstructionsBuilder builder(vm());
  auto blob = builder.allocate_blob(builder.stream(kOpenCL0), 4096);
  builder.fill(blob, 16, 64, 0xAB, 1);
  builder.copy(blob, 0, blob, 1024, 100);
  builder.reset_stats(kOpenCL0, ResetKind::kAccumulated);
  builder.soft_sync(vm().stream(kOpenCL0), vm().stream(kOpenCL0, vm::StreamRole::kUser, 1));
  vm::InstructionList list = builder.take();
  std::vector<std::string> text;
  for (const vm::Instruction& instruction : list.items()) text.push_back(instruction.describe());
  ASSERT_EQ(text.size(), 5u);
  EXPECT_CONTAINS(text[0], "u8[4096] on opencl:0");
  EXPECT_CONTAINS(text[0], "4096 B");
  EXPECT_CONTAINS(text[1], "[16, 16 + 64)");
  EXPECT_CONTAINS(text[1], "0xab");
  EXPECT_CONTAINS(text[2], "device to device");
  EXPECT_CONTAINS(text[2], "[1024, 1024 + 100)");
  EXPECT_CONTAINS(text[3], "accumulated");
  EXPECT_CONTAINS(text[4], "opencl:0/compute -> opencl:0/user1");
}

// ---------------------------------------------------------------------------------------------
// Build-time checks.

TEST_F(BuilderTest, UnknownDeviceIsRejected) {
  InstructionsBuilder builder(vm());
  const Device missing{DeviceType::kOpenCL, 99};
  DeviceStats out;
  EXPECT_THROW(builder.stream(missing), InvalidArgument);
  EXPECT_THROW(vm().stream(missing), InvalidArgument);
  EXPECT_THROW(builder.query_stats(missing, &out), InvalidArgument);
  EXPECT_THROW(builder.empty_cache(missing), InvalidArgument);
  EXPECT_THROW(builder.reset_stats(missing, ResetKind::kPeak), InvalidArgument);
  // A blob that names a missing device (built by hand) has no stream to run on.
  auto stray = std::make_shared<BlobObject>(missing, Dims{64}, DType::kU8);
  EXPECT_THROW(builder.fill(stray, 0, 64, 0, 1), InvalidArgument);
  EXPECT_THROW(builder.release(stray), InvalidArgument);
  EXPECT_EQ(builder.size(), 0u);
}

TEST_F(BuilderTest, BadSizesAreRejectedAndChangeNothing) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(kOpenCL0);
  auto blob = builder.allocate_blob(stream, 4096);  // the one valid instruction
  const uint64_t max_bytes = DeviceManager::instance().backend(kOpenCL0).properties().max_alloc_bytes;

  std::string m = expect_rejected(builder, [&] { builder.allocate_blob(stream, 0); });
  EXPECT_CONTAINS(m, "0 bytes");
  m = expect_rejected(builder, [&] { builder.allocate_blob(stream, SIZE_MAX); });
  EXPECT_CONTAINS(m, std::to_string(SIZE_MAX));
  EXPECT_CONTAINS(m, "opencl:0");
  expect_rejected(builder, [&] { builder.allocate_blob(stream, max_bytes + 1); });
  expect_rejected(builder, [&] { builder.allocate_blob(stream, {4, -1}, DType::kF32); });
  expect_rejected(builder, [&] {
    builder.allocate_blob(stream, {int64_t{1} << 40, int64_t{1} << 40}, DType::kF32);
  });
  expect_rejected(builder, [&] {
    builder.allocate_blob(stream, {static_cast<int64_t>(max_bytes / 4 + 1)}, DType::kF32);
  });
  EXPECT_EQ(builder.size(), 1u);
  vm().run(builder.take());
  const DeviceStats s = stats(kOpenCL0);
  EXPECT_EQ(s.allocation.aggregate().allocated, 1);
  EXPECT_EQ(s.allocated_bytes.aggregate().current, 4096);
  EXPECT_EQ(s.num_ooms, 0);
  builder.release(blob);
  vm().run(builder.take());
}

TEST_F(BuilderTest, BadCopiesAreRejectedAndChangeNothing) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(kOpenCL0);
  auto a = builder.allocate_blob(stream, 4096);
  auto b = builder.allocate_blob(stream, 1024);
  auto c = builder.allocate_blob(builder.stream(kCpu), 4096);
  vm().run(builder.take());
  const std::string before_cl = stats(kOpenCL0).to_string();
  const std::string before_cpu = stats(kCpu).to_string();
  std::vector<uint8_t> host(8192, 0);

  // Beyond the end, and offset + size overflow.
  std::string m = expect_rejected(builder, [&] { builder.copy_host_to_device(host.data(), a, 4000, 97); });
  EXPECT_CONTAINS(m, "copy destination");
  EXPECT_CONTAINS(m, "[4000, 4000 + 97)");
  EXPECT_CONTAINS(m, "4096 bytes");
  expect_rejected(builder, [&] { builder.copy_host_to_device(host.data(), a, 0, 4097); });
  expect_rejected(builder, [&] { builder.copy_host_to_device(host.data(), a, SIZE_MAX, 2); });
  expect_rejected(builder, [&] { builder.copy_device_to_host(a, 1, host.data(), 4096); });
  expect_rejected(builder, [&] { builder.copy_device_to_host(a, 8, host.data(), SIZE_MAX); });
  // Mismatched sizes: the range fits one blob but not the other.
  m = expect_rejected(builder, [&] { builder.copy(a, 0, b, 0, 2048); });
  EXPECT_CONTAINS(m, "1024 bytes");
  expect_rejected(builder, [&] { builder.copy(b, 0, a, 3000, 1024 + 1); });
  expect_rejected(builder, [&] { builder.copy(a, 0, c, 1, 4096); });
  // Overlap within one blob.
  m = expect_rejected(builder, [&] { builder.copy(a, 0, a, 100, 200); });
  EXPECT_CONTAINS(m, "non-overlapping");
  // Null pointers.
  expect_rejected(builder, [&] { builder.copy_host_to_device(nullptr, a, 0, 16); });
  expect_rejected(builder, [&] { builder.copy_device_to_host(a, 0, nullptr, 16); });
  expect_rejected(builder, [&] { builder.copy_host_to_device(host.data(), nullptr, 0, 16); });
  expect_rejected(builder, [&] { builder.copy_device_to_host(nullptr, 0, host.data(), 16); });
  expect_rejected(builder, [&] { builder.copy(nullptr, 0, a, 0, 16); });
  expect_rejected(builder, [&] { builder.copy(a, 0, nullptr, 0, 16); });
  // Streams of the wrong device.
  vm::Stream& cpu_stream = builder.stream(kCpu);
  m = expect_rejected(builder, [&] { builder.copy_host_to_device(host.data(), a, 0, 16, &cpu_stream); });
  EXPECT_CONTAINS(m, "cpu/compute");
  expect_rejected(builder, [&] { builder.copy_device_to_host(a, 0, host.data(), 16, &cpu_stream); });
  expect_rejected(builder, [&] { builder.copy(a, 0, b, 0, 16, &cpu_stream); });
  expect_rejected(builder, [&] { builder.copy(a, 0, c, 0, 16, &stream); });  // not dst's device
  EXPECT_EQ(builder.size(), 0u);

  EXPECT_EQ(stats(kOpenCL0).to_string(), before_cl);
  EXPECT_EQ(stats(kCpu).to_string(), before_cpu);
  builder.release(a);
  builder.release(b);
  builder.release(c);
  vm().run(builder.take());
}

TEST_F(BuilderTest, BadFillsAreRejected) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(kCpu);
  auto blob = builder.allocate_blob(stream, 1024);
  std::string m = expect_rejected(builder, [&] { builder.fill(blob, 0, 96, 0, 3); });
  EXPECT_CONTAINS(m, "1, 2, 4 or 8");
  expect_rejected(builder, [&] { builder.fill(blob, 0, 64, 0, 0); });
  expect_rejected(builder, [&] { builder.fill(blob, 0, 64, 0, 16); });
  m = expect_rejected(builder, [&] { builder.fill(blob, 0, 64, 0x100, 1); });
  EXPECT_CONTAINS(m, "1-byte fill pattern, but got 0x100");
  expect_rejected(builder, [&] { builder.fill(blob, 0, 64, 0x10000, 2); });
  expect_rejected(builder, [&] { builder.fill(blob, 2, 64, 0, 4); });   // offset
  expect_rejected(builder, [&] { builder.fill(blob, 0, 60, 0, 8); });   // size
  expect_rejected(builder, [&] { builder.fill(blob, 1016, 16, 0, 8); }); // range
  expect_rejected(builder, [&] { builder.fill(nullptr, 0, 8, 0, 1); });
  expect_rejected(builder, [&] { builder.fill(blob, 0, 8, 0, 1, &vm().stream(kOpenCL0)); });
  builder.fill(blob, 0, 8, 0xFFFFFFFFFFFFFFFF, 8);  // a full 8-byte pattern is fine
  EXPECT_EQ(builder.size(), 2u);
  builder.release(blob);
  vm().run(builder.take());
}

TEST_F(BuilderTest, BadAccessSyncBarrierAndStatsArgumentsAreRejected) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(kOpenCL0);
  auto blob = builder.allocate_blob(stream, 1024);
  auto noop = [](void*, size_t) {};
  expect_rejected(builder, [&] { builder.access(blob, 1000, 25, HostAccess::kRead, noop); });
  expect_rejected(builder, [&] { builder.access(blob, 0, 8, HostAccess::kRead, nullptr); });
  expect_rejected(builder, [&] { builder.access(nullptr, 0, 8, HostAccess::kRead, noop); });
  expect_rejected(builder,
                  [&] { builder.access(blob, 0, 8, HostAccess::kWrite, noop, &vm().stream(kCpu)); });
  std::string m = expect_rejected(builder, [&] { builder.soft_sync(stream, vm().stream(kCpu)); });
  EXPECT_CONTAINS(m, "one device");
  m = expect_rejected(builder, [&] { builder.soft_sync(stream, stream); });
  EXPECT_CONTAINS(m, "twice");
  expect_rejected(builder, [&] { builder.barrier(stream, nullptr); });
  expect_rejected(builder, [&] { builder.query_stats(kOpenCL0, nullptr); });
  expect_rejected(builder, [&] { builder.release(nullptr); });
  EXPECT_EQ(builder.size(), 1u);
  builder.release(blob);
  vm().run(builder.take());
}

TEST_F(BuilderTest, StreamsOfAnotherVmAreRejected) {
  vm::VirtualMachine other(DeviceManager::instance(), Options{});
  vm::Stream& foreign = other.stream(kCpu, vm::StreamRole::kUser, 7);
  InstructionsBuilder builder(vm());
  std::string m = expect_rejected(builder, [&] { builder.allocate_blob(foreign, 64); });
  EXPECT_CONTAINS(m, "another VM");
  expect_rejected(builder, [&] { builder.barrier(foreign, [] {}); });
  EXPECT_EQ(builder.size(), 0u);
}

TEST_F(BuilderTest, TakingAnEmptyBuilderGivesAnEmptyList) {
  InstructionsBuilder builder(vm());
  vm::InstructionList list = builder.take();
  EXPECT_TRUE(list.empty());
  vm().run(std::move(list));  // running nothing is fine
}

}  // namespace
}  // namespace oclvm
