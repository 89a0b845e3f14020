// tests/script/script_run_test.cc — instruction scripts executed on real devices (PoCL).
//
// Expectations that hold, expectations that fail with the report that says so, leaks, skips,
// tracing and `query` output. Each execution builds and destroys its own VM; the fixture checks
// that the backends hold no more segments afterwards and that no blob was freed by a destructor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "adapters/script/script.h"
#include "oclvm/storage/storage_objects.h"
#include "tests/storage/test_util.h"

namespace oclvm::script {
namespace {

class ScriptRunTest : public testing::LeakCheckedTest {
 protected:
  void SetUp() override {
    LeakCheckedTest::SetUp();
    destructor_releases_ = BlobStorage::destructor_releases();
  }
  void TearDown() override {
    EXPECT_EQ(BlobStorage::destructor_releases(), destructor_releases_)
        << "a blob was freed by its destructor instead of a release";
    LeakCheckedTest::TearDown();
  }

  ExecuteResult run(const std::string& text, ExecuteOptions options = {}) {
    script_ = parse_script(text, "t.oclvm", ParseOptions{testing::opencl_device_count()});
    return execute(script_, options);
  }
  // Runs `text` with tracing on; traced_ holds the trace lines afterwards.
  ExecuteResult run_traced(const std::string& text) {
    ExecuteOptions options;
    options.trace = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(trace_mutex_);
      traced_.push_back(line);
    };
    return run(text, options);
  }
  // Every failure as "t.oclvm:LINE: message".
  std::vector<std::string> failures(const ExecuteResult& result) const {
    std::vector<std::string> out;
    for (size_t i = 0; i < result.failures.size(); ++i) out.push_back(result.describe(script_, i));
    return out;
  }

