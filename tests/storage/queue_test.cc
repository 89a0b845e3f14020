// tests/storage/queue_test.cc — DeviceQueue on real devices: PoCL (opencl:0) and the host (cpu).
//
// Every test runs on both devices. Each makes its own segments straight from the backend (no
// allocator) and its own queues, and gives every segment back; LeakCheckedTest asserts that the
// backends' live segment counts are back where they started.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/queue.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

// A backend segment for the length of a test.
class ScopedSegment {
 public:
  ScopedSegment(MemoryBackend& backend, size_t bytes)
      : backend_(backend), segment_(backend.create_segment(bytes)) {}
  ~ScopedSegment() { backend_.release_segment(segment_); }
  ScopedSegment(const ScopedSegment&) = delete;
  ScopedSegment& operator=(const ScopedSegment&) = delete;
  const Segment& operator*() const { return *segment_; }

 private:
  MemoryBackend& backend_;
  Segment* segment_;
};

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start = 1) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(start + i * 7);
  return bytes;
}

class QueueTest : public testing::LeakCheckedTest, public ::testing::WithParamInterface<Device> {
 protected:
  MemoryBackend& backend() { return DeviceManager::instance().backend(GetParam()); }

  // Reads the whole segment back with a blocking read on a fresh queue.
  std::vector<uint8_t> contents(const Segment& segment) {
    std::vector<uint8_t> out(segment.size);
    backend().create_queue()->enqueue_read(segment, 0, out.data(), out.size(), true);
    return out;
  }
};

INSTANTIATE_TEST_SUITE_P(Devices, QueueTest,
                         ::testing::Values(Device{DeviceType::kOpenCL, 0},
                                           Device{DeviceType::kCpu, 0}),
                         [](const auto& info) {
                           return info.param.type == DeviceType::kCpu ? std::string("cpu")
                                                                      : std::string("opencl0");
                         });

TEST_P(QueueTest, QueueReportsItsDevice) {
  auto queue = backend().create_queue();
  EXPECT_EQ(queue->device(), GetParam());
  EXPECT_EQ(&queue->backend(), &backend());
}

TEST_P(QueueTest, NonBlockingWriteThenFinishReadsBack) {
  ScopedSegment segment(backend(), 64 << 10);
  auto queue = backend().create_queue();
  const std::vector<uint8_t> data = iota_bytes(64 << 10);
  queue->enqueue_write(*segment, 0, data.data(), data.size(), /*blocking=*/false);
  queue->finish();
  std::vector<uint8_t> back(data.size(), 0);
  queue->enqueue_read(*segment, 0, back.data(), back.size(), /*blocking=*/false);
  queue->finish();
  EXPECT_EQ(back, data);
}

TEST_P(QueueTest, WriteAndReadAtOffsets) {
  ScopedSegment segment(backend(), 4096);
  auto queue = backend().create_queue();
  const std::vector<uint8_t> zeros(4096, 0);
  queue->enqueue_write(*segment, 0, zeros.data(), zeros.size(), true);
  const std::vector<uint8_t> data = iota_bytes(100, 3);
  queue->enqueue_write(*segment, 1000, data.data(), data.size(), true);
  std::vector<uint8_t> back(10);
  queue->enqueue_read(*segment, 1090, back.data(), back.size(), true);
  EXPECT_EQ(back, std::vector<uint8_t>(data.begin() + 90, data.end()));
  const std::vector<uint8_t> all = contents(*segment);
  EXPECT_EQ(all[999], 0);
  EXPECT_EQ(all[1000], data[0]);
  EXPECT_EQ(all[1099], data[99]);
  EXPECT_EQ(all[1100], 0);
}

