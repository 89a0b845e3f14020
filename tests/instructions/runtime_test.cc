// tests/instructions/runtime_test.cc — the embedders' Runtime (instructions/runtime.h), through
// the entry header oclvm/oclvm.h, on real devices.
//
// Each test makes its own Runtimes (never the process-wide VM). The fixture checks at the end
// that nothing is allocated on any device of its Runtime and that no storage fell back to its
// destructor. Ownership rules that end in a deliberate leak run in a child process (death test).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "oclvm/oclvm.h"
#include "oclvm/storage/address_space.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

constexpr Device kOpenCL0{DeviceType::kOpenCL, 0};
constexpr Device kCpu{DeviceType::kCpu, 0};

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { destructor_releases_ = BlobStorage::destructor_releases(); }
  void TearDown() override {
    for (Device device : runtime_.devices()) {
      const DeviceStats stats = runtime_.stats(device);
      EXPECT_EQ(stats.allocation.aggregate().current, 0) << device.str();
      EXPECT_EQ(stats.allocated_bytes.aggregate().current, 0) << device.str();
    }
    EXPECT_EQ(BlobStorage::destructor_releases(), destructor_releases_);
  }

  Runtime runtime_{Options{}};
  uint64_t destructor_releases_ = 0;
};

TEST(RuntimeVersionTest, HeadersAndLibraryAgree) {
  EXPECT_STREQ(kVersion, library_version());
  EXPECT_STREQ(kVersion, (std::to_string(OCLVM_VERSION_MAJOR) + "." +
                          std::to_string(OCLVM_VERSION_MINOR) + "." +
                          std::to_string(OCLVM_VERSION_PATCH)).c_str());
}

TEST_F(RuntimeTest, ListsTheDevicesOfItsPlatformThenCpu) {
  const std::vector<Device>& devices = runtime_.devices();
  ASSERT_EQ(devices.size(), runtime_.opencl_device_count() + 1);
  EXPECT_EQ(devices.size(), opencl_device_count() + 1) << "the same platform as the process";
  for (size_t i = 0; i + 1 < devices.size(); ++i) {
    EXPECT_EQ(devices[i], (Device{DeviceType::kOpenCL, static_cast<DeviceIndex>(i)}));
    const DeviceProperties& properties = runtime_.properties(devices[i]);
    EXPECT_FALSE(properties.name.empty());
    EXPECT_GT(properties.max_alloc_bytes, 0u);
  }
  EXPECT_EQ(devices.back(), kCpu);
  try {
    runtime_.properties(Device{DeviceType::kOpenCL, 42});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "opencl:42");
  }
}

TEST(RuntimeOptionsTest, AnUnknownAllocatorOrPlatformCreatesNothing) {
  Options options;
  options.allocator = "no_such_allocator";
  try {
    Runtime runtime(options);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "no_such_allocator");
    EXPECT_CONTAINS(e.what(), "caching");
  }
  Options platform;
  platform.platform = "no such platform";
  EXPECT_THROW(Runtime runtime(platform), InvalidArgument);
}

TEST(RuntimeOptionsTest, TheAllocatorAndLimitComeFromOptions) {
  Options options;
  options.allocator = "system";  // no cache: reserved == allocated
  options.memory_limit = 1 * kMiB;
  Runtime runtime(options);
  EXPECT_EQ(runtime.options().allocator, "system");
  EXPECT_EQ(runtime.memory_limit(kOpenCL0), 1 * kMiB);
  {
    auto storage = runtime.create_storage(kOpenCL0, 4096);
    const DeviceStats stats = runtime.stats(kOpenCL0);
    EXPECT_EQ(stats.reserved_bytes.aggregate().current, stats.allocated_bytes.aggregate().current);
    EXPECT_THROW(runtime.create_storage(kOpenCL0, 2 * kMiB), OutOfMemoryError);
  }
  EXPECT_EQ(runtime.stats(kOpenCL0).allocation.aggregate().current, 0);
}

TEST(RuntimeOptionsTest, ARuntimeTakesOverDevicesDiscoveredEarlier) {
  Options options;
  options.allocator = "system";
  auto devices = std::make_unique<DeviceManager>(options);
  const size_t count = devices->opencl_device_count();
  Runtime runtime(std::move(devices));
  EXPECT_EQ(runtime.opencl_device_count(), count);
  EXPECT_EQ(runtime.options().allocator, "system") << "the devices' options";
  {
    auto storage = runtime.create_storage(kOpenCL0, 4096);
    EXPECT_EQ(runtime.stats(kOpenCL0).allocation.aggregate().current, 1);
  }
  EXPECT_EQ(runtime.stats(kOpenCL0).allocation.aggregate().current, 0);
  EXPECT_THROW(Runtime(std::unique_ptr<DeviceManager>()), InvalidArgument);
}

