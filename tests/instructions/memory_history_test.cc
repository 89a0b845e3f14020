// tests/instructions/memory_history_test.cc — the memory history and snapshots through the
// Runtime (storage/memory_history.h, instructions/memory_snapshot.h), on a real device, under
// each allocator.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "oclvm/oclvm.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

constexpr Device kOpenCL0{DeviceType::kOpenCL, 0};

Options with_allocator(const std::string& name) {
  Options options;
  options.allocator = name;
  return options;
}

HistoryOptions recording(HistoryMode mode = HistoryMode::kAll,
                         ContextMode context = ContextMode::kAll) {
  HistoryOptions options;
  options.mode = mode;
  options.context = context;
  return options;
}

std::vector<MemoryAction> actions_of(const DeviceMemorySnapshot& snapshot) {
  std::vector<MemoryAction> actions;
  for (const MemoryEvent& event : snapshot.events) actions.push_back(event.action);
  return actions;
}

DeviceMemorySnapshot snapshot_of(Runtime& runtime, Device device = kOpenCL0) {
  MemorySnapshot snapshot = runtime.memory_snapshot({device});
  EXPECT_EQ(snapshot.devices.size(), 1u);
  return std::move(snapshot.devices.at(0));
}

// A context naming one frame, so a test can tell whose context it sees.
std::shared_ptr<const MemoryContext> frame_named(const std::string& name) {
  auto context = std::make_shared<MemoryContext>();
  context->frames.push_back({"model.py", 7, name});
  return context;
}

// The blocks of every segment tile it, in address order; the live blocks' bytes add up to the
// allocator's allocated bytes.
void expect_consistent(const DeviceMemorySnapshot& snapshot, const DeviceStats& stats) {
  int64_t allocated = 0;
  for (const SegmentSnapshot& segment : snapshot.segments) {
    uintptr_t at = segment.address;
    for (const BlockSnapshot& block : segment.blocks) {
      EXPECT_EQ(block.address, at) << "blocks tile their segment";
      at += block.size;
      if (block.allocated) allocated += static_cast<int64_t>(block.size);
    }
    EXPECT_EQ(at, segment.address + segment.size);
  }
  EXPECT_EQ(allocated, stats.allocated_bytes.aggregate().current);
}

class MemoryHistoryTest : public ::testing::TestWithParam<std::string> {
 protected:
  Runtime runtime_{with_allocator(GetParam())};
};

