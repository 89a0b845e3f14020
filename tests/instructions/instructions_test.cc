// tests/instructions/instructions_test.cc — every instruction end to end on a real VM (PoCL and the
// host device): allocation and release, contents, events and stream uses, barriers, host access
// and mappings, statistics and copies across devices. The fixture is VmTest (vm_fixture.h);
// instructions_errors_test.cc has the errors at the sync point and ownership.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
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


// The same tests on PoCL and on the host device.
class OnDevice : public VmTest, public ::testing::WithParamInterface<Device> {
 protected:
  Device device() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, OnDevice, ::testing::Values(kOpenCL0, kCpu),
                         [](const auto& info) {
                           return info.param.type == DeviceType::kCpu ? std::string("cpu")
                                                                      : std::string("opencl0");
                         });

// ---------------------------------------------------------------------------------------------
// AllocateBlob / ReleaseTensor and the statistics.

TEST_P(OnDevice, AllocateAndReleaseMoveStatisticsExactly) {
  auto blob = allocate(device(), 1000);
  ASSERT_NE(blob->storage(), nullptr);
  EXPECT_EQ(blob->storage()->size(), 1000u);
  EXPECT_EQ(blob->device(), device());
  EXPECT_NE(blob->storage()->device_address(), 0u);
  DeviceStats s = stats(device());
  EXPECT_EQ(s.allocation.aggregate().current, 1);
  EXPECT_EQ(s.allocated_bytes.aggregate().current, 1024);  // rounded to the 512-byte quantum
  EXPECT_EQ(s.requested_bytes.aggregate().current, 1000);
  EXPECT_EQ(s.segment.aggregate().current, 1);
  EXPECT_EQ(s.reserved_bytes.aggregate().current, kSmallSegment);
  EXPECT_EQ(s.num_device_alloc, 1);

  std::weak_ptr<BlobStorage> storage = blob->storage();
  release(blob);
  EXPECT_TRUE(blob->storage()->released());
  s = stats(device());
  EXPECT_EQ(s.allocation.aggregate().current, 0);
  EXPECT_EQ(s.allocated_bytes.aggregate().current, 0);
  EXPECT_EQ(s.allocated_bytes.aggregate().freed, 1024);
  EXPECT_EQ(s.reserved_bytes.aggregate().current, kSmallSegment);  // cached
  blob.reset();
  EXPECT_TRUE(storage.expired());

  InstructionsBuilder builder(vm());
  builder.empty_cache(device());
  vm().run(builder.take());
  s = stats(device());
  EXPECT_EQ(s.reserved_bytes.aggregate().current, 0);
  EXPECT_EQ(s.num_device_free, 1);
}

TEST_P(OnDevice, ManyBlobsInOneList) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(device());
  std::vector<std::shared_ptr<BlobObject>> blobs;
  for (size_t i = 1; i <= 8; ++i) blobs.push_back(builder.allocate_blob(stream, i * 512));
  vm().run(builder.take());
  EXPECT_EQ(stats(device()).allocated_bytes.aggregate().current, 512 * 36);
  // Distinct, non-overlapping device ranges.
  for (size_t i = 0; i < blobs.size(); ++i) {
    for (size_t j = i + 1; j < blobs.size(); ++j) {
      const uintptr_t a = blobs[i]->storage()->device_address();
      const uintptr_t b = blobs[j]->storage()->device_address();
      EXPECT_TRUE(a + blobs[i]->required_bytes() <= b || b + blobs[j]->required_bytes() <= a);
    }
  }
  for (auto& blob : blobs) builder.release(blob);
  vm().run(builder.take());
  EXPECT_EQ(stats(device()).allocated_bytes.aggregate().current, 0);
}