TEST_F(RuntimeTest, StoragesAreReleasedByTheirLastOwner) {
  std::shared_ptr<TensorStorage> storage = runtime_.create_storage(kOpenCL0, {64, 4}, DType::kF32);
  ASSERT_NE(storage, nullptr);
  EXPECT_EQ(storage->blob()->device(), kOpenCL0);
  EXPECT_EQ(storage->blob()->nbytes(), 1024);
  EXPECT_EQ(runtime_.stats(kOpenCL0).allocated_bytes.aggregate().current, 1024);
  std::shared_ptr<TensorStorage> view = storage;  // what a tensor view holds
  storage.reset();
  EXPECT_EQ(runtime_.stats(kOpenCL0).allocation.aggregate().current, 1);
  view.reset();  // the releaser runs a ReleaseTensor before this returns
  EXPECT_EQ(runtime_.stats(kOpenCL0).allocation.aggregate().current, 0);

  auto empty = runtime_.create_storage(kCpu, 0);
  EXPECT_EQ(empty->blob()->numel(), 0);
  EXPECT_EQ(runtime_.stats(kCpu).allocation.aggregate().current, 0) << "0 bytes: no device memory";
}

TEST_F(RuntimeTest, AHostSectionReadsAndWritesAStorageInPlace) {
  for (Device device : {kOpenCL0, kCpu}) {
    ASSERT_TRUE(runtime_.properties(device).host_addressable) << device.str();
    auto storage = runtime_.create_storage(device, 4096);
    InstructionsBuilder builder = runtime_.builder();
    builder.fill(storage->blob(), 0, 4096, 0x5a);
    vm::Ticket filled = runtime_.submit(builder.take());  // the section waits for it
    {
      std::optional<vm::HostSection> section = runtime_.host_section(device);
      ASSERT_TRUE(section.has_value());
      auto* host = static_cast<uint8_t*>(Runtime::host_address(*storage));
      ASSERT_NE(host, nullptr);
      EXPECT_EQ(host[4095], 0x5a) << "the fill ran before the section";
      std::memset(host, 0x11, 16);
    }
    filled.wait();
    std::vector<uint8_t> back(16, 0);
    builder.copy_device_to_host(storage->blob(), 0, back.data(), back.size());
    runtime_.run(builder.take());
    EXPECT_EQ(back, std::vector<uint8_t>(16, 0x11)) << "later lists see the host's writes";
  }
  EXPECT_EQ(Runtime::host_address(*runtime_.create_storage(kCpu, 0)), nullptr);
  runtime_.shutdown();
  EXPECT_FALSE(runtime_.host_section(kCpu).has_value());
}

TEST_F(RuntimeTest, BuildersRunListsAndTheDataRoundTrips) {
  auto storage = runtime_.create_storage(kOpenCL0, 4096);
  std::vector<uint8_t> back(4096, 0);
  InstructionsBuilder builder = runtime_.builder();
  EXPECT_EQ(&builder.vm(), &runtime_.vm());
  builder.fill(storage->blob(), 0, 4096, 0x5a);
  builder.fill(storage->blob(), 1024, 1024, 0x01020304, 4);
  builder.copy_device_to_host(storage->blob(), 0, back.data(), back.size());
  runtime_.run(builder.take());
  EXPECT_EQ(back[0], 0x5a);
  EXPECT_EQ(back[1024], 0x04);
  EXPECT_EQ(back[1027], 0x01);
  EXPECT_EQ(back[4095], 0x5a);

  // The same through submit and a ticket, on a user stream.
  std::vector<uint8_t> again(16, 0);
  InstructionsBuilder second = runtime_.builder();
  vm::Stream& user = runtime_.stream(kOpenCL0, vm::StreamRole::kUser, 1);
  EXPECT_EQ(user.role(), vm::StreamRole::kUser);
  second.copy_device_to_host(storage->blob(), 1024, again.data(), again.size(), &user);
  vm::Ticket ticket = runtime_.submit(second.take());
  ticket.wait();
  EXPECT_EQ(again[0], 0x04);
}

