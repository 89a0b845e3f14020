// tests/instructions/bad_input_test.cc — bad input to the C++ API that the other suites leave
// out (design/reliability.md, "Bad input", lists every case and the test of each).
//
// Every case here: the call throws a typed oclvm error whose message reads "Expected X, but got
// Y"; the builder's list keeps its size; the device statistics (DeviceStats::to_string, every
// field) are what they were; and, as in every LeakCheckedTest, the backends hold no more segments
// at the end than at the start and no blob was freed by its destructor fallback.
//
// The fixture is VmTest (tests/instructions/vm_fixture.h): each test gets its own VirtualMachine
// (fresh allocators), and TearDown asserts nothing is allocated on any device, empties every cache
// and asserts nothing is reserved.
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
constexpr Device kMissingOpenCL{DeviceType::kOpenCL, 99};
constexpr Device kMissingCpu{DeviceType::kCpu, 1};  // only parse_device refuses "cpu:1"

using testing::message_of;
using testing::VmTest;

class BadInputTest : public VmTest {
 protected:
  // Every statistic of every device, as text: equal snapshots mean nothing changed.
  std::string all_stats() {
    std::string text;
    for (Device device : DeviceManager::instance().devices()) {
      text += device.str() + "\n" + stats(device).to_string();
    }
    return text;
  }

  // Expects `bad` to throw InvalidArgument in the "Expected X, but got Y" form and to leave the
  // builder's list as it was; returns the message.
  std::string expect_rejected(InstructionsBuilder& builder, const std::function<void()>& bad) {
    const size_t size = builder.size();
    const std::string message = message_of<InvalidArgument>(bad);
    EXPECT_EQ(builder.size(), size) << message;
    EXPECT_EQ(message.rfind("Expected ", 0), 0u) << message;
    EXPECT_CONTAINS(message, ", but got ");
    return message;
  }
};

// ---------------------------------------------------------------------------------------------
// Devices that do not exist.

TEST_F(BadInputTest, AllocatorControlOfAMissingDeviceIsRejected) {
  const std::string before = all_stats();
  InstructionsBuilder builder(vm());
  DeviceStats out;
  std::string known;
  for (Device d : DeviceManager::instance().devices()) {
    known += (known.empty() ? "" : ", ") + d.str();
  }
  std::string m = expect_rejected(builder, [&] { builder.set_memory_limit(kMissingOpenCL, 1); });
  EXPECT_EQ(m, "Expected one of the devices " + known + ", but got opencl:99");
  expect_rejected(builder, [&] { builder.empty_cache(kMissingCpu); });
  expect_rejected(builder, [&] { builder.reset_stats(kMissingCpu, ResetKind::kAccumulated); });
  // Device{kCpu, 1} (only C++ can make it) keeps its index in the message.
  m = expect_rejected(builder, [&] { builder.query_stats(kMissingCpu, &out); });
  EXPECT_EQ(m, "Expected one of the devices " + known + ", but got cpu:1");
  expect_rejected(builder, [&] { builder.stream(Device{DeviceType::kOpenCL, -1}); });
  expect_rejected(builder, [&] { vm().stream(kMissingOpenCL, vm::StreamRole::kUser, 3); });
  EXPECT_EQ(builder.size(), 0u);
  EXPECT_EQ(all_stats(), before);
}

// A BlobObject made by hand can name a device that does not exist; no builder call takes it.
TEST_F(BadInputTest, BlobsOfAMissingDeviceAreRejectedByEveryBuilderCall) {
  auto good = allocate(kOpenCL0, 4096);
  const std::string before = all_stats();
  auto stray = std::make_shared<BlobObject>(kMissingOpenCL, size_t{4096});
  std::vector<uint8_t> host(4096, 0);
  InstructionsBuilder builder(vm());
  std::string m =
      expect_rejected(builder, [&] { builder.copy_host_to_device(host.data(), stray, 0, 16); });
  EXPECT_CONTAINS(m, "but got opencl:99");
  expect_rejected(builder, [&] { builder.copy_device_to_host(stray, 0, host.data(), 16); });
  m = expect_rejected(builder, [&] { builder.copy(stray, 0, good, 0, 16); });  // source missing
  EXPECT_CONTAINS(m, "but got opencl:99");
  expect_rejected(builder, [&] { builder.copy(good, 0, stray, 0, 16); });  // destination missing
  expect_rejected(builder, [&] {
    builder.access(stray, 0, 16, HostAccess::kRead, [](void*, size_t) {});
  });
  m = expect_rejected(builder, [&] { builder.record_blob_use(builder.stream(kOpenCL0), stray); });
  EXPECT_EQ(m, "Expected a stream on opencl:99 (the blob's device), but got opencl:0/compute");
  EXPECT_EQ(builder.size(), 0u);
  EXPECT_EQ(all_stats(), before);
  release(good);
}