TEST_P(OnDevice, TypedBlobWithNoElementsAllocatesNothing) {
  InstructionsBuilder builder(vm());
  auto blob = builder.allocate_blob(builder.stream(device()), {4, 0, 3}, DType::kF32);
  EXPECT_EQ(blob->required_bytes(), 0u);
  vm().run(builder.take());
  ASSERT_NE(blob->storage(), nullptr);
  EXPECT_EQ(blob->storage()->size(), 0u);
  EXPECT_EQ(blob->storage()->device_address(), 0u);
  const DeviceStats s = stats(device());
  EXPECT_EQ(s.allocation.aggregate().allocated, 0);
  EXPECT_EQ(s.segment.aggregate().current, 0);
  // Zero-byte copies and fills of it are no-ops; its release is an ordinary one.
  builder.copy_host_to_device(nullptr, blob, 0, 0);
  builder.fill(blob, 0, 0, 7, 1);
  builder.release(blob);
  vm().run(builder.take());
  EXPECT_TRUE(blob->storage()->released());
}

TEST_P(OnDevice, TypedBlobAllocatesNumelTimesElementSize) {
  InstructionsBuilder builder(vm());
  auto blob = builder.allocate_blob(builder.stream(device()), {3, 5}, DType::kF64);
  vm().run(builder.take());
  EXPECT_EQ(blob->storage()->size(), 120u);
  EXPECT_EQ(stats(device()).requested_bytes.aggregate().current, 120);
  release(blob);
}

// ---------------------------------------------------------------------------------------------
// CopyBlob and FillBlob with contents.

TEST_P(OnDevice, HostToDeviceThenDeviceToHostRoundTrip) {
  constexpr size_t kBytes = 100000;
  auto blob = allocate(device(), kBytes);
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 1);
  write(blob, 0, data);
  EXPECT_EQ(read(blob, 0, kBytes), data);
  // Partial ranges at offsets.
  const std::vector<uint8_t> patch = pattern_bytes(777, 99);
  write(blob, 5000, patch);
  EXPECT_EQ(read(blob, 5000, 777), patch);
  const std::vector<uint8_t> around = read(blob, 4999, 779);
  EXPECT_EQ(around.front(), data[4999]);
  EXPECT_EQ(around.back(), data[5777]);
  release(blob);
}

TEST_P(OnDevice, HostToDeviceAndBackInOneList) {
  constexpr size_t kBytes = 1 << 20;
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 3);
  std::vector<uint8_t> back(kBytes, 0);
  InstructionsBuilder builder(vm());
  auto blob = builder.allocate_blob(builder.stream(device()), kBytes);
  builder.copy_host_to_device(data.data(), blob, 0, kBytes);
  builder.copy_device_to_host(blob, 0, back.data(), kBytes);
  builder.release(blob);
  vm().run(builder.take());
  EXPECT_EQ(back, data);
}

TEST_P(OnDevice, DeviceToDeviceWithOffsets) {
  auto src = allocate(device(), 8192);
  auto dst = allocate(device(), 8192);
  const std::vector<uint8_t> data = pattern_bytes(8192, 7);
  write(src, 0, data);
  write(dst, 0, std::vector<uint8_t>(8192, 0));
  InstructionsBuilder builder(vm());
  builder.copy(src, 100, dst, 4000, 3000);
  builder.copy(src, 0, src, 6000, 1000);  // within one blob, disjoint
  vm().run(builder.take());
  const std::vector<uint8_t> got = read(dst, 0, 8192);
  for (size_t i = 0; i < got.size(); ++i) {
    const uint8_t expected = i >= 4000 && i < 7000 ? data[i - 4000 + 100] : 0;
    ASSERT_EQ(got[i], expected) << "byte " << i;
  }
  const std::vector<uint8_t> got_src = read(src, 0, 8192);
  for (size_t i = 0; i < got_src.size(); ++i) {
    const uint8_t expected = i >= 6000 && i < 7000 ? data[i - 6000] : data[i];
    ASSERT_EQ(got_src[i], expected) << "byte " << i;
  }
  release(src);
  release(dst);
}