TEST_F(RuntimeTest, BadRequestsThrowAndChangeNothing) {
  const DeviceStats before = runtime_.stats(kOpenCL0);
  const uint64_t largest = runtime_.properties(kOpenCL0).max_alloc_bytes;
  EXPECT_THROW(runtime_.create_storage(kOpenCL0, static_cast<size_t>(largest) + 1),
               InvalidArgument);
  EXPECT_THROW(runtime_.create_storage(kOpenCL0, std::numeric_limits<size_t>::max()),
               InvalidArgument);
  EXPECT_THROW(runtime_.create_storage(kOpenCL0, {4, -1}, DType::kF32), InvalidArgument);
  EXPECT_THROW(runtime_.create_storage(Device{DeviceType::kOpenCL, 7}, 64), InvalidArgument);
  EXPECT_THROW(runtime_.stats(Device{DeviceType::kOpenCL, 7}), InvalidArgument);
  EXPECT_THROW(runtime_.stream(kOpenCL0, vm::StreamRole::kUser, -1), InvalidArgument);
  EXPECT_TRUE(same_stats(runtime_.stats(kOpenCL0), before));
}

TEST_F(RuntimeTest, OutOfMemoryUnderALimitIsTypedAndLeavesNothing) {
  runtime_.set_memory_limit(kOpenCL0, 4 * kMiB);
  EXPECT_EQ(runtime_.memory_limit(kOpenCL0), 4 * kMiB);
  try {
    runtime_.create_storage(kOpenCL0, 8 * kMiB);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_CONTAINS(e.what(), "AllocateBlob");
    EXPECT_CONTAINS(e.what(), "on opencl:0/compute: Out of memory on opencl:0");
  }
  const DeviceStats stats = runtime_.stats(kOpenCL0);
  EXPECT_EQ(stats.num_ooms, 1);
  EXPECT_EQ(stats.allocation.aggregate().current, 0);
  runtime_.set_memory_limit(kOpenCL0, 0);
  EXPECT_EQ(runtime_.memory_limit(kOpenCL0), 0u);
  auto storage = runtime_.create_storage(kOpenCL0, 8 * kMiB);  // fits without the limit
}

TEST_F(RuntimeTest, StatisticsResetAndEmptyCache) {
  { auto storage = runtime_.create_storage(kOpenCL0, 3 * kMiB); }
  DeviceStats stats = runtime_.stats(kOpenCL0);
  EXPECT_GT(stats.reserved_bytes.aggregate().current, 0)
      << "the caching allocator keeps the segment";
  EXPECT_EQ(stats.allocated_bytes.aggregate().peak, static_cast<int64_t>(3 * kMiB));
  runtime_.reset_peak_stats(kOpenCL0);
  EXPECT_EQ(runtime_.stats(kOpenCL0).allocated_bytes.aggregate().peak, 0);
  runtime_.reset_accumulated_stats(kOpenCL0);
  EXPECT_EQ(runtime_.stats(kOpenCL0).num_device_alloc, 0);
  runtime_.empty_cache(kOpenCL0);
  stats = runtime_.stats(kOpenCL0);
  EXPECT_EQ(stats.reserved_bytes.aggregate().current, 0);
  EXPECT_EQ(stats.num_device_free, 1);
}

TEST_F(RuntimeTest, TwoRuntimesAreIndependentAndRefuseEachOthersLists) {
  Runtime other{Options{}};
  auto mine = runtime_.create_storage(kOpenCL0, 1024);
  auto theirs = other.create_storage(kOpenCL0, 2048);
  EXPECT_EQ(runtime_.stats(kOpenCL0).allocated_bytes.aggregate().current, 1024);
  EXPECT_EQ(other.stats(kOpenCL0).allocated_bytes.aggregate().current, 2048);

  InstructionsBuilder builder = other.builder();
  builder.fill(theirs->blob(), 0, 16, 1);
  try {
    runtime_.run(builder.take());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "Expected instructions built for this VM");
  }
  InstructionsBuilder mixed = runtime_.builder();
  mixed.fill(theirs->blob(), 0, 16, 1);  // a blob the other runtime has used
  EXPECT_THROW(runtime_.run(mixed.take()), InvalidArgument);
}

