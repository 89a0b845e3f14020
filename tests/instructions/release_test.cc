// tests/instructions/release_test.cc — stream-ordered releases against OCLVM_RELEASE=finish on
// PoCL: a release leaves its queue running, the next allocation on its stream takes the block at
// once, another stream waits for the release first, and segments go back to the driver only after
// the device is done with them. Every case runs in both modes and checks the bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/vm/host_section.h"
#include "oclvm/vm/virtual_machine.h"
#include "tests/instructions/vm_fixture.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using testing::kOpenCL0;
using testing::VmTest;
constexpr size_t kWords = 1024;

// Writes `value` to every word after a loop long enough that, on PoCL's pthread driver, the
// kernel is still running when the host has gone on to the release and the next allocation.
const KernelSource kSlowFill{R"(
__kernel void slow_fill(OCLVM_BLOB(uint, v), uint value, uint spins) {
  size_t i = get_global_id(0);
  uint x = (uint)i;
  for (uint k = 0; k < spins; ++k) x = x * 1664525u + 1013904223u;
  OCLVM_PTR(uint, v)[i] = x == 7u ? value + 1u : value;
})",
                             "slow_fill", ""};

struct Mode {
  ReleaseMode release;
  const char* allocator;
};
void PrintTo(const Mode& mode, std::ostream* out) {
  *out << (mode.release == ReleaseMode::kFinish ? "finish" : "stream") << " with " << mode.allocator;
}

class ReleaseTest : public VmTest, public ::testing::WithParamInterface<Mode> {
 protected:
  Options vm_options() const override {
    Options options;
    options.release = GetParam().release;
    options.allocator = GetParam().allocator;
    return options;
  }

  bool stream_ordered() const { return GetParam().release == ReleaseMode::kStreamOrdered; }
  DeviceQueue& compute_queue() { return vm_->stream(kOpenCL0).queue(); }

  std::shared_ptr<BlobObject> allocate(vm::Stream& stream) {
    InstructionsBuilder builder(*vm_);
    auto blob = builder.allocate_blob(stream, {static_cast<int64_t>(kWords)}, DType::kI32);
    vm_->run(builder.take());
    return blob;
  }
  // Submits the slow kernel on the compute stream and returns without waiting for it.
  vm::Ticket submit_slow_fill(const std::shared_ptr<BlobObject>& blob, uint32_t value) {
    InstructionsBuilder builder(*vm_);
    LaunchRange range;
    range.global[0] = kWords;
    range.local[0] = 64;
    builder.launch(vm_->stream(kOpenCL0), kSlowFill, range,
                   {LaunchArg::of_blob(blob, 0, KernelAccess::kWrite), LaunchArg::of(value),
                    LaunchArg::of(uint32_t{20000})});
    return vm_->submit(builder.take());
  }
  // Fills `blob` with the byte `value` and reads it back.
  std::vector<uint8_t> fill_and_read(const std::shared_ptr<BlobObject>& blob, uint8_t value) {
    InstructionsBuilder builder(*vm_);
    builder.fill(blob, 0, kWords * sizeof(uint32_t), value);
    vm_->run(builder.take());
    return read(blob);
  }
  std::vector<uint8_t> read(const std::shared_ptr<BlobObject>& blob) {
    return VmTest::read(blob, 0, kWords * sizeof(uint32_t));
  }
  static void* address(const std::shared_ptr<BlobObject>& blob) {
    return blob->storage()->allocation().ptr;
  }
};

TEST_P(ReleaseTest, TheNextAllocationOnTheStreamTakesTheBlockAtOnce) {
  auto first = allocate(vm_->stream(kOpenCL0));
  void* const block = address(first);
  vm::Ticket kernel = submit_slow_fill(first, 1);
  release(std::move(first));
  // Stream-ordered, nothing finished the queue: the kernel may still be writing the block.
  EXPECT_EQ(compute_queue().idle(), !stream_ordered());
  auto second = allocate(vm_->stream(kOpenCL0));
  EXPECT_EQ(address(second), block) << "the cache hands the released block out again";
  EXPECT_EQ(fill_and_read(second, 7), std::vector<uint8_t>(kWords * sizeof(uint32_t), 7));
  kernel.wait();
  EXPECT_EQ(read(second), std::vector<uint8_t>(kWords * sizeof(uint32_t), 7)) << "no late writes";
  release(std::move(second));
}