  Script script_;
  uint64_t destructor_releases_ = 0;
  std::mutex trace_mutex_;
  std::vector<std::string> traced_;  // by run_traced; complete once it returns
};

TEST_F(ScriptRunTest, ExpectationsThatHold) {
  ExecuteResult result = run(
      "host h 8\n"
      "alloc b = opencl:0 4096\n"
      "fill b[0] 4096 0xab\n"
      "write b[8] = 01 02 03\n"
      "copy b[6] -> h[0] 8\n"
      "run\n"
      "expect allocated opencl:0 = 4K\n"
      "expect requested opencl:0 = 4096\n"
      "expect fill b[0] 8 0xab\n"
      "expect bytes b[7] = ab 01 02 03 ab\n"
      "expect bytes h = ab ab 01 02 03 ab ab ab\n"
      "release b\n"
      "run\n"
      "expect allocated opencl:0 = 0\n");
  EXPECT_FALSE(result.skipped);
  EXPECT_EQ(result.expectations, 6u);
  EXPECT_TRUE(result.ok()) << ::testing::PrintToString(failures(result));
  EXPECT_TRUE(result.notes.empty());
}

TEST_F(ScriptRunTest, FailedExpectationsNameTheirLineAndWhatWasSeen) {
  ExecuteResult result = run(
      "host h 2\n"
      "alloc b = opencl:0 1K\n"
      "fill b[0] 1K 0xab\n"
      "run\n"
      "expect allocated opencl:0 = 2K\n"
      "expect bytes b[2] = ab ac\n"
      "expect fill b[1020] 4 0x00ab\n"
      "expect bytes h = 00 01\n"
      "expect barriers > 0\n"
      "release b\n"
      "run\n");
  EXPECT_EQ(result.expectations, 5u);
  EXPECT_EQ(failures(result),
            (std::vector<std::string>{
                "t.oclvm:5: expected allocated (allocated_bytes.all.current) of opencl:0 = 2048, "
                "but got 1024",
                "t.oclvm:6: expected b[2..4) = ab ac, but byte 3 is ab (expected ac); from there it "
                "reads ab",
                "t.oclvm:7: expected b[1020..1024) filled with 0x00ab, but byte 1021 is ab (expected "
                "00); from there it reads ab ab ab",
                "t.oclvm:8: expected h[0..2) = 00 01, but byte 1 is 00 (expected 01); from there it "
                "reads 00",
                "t.oclvm:9: expected barriers > 0 (callbacks run so far), but got 0",
            }));
}

TEST_F(ScriptRunTest, ErrorsExpectedAndUnexpected) {
  ExecuteResult result = run(
      "limit 4M\n"
      "alloc a = opencl:0 1M\n"
      "run\n"
      "alloc big = opencl:0 8M\n"
      "run\n"
      "expect error out_of_memory \"Out of memory on opencl:0\"\n"  // holds
      "alloc big2 = opencl:0 8M\n"
      "run\n"                                                      // 8: fails, nothing expected
      "release a\n"
      "run\n"
      "expect error error\n"                                       // 11: but it succeeded
      "release a\n"
      "run\n"
      "expect error out_of_memory\n"                               // 14: another kind
      "release a\n"
      "run\n"
      "expect error invalid_argument \"no such words\"\n"          // 17: another message
      "expect num_ooms opencl:0 = 2\n"
      "expect allocated opencl:0 = 0\n");
  EXPECT_EQ(result.expectations, 6u);
  std::vector<std::string> seen = failures(result);
  ASSERT_EQ(seen.size(), 4u) << ::testing::PrintToString(seen);
  EXPECT_EQ(seen[0].rfind("t.oclvm:8: run failed with out_of_memory: AllocateBlob", 0), 0u)
      << seen[0];
  EXPECT_NE(seen[0].find("(no `expect error` follows this run)"), std::string::npos) << seen[0];
  EXPECT_EQ(seen[1], "t.oclvm:11: expected the run to fail with error, but it succeeded");
  EXPECT_EQ(seen[2].rfind("t.oclvm:14: expected the run to fail with out_of_memory, but it failed "
                          "with invalid_argument: ReleaseTensor",
                          0),
            0u)
      << seen[2];
  EXPECT_EQ(seen[3].rfind("t.oclvm:17: expected the run to fail with invalid_argument containing "
                          "\"no such words\", but the message is: ReleaseTensor",
                          0),
            0u)
      << seen[3];
}

TEST_F(ScriptRunTest, ABuildErrorVoidsItsBatch) {
  ExecuteResult result = run(
      "alloc keep = opencl:0 64\n"
      "fill keep[0] 64 0x01\n"
      "run\n"
      "fill keep[0] 64 0x02\n"       // dropped with the batch
      "fill keep[0] 65 0x03\n"       // the builder refuses this one
      "alloc never = opencl:0 64\n"  // after the error: not built
      "run\n"
      "expect error invalid_argument \"Expected a fill target range within the 64 bytes\"\n"
      "expect fill keep 64 0x01\n"
      "expect num_allocs opencl:0 = 1\n"
      "release never\n"
      "run\n"
      "expect error invalid_argument \"Expected blob never to exist, but its `alloc` (line 6) was "
      "dropped with a batch that failed to build\"\n"
      "release keep\n"
      "run\n");
  EXPECT_EQ(result.expectations, 4u);
  EXPECT_TRUE(result.ok()) << ::testing::PrintToString(failures(result));
}

TEST_F(ScriptRunTest, LeakedBlobsAreReportedAndReleased) {
  ExecuteResult result = run(
      "alloc a = opencl:0 4096\n"
      "alloc b = opencl:0 100\n"
      "alloc c = opencl:0 16\n"
      "run\n"
      "release b\n"
      "run\n");
  EXPECT_EQ(failures(result),
            (std::vector<std::string>{
                "t.oclvm:1: leaked blob a (4096 bytes): it is still live at the end of the script; "
                "add `release a` and a `run`",
                "t.oclvm:3: leaked blob c (16 bytes): it is still live at the end of the script; "
                "add `release c` and a `run`",
            }));
  // The fixture's TearDown checks that the leaked blobs were given back all the same.
}

TEST_F(ScriptRunTest, AScriptThatNeedsMoreDevicesIsSkipped) {
  size_t present = testing::opencl_device_count();
  std::string needed = std::to_string(present + 1);
  ExecuteResult result = run("require devices " + needed + "\nalloc b = opencl:" +
                             std::to_string(present) + " 16\nrun\nexpect allocated opencl:0 = 1\n");
  EXPECT_TRUE(result.skipped);
  EXPECT_EQ(result.skip_reason, "requires " + needed + " OpenCL devices, " +
                                    std::to_string(present) + " present");
  EXPECT_EQ(result.expectations, 0u);
  EXPECT_TRUE(result.ok());
}

TEST_F(ScriptRunTest, TwoDevicesWhenPresent) {
  if (testing::opencl_device_count() < 2) GTEST_SKIP() << "needs two OpenCL devices";
  ExecuteResult result = run(
      "require devices 2\n"
      "alloc a = opencl:0 1K\n"
      "alloc b = opencl:1 1K\n"
      "fill a[0] 1K 0x0a\n"
      "fill b[0] 1K 0x0b\n"
      "copy a[0] -> b[512] 256\n"
      "run\n"
      "expect bytes b[510] = 0b 0b 0a\n"
      "expect bytes b[766] = 0a 0a 0b\n"
      "expect allocated opencl:1 = 1K\n"
      "release a\n"
      "release b\n"
      "run\n");
  EXPECT_FALSE(result.skipped);
  EXPECT_EQ(result.expectations, 3u);
  EXPECT_TRUE(result.ok()) << ::testing::PrintToString(failures(result));
}

TEST_F(ScriptRunTest, EveryExecutionHasAFreshVm) {
  // The same script twice: statistics start from zero each time (a VM of its own), and the
  // options of the script (here the system allocator) hold for its VM only.
  const std::string text =
      "allocator system\n"
      "alloc b = opencl:0 1000\n"
      "run\n"
      "expect num_allocs opencl:0 = 1\n"
      "expect reserved opencl:0 = 1024\n"
      "release b\n"
      "run\n"
      "expect reserved opencl:0 = 0\n";
  for (int i = 0; i < 2; ++i) {
    ExecuteResult result = run(text);
    EXPECT_EQ(result.expectations, 3u);
    EXPECT_TRUE(result.ok()) << i << ": " << ::testing::PrintToString(failures(result));
  }
}

TEST_F(ScriptRunTest, TraceNamesScriptLinesStreamsAndOperands) {
  ExecuteResult result = run_traced(
      "stream side = opencl:0 user 4\n"
      "alloc b = opencl:0 64\n"
      "fill b[0] 64 0x00 on side\n"
      "run\n"
      "expect fill b 64 0x00\n"
      "release b\n"
      "run\n");
  const std::vector<std::string>& lines = traced_;
  EXPECT_TRUE(result.ok()) << ::testing::PrintToString(failures(result));
  ASSERT_EQ(lines.size(), 4u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0].rfind("t.oclvm:2: AllocateBlob on opencl:0/compute ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(" [b write] "), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("t.oclvm:3: FillBlob on opencl:0/user4 ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("t.oclvm:5: CopyBlob on opencl:0/compute ", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find(" [b read] "), std::string::npos) << lines[2];
  EXPECT_EQ(lines[3].rfind("t.oclvm:6: ReleaseTensor on opencl:0/compute ", 0), 0u) << lines[3];
  for (const std::string& line : lines) {
    EXPECT_EQ(line.substr(line.size() - 3), " us") << line;
  }
}

TEST_F(ScriptRunTest, QueryPrintsTheStatisticsAfterItsRun) {
  ExecuteResult result = run(
      "alloc b = opencl:0 2K\n"
      "query opencl:0\n"
      "release b\n"
      "run\n");
  EXPECT_TRUE(result.ok()) << ::testing::PrintToString(failures(result));
  ASSERT_EQ(result.notes.size(), 1u);
  const std::string& note = result.notes[0];
  EXPECT_EQ(note.rfind("t.oclvm:2: statistics of opencl:0:\n", 0), 0u) << note;
  EXPECT_NE(note.find("allocated_bytes: current 2048, peak 2048"), std::string::npos) << note;
}

TEST_F(ScriptRunTest, EventsBlobUsesAndMemoryLimitsBuildTheirInstructions) {
  // Each statement builds its instruction on the stream it names (the trace shows them), and a
  // limit set by set_memory_limit holds for the allocations after it.
  ExecuteResult result = run_traced(
      "stream side = opencl:0 user 3\n"
      "event e\n"
      "alloc b = opencl:0 64\n"
      "record_event e on side\n"
      "wait_event e on opencl:0\n"
      "record_blob_use b on side\n"
      "set_memory_limit opencl:0 1M\n"
      "alloc big = opencl:0 4M\n"
      "run\n"
      "expect error out_of_memory \"Out of memory on opencl:0\"\n"
      "set_memory_limit opencl:0 0\n"
      "release b\n"
      "run\n");
  const std::vector<std::string>& lines = traced_;
  EXPECT_EQ(result.expectations, 1u);
  EXPECT_TRUE(result.ok()) << ::testing::PrintToString(failures(result));
  auto traced = [&](const std::string& prefix) {
    return std::count_if(lines.begin(), lines.end(),
                         [&](const std::string& line) { return line.rfind(prefix, 0) == 0; });
  };
  EXPECT_EQ(traced("t.oclvm:4: RecordEvent on opencl:0/user3 event on opencl:0/user3 "), 1)
      << ::testing::PrintToString(lines);
  EXPECT_EQ(traced("t.oclvm:5: WaitEvent on opencl:0/compute event, on opencl:0/compute "), 1);
  EXPECT_EQ(traced("t.oclvm:6: RecordBlobUse on opencl:0/user3 "), 1);
  EXPECT_EQ(traced("t.oclvm:7: SetMemoryLimit on opencl:0/compute 1048576 B on opencl:0 "), 1);
  EXPECT_EQ(traced("t.oclvm:11: SetMemoryLimit on opencl:0/compute none on opencl:0 "), 1);
  for (const std::string& line : lines) {
    if (line.rfind("t.oclvm:6: ", 0) == 0) {
      EXPECT_NE(line.find(" [b read] "), std::string::npos) << line;
    }
  }
}

TEST_F(ScriptRunTest, StreamsBarriersAccessAndAllocatorControl) {
  ExecuteResult result = run(
      "caller_runs off\n"
      "stream s1 = opencl:0 user 1\n"
      "stream s2 = opencl:0 h2d\n"
      "host h 4\n"
      "alloc b = s1 4M\n"
      "fill b[0] 4M 0x5a on s1\n"
      "soft_sync s1 -> s2\n"
      "access write b[4] on s2 = 01 02 03 04\n"
      "access read b[2] 4 -> h on s1\n"
      "barrier s1\n"
      "barrier s2\n"
      "run\n"
      "expect bytes h = 5a 5a 01 02\n"
      "expect barriers = 2\n"
      "expect reserved opencl:0 = 4M\n"
      "release b\n"
      "reset_stats opencl:0 peak\n"
      "empty_cache opencl:0\n"
      "run\n"
      "expect reserved opencl:0 = 0\n"
      "expect peak_reserved opencl:0 = 4M\n"  // the reset ran before empty_cache gave it back
      "reset_stats opencl:0 peak\n"
      "reset_stats opencl:0 accumulated\n"
      "run\n"
      "expect peak_reserved opencl:0 = 0\n"
      "expect num_device_free opencl:0 = 0\n");
  EXPECT_EQ(result.expectations, 7u);
  EXPECT_TRUE(result.ok()) << ::testing::PrintToString(failures(result));
}

}  // namespace
}  // namespace oclvm::script