TEST_F(RuntimeTest, FindNamesTheDeviceAndSegmentOfItsOwnAddressesOnly) {
  Runtime other{Options{}};
  std::shared_ptr<TensorStorage> storage = runtime_.create_storage(kOpenCL0, 4096);
  auto on_host = runtime_.create_storage(kCpu, 64);
  auto theirs = other.create_storage(kOpenCL0, 4096);
  const uintptr_t base = storage->blob()->storage()->device_address();
  const auto address = [](uintptr_t value) { return reinterpret_cast<const void*>(value); };
  for (size_t offset : {size_t{0}, size_t{1}, size_t{4095}}) {
    const std::optional<FoundAddress> found = runtime_.find(address(base + offset));
    ASSERT_TRUE(found.has_value()) << "offset " << offset;
    EXPECT_EQ(found->device, kOpenCL0);
    EXPECT_EQ(found->segment_address + found->offset, base + offset);
    EXPECT_LT(found->offset, found->segment_bytes);
    EXPECT_GE(found->segment_bytes, 4096u) << "a segment holds the whole blob";
  }
  const std::optional<FoundAddress> host =
      runtime_.find(address(on_host->blob()->storage()->device_address()));
  ASSERT_TRUE(host.has_value());
  EXPECT_EQ(host->device, kCpu);

  const uintptr_t their_base = theirs->blob()->storage()->device_address();
  EXPECT_FALSE(runtime_.find(address(their_base)).has_value()) << "another Runtime's memory";
  ASSERT_TRUE(other.find(address(their_base)).has_value());
  EXPECT_EQ(other.find(address(their_base))->device, kOpenCL0);
  int on_stack = 0;
  EXPECT_FALSE(runtime_.find(&on_stack).has_value());
  EXPECT_FALSE(runtime_.find(nullptr).has_value());

  storage.reset();
  runtime_.empty_cache(kOpenCL0);  // the segment goes back to the driver
  EXPECT_FALSE(runtime_.find(address(base)).has_value());
}

TEST_F(RuntimeTest, FindStreamFindsOnlyStreamsOfThisRuntime) {
  vm::Stream& compute = runtime_.stream(kOpenCL0);
  vm::Stream& user = runtime_.stream(kOpenCL0, vm::StreamRole::kUser, 3);
  EXPECT_EQ(runtime_.find_stream(compute.id()), &compute);
  EXPECT_EQ(runtime_.find_stream(user.id()), &user);
  EXPECT_EQ(runtime_.find_stream(4095), nullptr);
  Runtime other{Options{}};
  EXPECT_NE(other.find_stream(user.id()), &user);
}

TEST_F(RuntimeTest, AfterShutdownOnlyReleasesAndStatisticsRun) {
  auto storage = runtime_.create_storage(kOpenCL0, 512);
  runtime_.shutdown();
  runtime_.shutdown();  // idempotent
  EXPECT_TRUE(runtime_.is_shut_down());
  EXPECT_EQ(runtime_.stats(kOpenCL0).allocation.aggregate().current, 1);
  InstructionsBuilder builder = runtime_.builder();
  builder.fill(storage->blob(), 0, 512, 0);
  try {
    runtime_.run(builder.take());
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "Expected a running VM, but it has been shut down");
  }
  EXPECT_THROW(runtime_.create_storage(kOpenCL0, 512), Error);
  storage.reset();  // released on this thread
  EXPECT_EQ(runtime_.stats(kOpenCL0).allocation.aggregate().current, 0);
}

TEST(RuntimeLifetimeTest, StoragesOutliveTheirRuntimeAndAreReleasedLater) {
  const uint64_t fallbacks = BlobStorage::destructor_releases();
  std::shared_ptr<TensorStorage> survivor;
  std::weak_ptr<BlobStorage> memory;
  auto runtime = std::make_unique<Runtime>(Options{});
  survivor = runtime->create_storage(kOpenCL0, {1024}, DType::kF64);
  memory = survivor->blob()->storage();
  // Its own releaser too: a blob the embedder allocated and wrapped itself.
  InstructionsBuilder builder = runtime->builder();
  std::shared_ptr<BlobObject> blob = builder.allocate_blob(builder.stream(kCpu), 256);
  runtime->run(builder.take());
  auto wrapped = std::make_shared<TensorStorage>(blob, runtime->releaser());
  blob.reset();
  runtime.reset();  // shut down; the storages keep the devices alive
  EXPECT_FALSE(memory.expired());
  survivor.reset();  // its ReleaseTensor runs here, on this thread
  EXPECT_TRUE(memory.expired());
  wrapped.reset();   // the last reference: the Runtime's devices go now
  EXPECT_EQ(BlobStorage::destructor_releases(), fallbacks);
  EXPECT_EQ(TensorStorage::failed_releases(), 0u);
}