TEST_P(ReleaseTest, AnotherStreamWaitsForTheReleaseFirst) {
  auto first = allocate(vm_->stream(kOpenCL0));
  void* const block = address(first);
  vm::Ticket kernel = submit_slow_fill(first, 1);
  release(std::move(first));
  vm::Stream& other = vm_->stream(kOpenCL0, vm::StreamRole::kUser, 0);
  const uint64_t commands = other.queue().commands();
  auto second = allocate(other);
  EXPECT_EQ(address(second), block);
  // Stream-ordered, the other queue waits for the release's marker on the device (one command;
  // PoCL runs one device's commands about in submission order, so the bytes below would not
  // show a missing wait). With finish, the block was idle already.
  EXPECT_EQ(other.queue().commands(), commands + (stream_ordered() ? 1 : 0));
  EXPECT_EQ(fill_and_read(second, 9), std::vector<uint8_t>(kWords * sizeof(uint32_t), 9));
  kernel.wait();
  EXPECT_EQ(read(second), std::vector<uint8_t>(kWords * sizeof(uint32_t), 9)) << "no late writes";
  release(std::move(second));
}

// EmptyCache's list finishes the queue at its end anyway; the guard that makes a segment wait
// for the device is what ReleaseSystemAllocatorTest sees, where a release alone frees a segment.
TEST_P(ReleaseTest, EmptyCacheAfterAStreamOrderedReleaseGivesEverySegmentBack) {
  auto blob = allocate(vm_->stream(kOpenCL0));
  vm::Ticket kernel = submit_slow_fill(blob, 1);
  release(std::move(blob));
  InstructionsBuilder builder(*vm_);
  DeviceStats stats;
  builder.empty_cache(kOpenCL0);
  builder.query_stats(kOpenCL0, &stats);
  vm_->run(builder.take());
  EXPECT_EQ(stats.reserved_bytes.aggregate().current, 0);
  EXPECT_TRUE(compute_queue().idle());
  kernel.wait();
}

TEST_P(ReleaseTest, AHostSectionAfterAReleaseSeesOnlyTheNewContents) {
  auto first = allocate(vm_->stream(kOpenCL0));
  vm::Ticket kernel = submit_slow_fill(first, 1);
  release(std::move(first));
  auto second = allocate(vm_->stream(kOpenCL0));
  std::vector<uint8_t> host(kWords * sizeof(uint32_t), 5);
  InstructionsBuilder builder(*vm_);
  builder.copy_host_to_device(host.data(), second, 0, host.size());
  vm_->run(builder.take());
  {
    std::optional<vm::HostSection> section = vm::HostSection::enter(*vm_, kOpenCL0);
    EXPECT_TRUE(compute_queue().idle()) << "entering finished what was in flight";
  }
  EXPECT_EQ(fill_and_read(second, 5), host);
  kernel.wait();
  release(std::move(second));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ReleaseTest,
    ::testing::Values(Mode{ReleaseMode::kStreamOrdered, "caching"},
                    Mode{ReleaseMode::kFinish, "caching"},
                    Mode{ReleaseMode::kStreamOrdered, "buddy"}),
    [](const ::testing::TestParamInfo<Mode>& info) {
      return std::string(info.param.release == ReleaseMode::kFinish ? "finish_" : "stream_") +
             info.param.allocator;
    });

// The system allocator gives every freed block back to the driver: its guard makes each
// stream-ordered release wait for the device, so the queue is finished when the release returns.
TEST(ReleaseSystemAllocatorTest, EveryFreeWaitsForTheDevice) {
  Options options;
  options.allocator = "system";
  vm::VirtualMachine vm(DeviceManager::instance(), options);
  InstructionsBuilder builder(vm);
  auto blob = builder.allocate_blob(builder.stream(kOpenCL0), {static_cast<int64_t>(kWords)},
                                    DType::kI32);
  vm.run(builder.take());
  LaunchRange range;
  range.global[0] = kWords;
  builder.launch(builder.stream(kOpenCL0), kSlowFill, range,
                 {LaunchArg::of_blob(blob, 0, KernelAccess::kWrite), LaunchArg::of(uint32_t{3}),
                  LaunchArg::of(uint32_t{100})});
  vm::Ticket kernel = vm.submit(builder.take());
  builder.release(std::move(blob));
  vm.run(builder.take());
  EXPECT_TRUE(vm.stream(kOpenCL0).queue().idle());
  kernel.wait();
}

}  // namespace
}  // namespace oclvm