TEST_P(OnDevice, FillWithEveryPatternSize) {
  struct Case {
    size_t pattern_size;
    uint64_t pattern;
  };
  for (const Case c : {Case{1, 0xA5}, Case{2, 0xBEEF}, Case{4, 0x01020304},
                       Case{8, 0x1122334455667788}}) {
    SCOPED_TRACE("pattern of " + std::to_string(c.pattern_size) + " bytes");
    auto blob = allocate(device(), 4096);
    write(blob, 0, std::vector<uint8_t>(4096, 0xEE));
    InstructionsBuilder builder(vm());
    const size_t offset = 8 * c.pattern_size;
    const size_t bytes = 64 * c.pattern_size;
    builder.fill(blob, offset, bytes, c.pattern, c.pattern_size);
    vm().run(builder.take());
    const std::vector<uint8_t> got = read(blob, 0, 4096);
    for (size_t i = 0; i < got.size(); ++i) {
      uint8_t expected = 0xEE;
      if (i >= offset && i < offset + bytes) {
        const size_t k = (i - offset) % c.pattern_size;  // little-endian: low byte first
        expected = static_cast<uint8_t>(c.pattern >> (8 * k));
      }
      ASSERT_EQ(got[i], expected) << "byte " << i;
    }
    release(blob);
  }
}

TEST_P(OnDevice, CopiesAcrossStreamsOfOneDeviceAreOrderedByTheirOperands) {
  // Upload on h2d, fill part on a user stream, download on d2h: the VM orders them from the
  // operands (soft syncs between the streams), so the download sees both writes.
  constexpr size_t kBytes = 2 << 20;
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 11);
  std::vector<uint8_t> back(kBytes, 0);
  InstructionsBuilder builder(vm());
  vm::Stream& h2d = vm().stream(device(), vm::StreamRole::kHostToDevice);
  vm::Stream& user = vm().stream(device(), vm::StreamRole::kUser, 3);
  vm::Stream& d2h = vm().stream(device(), vm::StreamRole::kDeviceToHost);
  auto blob = builder.allocate_blob(builder.stream(device()), kBytes);
  builder.copy_host_to_device(data.data(), blob, 0, kBytes, &h2d);
  builder.fill(blob, 1024, 4096, 0x77, 1, &user);
  builder.copy_device_to_host(blob, 0, back.data(), kBytes, &d2h);
  builder.release(blob);
  vm().run(builder.take());
  for (size_t i = 0; i < kBytes; ++i) {
    const uint8_t expected = i >= 1024 && i < 1024 + 4096 ? 0x77 : data[i];
    ASSERT_EQ(back[i], expected) << "byte " << i;
  }
}

TEST_P(OnDevice, ExplicitSoftSyncBetweenUserStreams) {
  constexpr size_t kBytes = 4 << 20;
  InstructionsBuilder builder(vm());
  vm::Stream& a = vm().stream(device(), vm::StreamRole::kUser, 0);
  vm::Stream& b = vm().stream(device(), vm::StreamRole::kUser, 1);
  auto blob = builder.allocate_blob(a, kBytes);
  builder.fill(blob, 0, kBytes, 0x5A5A5A5A, 4, &a);
  builder.soft_sync(a, b);
  std::vector<uint8_t> back(kBytes, 0);
  builder.copy_device_to_host(blob, 0, back.data(), kBytes, &b);
  builder.release(blob);
  ASSERT_EQ(builder.size(), 5u);
  vm().run(builder.take());
  EXPECT_EQ(back, std::vector<uint8_t>(kBytes, 0x5A));
}

TEST_P(OnDevice, OffsetsCountFromTheElementZeroOfAView) {
  // A typed view into a byte blob's storage, starting 512 floats (2048 bytes) in.
  auto base = allocate(device(), 4096);
  write(base, 0, std::vector<uint8_t>(4096, 0));
  auto view = std::make_shared<BlobObject>(base->storage(), Dims{256}, DType::kF32,
                                           Dims{}, 512);
  EXPECT_EQ(blob_base_bytes(*view), 2048u);
  EXPECT_EQ(blob_capacity_bytes(*view), 2048u);
  const std::vector<uint8_t> data = pattern_bytes(1024, 17);
  InstructionsBuilder builder(vm());
  builder.copy_host_to_device(data.data(), view, 100, 1024);
  EXPECT_THROW(builder.copy_host_to_device(data.data(), view, 2000, 100), InvalidArgument);
  vm().run(builder.take());
  const std::vector<uint8_t> got = read(base, 0, 4096);
  for (size_t i = 0; i < got.size(); ++i) {
    const uint8_t expected = i >= 2148 && i < 2148 + 1024 ? data[i - 2148] : 0;
    ASSERT_EQ(got[i], expected) << "byte " << i;
  }
  EXPECT_EQ(read(view, 100, 1024), data);
  release(base);  // the view shares the storage: one release frees it
}