TEST(RuntimeLifetimeDeathTest, ARuntimeDestroyedWithLiveRawBlobsSaysSoAndKeepsThemValid) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto runtime = std::make_unique<Runtime>(Options{});
        InstructionsBuilder builder = runtime->builder();
        std::shared_ptr<BlobObject> blob = builder.allocate_blob(builder.stream(kOpenCL0), 4096);
        runtime->run(builder.take());
        runtime.reset();  // the rule is broken: the blob was never released
        blob->storage()->check_invariants();  // still valid: its allocator was kept
        blob.reset();
        std::exit(BlobStorage::destructor_releases() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "a Runtime was destroyed while blobs allocated through its builder were still live on "
      "opencl:0 \\(1 blobs, 4.00 KiB\\)");
}

// Regression (review of issue #6): a 0-byte raw blob left unreleased used its allocator after
// the Runtime had freed it (the Runtime saw no live allocation, rightly, and deleted its core).
TEST(RuntimeLifetimeTest, AZeroByteRawBlobMayOutliveTheRuntime) {
  const uint64_t fallbacks = BlobStorage::destructor_releases();
  std::shared_ptr<BlobObject> blob;
  {
    Runtime runtime{Options{}};
    InstructionsBuilder builder = runtime.builder();
    blob = builder.allocate_blob(builder.stream(kCpu), Dims{0}, DType::kF32);
    runtime.run(builder.take());
    ASSERT_NE(blob->storage(), nullptr);
  }
  blob.reset();  // holds no memory: touches nothing
  EXPECT_EQ(BlobStorage::destructor_releases(), fallbacks);
}

// Regression (review of issue #6): shutdown() from inside an instruction callback joined the
// worker the callback ran on (std::system_error: resource deadlock) or hung; it is an Error now.
TEST_F(RuntimeTest, ShutdownInsideACallbackIsAnErrorAndChangesNothing) {
  InstructionsBuilder builder = runtime_.builder();
  builder.barrier(runtime_.stream(kOpenCL0), [this] { runtime_.shutdown(); });
  try {
    runtime_.run(builder.take());
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "Expected shutdown() outside instruction callbacks");
  }
  EXPECT_FALSE(runtime_.is_shut_down());
  auto storage = runtime_.create_storage(kOpenCL0, 64);  // still serving
}

// Regression (review of issue #6): the last owner of a Runtime dying inside one of its own
// instruction callbacks shut down on that thread, joining itself. A thread of its own shuts down
// now; a storage dropped later waits for that drain and is released normally.
TEST(RuntimeLifetimeTest, ARuntimeWhoseLastOwnerDiesInsideACallbackShutsDownElsewhere) {
  const uint64_t fallbacks = BlobStorage::destructor_releases();
  const size_t ranges_at_start = AddressSpace::instance().live_ranges();
  for (bool caller_runs : {false, true}) {
    SCOPED_TRACE(caller_runs ? "dispatched by the caller" : "dispatched by the worker");
    auto runtime = std::make_shared<Runtime>(Options{}, vm::VmOptions{.caller_runs = caller_runs});
    std::weak_ptr<Runtime> weak = runtime;
    std::shared_ptr<TensorStorage> storage = runtime->create_storage(kOpenCL0, 256);
    InstructionsBuilder builder = runtime->builder();
    builder.barrier(runtime->stream(kOpenCL0), [held = runtime] {});  // the callback holds it
    vm::InstructionList list = builder.take();
    Runtime* raw = runtime.get();
    runtime.reset();  // the list's callback is the last owner now
    raw->run(std::move(list));  // the instruction dies after its dispatch: ~Runtime there
    EXPECT_TRUE(weak.expired());
    storage.reset();  // waits for the shutdown thread's drain, then releases on this thread
    EXPECT_EQ(BlobStorage::destructor_releases(), fallbacks);
  }
  // The retired core's allocators give their cached segments back on the shutdown thread, which
  // may still be running: wait for them (bounded), so that they are seen to go and the next
  // test's leak check does not see them go under it (a CI run did, once).
  for (int i = 0; i < 2000 && AddressSpace::instance().live_ranges() > ranges_at_start; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(AddressSpace::instance().live_ranges(), ranges_at_start);
}

// Regression (review of issue #6): the core of a Runtime retired on a thread that dispatches for
// another Runtime tried to run a QueryStats there, failed, and was leaked every time. It reads
// the allocators directly now and is freed.
TEST(RuntimeLifetimeTest, ACoreRetiredInsideAnotherRuntimesCallbackIsFreed) {
  Runtime other{Options{}};
  auto runtime = std::make_unique<Runtime>(Options{});
  std::shared_ptr<TensorStorage> storage = runtime->create_storage(kOpenCL0, 512);
  runtime.reset();  // shut down; the storage holds the core
  InstructionsBuilder builder = other.builder();
  builder.barrier(other.stream(kOpenCL0), [held = std::move(storage)] {});
  ::testing::internal::CaptureStderr();
  other.run(builder.take());  // the storage, then the core, die on other's dispatching thread
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "") << "nothing kept, nothing failed";
}

