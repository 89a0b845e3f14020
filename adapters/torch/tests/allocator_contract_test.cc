// adapters/torch/tests/allocator_contract_test.cc — the contract of CLDeviceAllocator, the
// c10::DeviceAllocator of PrivateUse1 ("opencl"), on the real libtorch and real PoCL devices.
//
// What is checked, one TEST each (adapters/torch/allocator.h states the promises):
//   - allocate(0): an empty DataPtr on the current device; nothing runs, nothing is recorded.
//   - allocate(n): a device address, a TensorStorage context, raw_deleter(), the current device;
//     the statistics move by exactly the rounded size and return when the DataPtr dies (the
//     release is synchronous: no waiting before the check).
//   - registration at load: c10::GetAllocator(PrivateUse1) is the instance; at::empty uses it.
//   - the block registry: find() of start, interior and past-the-end addresses.
//   - copy_data: whole blocks, interior addresses, within one block, across devices.
//   - requests beyond the device's largest single allocation (c10::OutOfMemoryError before the
//     allocator, nothing recorded), and a real out of memory under OCLVM_MEMORY_LIMIT
//     (c10::OutOfMemoryError, num_ooms + 1).
//   - 4 threads x 1000 allocations; the current device per thread; blocks on the device current
//     at allocate time (two devices); the PrivateUse1 hooks' getDeviceFromPtr.
//   - streams: torch stream ids map to VM streams and back; a block is produced on the current
//     stream; recordStream makes the block a read operand of the other stream (the VM's
//     dependence record), is a no-op for the producer stream and an empty DataPtr, and refuses
//     stream ids that name nothing.
// allocator_stats_test.cc checks the statistics; the fixture is in allocator_fixture.h.
//
// Exact byte counts assume oclvm's default allocator, CachingAllocator with its default options
// (storage/caching_allocator.h, Note [Caching policy]): blocks rounded up to 512 bytes (PoCL's
// base address alignment is 128), small pool for rounded sizes <= 1 MiB in 2 MiB segments, a
// large segment the rounded request rounded up to 1 MiB. Under another OCLVM_ALLOCATOR those
// tests skip.
//
// Devices are named by c10::DeviceType::PrivateUse1, never by the string "opencl": without
// c10::register_privateuse1_backend("opencl") (which the Python package's rename does), the
// parser reads "opencl" as the legacy DeviceType::OPENCL. Nothing here parses device strings, and
// the allocator, guard and hooks work on PrivateUse1 either way, so the binary registers no name.
//
// ctest runs the binary three times (adapters/torch/CMakeLists.txt): one PoCL device, two
// (POCL_DEVICES="pthread pthread"; the two-device tests skip otherwise), and one device under
// OCLVM_MEMORY_LIMIT (the out-of-memory test skips without a limit).
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/device.h"
#include "adapters/torch/streams.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/stats.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/virtual_machine.h"
#include "adapters/torch/tests/allocator_fixture.h"

namespace oclvm::torch_adapter {
namespace {

using namespace oclvm::torch_adapter::testing;


// --- allocate --------------------------------------------------------------------------------

TEST_F(CLDeviceAllocatorTest, AllocateZeroGivesEmptyPointerOnCurrentDeviceAndRecordsNothing) {
  const c10::DeviceIndex device = device_count() - 1;  // not only the default device
  set_current_device(device);
  const Stats before = stats(device);

  std::optional<c10::DataPtr> ptr = allocator().allocate(0);
  EXPECT_EQ(ptr->get(), nullptr);
  EXPECT_EQ(ptr->get_context(), nullptr);
  EXPECT_EQ(ptr->device(), opencl(device));
  EXPECT_EQ(allocator().live_blocks(), 0u);
  EXPECT_TRUE(same_stats(before, stats(device)));

  ptr.reset();  // the deleter with a null context does nothing
  EXPECT_TRUE(same_stats(before, stats(device)));
  EXPECT_EQ(stats(device).allocation[kAll].allocated, before.allocation[kAll].allocated);
}

TEST_F(CLDeviceAllocatorTest, AllocateGivesDeviceBlockOnCurrentDeviceReleasedSynchronously) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  constexpr size_t kBytes = 1000;
  const Stats before = stats(0);