// ---------------------------------------------------------------------------------------------
// Events and stream uses.

// The same ordering as the soft sync above, through an event: record on a, wait on b.
TEST_P(OnDevice, WaitEventOrdersAnotherStreamAfterTheRecordedPoint) {
  constexpr size_t kBytes = 4 << 20;
  auto event = std::make_shared<StreamEvent>();
  EXPECT_FALSE(event->recorded());
  EXPECT_TRUE(event->query()) << "an event never recorded counts as complete";
  event->synchronize();  // returns at once
  InstructionsBuilder builder(vm());
  vm::Stream& a = vm().stream(device(), vm::StreamRole::kUser, 0);
  vm::Stream& b = vm().stream(device(), vm::StreamRole::kUser, 1);
  auto blob = builder.allocate_blob(a, kBytes);
  builder.fill(blob, 0, kBytes, 0x3C3C3C3C, 4, &a);
  builder.record_event(a, event);
  builder.wait_event(b, event);
  std::vector<uint8_t> back(kBytes, 0);
  builder.copy_device_to_host(blob, 0, back.data(), kBytes, &b);
  vm().run(builder.take());
  EXPECT_EQ(back, std::vector<uint8_t>(kBytes, 0x3C));
  EXPECT_TRUE(event->recorded());
  event->synchronize();
  EXPECT_TRUE(event->query());
  release(blob);
}

TEST_P(OnDevice, TimingEventsMeasureTheWorkBetweenThem) {
  constexpr size_t kBytes = 16 << 20;
  auto start = std::make_shared<StreamEvent>(/*timing=*/true);
  auto end = std::make_shared<StreamEvent>(/*timing=*/true);
  auto plain = std::make_shared<StreamEvent>();
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 5);
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(device());
  auto blob = builder.allocate_blob(stream, kBytes);
  builder.record_event(stream, start);
  builder.copy_host_to_device(data.data(), blob, 0, kBytes);
  builder.record_event(stream, end);
  builder.record_event(stream, plain);
  builder.release(blob);
  vm().run(builder.take());
  EXPECT_GE(end->elapsed_ms_since(*start), 0.0);
  EXPECT_LE(start->elapsed_ms_since(*end), 0.0);
  EXPECT_THROW(end->elapsed_ms_since(*plain), InvalidArgument);
  EXPECT_THROW(end->elapsed_ms_since(StreamEvent(true)), InvalidArgument) << "never recorded";
}

TEST_P(OnDevice, EventBuildErrorsAddNothing) {
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(device());
  EXPECT_THROW(builder.record_event(stream, nullptr), InvalidArgument);
  EXPECT_THROW(builder.wait_event(stream, nullptr), InvalidArgument);
  EXPECT_THROW(builder.record_blob_use(stream, nullptr), InvalidArgument);
  auto other_device_blob =
      std::make_shared<BlobObject>(device() == kCpu ? kOpenCL0 : kCpu, size_t{4096});
  EXPECT_THROW(builder.record_blob_use(stream, other_device_blob), InvalidArgument);
  EXPECT_EQ(builder.size(), 0u);
}