// ---------------------------------------------------------------------------------------------
// Streams of another VM, and blobs whose producer stream is not on their device.

TEST_F(BadInputTest, StreamsOfAnotherVmAreRejectedByEveryBuilderCall) {
  auto blob = allocate(kCpu, 4096);
  auto other_blob = allocate(kCpu, 4096);
  const std::string before = all_stats();
  vm::VirtualMachine other(DeviceManager::instance(), Options{});
  vm::Stream& foreign = other.stream(kCpu, vm::StreamRole::kUser, 5);
  vm::Stream& own = vm().stream(kCpu);
  std::vector<uint8_t> host(64, 0);
  auto event = std::make_shared<StreamEvent>();
  InstructionsBuilder builder(vm());
  const std::vector<std::function<void()>> bad = {
      [&] { builder.allocate_blob(foreign, Dims{4}, DType::kF32); },
      [&] { builder.copy_host_to_device(host.data(), blob, 0, 64, &foreign); },
      [&] { builder.copy_device_to_host(blob, 0, host.data(), 64, &foreign); },
      [&] { builder.copy(blob, 0, other_blob, 0, 64, &foreign); },
      [&] { builder.fill(blob, 0, 64, 0, 1, &foreign); },
      [&] { builder.access(blob, 0, 64, HostAccess::kWrite, [](void*, size_t) {}, &foreign); },
      [&] { builder.soft_sync(own, foreign); },
      [&] { builder.soft_sync(foreign, own); },
      [&] { builder.record_event(foreign, event); },
      [&] { builder.wait_event(foreign, event); },
      [&] { builder.record_blob_use(foreign, blob); },
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const std::string m = expect_rejected(builder, bad[i]);
    EXPECT_EQ(m, "Expected a stream of this builder's VM, but got cpu/user5 of another VM");
  }
  EXPECT_EQ(builder.size(), 0u);
  EXPECT_FALSE(event->recorded());
  EXPECT_EQ(all_stats(), before);
  release(blob);
  release(other_blob);
}

TEST_F(BadInputTest, ReleaseOfABlobWhoseProducerIsOnAnotherDeviceIsRejected) {
  auto blob = allocate(kOpenCL0, 4096);
  const std::string before = all_stats();
  const vm::StreamId producer = vm::producer_stream(*blob);
  vm::set_producer_stream(*blob, vm().stream(kCpu).id());
  InstructionsBuilder builder(vm());
  const std::string m = expect_rejected(builder, [&] { builder.release(blob); });
  EXPECT_EQ(m,
            "Expected a blob produced by a stream of this VM on opencl:0, but got one whose "
            "producer stream is cpu/compute");
  EXPECT_FALSE(blob->storage()->released());
  EXPECT_EQ(all_stats(), before);
  vm::set_producer_stream(*blob, producer);
  release(blob);
}

// ---------------------------------------------------------------------------------------------
// Stream numbers and the stream limit.

TEST_F(BadInputTest, NegativeUserStreamIndexIsRejected) {
  const std::string m = message_of<InvalidArgument>(
      [&] { vm().stream(kCpu, vm::StreamRole::kUser, -1); });
  EXPECT_EQ(m, "Expected a user stream index >= 0, but got -1");
  // Roles other than user ignore the index.
  EXPECT_EQ(&vm().stream(kCpu, vm::StreamRole::kHostToDevice, -1),
            &vm().stream(kCpu, vm::StreamRole::kHostToDevice, 0));
}