  std::optional<c10::DataPtr> ptr = allocator().allocate(kBytes);
  ASSERT_NE(ptr->get(), nullptr);
  EXPECT_NE(ptr->get_context(), nullptr);
  EXPECT_EQ(ptr->get_deleter(), allocator().raw_deleter());
  EXPECT_EQ(ptr->device(), opencl(0));
  EXPECT_EQ(allocator().live_blocks(), 1u);
  // The data is the blob's device address, the context its TensorStorage.
  const auto* storage = static_cast<const TensorStorage*>(ptr->get_context());
  EXPECT_EQ(storage->blob()->storage()->device_address(),
            reinterpret_cast<uintptr_t>(ptr->get()));
  EXPECT_EQ(storage->blob()->storage()->size(), kBytes);

  const Stats during = stats(0);
  const int64_t block = rounded(kBytes);
  EXPECT_GE(block, static_cast<int64_t>(kBytes));
  EXPECT_EQ(during.allocated_bytes[kAll].current - before.allocated_bytes[kAll].current, block);
  EXPECT_EQ(during.active_bytes[kAll].current - before.active_bytes[kAll].current, block);
  EXPECT_EQ(during.requested_bytes[kAll].current - before.requested_bytes[kAll].current,
            static_cast<int64_t>(kBytes));
  EXPECT_EQ(during.allocation[kAll].current - before.allocation[kAll].current, 1);
  EXPECT_EQ(during.allocation[kAll].allocated - before.allocation[kAll].allocated, 1);