// RecordBlobUse makes the blob's release wait for the stream that used it: the release on the
// producer stream is given a wait on the user stream (what recordStream promises).
TEST_P(OnDevice, RecordBlobUseMakesTheReleaseWaitForTheUsingStream) {
  InstructionsBuilder builder(vm());
  vm::Stream& producer = builder.stream(device());
  vm::Stream& user = vm().stream(device(), vm::StreamRole::kUser, 3);
  auto blob = builder.allocate_blob(producer, 1 << 20);
  builder.record_blob_use(user, blob);
  vm().run(builder.take());
  const vm::BlobRecords& records = *vm::find_records(*blob);
  ASSERT_EQ(records.reads.size(), 1u);
  EXPECT_EQ(records.reads[0].stream, user.id());
  release(blob);
  EXPECT_TRUE(records.reads.empty());
  EXPECT_EQ(records.last_write.stream, producer.id()) << "released on its producer";
}

TEST_F(VmTest, SetMemoryLimitChangesWhatTheAllocatorAccepts) {
  uint64_t limit = 1;
  DeviceStats out;
  InstructionsBuilder builder(vm());
  builder.query_stats(kOpenCL0, &out, &limit);
  vm().run(builder.take());
  EXPECT_EQ(limit, 0u);

  auto kept = allocate(kOpenCL0, 4096);
  builder.set_memory_limit(kOpenCL0, 1);
  builder.query_stats(kOpenCL0, &out, &limit);
  vm().run(builder.take());
  EXPECT_EQ(limit, 1u);
  const int64_t ooms = out.num_ooms;
  auto refused = builder.allocate_blob(builder.stream(kOpenCL0), 64 << 20);
  EXPECT_THROW(vm().run(builder.take()), OutOfMemoryError);
  EXPECT_EQ(stats(kOpenCL0).num_ooms, ooms + 1);
  EXPECT_EQ(read(kept, 0, 16).size(), 16u) << "the live block stays usable";
  EXPECT_EQ(stats(kCpu).num_ooms, 0) << "the limit is per device";

  builder.set_memory_limit(kOpenCL0, 0);
  vm().run(builder.take());
  auto accepted = allocate(kOpenCL0, 64 << 20);
  release(accepted);
  release(kept);
}

// ---------------------------------------------------------------------------------------------
// Barrier and AccessBlobByCallback.

TEST_P(OnDevice, BarrierRunsAfterEverythingBeforeItOnItsStream) {
  constexpr size_t kBytes = 4 << 20;
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 21);
  std::vector<uint8_t> back(kBytes, 0);
  std::vector<uint8_t> seen_by_barrier;
  std::vector<int> order;
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(device());
  auto blob = builder.allocate_blob(stream, kBytes);
  builder.barrier(stream, [&] { order.push_back(1); });
  builder.copy_host_to_device(data.data(), blob, 0, kBytes);
  builder.copy_device_to_host(blob, 0, back.data(), kBytes);  // non-blocking read
  builder.barrier(stream, [&] {
    order.push_back(2);
    seen_by_barrier = back;  // the read has landed: the barrier finished the queue first
  });
  builder.release(blob);
  builder.barrier(stream, [&] { order.push_back(3); });
  vm().run(builder.take());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(seen_by_barrier, data);
}

TEST_P(OnDevice, AccessForWriteThenForRead) {
  auto blob = allocate(device(), 4096);
  write(blob, 0, std::vector<uint8_t>(4096, 0));
  InstructionsBuilder builder(vm());
  size_t seen_bytes = 0;
  builder.access(blob, 512, 1024, HostAccess::kWrite, [&](void* host, size_t bytes) {
    seen_bytes = bytes;
    auto* p = static_cast<uint8_t*>(host);
    for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(i * 3);
  });
  std::vector<uint8_t> mapped_copy;
  builder.access(blob, 0, 4096, HostAccess::kRead, [&](void* host, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(host);
    mapped_copy.assign(p, p + bytes);
  });
  vm().run(builder.take());
  EXPECT_EQ(seen_bytes, 1024u);
  std::vector<uint8_t> expected(4096, 0);
  for (size_t i = 0; i < 1024; ++i) expected[512 + i] = static_cast<uint8_t>(i * 3);
  EXPECT_EQ(mapped_copy, expected);
  EXPECT_EQ(read(blob, 0, 4096), expected);
  release(blob);
}