// Regression (review of issue #6): when the stream's finish failed after a successful
// AllocateBlob, create_storage threw with the memory still allocated, and the blob's destructor
// freed it on the caller's thread, racing with the worker.
// With OCLVM_RELEASE=finish every list finishes its queues at its end, an allocation's too.
TEST(RuntimeFaultTest, CreateStorageGivesTheMemoryBackWhenAFinishFails) {
  const uint64_t fallbacks = BlobStorage::destructor_releases();
  Options options;
  options.release = ReleaseMode::kFinish;
  options.faults = FaultOptions::parse("finish:every=1", "test");
  Runtime runtime(options);
  // A queue's finish reaches the driver only with work outstanding: a fill whose finish fails
  // leaves the compute stream unfinished.
  std::shared_ptr<TensorStorage> first = runtime.create_storage(kOpenCL0, 256);
  InstructionsBuilder builder = runtime.builder();
  builder.fill(first->blob(), 0, 256, 1);
  EXPECT_THROW(runtime.run(builder.take()), BackendError);
  // The AllocateBlob succeeds, then the list's finish fails.
  EXPECT_THROW(runtime.create_storage(kOpenCL0, 4096), BackendError);
  EXPECT_EQ(BlobStorage::destructor_releases(), fallbacks) << "not freed by the blob's destructor";
  runtime.vm().devices().backend(kOpenCL0).faults().configure(FaultOptions{});
  EXPECT_EQ(runtime.stats(kOpenCL0).allocation.aggregate().current, 1)
      << "given back through the VM";
  first.reset();
  EXPECT_EQ(runtime.stats(kOpenCL0).allocation.aggregate().current, 0);
}

// Stream-ordered (the default), a list of allocations and releases finishes no queue: a failing
// finish does not reach them, while a fill's list still reports it.
TEST(RuntimeFaultTest, AllocationsAndReleasesNeedNoFinish) {
  Options options;
  options.faults = FaultOptions::parse("finish:every=1", "test");
  Runtime runtime(options);
  std::shared_ptr<TensorStorage> first = runtime.create_storage(kOpenCL0, 256);
  InstructionsBuilder builder = runtime.builder();
  builder.fill(first->blob(), 0, 256, 1);
  EXPECT_THROW(runtime.run(builder.take()), BackendError);
  std::shared_ptr<TensorStorage> second = runtime.create_storage(kOpenCL0, 4096);
  second.reset();
  first.reset();
  runtime.vm().devices().backend(kOpenCL0).faults().configure(FaultOptions{});
  EXPECT_EQ(runtime.stats(kOpenCL0).allocation.aggregate().current, 0);
}

// Many threads on one Runtime: storages made and dropped, lists run, statistics read (the
// ThreadSanitizer run of `make tsan` covers this too).
TEST_F(RuntimeTest, ManyThreadsShareOneRuntime) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const Device device = t % 2 == 0 ? kOpenCL0 : kCpu;
      for (int round = 0; round < kRounds; ++round) {
        auto storage = runtime_.create_storage(device, 256 + 64 * static_cast<size_t>(t));
        std::vector<uint8_t> back(64, 0);
        InstructionsBuilder builder = runtime_.builder();
        builder.fill(storage->blob(), 0, 64, static_cast<uint64_t>(t + round) & 0xff);
        builder.copy_device_to_host(storage->blob(), 0, back.data(), back.size());
        runtime_.run(builder.take());
        if (back[63] != static_cast<uint8_t>((t + round) & 0xff)) mismatches.fetch_add(1);
        if (round % 50 == 0) runtime_.stats(device);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace oclvm