  ptr.reset();  // the release is synchronous: checked at once, no waiting
  const Stats after = stats(0);
  EXPECT_EQ(allocator().live_blocks(), 0u);
  EXPECT_EQ(after.allocated_bytes[kAll].current, before.allocated_bytes[kAll].current);
  EXPECT_EQ(after.active_bytes[kAll].current, before.active_bytes[kAll].current);
  EXPECT_EQ(after.requested_bytes[kAll].current, before.requested_bytes[kAll].current);
  EXPECT_EQ(after.allocation[kAll].current, before.allocation[kAll].current);
  EXPECT_EQ(after.allocated_bytes[kAll].freed - before.allocated_bytes[kAll].freed, block);
}

TEST_F(CLDeviceAllocatorTest, RegisteredForPrivateUse1AtLoad) {
  EXPECT_EQ(c10::GetAllocator(c10::DeviceType::PrivateUse1), &allocator());
  EXPECT_EQ(c10::getDeviceAllocator(c10::DeviceType::PrivateUse1), &allocator());
}

TEST_F(CLDeviceAllocatorTest, EmptyTensorStorageIsABlockOfThisAllocator) {
  std::optional<at::Tensor> t =
      at::empty({1000}, at::TensorOptions().dtype(at::kByte).device(opencl(0)));
  const c10::DataPtr& data = t->storage().data_ptr();
  EXPECT_EQ(data.get_deleter(), allocator().raw_deleter());
  EXPECT_EQ(data.device(), opencl(0));
  EXPECT_EQ(allocator().live_blocks(), 1u);
  EXPECT_EQ(allocator().find(data.get()).offset, 0u);
  EXPECT_EQ(stats(0).requested_bytes[kAll].current, 1000);
  t.reset();
  EXPECT_EQ(allocator().live_blocks(), 0u);
}

TEST_F(CLDeviceAllocatorTest, InitializedWhenADeviceExists) {
  EXPECT_GT(device_count(), 0);
  EXPECT_TRUE(allocator().initialized());
}

// --- the block registry ----------------------------------------------------------------------

TEST_F(CLDeviceAllocatorTest, FindGivesBlobAndOffsetOfAddressesInsideLiveBlocksOnly) {
  constexpr size_t kBytes = 1000;
  std::optional<c10::DataPtr> a = allocator().allocate(kBytes);
  std::optional<c10::DataPtr> b = allocator().allocate(kBytes);
  const auto* owner = static_cast<const TensorStorage*>(a->get_context());

  EXPECT_EQ(allocator().find(a->get()).blob, owner->blob());
  EXPECT_EQ(allocator().find(a->get()).offset, 0u);
  EXPECT_EQ(allocator().find(at_offset(a->get(), 1)).offset, 1u);
  EXPECT_EQ(allocator().find(at_offset(a->get(), kBytes - 1)).blob, owner->blob());
  EXPECT_EQ(allocator().find(at_offset(a->get(), kBytes - 1)).offset, kBytes - 1);
  // Past the requested bytes (the rounding padding) is no block's byte.
  EXPECT_THROW(allocator().find(at_offset(a->get(), kBytes)), c10::Error);
  int on_stack = 0;
  EXPECT_THROW(allocator().find(&on_stack), c10::Error);
  EXPECT_THROW(allocator().find(nullptr), c10::Error);

  void* released = a->get();
  a.reset();
  EXPECT_THROW(allocator().find(released), c10::Error);
  EXPECT_EQ(allocator().find(b->get()).offset, 0u);
}

// --- copy_data -------------------------------------------------------------------------------

TEST_F(CLDeviceAllocatorTest, CopyDataCopiesWholeBlocks) {
  constexpr size_t kBytes = 4096;
  std::optional<c10::DataPtr> src = allocator().allocate(kBytes);
  std::optional<c10::DataPtr> dst = allocator().allocate(kBytes);
  const std::vector<uint8_t> data = pattern(kBytes, 3);
  write_bytes(src->get(), data);
  write_bytes(dst->get(), std::vector<uint8_t>(kBytes, 0));

  allocator().copy_data(dst->get(), src->get(), kBytes);
  EXPECT_EQ(read_bytes(dst->get(), kBytes), data);
  EXPECT_EQ(read_bytes(src->get(), kBytes), data);  // the source is untouched
}

TEST_F(CLDeviceAllocatorTest, CopyDataAtInteriorAddresses) {
  constexpr size_t kBytes = 4096;
  std::optional<c10::DataPtr> src = allocator().allocate(kBytes);
  std::optional<c10::DataPtr> dst = allocator().allocate(kBytes);
  const std::vector<uint8_t> data = pattern(kBytes, 11);
  const std::vector<uint8_t> background(kBytes, 0xEE);
  write_bytes(src->get(), data);
  write_bytes(dst->get(), background);

  // Bytes [1000, 1500) of src go to [100, 600) of dst; nothing else of dst changes.
  allocator().copy_data(at_offset(dst->get(), 100), at_offset(src->get(), 1000), 500);
  std::vector<uint8_t> expected = background;
  std::copy(data.begin() + 1000, data.begin() + 1500, expected.begin() + 100);
  EXPECT_EQ(read_bytes(dst->get(), kBytes), expected);

  // Up to the last byte of both blocks.
  allocator().copy_data(at_offset(dst->get(), kBytes - 7), at_offset(src->get(), kBytes - 7), 7);
  std::copy(data.end() - 7, data.end(), expected.end() - 7);
  EXPECT_EQ(read_bytes(dst->get(), kBytes), expected);

  // Within one block: disjoint ranges are copied, overlapping ones refused (InvalidArgument from
  // the builder, a c10::ValueError here) with nothing written.
  allocator().copy_data(at_offset(src->get(), 2048), src->get(), 1024);
  std::vector<uint8_t> src_expected = data;
  std::copy(data.begin(), data.begin() + 1024, src_expected.begin() + 2048);
  EXPECT_EQ(read_bytes(src->get(), kBytes), src_expected);
  EXPECT_THROW(allocator().copy_data(at_offset(src->get(), 10), src->get(), 100), c10::ValueError);
  EXPECT_EQ(read_bytes(src->get(), kBytes), src_expected);
}

TEST_F(CLDeviceAllocatorTest, CopyDataRefusesRangesOutsideLiveBlocks) {
  constexpr size_t kBytes = 4096;
  std::optional<c10::DataPtr> src = allocator().allocate(kBytes);
  std::optional<c10::DataPtr> dst = allocator().allocate(kBytes);
  const std::vector<uint8_t> before = pattern(kBytes, 5);
  write_bytes(dst->get(), before);

  // Running past the end of the destination block (InvalidArgument from the builder).
  EXPECT_THROW(allocator().copy_data(at_offset(dst->get(), 100), src->get(), kBytes),
               c10::ValueError);
  // An address no live block holds (the registry).
  int on_stack = 0;
  EXPECT_THROW(allocator().copy_data(dst->get(), &on_stack, 4), c10::Error);
  EXPECT_EQ(read_bytes(dst->get(), kBytes), before);
  // A zero-byte copy looks at nothing, not even the addresses.
  allocator().copy_data(nullptr, nullptr, 0);
}

TEST_F(CLDeviceAllocatorTest, CopyDataAcrossDevices) {
  if (device_count() < 2) GTEST_SKIP() << "needs two devices (POCL_DEVICES='pthread pthread')";
  constexpr size_t kBytes = 8192;
  set_current_device(0);
  std::optional<c10::DataPtr> on0 = allocator().allocate(kBytes);
  set_current_device(1);
  std::optional<c10::DataPtr> on1 = allocator().allocate(kBytes);
  set_current_device(0);
  const std::vector<uint8_t> data = pattern(kBytes, 17);
  write_bytes(on0->get(), data);
  write_bytes(on1->get(), std::vector<uint8_t>(kBytes, 0));

  allocator().copy_data(at_offset(on1->get(), 512), at_offset(on0->get(), 256), 4096);
  std::vector<uint8_t> expected(kBytes, 0);
  std::copy(data.begin() + 256, data.begin() + 256 + 4096, expected.begin() + 512);
  EXPECT_EQ(read_bytes(on1->get(), kBytes), expected);
}

// --- refusals and out of memory --------------------------------------------------------------

// Torch code catches OutOfMemoryError to shrink its batch: a request larger than one allocation
// may hold is one, raised before the allocator sees it (so no statistic changes, num_ooms
// included).
TEST_F(CLDeviceAllocatorTest, AllocateBeyondLargestSingleAllocationIsOutOfMemoryChangingNothing) {
  const uint64_t max_alloc = properties(0).max_alloc_bytes;
  ASSERT_LT(max_alloc, uint64_t{1} << 60);
  const Stats before = stats(0);
  for (const size_t bytes : {static_cast<size_t>(max_alloc) + 1, size_t{1} << 60, SIZE_MAX}) {
    try {
      c10::DataPtr ptr = allocator().allocate(bytes);
      ADD_FAILURE() << "allocate(" << bytes << ") succeeded";
    } catch (const c10::OutOfMemoryError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("OpenCL out of memory. opencl:0: tried to allocate " +
                             std::to_string(bytes) +
                             " bytes, more than the device's largest single allocation (" +
                             std::to_string(max_alloc) + " bytes)"),
                std::string::npos)
          << message;
    }
  }
  EXPECT_TRUE(same_stats(before, stats(0)));
  EXPECT_EQ(allocator().live_blocks(), 0u);