TEST_P(OnDevice, ThrowingCallbacksFailTheirRunAndTheBlobStaysUsable) {
  auto blob = allocate(device(), 4096);
  const std::vector<uint8_t> data = pattern_bytes(4096, 5);
  write(blob, 0, data);
  InstructionsBuilder builder(vm());
  builder.access(blob, 0, 4096, HostAccess::kWrite, [](void* host, size_t) {
    static_cast<uint8_t*>(host)[0] = 0xFF;
    throw std::runtime_error("callback refused");
  });
  std::string message = message_of<std::runtime_error>([&] { vm().run(builder.take()); });
  EXPECT_CONTAINS(message, "callback refused");
  // The blob was unmapped despite the throw: it can be read and written again.
  std::vector<uint8_t> expected = data;
  expected[0] = 0xFF;
  EXPECT_EQ(read(blob, 0, 4096), expected);

  builder.barrier(builder.stream(device()), [] { throw InvalidArgument("barrier refused"); });
  message = message_of<InvalidArgument>([&] { vm().run(builder.take()); });
  EXPECT_CONTAINS(message, "barrier refused");
  EXPECT_CONTAINS(message, "Barrier");
  release(blob);
}

// ---------------------------------------------------------------------------------------------
// MapBlob and UnmapBlob (Note [Host mappings]).

TEST_P(OnDevice, MapWaitsForTheLastWriterAndTheHostWritesReachTheDevice) {
  constexpr size_t kBytes = 1 << 20;
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 7);
  InstructionsBuilder builder(vm());
  vm::Stream& stream = builder.stream(device());
  auto blob = builder.allocate_blob(stream, kBytes);
  builder.copy_host_to_device(data.data(), blob, 0, kBytes);  // non-blocking upload
  auto mapping = builder.map(blob, 4096, kBytes - 4096, HostAccess::kWrite);
  vm().run(builder.take());
  ASSERT_TRUE(mapping->mapped());
  ASSERT_NE(mapping->host(), nullptr);
  auto* host = static_cast<uint8_t*>(mapping->host());
  EXPECT_EQ(std::memcmp(host, data.data() + 4096, kBytes - 4096), 0)
      << "the map ran after the upload that wrote the blob";
  for (size_t i = 0; i < 4096; ++i) host[i] = static_cast<uint8_t>(255 - i % 251);
  std::vector<uint8_t> back(kBytes, 0);
  builder.unmap(mapping);
  builder.copy_device_to_host(blob, 0, back.data(), kBytes);  // after the unmap: sees the host
  vm().run(builder.take());
  EXPECT_FALSE(mapping->mapped());
  EXPECT_EQ(mapping->host(), nullptr);
  std::vector<uint8_t> expected = data;
  for (size_t i = 0; i < 4096; ++i) expected[4096 + i] = static_cast<uint8_t>(255 - i % 251);
  EXPECT_EQ(back, expected);
  release(blob);
}

TEST_P(OnDevice, ReadMappingsOfOneBlobMayOverlapAndEmptyRangesMapToNull) {
  auto blob = allocate(device(), 8192);
  const std::vector<uint8_t> data = pattern_bytes(8192, 3);
  write(blob, 0, data);
  InstructionsBuilder builder(vm());
  auto first = builder.map(blob, 0, 8192, HostAccess::kRead);
  auto second = builder.map(blob, 100, 200, HostAccess::kRead);
  auto empty = builder.map(blob, 8192, 0, HostAccess::kRead);
  vm().run(builder.take());
  EXPECT_EQ(std::memcmp(first->host(), data.data(), 8192), 0);
  EXPECT_EQ(std::memcmp(second->host(), data.data() + 100, 200), 0);
  EXPECT_TRUE(empty->mapped());
  EXPECT_EQ(empty->host(), nullptr);
  for (const auto& mapping : {first, second, empty}) builder.unmap(mapping);
  vm().run(builder.take());
  release(blob);
}

