// tests/storage/tracking_allocator_test.cc — TrackingAllocator over the system and buddy allocators:
// records appear and disappear with allocations, carry the stream tag, make a readable leak report,
// and stay unchanged when the inner allocator rejects a call.
#include "oclvm/storage/tracking_allocator.h"

#include <gtest/gtest.h>

#include <string>

#include "oclvm/storage/buddy_allocator.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/system_allocator.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

size_t count_of(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

class TrackingAllocatorTest : public testing::LeakCheckedTest {
 protected:
  static std::unique_ptr<TrackingAllocator> tracking_system(uint64_t limit = 0) {
    return std::make_unique<TrackingAllocator>(
        std::make_unique<SystemAllocator>(opencl_backend(0), limit));
  }
};

TEST_F(TrackingAllocatorTest, NameAndForwardingMatchTheInnerAllocator) {
  auto allocator = tracking_system(1 << 20);
  EXPECT_EQ(allocator->name(), "tracking(system)");
  EXPECT_EQ(&allocator->backend(), &opencl_backend(0));
  EXPECT_EQ(allocator->device(), opencl_backend(0).device());
  EXPECT_EQ(allocator->memory_limit(), 1u << 20);
  EXPECT_EQ(allocator->inner().name(), "system");
  Allocation a = allocator->allocate(1000);
  EXPECT_EQ(allocator->allocated_size(a), 1024u);
  EXPECT_TRUE(same_stats(allocator->stats(), allocator->inner().stats()));
  EXPECT_EQ(allocator->stats().allocated_bytes.aggregate().current, 1024);
  allocator->reset_accumulated_stats();
  EXPECT_EQ(allocator->inner().stats().allocated_bytes.aggregate().allocated, 0);
  allocator->deallocate(a);
  allocator->check_invariants();
  testing::expect_nothing_live(*allocator);
  EXPECT_THROW(TrackingAllocator(nullptr), InvalidArgument);
}

TEST_F(TrackingAllocatorTest, RecordsAppearAndDisappearWithAllocations) {
  auto allocator = tracking_system();
  EXPECT_FALSE(allocator->allocate(0));
  EXPECT_EQ(allocator->live_count(), 0u);  // an empty handle has no record

  Allocation a = allocator->allocate(1);
  allocator->set_stream(7);
  EXPECT_EQ(allocator->stream(), 7);
  Allocation b = allocator->allocate(3000);
  Allocation c = allocator->allocate(70000);
  allocator->check_invariants();
  ASSERT_EQ(allocator->live_count(), 3u);
  std::vector<AllocationRecord> records = allocator->live_records();
  ASSERT_EQ(records.size(), 3u);
  const Allocation* handles[] = {&a, &b, &c};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(records[i].id, handles[i]->id);
    EXPECT_EQ(records[i].ptr, handles[i]->ptr);
    EXPECT_EQ(records[i].requested, handles[i]->size);
    EXPECT_EQ(records[i].allocated, allocator->allocated_size(*handles[i]));
  }
  EXPECT_LT(records[0].id, records[1].id);
  EXPECT_LT(records[1].id, records[2].id);
  EXPECT_EQ(records[0].stream, 0);
  EXPECT_EQ(records[1].stream, 7);
  EXPECT_EQ(records[2].stream, 7);
  EXPECT_LE(records[0].when, records[1].when);
  EXPECT_LE(records[1].when, records[2].when);

  allocator->deallocate(b);
  records = allocator->live_records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].id, a.id);
  EXPECT_EQ(records[1].id, c.id);
  allocator->deallocate(a);
  allocator->deallocate(c);
  EXPECT_EQ(allocator->live_count(), 0u);
  EXPECT_TRUE(allocator->live_records().empty());
  allocator->check_invariants();
  testing::expect_nothing_live(*allocator);
}