  std::optional<c10::DataPtr> ptr = allocator().allocate(1000);  // the device still works
  EXPECT_NE(ptr->get(), nullptr);
  ptr.reset();
  EXPECT_EQ(stats(0).allocated_bytes[kAll].current, 0);
}

// A real out of memory needs a limit: ctest's oclvm_torch_tests.memory_limit sets
// OCLVM_MEMORY_LIMIT. A request that not even an empty cache could make room for is refused
// before anything is touched (Note [Out-of-memory ladder]): c10::OutOfMemoryError with oclvm's
// message, num_ooms + 1, every other statistic unchanged (the cache is kept), nothing held.
TEST_F(CLDeviceAllocatorTest, OutOfMemoryUnderLimitIsOutOfMemoryErrorCountedInNumOoms) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  const uint64_t limit = runtime().options().memory_limit;
  if (limit == 0) GTEST_SKIP() << "needs OCLVM_MEMORY_LIMIT (ctest oclvm_torch_tests.memory_limit)";
  ASSERT_EQ(limit % kMiB, 0u) << "the test's sizes assume a limit of whole MiB";
  ASSERT_LE(limit, properties(0).max_alloc_bytes);
  ASSERT_GE(limit, uint64_t{16 * kMiB});

  std::optional<c10::DataPtr> held = allocator().allocate(1000);  // a 2 MiB small segment
  { c10::DataPtr cached = allocator().allocate(4 * kMiB); }  // then a cached 4 MiB segment
  const Stats before = stats(0);
  ASSERT_EQ(before.reserved_bytes[kAll].current, kSmallSegment + 4 * kMiB);

  // Even with the 4 MiB given back: 2 MiB + (limit - 1 MiB) > limit.
  const size_t bytes = static_cast<size_t>(limit) - kMiB;
  try {
    c10::DataPtr ptr = allocator().allocate(bytes);
    ADD_FAILURE() << "allocate(" << bytes << ") succeeded under a limit of " << limit;
  } catch (const c10::OutOfMemoryError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("OpenCL out of memory. opencl:0: tried to allocate", 0), 0u)
        << message;
    EXPECT_NE(message.find("(" + std::to_string(bytes) + " bytes)"), std::string::npos) << message;
  }
  const Stats after = stats(0);
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  EXPECT_TRUE(same_stats(before, after, {"num_ooms"}));
  EXPECT_EQ(allocator().live_blocks(), 1u);

  std::optional<c10::DataPtr> again = allocator().allocate(4096);  // the device still works
  EXPECT_NE(again->get(), nullptr);
  again.reset();
  held.reset();
  EXPECT_EQ(stats(0).num_ooms, before.num_ooms + 1);
}