TEST_P(OnDevice, BadMappingsAreRefusedAndChangeNothing) {
  auto blob = allocate(device(), 4096);
  InstructionsBuilder builder(vm());
  EXPECT_THROW(builder.map(blob, 4000, 200, HostAccess::kRead), InvalidArgument);
  EXPECT_THROW(builder.map(nullptr, 0, 1, HostAccess::kRead), InvalidArgument);
  EXPECT_THROW(builder.unmap(nullptr), InvalidArgument);
  EXPECT_EQ(builder.size(), 0u) << "a refused call adds nothing to the list";
  auto mapping = builder.map(blob, 0, 64, HostAccess::kWrite);
  vm().run(builder.take());
  vm::InstructionList again;  // the same mapping mapped twice
  again.push_back(std::make_unique<MapBlob>(builder.stream(device()), mapping));
  const std::string message = message_of<InvalidArgument>([&] { vm().run(std::move(again)); });
  EXPECT_CONTAINS(message, "already mapped");
  EXPECT_CONTAINS(message, "MapBlob");
  EXPECT_TRUE(mapping->mapped()) << "the first mapping stays";
  builder.unmap(mapping);
  builder.unmap(mapping);  // a second unmap of an ended mapping is a no-op
  vm().run(builder.take());
  EXPECT_FALSE(mapping->mapped());
  release(blob);
}

// ---------------------------------------------------------------------------------------------
// Allocator control.

TEST_P(OnDevice, QueryResetAndEmptyCacheStatisticsAreExact) {
  auto a = allocate(device(), 4096);
  auto b = allocate(device(), 8192);
  release(b);
  DeviceStats s = stats(device());
  EXPECT_EQ(s.allocated_bytes.aggregate().current, 4096);
  EXPECT_EQ(s.allocated_bytes.aggregate().peak, 12288);
  EXPECT_EQ(s.allocated_bytes.aggregate().allocated, 12288);
  EXPECT_EQ(s.allocated_bytes.aggregate().freed, 8192);
  EXPECT_EQ(s.allocation.aggregate().allocated, 2);
  EXPECT_EQ(s.num_device_alloc, 1);

  InstructionsBuilder builder(vm());
  builder.reset_stats(device(), ResetKind::kPeak);
  vm().run(builder.take());
  s = stats(device());
  EXPECT_EQ(s.allocated_bytes.aggregate().peak, 4096);
  EXPECT_EQ(s.allocated_bytes.aggregate().allocated, 12288);  // untouched by a peak reset

  builder.reset_stats(device(), ResetKind::kAccumulated);
  vm().run(builder.take());
  s = stats(device());
  EXPECT_EQ(s.allocated_bytes.aggregate().current, 4096);
  EXPECT_EQ(s.allocated_bytes.aggregate().allocated, 0);
  EXPECT_EQ(s.allocated_bytes.aggregate().freed, 0);
  EXPECT_EQ(s.num_device_alloc, 0);

  release(a);
  builder.empty_cache(device());
  DeviceStats in_list;
  builder.query_stats(device(), &in_list);  // ordered after the empty_cache in the same list
  vm().run(builder.take());
  EXPECT_EQ(in_list.reserved_bytes.aggregate().current, 0);
  EXPECT_EQ(in_list.segment.aggregate().current, 0);
  EXPECT_EQ(in_list.num_device_free, 1);
  EXPECT_EQ(in_list.allocated_bytes.aggregate().freed, 4096);
}

TEST_F(VmTest, StatisticsAreKeptPerDevice) {
  auto on_cl = allocate(kOpenCL0, 4096);
  auto on_cpu = allocate(kCpu, 1024);
  EXPECT_EQ(stats(kOpenCL0).allocated_bytes.aggregate().current, 4096);
  EXPECT_EQ(stats(kCpu).allocated_bytes.aggregate().current, 1024);
  release(on_cl);
  EXPECT_EQ(stats(kOpenCL0).allocated_bytes.aggregate().current, 0);
  EXPECT_EQ(stats(kCpu).allocated_bytes.aggregate().current, 1024);
  release(on_cpu);
}