TEST_P(QueueTest, FillWithEveryPatternSize) {
  for (size_t pattern_size : {1, 2, 4, 8, 16}) {
    SCOPED_TRACE("pattern of " + std::to_string(pattern_size) + " bytes");
    ScopedSegment segment(backend(), 1024);
    auto queue = backend().create_queue();
    const std::vector<uint8_t> background(1024, 0xEE);
    queue->enqueue_write(*segment, 0, background.data(), background.size(), true);
    const std::vector<uint8_t> pattern = iota_bytes(pattern_size, 0x10);
    const size_t offset = 2 * pattern_size;
    const size_t n = 5 * pattern_size;
    queue->enqueue_fill(*segment, offset, pattern.data(), pattern_size, n);
    queue->finish();
    const std::vector<uint8_t> all = contents(*segment);
    for (size_t i = 0; i < all.size(); ++i) {
      const uint8_t expected =
          i >= offset && i < offset + n ? pattern[(i - offset) % pattern_size] : 0xEE;
      ASSERT_EQ(all[i], expected) << "byte " << i;
    }
  }
}

TEST_P(QueueTest, FillRejectsBadPatternsAndChangesNothing) {
  ScopedSegment segment(backend(), 256);
  auto queue = backend().create_queue();
  const std::vector<uint8_t> background(256, 0x5A);
  queue->enqueue_write(*segment, 0, background.data(), background.size(), true);
  const uint64_t pattern[32] = {};
  EXPECT_THROW(queue->enqueue_fill(*segment, 0, pattern, 3, 96), InvalidArgument);
  EXPECT_THROW(queue->enqueue_fill(*segment, 0, pattern, 0, 96), InvalidArgument);
  EXPECT_THROW(queue->enqueue_fill(*segment, 0, pattern, 256, 256), InvalidArgument);
  EXPECT_THROW(queue->enqueue_fill(*segment, 2, pattern, 4, 8), InvalidArgument);   // offset
  EXPECT_THROW(queue->enqueue_fill(*segment, 0, pattern, 4, 10), InvalidArgument);  // size
  EXPECT_THROW(queue->enqueue_fill(*segment, 128, pattern, 8, 136), InvalidArgument);  // range
  queue->finish();
  EXPECT_EQ(contents(*segment), background);
  try {
    queue->enqueue_fill(*segment, 0, pattern, 3, 96);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "Expected a fill pattern");
  }
}

TEST_P(QueueTest, CopyBetweenSegmentsAndWithinOne) {
  ScopedSegment a(backend(), 4096);
  ScopedSegment b(backend(), 4096);
  auto queue = backend().create_queue();
  const std::vector<uint8_t> data = iota_bytes(4096, 9);
  const std::vector<uint8_t> zeros(4096, 0);
  queue->enqueue_write(*a, 0, data.data(), data.size(), false);
  queue->enqueue_write(*b, 0, zeros.data(), zeros.size(), false);
  queue->enqueue_copy(*a, 512, *b, 1024, 1000);      // across segments
  queue->enqueue_copy(*a, 0, *a, 2048, 1024);        // within one, disjoint
  queue->finish();
  const std::vector<uint8_t> got_b = contents(*b);
  for (size_t i = 0; i < 4096; ++i) {
    const uint8_t expected = i >= 1024 && i < 2024 ? data[i - 1024 + 512] : 0;
    ASSERT_EQ(got_b[i], expected) << "byte " << i;
  }
  const std::vector<uint8_t> got_a = contents(*a);
  for (size_t i = 0; i < 4096; ++i) {
    const uint8_t expected = i >= 2048 && i < 3072 ? data[i - 2048] : data[i];
    ASSERT_EQ(got_a[i], expected) << "byte " << i;
  }
}

TEST_P(QueueTest, OverlappingCopyInOneSegmentIsRejected) {
  ScopedSegment a(backend(), 4096);
  auto queue = backend().create_queue();
  const std::vector<uint8_t> data = iota_bytes(4096, 1);
  queue->enqueue_write(*a, 0, data.data(), data.size(), true);
  EXPECT_THROW(queue->enqueue_copy(*a, 0, *a, 100, 200), InvalidArgument);
  EXPECT_THROW(queue->enqueue_copy(*a, 100, *a, 0, 200), InvalidArgument);
  EXPECT_THROW(queue->enqueue_copy(*a, 0, *a, 0, 1), InvalidArgument);
  // Adjacent ranges do not overlap.
  queue->enqueue_copy(*a, 0, *a, 200, 200);
  queue->finish();
  std::vector<uint8_t> expected = data;
  std::memcpy(expected.data() + 200, data.data(), 200);
  EXPECT_EQ(contents(*a), expected);
}