// --- threads and devices ---------------------------------------------------------------------

// Both pools, sizes at and around the rounding quantum and the small/large boundary.
constexpr size_t kThreadSizes[] = {1, 100, 511, 512, 513, 4096, 65536, 200000, kSmallSize + 1};

TEST_F(CLDeviceAllocatorTest, FourThreadsAllocatingAndFreeingLeaveNothingBehind) {
  constexpr int kThreads = 4;
  constexpr int kBlocksPerThread = 1000;
  std::vector<Stats> before;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) before.push_back(stats(d));
  const size_t live_before = allocator().live_blocks();

  std::atomic<int> wrong_device{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &wrong_device, &failures] {
      try {
        const auto device = static_cast<c10::DeviceIndex>(t % device_count());
        set_current_device(device);
        std::mt19937 rng(static_cast<unsigned>(t) + 1);
        std::vector<c10::DataPtr> held;
        for (int i = 0; i < kBlocksPerThread; ++i) {
          const size_t bytes = kThreadSizes[rng() % std::size(kThreadSizes)] + rng() % 64;
          held.push_back(allocator().allocate(bytes));
          if (held.back().device() != opencl(device) || held.back().get() == nullptr) {
            ++wrong_device;
          }
          if (held.size() > 4) held.erase(held.begin() + static_cast<ptrdiff_t>(rng() % 5));
        }
      } catch (const std::exception& e) {
        ++failures;
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong_device.load(), 0);
  EXPECT_EQ(allocator().live_blocks(), live_before);
  int64_t allocations = 0;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    const Stats s = stats(d);
    EXPECT_EQ(s.allocated_bytes[kAll].current, before[d].allocated_bytes[kAll].current);
    EXPECT_EQ(s.requested_bytes[kAll].current, before[d].requested_bytes[kAll].current);
    EXPECT_EQ(s.allocation[kAll].current, before[d].allocation[kAll].current);
    EXPECT_EQ(s.allocation[kAll].freed - before[d].allocation[kAll].freed,
              s.allocation[kAll].allocated - before[d].allocation[kAll].allocated);
    allocations += s.allocation[kAll].allocated - before[d].allocation[kAll].allocated;
  }
  EXPECT_EQ(allocations, kThreads * kBlocksPerThread) << "every allocate counted exactly once";
}