// ---------------------------------------------------------------------------------------------
// Copies across devices.

void check_cross_device_copy(VmTest& test, vm::VirtualMachine& vm, Device from, Device to) {
  SCOPED_TRACE(from.str() + " -> " + to.str());
  constexpr size_t kBytes = 3 << 20;
  auto src = test.allocate(from, kBytes);
  auto dst = test.allocate(to, kBytes);
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 31);
  test.write(src, 0, data);
  test.write(dst, 0, std::vector<uint8_t>(kBytes, 0));
  InstructionsBuilder builder(vm);
  builder.copy(src, 1000, dst, 2000, kBytes - 5000);
  vm.run(builder.take());
  const std::vector<uint8_t> got = test.read(dst, 0, kBytes);
  for (size_t i = 0; i < kBytes; ++i) {
    const uint8_t expected = i >= 2000 && i < kBytes - 3000 ? data[i - 2000 + 1000] : 0;
    ASSERT_EQ(got[i], expected) << "byte " << i;
  }
  // Produced and consumed in one list: the copy waits for the upload on the other device.
  std::vector<uint8_t> back(kBytes, 0);
  const std::vector<uint8_t> data2 = pattern_bytes(kBytes, 77);
  builder.copy_host_to_device(data2.data(), src, 0, kBytes);
  builder.copy(src, 0, dst, 0, kBytes);
  builder.copy_device_to_host(dst, 0, back.data(), kBytes);
  vm.run(builder.take());
  EXPECT_EQ(back, data2);
  test.release(src);
  test.release(dst);
}

TEST_F(VmTest, CopyBetweenOpenCLAndCpu) {
  check_cross_device_copy(*this, vm(), kOpenCL0, kCpu);
  check_cross_device_copy(*this, vm(), kCpu, kOpenCL0);
}

TEST_F(VmTest, CopyBetweenTwoOpenCLDevices) {
  if (testing::opencl_device_count() < 2) {
    GTEST_SKIP() << "needs two OpenCL devices (POCL_DEVICES=\"pthread pthread\")";
  }
  check_cross_device_copy(*this, vm(), kOpenCL0, kOpenCL1);
  check_cross_device_copy(*this, vm(), kOpenCL1, kOpenCL0);
}

TEST_F(VmTest, CrossDeviceCopyLargerThanTheStagingChunk) {
  // Several staging chunks, the last one partial, at unaligned offsets.
  constexpr size_t kBytes = CopyBlob::kStagingChunkBytes + 4096 + 3;
  auto src = allocate(kCpu, kBytes + 16);
  auto dst = allocate(kOpenCL0, kBytes + 16);
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 41);
  write(src, 5, data);
  InstructionsBuilder builder(vm());
  builder.copy(src, 5, dst, 11, kBytes);
  vm().run(builder.take());
  EXPECT_EQ(read(dst, 11, kBytes), data);
  release(src);
  release(dst);
}

TEST_F(VmTest, CrossDeviceCopyRunsOnTheDestinationStream) {
  // The blobs are only built, never run: a copy's checks need their sizes and devices only.
  InstructionsBuilder builder(vm());
  auto src = builder.allocate_blob(builder.stream(kOpenCL0), 4096);
  auto dst = builder.allocate_blob(builder.stream(kCpu), 4096);
  vm::InstructionList never_run = builder.take();
  InstructionsBuilder check(vm());
  check.copy(src, 0, dst, 0, 4096);
  vm::InstructionList list = check.take();
  ASSERT_EQ(list.size(), 1u);
  const auto& copy = static_cast<const CopyBlob&>(list.items().front());
  EXPECT_EQ(copy.kind(), CopyBlob::Kind::kCrossDevice);
  EXPECT_EQ(copy.stream().device(), kCpu);
  EXPECT_THROW(check.copy(src, 0, dst, 0, 4096, &vm().stream(kOpenCL0)), InvalidArgument);
}

}  // namespace
}  // namespace oclvm
