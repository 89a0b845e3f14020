// tests/storage/faults_test.cc — fault injection in the device layer (storage/faults.h): the
// OCLVM_FAULTS syntax, the nth / every / probability rules, and the failures the real backends
// (PoCL and the host) then give: a refused segment is an OutOfMemoryError that holds nothing, a
// failed enqueue or finish a BackendError naming the command and the device, with nothing
// enqueued.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/faults.h"
#include "oclvm/storage/queue.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

TEST(FaultOptionsTest, ParsesEveryRuleAndPrintsItBack) {
  const FaultOptions options =
      FaultOptions::parse("segment:nth=3,copy:every=10,fill:p=0.5,finish:p=1,seed=42", "test");
  EXPECT_TRUE(options.any());
  EXPECT_EQ(options.rule(FaultPoint::kSegment).mode, FaultRule::Mode::kNth);
  EXPECT_EQ(options.rule(FaultPoint::kSegment).n, 3u);
  EXPECT_EQ(options.rule(FaultPoint::kCopy).mode, FaultRule::Mode::kEvery);
  EXPECT_EQ(options.rule(FaultPoint::kFill).probability, 0.5);
  EXPECT_EQ(options.seed, 42u);
  EXPECT_EQ(options.str(), "segment:nth=3,copy:every=10,fill:p=0.5,finish:p=1,seed=42");
  EXPECT_EQ(FaultOptions::parse(options.str(), "again").str(), options.str());
  EXPECT_FALSE(FaultOptions::parse("", "empty").any());
  EXPECT_EQ(FaultOptions::parse("", "empty").str(), "");
}

TEST(FaultOptionsTest, RejectsMalformedRulesNamingTheSource) {
  for (const char* bad : {"segment", "segment:", "memory:nth=1", "copy:nth=0", "copy:every=-1",
                          "copy:nth=1x", "fill:p=1.5", "fill:p=-0.1", "fill:p=nan", "fill:p=",
                          "copy:nth=1,copy:every=2", "seed=abc", ",", "copy:nth=1,", "finish:often",
                          "copy:nth=99999999999999999999999"}) {
    try {
      FaultOptions::parse(bad, "OCLVM_FAULTS");
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const InvalidArgument& e) {
      EXPECT_CONTAINS(e.what(), "OCLVM_FAULTS");
      EXPECT_CONTAINS(e.what(), "Expected");
    }
  }
}

TEST(FaultInjectorTest, NthFailsOnceAndEveryFailsPeriodically) {
  FaultInjector injector;
  EXPECT_FALSE(injector.should_fail(FaultPoint::kCopy)) << "off until configured";
  EXPECT_EQ(injector.calls(FaultPoint::kCopy), 0u) << "an idle injector counts nothing";
  injector.configure(FaultOptions::parse("copy:nth=3,fill:every=2", "test"));
  std::vector<bool> copies;
  std::vector<bool> fills;
  for (int i = 0; i < 6; ++i) {
    copies.push_back(injector.should_fail(FaultPoint::kCopy));
    fills.push_back(injector.should_fail(FaultPoint::kFill));
  }
  EXPECT_EQ(copies, (std::vector<bool>{false, false, true, false, false, false}));
  EXPECT_EQ(fills, (std::vector<bool>{false, true, false, true, false, true}));
  EXPECT_FALSE(injector.should_fail(FaultPoint::kSegment));
  EXPECT_EQ(injector.calls(FaultPoint::kCopy), 6u);
  EXPECT_EQ(injector.injected(FaultPoint::kCopy), 1u);
  EXPECT_EQ(injector.injected(FaultPoint::kFill), 3u);
  EXPECT_EQ(injector.injected_total(), 4u);
  injector.configure(FaultOptions{});
  EXPECT_EQ(injector.injected_total(), 0u);
  EXPECT_FALSE(injector.should_fail(FaultPoint::kCopy));
}

TEST(FaultInjectorTest, ProbabilityIsSeededAndReplays) {
  auto draws = [](const char* rules) {
    FaultInjector injector;
    injector.configure(FaultOptions::parse(rules, "test"));
    std::vector<bool> out;
    for (int i = 0; i < 2000; ++i) out.push_back(injector.should_fail(FaultPoint::kFinish));
    return out;
  };
  const std::vector<bool> first = draws("finish:p=0.1,seed=7");
  EXPECT_EQ(first, draws("finish:p=0.1,seed=7")) << "the same seed replays";
  EXPECT_NE(first, draws("finish:p=0.1,seed=8"));
  const auto failures = std::count(first.begin(), first.end(), true);
  EXPECT_GT(failures, 140);  // 200 expected; far outside these bounds means a broken generator
  EXPECT_LT(failures, 260);
  const std::vector<bool> never = draws("finish:p=0");
  EXPECT_EQ(std::count(never.begin(), never.end(), true), 0);
  const std::vector<bool> always = draws("finish:p=1");
  EXPECT_EQ(std::count(always.begin(), always.end(), true), 2000);
}