TEST_F(CLDeviceAllocatorTest, CurrentDeviceIsPerThread) {
  const c10::DeviceIndex last = device_count() - 1;
  set_current_device(last);
  c10::DeviceIndex seen_by_new_thread = -1;
  std::thread([&] {
    seen_by_new_thread = current_device();
    set_current_device(0);
  }).join();
  EXPECT_EQ(seen_by_new_thread, 0) << "every thread starts on device 0";
  EXPECT_EQ(current_device(), last) << "another thread's set_current_device leaked here";

  set_current_device(0);
  c10::DeviceIndex set_by_other = -1;
  std::thread([&] {
    set_current_device(last);
    set_by_other = current_device();
  }).join();
  EXPECT_EQ(set_by_other, last);
  EXPECT_EQ(current_device(), 0);

  EXPECT_THROW(set_current_device(device_count()), c10::IndexError);
  EXPECT_THROW(set_current_device(-1), c10::IndexError);
  EXPECT_EQ(current_device(), 0) << "a refused index changes nothing";
}

TEST_F(CLDeviceAllocatorTest, BlocksLandOnTheDeviceCurrentAtAllocateTime) {
  if (!caching_allocator_in_use()) GTEST_SKIP() << kNeedsCaching;
  if (device_count() < 2) GTEST_SKIP() << "needs two devices (POCL_DEVICES='pthread pthread')";
  const Stats before0 = stats(0);
  const Stats before1 = stats(1);

  set_current_device(1);
  std::optional<c10::DataPtr> on1 = allocator().allocate(1000);
  set_current_device(0);  // changing the current device afterwards does not move the block
  EXPECT_EQ(on1->device(), opencl(1));
  EXPECT_EQ(at::detail::getPrivateUse1Hooks().getDeviceFromPtr(on1->get()), opencl(1));
  EXPECT_TRUE(same_stats(before0, stats(0))) << "device 0 must not see device 1's block";
  const Stats mid1 = stats(1);
  EXPECT_EQ(mid1.allocation[kAll].current - before1.allocation[kAll].current, 1);
  EXPECT_EQ(mid1.allocated_bytes[kAll].current - before1.allocated_bytes[kAll].current,
            rounded(1000));
  EXPECT_EQ(mid1.reserved_bytes[kAll].current, kSmallSegment);

  std::optional<c10::DataPtr> on0 = allocator().allocate(4096);
  EXPECT_EQ(on0->device(), opencl(0));
  EXPECT_EQ(stats(0).allocated_bytes[kAll].current - before0.allocated_bytes[kAll].current, 4096);
  EXPECT_TRUE(same_stats(mid1, stats(1))) << "device 1 must not see device 0's block";

  on1.reset();  // released on device 1, whatever the current device is
  const Stats after1 = stats(1);
  EXPECT_EQ(after1.allocated_bytes[kAll].current, before1.allocated_bytes[kAll].current);
  EXPECT_EQ(after1.allocation[kAll].current, before1.allocation[kAll].current);
  EXPECT_EQ(stats(0).allocated_bytes[kAll].current - before0.allocated_bytes[kAll].current, 4096);
  on0.reset();
}

TEST_F(CLDeviceAllocatorTest, HooksGiveTheDeviceOfABlockAddress) {
  ASSERT_TRUE(at::isPrivateUse1HooksRegistered());
  const at::PrivateUse1HooksInterface& hooks = at::detail::getPrivateUse1Hooks();
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    set_current_device(d);
    std::optional<c10::DataPtr> block = allocator().allocate(1000);
    EXPECT_EQ(hooks.getDeviceFromPtr(block->get()), opencl(d));
    EXPECT_EQ(hooks.getDeviceFromPtr(at_offset(block->get(), 999)), opencl(d));
    block.reset();
  }
  set_current_device(0);
  int on_stack = 0;
  EXPECT_THROW(hooks.getDeviceFromPtr(&on_stack), c10::Error);
  EXPECT_THROW(hooks.getDeviceFromPtr(nullptr), c10::Error);
}