TEST_P(QueueTest, MapForReadAndForWrite) {
  ScopedSegment segment(backend(), 8192);
  auto queue = backend().create_queue();
  const std::vector<uint8_t> data = iota_bytes(8192, 4);
  queue->enqueue_write(*segment, 0, data.data(), data.size(), false);
  // A map comes after every earlier command of its queue.
  void* host = queue->map(*segment, 4096, 1024, /*for_write=*/false);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(std::memcmp(host, data.data() + 4096, 1024), 0);
  queue->unmap(*segment, host);

  host = queue->map(*segment, 100, 50, /*for_write=*/true);
  ASSERT_NE(host, nullptr);
  std::memset(host, 0xAB, 50);
  queue->unmap(*segment, host);
  queue->finish();
  std::vector<uint8_t> expected = data;
  std::memset(expected.data() + 100, 0xAB, 50);
  EXPECT_EQ(contents(*segment), expected);

  EXPECT_EQ(queue->map(*segment, 0, 0, false), nullptr);  // n == 0 maps nothing
  queue->unmap(*segment, nullptr);                         // and unmapping nothing is a no-op
  EXPECT_THROW(queue->map(*segment, 8000, 200, false), InvalidArgument);
}

TEST_P(QueueTest, MarkerOrdersAWriteOnOneQueueBeforeAReadOnAnother) {
  constexpr size_t kBytes = 4 << 20;  // large enough that an unordered read would see old bytes
  ScopedSegment segment(backend(), kBytes);
  auto a = backend().create_queue();
  auto b = backend().create_queue();
  const std::vector<uint8_t> zeros(kBytes, 0);
  a->enqueue_write(*segment, 0, zeros.data(), zeros.size(), true);
  const std::vector<uint8_t> data = iota_bytes(kBytes, 77);
  a->enqueue_write(*segment, 0, data.data(), data.size(), /*blocking=*/false);
  std::shared_ptr<QueueMarker> marker = a->record_marker();
  ASSERT_NE(marker, nullptr);
  EXPECT_EQ(marker->device(), GetParam());
  b->wait_marker(marker);
  std::vector<uint8_t> back(kBytes, 0);
  b->enqueue_read(*segment, 0, back.data(), back.size(), /*blocking=*/true);
  EXPECT_EQ(back, data);
  marker->wait();  // complete by now; waiting again is harmless
  EXPECT_TRUE(marker->complete());
  a->finish();
}

TEST_P(QueueTest, MarkerIsCompleteOnceWaitedForAndAfterFinish) {
  ScopedSegment segment(backend(), 1 << 20);
  auto queue = backend().create_queue();
  const std::vector<uint8_t> data = iota_bytes(1 << 20, 3);
  queue->enqueue_write(*segment, 0, data.data(), data.size(), /*blocking=*/false);
  std::shared_ptr<QueueMarker> marker = queue->record_marker();
  queue->finish();
  EXPECT_TRUE(marker->complete());
  std::shared_ptr<QueueMarker> idle = queue->record_marker();
  idle->wait();
  EXPECT_TRUE(idle->complete());
}

TEST_P(QueueTest, FinishAfterAWaitCoversTheAwaitedQueue) {
  // B has no commands of its own; after waiting for A's marker, B.finish() must still wait for
  // A's write (the wait counts as a command of B: Note [Cheap finish] in storage/queue.h).
  constexpr size_t kBytes = 4 << 20;
  ScopedSegment segment(backend(), kBytes);
  auto a = backend().create_queue();
  auto b = backend().create_queue();
  b->finish();  // an idle queue finishes at once
  const std::vector<uint8_t> data = iota_bytes(kBytes, 61);
  a->enqueue_write(*segment, 0, data.data(), data.size(), /*blocking=*/false);
  b->wait_marker(a->record_marker());
  b->finish();
  std::vector<uint8_t> back(kBytes, 0);
  backend().read(*segment, 0, back.data(), back.size());  // the backend's own queue
  EXPECT_EQ(back, data);
  a->finish();
  a->finish();  // twice is fine
}