// The same checks on opencl:0 and on the host device; each test restores "no faults".
class BackendFaultTest : public DeviceTypeTest {
 protected:
  void TearDown() override {
    backend().faults().configure(FaultOptions{});
    DeviceTypeTest::TearDown();
  }
  void inject(const char* rules) { backend().faults().configure(FaultOptions::parse(rules, "test")); }
};

TEST_P(BackendFaultTest, RefusedSegmentIsOutOfMemoryAndHoldsNothing) {
  inject("segment:nth=2");
  const size_t live = backend().live_segments();
  Segment* first = backend().create_segment(4096);
  try {
    backend().create_segment(4096);
    ADD_FAILURE() << "the second segment was not refused";
  } catch (const OutOfMemoryError& e) {
    EXPECT_CONTAINS(e.what(), "injected fault");
    EXPECT_CONTAINS(e.what(), backend().device().str());
    EXPECT_CONTAINS(e.what(), "4096 bytes");
  }
  EXPECT_EQ(backend().live_segments(), live + 1);
  Segment* third = backend().create_segment(4096);  // nth fails once
  backend().release_segment(first);
  backend().release_segment(third);
  EXPECT_EQ(backend().faults().injected(FaultPoint::kSegment), 1u);
}

TEST_P(BackendFaultTest, FailedEnqueuesAreBackendErrorsAndEnqueueNothing) {
  Segment* segment = backend().create_segment(1 << 16);
  auto queue = backend().create_queue();
  std::vector<uint8_t> data(1 << 16, 0x11);
  queue->enqueue_write(*segment, 0, data.data(), data.size(), /*blocking=*/true);
  inject("copy:every=1,fill:every=1");
  std::vector<uint8_t> other(1 << 16, 0x22);
  const uint8_t pattern = 0x33;
  for (const auto& attempt : std::vector<std::function<void()>>{
           [&] { queue->enqueue_write(*segment, 0, other.data(), other.size(), true); },
           [&] { queue->enqueue_read(*segment, 0, other.data(), other.size(), true); },
           [&] { queue->enqueue_copy(*segment, 0, *segment, 1 << 15, 1 << 15); },
           [&] { queue->enqueue_fill(*segment, 0, &pattern, 1, 1 << 16); },
           [&] { backend().write(*segment, 0, other.data(), 16); },
           [&] { backend().fill(*segment, 0, 0x44, 16); }}) {
    try {
      attempt();
      ADD_FAILURE() << "no fault was injected";
    } catch (const BackendError& e) {
      EXPECT_CONTAINS(e.what(), "injected fault");
      EXPECT_CONTAINS(e.what(), backend().device().str());
    }
  }
  EXPECT_EQ(backend().faults().injected(FaultPoint::kCopy), 4u);
  EXPECT_EQ(backend().faults().injected(FaultPoint::kFill), 2u);
  backend().faults().configure(FaultOptions{});
  queue->finish();
  std::vector<uint8_t> back(1 << 16, 0);
  queue->enqueue_read(*segment, 0, back.data(), back.size(), true);
  EXPECT_EQ(back, data) << "no failed command touched the segment";
  backend().release_segment(segment);
}

TEST_P(BackendFaultTest, FailedFinishReportsAfterTheCommandsCompleted) {
  Segment* segment = backend().create_segment(1 << 20);
  auto queue = backend().create_queue();
  std::vector<uint8_t> data(1 << 20, 0x5A);
  queue->enqueue_write(*segment, 0, data.data(), data.size(), /*blocking=*/false);
  inject("finish:nth=1");
  try {
    queue->finish();
    ADD_FAILURE() << "the finish did not fail";
  } catch (const BackendError& e) {
    EXPECT_CONTAINS(e.what(), "finishing a queue failed on " + backend().device().str());
  }
  queue->finish();  // a second finish is no longer refused and covers the write again
  std::vector<uint8_t> back(1 << 20, 0);
  backend().read(*segment, 0, back.data(), back.size());
  EXPECT_EQ(back, data);
  backend().release_segment(segment);
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendFaultTest,
                         ::testing::Values(DeviceType::kOpenCL, DeviceType::kCpu),
                         device_type_name);

}  // namespace
}  // namespace oclvm