TEST_P(MemoryHistoryTest, OffByDefaultKeepsNoEventsButShowsSegments) {
  auto storage = runtime_.create_storage(kOpenCL0, 1000);
  const DeviceMemorySnapshot snapshot = snapshot_of(runtime_);
  EXPECT_TRUE(snapshot.events.empty());
  ASSERT_FALSE(snapshot.segments.empty());
  expect_consistent(snapshot, runtime_.stats(kOpenCL0));
  bool found = false;
  for (const SegmentSnapshot& segment : snapshot.segments) {
    for (const BlockSnapshot& block : segment.blocks) {
      if (!block.allocated) continue;
      EXPECT_EQ(block.requested, 1000u);
      EXPECT_EQ(block.context, nullptr);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST_P(MemoryHistoryTest, RecordsEachStepOfAnAllocationsLife) {
  runtime_.empty_cache(kOpenCL0);
  runtime_.record_memory_history(recording());
  {
    auto storage = runtime_.create_storage(kOpenCL0, 1000);
    const DeviceMemorySnapshot live = snapshot_of(runtime_);
    expect_consistent(live, runtime_.stats(kOpenCL0));
  }
  runtime_.empty_cache(kOpenCL0);
  const DeviceMemorySnapshot snapshot = snapshot_of(runtime_);
  using A = MemoryAction;
  // (The system allocator gives the segment back with the block; the others at empty_cache.)
  const std::vector<A> expected = {A::kSegmentAlloc,  A::kAlloc,         A::kSnapshot,
                                   A::kFreeRequested, A::kFreeCompleted, A::kSegmentFree,
                                   A::kSnapshot};
  EXPECT_EQ(actions_of(snapshot), expected);
  const MemoryEvent& alloc = snapshot.events[1];
  EXPECT_EQ(alloc.address, snapshot.events[3].address);
  EXPECT_GE(alloc.size, 1000u) << "the allocated (rounded) size";
  EXPECT_EQ(alloc.size, snapshot.events[4].size);
  EXPECT_EQ(snapshot.events[0].address, snapshot.events[5].address) << "the same segment";
  EXPECT_GT(alloc.time_us, 0);
  EXPECT_LE(snapshot.events.front().time_us, snapshot.events.back().time_us);
  EXPECT_TRUE(snapshot.segments.empty());
  EXPECT_EQ(snapshot.dropped_events, 0u);
}

TEST_P(MemoryHistoryTest, ContextsFollowTheContextMode) {
  runtime_.set_memory_context_capture([] { return frame_named("train_step"); });
  struct Case {
    ContextMode mode;
    bool in_block, in_alloc, in_free;
  };
  for (const Case& c : {Case{ContextMode::kNone, false, false, false},
                        Case{ContextMode::kState, true, false, false},
                        Case{ContextMode::kAlloc, true, true, false},
                        Case{ContextMode::kAll, true, true, true}}) {
    SCOPED_TRACE(static_cast<int>(c.mode));
    HistoryOptions options = recording(HistoryMode::kAll, c.mode);
    options.clear = true;
    runtime_.record_memory_history(options);
    auto storage = runtime_.create_storage(kOpenCL0, 4096);
    const DeviceMemorySnapshot live = snapshot_of(runtime_);
    const uintptr_t address = storage->blob()->storage()->device_address();
    bool seen = false;
    for (const SegmentSnapshot& segment : live.segments) {
      for (const BlockSnapshot& block : segment.blocks) {
        if (block.address != address) continue;
        seen = true;
        ASSERT_EQ(block.context != nullptr, c.in_block);
        if (c.in_block) {
          EXPECT_EQ(block.context->frames.at(0).name, "train_step");
        }
      }
    }
    EXPECT_TRUE(seen);
    storage.reset();
    const DeviceMemorySnapshot after = snapshot_of(runtime_);
    for (const MemoryEvent& event : after.events) {
      if (event.action == MemoryAction::kAlloc) {
        EXPECT_EQ(event.context != nullptr, c.in_alloc);
      }
      if (event.action == MemoryAction::kFreeRequested) {
        EXPECT_EQ(event.context != nullptr, c.in_free);
      }
    }
  }
  runtime_.record_memory_history(HistoryOptions{});
}

TEST_P(MemoryHistoryTest, KeepsTheNewestMaxEntriesAndStoppingDropsThem) {
  HistoryOptions options = recording();
  options.max_entries = 3;
  runtime_.record_memory_history(options);
  for (int i = 0; i < 4; ++i) runtime_.create_storage(kOpenCL0, 512);
  const DeviceMemorySnapshot snapshot = snapshot_of(runtime_);
  ASSERT_EQ(snapshot.events.size(), 3u);
  using A = MemoryAction;
  // The last release, then the snapshot (the system allocator's segment goes with its block).
  const std::vector<A> newest =
      GetParam() == "system" ? std::vector<A>{A::kFreeCompleted, A::kSegmentFree, A::kSnapshot}
                             : std::vector<A>{A::kFreeRequested, A::kFreeCompleted, A::kSnapshot};
  EXPECT_EQ(actions_of(snapshot), newest);
  runtime_.record_memory_history(HistoryOptions{});
  EXPECT_TRUE(snapshot_of(runtime_).events.empty());
}

TEST_P(MemoryHistoryTest, SkippedActionsAreNotRecorded) {
  HistoryOptions options = recording();
  options.skip = (1u << static_cast<int>(MemoryAction::kFreeRequested)) |
                 (1u << static_cast<int>(MemoryAction::kSnapshot));
  runtime_.record_memory_history(options);
  runtime_.create_storage(kOpenCL0, 512);
  for (const MemoryEvent& event : snapshot_of(runtime_).events) {
    EXPECT_NE(event.action, MemoryAction::kFreeRequested);
    EXPECT_NE(event.action, MemoryAction::kSnapshot);
  }
}

TEST_P(MemoryHistoryTest, AnOutOfMemoryRequestIsAnOomEvent) {
  runtime_.empty_cache(kOpenCL0);
  runtime_.set_memory_limit(kOpenCL0, 4 << 20);
  runtime_.record_memory_history(recording());
  EXPECT_THROW(runtime_.create_storage(kOpenCL0, 64 << 20), OutOfMemoryError);
  const DeviceMemorySnapshot snapshot = snapshot_of(runtime_);
  ASSERT_FALSE(snapshot.events.empty());
  const MemoryEvent& oom = snapshot.events.at(snapshot.events.size() - 2);
  EXPECT_EQ(oom.action, MemoryAction::kOom);
  EXPECT_EQ(oom.size, size_t{64} << 20);
  EXPECT_EQ(oom.address, 0u);
  EXPECT_LE(oom.device_free, uint64_t{4} << 20) << "under the 4 MiB limit";
  runtime_.set_memory_limit(kOpenCL0, 0);
}

TEST_P(MemoryHistoryTest, BadOptionsAreRefusedAndChangeNothing) {
  runtime_.record_memory_history(recording());
  runtime_.create_storage(kOpenCL0, 512);
  const size_t before = snapshot_of(runtime_).events.size();
  HistoryOptions bad = recording();
  bad.max_entries = 0;
  EXPECT_THROW(runtime_.record_memory_history(bad), InvalidArgument);
  EXPECT_EQ(snapshot_of(runtime_).events.size(), before + 1) << "only the new snapshot event";
  EXPECT_THROW(runtime_.memory_snapshot({Device{DeviceType::kOpenCL, 99}}), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(EveryAllocator, MemoryHistoryTest,
                         ::testing::Values("caching", "buddy", "system"));

TEST(MemorySnapshotPickleTest, IsAProtocolTwoPickleWithPyTorchsKeys) {
  MemorySnapshot snapshot;
  DeviceMemorySnapshot device;
  device.device = Device{DeviceType::kOpenCL, 1};
  device.segments.push_back({uintptr_t{1} << 63, 2 << 20, true,
                             {{uintptr_t{1} << 63, 1024, 1000, true, frame_named("f")},
                              {(uintptr_t{1} << 63) + 1024, (2 << 20) - 1024, 0, false, nullptr}}});
  device.events.push_back(
      {MemoryAction::kAlloc, uintptr_t{1} << 63, 1024, 3, -5, frame_named("f"), 0});
  snapshot.devices.push_back(device);
  const std::string bytes = to_pickle(snapshot);
  EXPECT_EQ(bytes.substr(0, 2), "\x80\x02");
  EXPECT_EQ(bytes.back(), '.');
  for (const char* key : {"segments", "device_traces", "total_size", "active_allocated",
                          "inactive", "requested_size", "alloc", "frames",
                          "model.py", "segment_type", "small"}) {
    EXPECT_NE(bytes.find(key), std::string::npos) << key;
  }
  // "model.py" is written once and referenced after: strings are memoized.
  EXPECT_EQ(bytes.find("model.py"), bytes.rfind("model.py"));
}

}  // namespace
}  // namespace oclvm