TEST_P(QueueTest, MarkerOfAnotherDeviceIsWaitedOnTheHost) {
  const Device other = GetParam().type == DeviceType::kCpu ? Device{DeviceType::kOpenCL, 0}
                                                           : Device{DeviceType::kCpu, 0};
  MemoryBackend& other_backend = DeviceManager::instance().backend(other);
  ScopedSegment source(other_backend, 1 << 20);
  auto other_queue = other_backend.create_queue();
  const std::vector<uint8_t> data = iota_bytes(1 << 20, 5);
  other_queue->enqueue_write(*source, 0, data.data(), data.size(), false);
  auto queue = backend().create_queue();
  queue->wait_marker(other_queue->record_marker());  // returns once the write has completed
  std::vector<uint8_t> back(data.size());
  // Read on the source's own device, with nothing else ordering it after the write.
  std::memset(back.data(), 0, back.size());
  other_backend.read(*source, 0, back.data(), back.size());
  EXPECT_EQ(back, data);
  other_queue->finish();
}

TEST_P(QueueTest, RangeErrorsEnqueueNothing) {
  ScopedSegment segment(backend(), 1024);
  auto queue = backend().create_queue();
  const std::vector<uint8_t> background(1024, 0x11);
  queue->enqueue_write(*segment, 0, background.data(), background.size(), true);
  std::vector<uint8_t> buffer(2048, 0x22);
  EXPECT_THROW(queue->enqueue_write(*segment, 1000, buffer.data(), 25, true), InvalidArgument);
  EXPECT_THROW(queue->enqueue_write(*segment, 1025, buffer.data(), 0, true), InvalidArgument);
  EXPECT_THROW(queue->enqueue_write(*segment, SIZE_MAX, buffer.data(), 2, true), InvalidArgument);
  EXPECT_THROW(queue->enqueue_read(*segment, 0, buffer.data(), 1025, true), InvalidArgument);
  EXPECT_THROW(queue->enqueue_read(*segment, 8, buffer.data(), SIZE_MAX, true), InvalidArgument);
  EXPECT_THROW(queue->enqueue_copy(*segment, 0, *segment, 600, 500), InvalidArgument);
  EXPECT_THROW(queue->enqueue_copy(*segment, 1000, *segment, 0, 100), InvalidArgument);
  try {
    queue->enqueue_write(*segment, 1000, buffer.data(), 25, true);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_CONTAINS(e.what(), "Expected");
  }
  // n == 0 inside the segment (up to its end) is a no-op.
  queue->enqueue_write(*segment, 1024, buffer.data(), 0, true);
  queue->enqueue_read(*segment, 0, buffer.data(), 0, true);
  queue->finish();
  EXPECT_EQ(contents(*segment), background);
  EXPECT_EQ(buffer, std::vector<uint8_t>(2048, 0x22));
}

TEST_P(QueueTest, SegmentOfAnotherBackendIsRejected) {
  const Device other = GetParam().type == DeviceType::kCpu ? Device{DeviceType::kOpenCL, 0}
                                                           : Device{DeviceType::kCpu, 0};
  ScopedSegment foreign(DeviceManager::instance().backend(other), 1024);
  ScopedSegment own(backend(), 1024);
  auto queue = backend().create_queue();
  std::vector<uint8_t> buffer(16, 0);
  EXPECT_THROW(queue->enqueue_write(*foreign, 0, buffer.data(), 16, true), InvalidArgument);
  EXPECT_THROW(queue->enqueue_read(*foreign, 0, buffer.data(), 16, true), InvalidArgument);
  EXPECT_THROW(queue->enqueue_copy(*foreign, 0, *own, 0, 16), InvalidArgument);
  EXPECT_THROW(queue->enqueue_copy(*own, 0, *foreign, 0, 16), InvalidArgument);
  EXPECT_THROW(queue->map(*foreign, 0, 16, false), InvalidArgument);
  const uint8_t pattern = 1;
  EXPECT_THROW(queue->enqueue_fill(*foreign, 0, &pattern, 1, 16), InvalidArgument);
}

}  // namespace
}  // namespace oclvm