// ---------------------------------------------------------------------------------------------
// Streams and recordStream

// Makes `stream` this thread's current stream of its device for the scope.
const c10::impl::DeviceGuardImplInterface& guard_impl() {
  return *c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
}

class CurrentStream {
 public:
  explicit CurrentStream(c10::Stream stream) : previous_(guard_impl().exchangeStream(stream)) {}
  ~CurrentStream() { guard_impl().exchangeStream(previous_); }

 private:
  c10::Stream previous_;
};

TEST_F(CLDeviceAllocatorTest, TorchStreamIdsMapToVmStreamsAndBack) {
  Runtime& rt = runtime();
  const c10::Stream default_stream = guard_impl().getDefaultStream(opencl(0));
  EXPECT_EQ(default_stream.id(), 0);
  EXPECT_EQ(&vm_stream(default_stream), &rt.stream(to_oclvm(0)));
  EXPECT_EQ(guard_impl().getStream(opencl(0)), default_stream);

  const c10::Stream fresh = guard_impl().getNewStream(opencl(0), 0);
  vm::Stream& mapped = vm_stream(fresh);
  EXPECT_EQ(mapped.role(), vm::StreamRole::kUser);
  EXPECT_EQ(mapped.device(), to_oclvm(0));
  EXPECT_EQ(torch_stream(mapped), fresh);
  EXPECT_NE(guard_impl().getNewStream(opencl(0), 0), fresh);

  const c10::Stream unknown(c10::Stream::UNSAFE, opencl(0), 1 << 20);
  EXPECT_THROW(vm_stream(unknown), c10::Error);
  EXPECT_THROW(guard_impl().exchangeStream(unknown), c10::Error);
  EXPECT_EQ(guard_impl().getStream(opencl(0)), default_stream) << "a refused stream changes nothing";
}

TEST_F(CLDeviceAllocatorTest, BlocksAreProducedOnTheCurrentStream) {
  const c10::Stream user = guard_impl().getStreamFromGlobalPool(opencl(0), false);
  c10::DataPtr on_user;
  {
    CurrentStream scope(user);
    on_user = allocator().allocate(4096);
  }
  c10::DataPtr on_default = allocator().allocate(4096);
  EXPECT_EQ(vm::producer_stream(*blob_of_data(on_user).blob), vm_stream(user).id());
  EXPECT_EQ(vm::producer_stream(*blob_of_data(on_default).blob),
            runtime().stream(to_oclvm(0)).id());
}

TEST_F(CLDeviceAllocatorTest, RecordStreamMakesTheBlockAReadOperandOfTheOtherStream) {
  const c10::Stream user = guard_impl().getNewStream(opencl(0), 0);
  c10::DataPtr ptr = allocator().allocate(1 << 20);
  const std::shared_ptr<BlobObject> blob = blob_of_data(ptr).blob;
  // Only this thread uses the blob, and every list has reached its sync point, so reading the
  // VM's access records here races with nothing. The allocation made them (vm/dependence.h).
  const vm::BlobRecords& records = *vm::find_records(*blob);
  allocator().recordStream(ptr, guard_impl().getDefaultStream(opencl(0)));  // its producer
  EXPECT_TRUE(records.reads.empty());
  allocator().recordStream(ptr, user);
  ASSERT_EQ(records.reads.size(), 1u);
  EXPECT_EQ(records.reads[0].stream, vm_stream(user).id());
  guard_impl().recordDataPtrOnStream(ptr, user);  // the guard's entry point: same record
  EXPECT_EQ(records.reads.size(), 1u);

  allocator().recordStream(c10::DataPtr(nullptr, opencl(0)), user);  // empty: nothing to record
  const c10::Stream unknown(c10::Stream::UNSAFE, opencl(0), 1 << 20);
  EXPECT_THROW(allocator().recordStream(ptr, unknown), c10::Error);
  ptr.clear();  // the release waits for `user` (a soft sync) and still frees synchronously
  EXPECT_EQ(stats(0).allocated_bytes[kAll].current, 0);
}

}  // namespace
}  // namespace oclvm::torch_adapter