TEST_F(TrackingAllocatorTest, LeakReportNamesEveryLiveAllocationAndTheTotal) {
  auto allocator = tracking_system();
  std::string report = allocator->leak_report();
  EXPECT_NE(report.find("total: 0 live allocations, 0 B requested, 0 B allocated"),
            std::string::npos)
      << report;

  Allocation a = allocator->allocate(100);
  allocator->set_stream(3);
  Allocation b = allocator->allocate(2 << 20);
  report = allocator->leak_report();
  EXPECT_NE(report.find("tracking(system)"), std::string::npos) << report;
  EXPECT_NE(report.find("opencl:0"), std::string::npos) << report;
  EXPECT_NE(report.find("#" + std::to_string(a.id) + " at "), std::string::npos) << report;
  EXPECT_NE(report.find("#" + std::to_string(b.id) + " at "), std::string::npos) << report;
  EXPECT_NE(report.find("100 B requested, 512 B allocated, stream 0"), std::string::npos) << report;
  EXPECT_NE(report.find("2.00 MiB requested, 2.00 MiB allocated, stream 3"), std::string::npos)
      << report;
  EXPECT_NE(report.find("total: 2 live allocations"), std::string::npos) << report;
  EXPECT_EQ(count_of(report, "\n  #"), 2u) << report;  // one line per live allocation

  allocator->deallocate(b);
  report = allocator->leak_report();
  EXPECT_EQ(report.find("#" + std::to_string(b.id) + " at "), std::string::npos) << report;
  EXPECT_NE(report.find("total: 1 live allocation, 100 B requested, 512 B allocated"),
            std::string::npos)
      << report;
  allocator->deallocate(a);
  testing::expect_nothing_live(*allocator);
}

TEST_F(TrackingAllocatorTest, FailedCallsLeaveRecordsAndStatisticsUnchanged) {
  auto allocator = tracking_system(4096);
  TrackingAllocator other(std::make_unique<SystemAllocator>(opencl_backend(0)));
  Allocation a = allocator->allocate(2048);
  Allocation gone = allocator->allocate(100);
  allocator->deallocate(gone);
  Allocation foreign = other.allocate(100);
  const std::vector<AllocationRecord> records = allocator->live_records();
  auto expect_unchanged = [&](const char* what) {
    const std::vector<AllocationRecord> now = allocator->live_records();
    ASSERT_EQ(now.size(), records.size()) << what;
    for (size_t i = 0; i < now.size(); ++i) EXPECT_EQ(now[i].id, records[i].id) << what;
    allocator->check_invariants();
  };

  DeviceStats before = allocator->stats();
  EXPECT_THROW(allocator->allocate(SIZE_MAX), InvalidArgument);
  EXPECT_TRUE(same_stats(before, allocator->stats()));
  expect_unchanged("SIZE_MAX");
  EXPECT_THROW(allocator->allocate(4096), OutOfMemoryError);  // over the limit
  EXPECT_EQ(allocator->stats().num_ooms, 1);
  expect_unchanged("out of memory");

  before = allocator->stats();
  EXPECT_THROW(allocator->deallocate(gone), InvalidArgument);
  expect_unchanged("double free");
  EXPECT_THROW(allocator->deallocate(foreign), InvalidArgument);
  expect_unchanged("another allocator's handle");
  Allocation forged = a;
  forged.size = 2047;  // the record matches by id and address; the inner allocator rejects the rest
  EXPECT_THROW(allocator->deallocate(forged), InvalidArgument);
  expect_unchanged("forged size");
  EXPECT_TRUE(same_stats(before, allocator->stats())) << allocator->stats().to_string();

  // A block made through inner() directly has no record: the wrapper refuses it.
  Allocation untracked = allocator->inner().allocate(10);
  EXPECT_THROW(allocator->deallocate(untracked), InvalidArgument);
  allocator->inner().deallocate(untracked);
  expect_unchanged("untracked block");

  allocator->deallocate(a);
  other.deallocate(foreign);
  EXPECT_EQ(allocator->live_count(), 0u);
  testing::expect_nothing_live(*allocator);
  testing::expect_nothing_live(other);
}

TEST_F(TrackingAllocatorTest, WrapsTheBuddyAllocatorAndForwardsEmptyCache) {
  BuddyAllocatorOptions options;
  options.arena_bytes = 4096;
  TrackingAllocator allocator(std::make_unique<BuddyAllocator>(opencl_backend(0), options));
  EXPECT_EQ(allocator.name(), "tracking(buddy)");
  Allocation a = allocator.allocate(700);
  EXPECT_EQ(allocator.live_records().at(0).allocated, 1024u);
  allocator.deallocate(a);
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, 4096);  // cached by the buddy
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().reserved_bytes.aggregate().current, 0);
  testing::expect_nothing_live(allocator);
}

}  // namespace
}  // namespace oclvm