TEST_F(BadInputTest, StreamPastTheLimitIsAnErrorAndTheVmKeepsServing) {
  // The limit counts every stream, compute streams too: those of every device are made first, so
  // that the statistics and caches stay reachable (TearDown needs them).
  for (Device device : DeviceManager::instance().devices()) vm().stream(device);
  // Host-device streams: their queues cost nothing to create.
  std::string message;
  int created = 0;
  for (int i = 0; i < 5000; ++i) {
    try {
      vm().stream(kCpu, vm::StreamRole::kUser, i);
      ++created;
    } catch (const InvalidArgument& e) {
      ADD_FAILURE() << "a stream past the limit is an Error, not InvalidArgument: " << e.what();
      break;
    } catch (const Error& e) {
      message = e.what();
      break;
    }
  }
  EXPECT_EQ(message, "Expected at most 4096 streams in one VM, but another was asked for on cpu");
  EXPECT_GT(created, 4000);
  EXPECT_LE(created, 4096);
  // Streams that exist are still found, and work runs on them.
  vm::Stream& last = vm().stream(kCpu, vm::StreamRole::kUser, created - 1);
  EXPECT_EQ(last.user_index(), created - 1);
  InstructionsBuilder builder(vm());
  auto blob = builder.allocate_blob(last, 4096);
  builder.fill(blob, 0, 4096, 0x5a, 1, &last);
  std::vector<uint8_t> back(4096, 0);
  builder.copy_device_to_host(blob, 0, back.data(), 4096, &last);
  builder.release(blob);
  vm().run(builder.take());
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 0x5a));
}

// ---------------------------------------------------------------------------------------------
// Options, tensor storages.

TEST_F(BadInputTest, AVmWithAnUnknownAllocatorIsNotCreated) {
  Options options;
  options.allocator = "bfc";
  const std::string m = message_of<InvalidArgument>(
      [&] { vm::VirtualMachine refused(DeviceManager::instance(), options); });
  EXPECT_EQ(m,
            "Expected the allocator (Options::allocator, OCLVM_ALLOCATOR) to be one of caching, "
            "buddy, system, but got 'bfc'");
}

TEST_F(BadInputTest, MakeTensorStorageRejectsBadShapesAndDevicesHoldingNothing) {
  const std::string before = all_stats();
  const uint64_t max_bytes =
      DeviceManager::instance().backend(kOpenCL0).properties().max_alloc_bytes;
  std::string m = message_of<InvalidArgument>(
      [&] { make_tensor_storage(vm(), kOpenCL0, {4, -1}, DType::kF32); });
  EXPECT_EQ(m.rfind("Expected ", 0), 0u) << m;
  m = message_of<InvalidArgument>([&] {
    make_tensor_storage(vm(), kOpenCL0, {int64_t{1} << 62, 4}, DType::kF32);
  });
  EXPECT_EQ(m.rfind("Expected ", 0), 0u) << m;
  m = message_of<InvalidArgument>([&] {
    make_tensor_storage(vm(), kOpenCL0, {static_cast<int64_t>(max_bytes / 4 + 1)}, DType::kF32);
  });
  EXPECT_CONTAINS(m, "Expected a blob of at most " + std::to_string(max_bytes) + " bytes");
  m = message_of<InvalidArgument>(
      [&] { make_tensor_storage(vm(), kMissingOpenCL, {4}, DType::kF32); });
  EXPECT_CONTAINS(m, "but got opencl:99");
  EXPECT_EQ(all_stats(), before);
}

// ---------------------------------------------------------------------------------------------
// Events: what CUDA allows, oclvm allows (a no-op), and says nothing changed.

TEST_F(BadInputTest, NeverRecordedEventsAreNoOps) {
  const std::string before = all_stats();
  auto event = std::make_shared<StreamEvent>();
  InstructionsBuilder builder(vm());
  builder.wait_event(builder.stream(kOpenCL0), event);
  builder.wait_event(builder.stream(kCpu), event);
  vm().run(builder.take());
  EXPECT_FALSE(event->recorded());
  EXPECT_TRUE(event->query());
  event->synchronize();  // returns at once
  const std::string m =
      message_of<InvalidArgument>([&] { StreamEvent(true).elapsed_ms_since(*event); });
  EXPECT_EQ(m.rfind("Expected ", 0), 0u) << m;
  EXPECT_EQ(all_stats(), before);
}

}  // namespace
}  // namespace oclvm
