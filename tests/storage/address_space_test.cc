// tests/storage/address_space_test.cc — AddressSpace (storage/address_space.h) through real
// segments.
//
// Segments are created and released through real backends (PoCL's opencl:N and the host device),
// which reserve and unreserve their ranges. Checks: resolve of the first, an interior, the last and
// the one-past-the-end byte; ranges of live segments never overlap (across devices too); a released
// range resolves to nothing; live_ranges returns to its starting value. A host dereference of a
// device address is deliberately not tested: it would trap (PROT_NONE).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/backend.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using testing::host_backend;
using testing::opencl_backend;
using testing::opencl_device_count;

constexpr size_t kChunk = AddressSpace::kChunk;

class AddressSpaceTest : public testing::LeakCheckedTest {
 protected:
  AddressSpace& space() { return AddressSpace::instance(); }

  // resolve(address) must name `segment` at `offset`.
  void expect_resolves(uintptr_t address, const Segment* segment, size_t offset) {
    const ResolvedAddress r = space().resolve(address);
    EXPECT_EQ(r.segment, segment) << "address " << address;
    EXPECT_EQ(r.offset, offset) << "address " << address;
  }

  // resolve(address) must not name `segment` (it may name a neighbour reserved right next to it).
  void expect_outside(uintptr_t address, const Segment* segment) {
    const ResolvedAddress r = space().resolve(address);
    EXPECT_NE(r.segment, segment) << "address " << address;
    if (r.segment != nullptr) {
      EXPECT_GE(address, r.segment->address);
      EXPECT_LT(address, r.segment->address + r.segment->size);
    }
  }
};

TEST_F(AddressSpaceTest, ResolvesEveryByteOfASegmentAndNothingPastIt) {
  MemoryBackend& backend = opencl_backend(0);
  // Smaller than a chunk, exactly a chunk, and one byte into a second chunk.
  for (size_t size : {size_t{1000}, kChunk, kChunk + 1, 3 * kChunk - 17}) {
    SCOPED_TRACE(size);
    Segment* s = backend.create_segment(size);
    ASSERT_NE(s->address, 0u);
    EXPECT_EQ(s->address % kChunk, 0u);
    expect_resolves(s->address, s, 0);
    expect_resolves(s->address + size / 2, s, size / 2);
    expect_resolves(s->address + size - 1, s, size - 1);
    expect_outside(s->address + size, s);
    expect_outside(s->address - 1, s);
    backend.release_segment(s);
  }
}

TEST_F(AddressSpaceTest, LiveRangesCountReservationsAndReturnToStart) {
  MemoryBackend& backend = opencl_backend(0);
  const size_t start = space().live_ranges();
  Segment* a = backend.create_segment(512);
  EXPECT_EQ(space().live_ranges(), start + 1);
  Segment* b = backend.create_segment(5 * kChunk);
  EXPECT_EQ(space().live_ranges(), start + 2);
  Segment* c = host_backend().create_segment(4096);
  EXPECT_EQ(space().live_ranges(), start + 3);
  backend.release_segment(b);
  EXPECT_EQ(space().live_ranges(), start + 2);
  host_backend().release_segment(c);
  backend.release_segment(a);
  EXPECT_EQ(space().live_ranges(), start);
}

TEST_F(AddressSpaceTest, LiveSegmentsNeverOverlapAcrossDevices) {
  std::vector<MemoryBackend*> backends = {&host_backend()};
  for (size_t i = 0; i < opencl_device_count(); ++i) {
    backends.push_back(&opencl_backend(static_cast<int>(i)));
  }
  const std::vector<size_t> sizes = {1, 512, kChunk - 1, kChunk, kChunk + 1, 4 * kChunk + 100};
  std::vector<Segment*> segments;
  for (MemoryBackend* backend : backends) {
    for (size_t size : sizes) segments.push_back(backend->create_segment(size));
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment* x = segments[i];
    expect_resolves(x->address, x, 0);
    expect_resolves(x->address + x->size - 1, x, x->size - 1);
    for (size_t j = i + 1; j < segments.size(); ++j) {
      const Segment* y = segments[j];
      const bool disjoint =
          x->address + x->size <= y->address || y->address + y->size <= x->address;
      EXPECT_TRUE(disjoint) << "segments " << x->id << " and " << y->id << " overlap";
      // Chunk-granular ranges: two segments never share a chunk either.
      EXPECT_NE(x->address / kChunk, y->address / kChunk);
    }
  }
  for (Segment* s : segments) s->backend->release_segment(s);
}

TEST_F(AddressSpaceTest, ReleasedRangeResolvesToNothing) {
  MemoryBackend& backend = opencl_backend(0);
  Segment* keep = backend.create_segment(kChunk);
  Segment* gone = backend.create_segment(2 * kChunk + 5);
  const uintptr_t first = gone->address;
  const uintptr_t last = gone->address + gone->size - 1;
  const uintptr_t middle = gone->address + kChunk + 3;
  backend.release_segment(gone);
  // Nothing has been reserved since, so nobody owns the old range.
  EXPECT_EQ(space().resolve(first).segment, nullptr);
  EXPECT_EQ(space().resolve(middle).segment, nullptr);
  EXPECT_EQ(space().resolve(last).segment, nullptr);
  // The neighbour is untouched.
  expect_resolves(keep->address + 17, keep, 17);
  const uintptr_t kept = keep->address;
  backend.release_segment(keep);
  EXPECT_EQ(space().resolve(kept).segment, nullptr);
  EXPECT_EQ(space().resolve(kept + 17).segment, nullptr);
}

TEST_F(AddressSpaceTest, AddressesOutsideAnyReservation) {
  EXPECT_EQ(space().resolve(0).segment, nullptr);
  EXPECT_EQ(space().resolve(0).offset, 0u);
  EXPECT_EQ(space().resolve(UINTPTR_MAX).segment, nullptr);
}

// A released range is kept reserved and handed to the next segment of the same reserved length,
// so a segment per allocation costs no mmap/munmap; the reused range resolves to the new segment only.
TEST_F(AddressSpaceTest, ReleasedRangesAreReusedForTheSameLength) {
  MemoryBackend& backend = opencl_backend();
  AddressSpace& space = AddressSpace::instance();
  Segment* first = backend.create_segment(3000);
  const uintptr_t address = first->address;
  const size_t cached_before = space.cached_bytes();
  backend.release_segment(first);
  EXPECT_EQ(space.cached_bytes(), cached_before + AddressSpace::kChunk);
  Segment* second = backend.create_segment(AddressSpace::kChunk);  // same reserved length
  EXPECT_EQ(second->address, address);
  EXPECT_EQ(space.cached_bytes(), cached_before);
  EXPECT_EQ(space.resolve(address + 100).segment, second);
  backend.release_segment(second);
}

}  // namespace
}  // namespace oclvm
