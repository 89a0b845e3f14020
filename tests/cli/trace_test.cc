// tests/cli/trace_test.cc — the `oclvm-trace v1` parser (adapters/cli/trace.h).
//
// Well-formed input gives exact events, dense slots and stats; every malformed case gives its exact
// `FILE:LINE: error: message`; the recorded traces shipped in traces/ parse to their exact figures
// (the README's table of them, and the oclvm_cli.replay.* ctest entries, give the same).
#include "adapters/cli/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace oclvm::cli {
namespace {

// Parses `text` as "t.trace" and returns the error text; fails the test if it parses.
std::string parse_error(const std::string& text) {
  try {
    parse_trace(text, "t.trace");
  } catch (const TraceError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a TraceError for:\n" << text;
  return "";
}

// The repository's traces/ folder (scripts/record_traces.py records what it holds).
std::filesystem::path shipped_traces() {
  return std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "traces";
}

TEST(TraceParserTest, ParsesEventsIntoDenseReusedSlots) {
  Trace trace = parse_trace(
      "# oclvm-trace v1\n"
      "# a comment\n"
      "\n"
      "a 10 1024\n"
      "a 20 0\n"
      "a 30 4096\n"
      "f 10\n"
      "a 40 512\n"
      "f 30\n"
      "f 20\n",
      "good.trace");
  EXPECT_EQ(trace.file, "good.trace");
  ASSERT_EQ(trace.events.size(), 7u);
  struct Expected {
    TraceEventKind kind;
    uint32_t slot;
    uint64_t bytes;
  };
  const Expected expected[] = {
      {TraceEventKind::kAllocate, 0, 1024}, {TraceEventKind::kAllocate, 1, 0},
      {TraceEventKind::kAllocate, 2, 4096}, {TraceEventKind::kFree, 0, 1024},
      {TraceEventKind::kAllocate, 0, 512},  {TraceEventKind::kFree, 2, 4096},
      {TraceEventKind::kFree, 1, 0},
  };
  for (size_t i = 0; i < trace.events.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(trace.events[i].kind, expected[i].kind);
    EXPECT_EQ(trace.events[i].slot, expected[i].slot);
    EXPECT_EQ(trace.events[i].bytes, expected[i].bytes);
  }
  EXPECT_EQ(trace.num_slots, 3u);
  EXPECT_EQ(trace.stats.events, 7u);
  EXPECT_EQ(trace.stats.allocations, 4u);
  EXPECT_EQ(trace.stats.frees, 3u);
  EXPECT_EQ(trace.stats.total_bytes, 1024u + 4096u + 512u);
  EXPECT_EQ(trace.stats.live_peak_bytes, 1024u + 4096u);
  EXPECT_EQ(trace.stats.live_peak_count, 3u);
  EXPECT_EQ(trace.stats.live_at_end, 1u);
  EXPECT_EQ(trace.stats.live_at_end_bytes, 512u);
}

TEST(TraceParserTest, AcceptsTabsCarriageReturnsAndLeadingBlankLines) {
  Trace trace = parse_trace("\n  \r\n# oclvm-trace v1  \r\n\ta\t7 \t 64\r\n  f 7\r\n   # indented comment\n",
                            "crlf.trace");
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.events[0].bytes, 64u);
  EXPECT_EQ(trace.stats.live_peak_bytes, 64u);
  EXPECT_EQ(trace.stats.live_at_end, 0u);
}

TEST(TraceParserTest, AcceptsAHeaderOnlyTraceAndTheLargestNumbers) {
  Trace empty = parse_trace("# oclvm-trace v1\n", "e.trace");
  EXPECT_TRUE(empty.events.empty());
  EXPECT_EQ(empty.num_slots, 0u);
  EXPECT_EQ(empty.stats.live_peak_bytes, 0u);

  Trace big = parse_trace("# oclvm-trace v1\na 18446744073709551615 18446744073709551615\n", "b.trace");
  ASSERT_EQ(big.events.size(), 1u);
  EXPECT_EQ(big.events[0].bytes, UINT64_MAX);
  EXPECT_EQ(big.stats.live_at_end_bytes, UINT64_MAX);
}

TEST(TraceParserTest, ErrorCarriesFileLineAndMessage) {
  try {
    parse_trace("# oclvm-trace v1\nf 3\n", "x/y.trace");
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.file(), "x/y.trace");
    EXPECT_EQ(e.line(), 2u);
    EXPECT_EQ(e.message(), "expected the ID of a live allocation, but ID 3 was never allocated");
    EXPECT_STREQ(e.what(),
                 "x/y.trace:2: error: expected the ID of a live allocation, but ID 3 was never allocated");
  }
}

TEST(TraceParserTest, RejectsAMissingOrOtherHeader) {
  EXPECT_EQ(parse_error("a 1 2\n"),
            "t.trace:1: error: expected the header '# oclvm-trace v1' as the first line, but got 'a 1 2'");
  EXPECT_EQ(parse_error("\n# oclvm-trace v2\na 1 2\n"),
            "t.trace:2: error: expected the header '# oclvm-trace v1' as the first line, but got "
            "'# oclvm-trace v2'");
  EXPECT_EQ(parse_error("# recorded yesterday\n# oclvm-trace v1\n"),
            "t.trace:1: error: expected the header '# oclvm-trace v1' as the first line, but got "
            "'# recorded yesterday'");
  EXPECT_EQ(parse_error(""), "t.trace:1: error: expected the header '# oclvm-trace v1', but got an empty file");
  EXPECT_EQ(parse_error("\n\n \n"),
            "t.trace:3: error: expected the header '# oclvm-trace v1', but got only blank lines");
}

TEST(TraceParserTest, RejectsAnUnknownEventKind) {
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 8\nx 1\n"),
            "t.trace:3: error: expected an event 'a ID BYTES' or 'f ID', but got 'x'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\nalloc 1 8\n"),
            "t.trace:2: error: expected an event 'a ID BYTES' or 'f ID', but got 'alloc'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\nA 1 8\n"),
            "t.trace:2: error: expected an event 'a ID BYTES' or 'f ID', but got 'A'");
}

TEST(TraceParserTest, RejectsMissingAndExtraOperands) {
  EXPECT_EQ(parse_error("# oclvm-trace v1\na\n"),
            "t.trace:2: error: expected 'a ID BYTES' with 2 operands, but got 0");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1\n"),
            "t.trace:2: error: expected 'a ID BYTES' with 2 operands, but got 1");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 2 3\n"),
            "t.trace:2: error: expected 'a ID BYTES' with 2 operands, but got 3");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 2 # trailing comment\n"),
            "t.trace:2: error: expected 'a ID BYTES' with 2 operands, but got 5");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 2\nf\n"),
            "t.trace:3: error: expected 'f ID' with 1 operand, but got 0");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 2\nf 1 2\n"),
            "t.trace:3: error: expected 'f ID' with 1 operand, but got 2");
}

TEST(TraceParserTest, RejectsNumbersThatAreNotPlainDecimals) {
  EXPECT_EQ(parse_error("# oclvm-trace v1\na x1 8\n"),
            "t.trace:2: error: expected ID to be an unsigned decimal number, but got 'x1'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 -8\n"),
            "t.trace:2: error: expected BYTES to be an unsigned decimal number, but got '-8'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 +8\n"),
            "t.trace:2: error: expected BYTES to be an unsigned decimal number, but got '+8'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 8K\n"),
            "t.trace:2: error: expected BYTES to be an unsigned decimal number, but got '8K'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 0x10\n"),
            "t.trace:2: error: expected BYTES to be an unsigned decimal number, but got '0x10'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 8\nf 1.0\n"),
            "t.trace:3: error: expected ID to be an unsigned decimal number, but got '1.0'");
}

TEST(TraceParserTest, RejectsNumbersThatOverflow) {
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 18446744073709551616\n"),
            "t.trace:2: error: expected BYTES to fit in 64 bits, but got '18446744073709551616'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 99999999999999999999999 1\n"),
            "t.trace:2: error: expected ID to fit in 64 bits, but got '99999999999999999999999'");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 18446744073709551615\na 2 1\n"),
            "t.trace:3: error: expected the live bytes to fit in 64 bits, but allocating 1 more on "
            "top of 18446744073709551615 overflows");
}

TEST(TraceParserTest, RejectsAnIdAllocatedWhileLiveOrReused) {
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 8\na 2 8\na 1 16\n"),
            "t.trace:4: error: expected a new ID, but ID 1 is live (allocated at line 2)");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 8\nf 1\n\na 1 16\n"),
            "t.trace:5: error: expected a new ID, but ID 1 was used before (allocated at line 2, "
            "freed at line 3)");
}

TEST(TraceParserTest, RejectsAFreeOfAnUnknownOrFreedId) {
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 8\nf 2\n"),
            "t.trace:3: error: expected the ID of a live allocation, but ID 2 was never allocated");
  EXPECT_EQ(parse_error("# oclvm-trace v1\na 1 8\nf 1\n# again\nf 1\n"),
            "t.trace:5: error: expected the ID of a live allocation, but ID 1 was already freed at "
            "line 3");
}

TEST(TraceParserTest, LoadReportsAnUnreadableFile) {
  const std::string missing = "/nonexistent/oclvm/missing.trace";
  try {
    load_trace(missing);
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), 0u);
    EXPECT_STREQ(e.what(), (missing + ": error: expected a readable trace file, but opening it failed "
                                      "(No such file or directory)")
                               .c_str());
  }
  const std::string directory = std::filesystem::path(__FILE__).parent_path().string();
  try {
    load_trace(directory);
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()), directory + ": error: expected a trace file, but got a directory");
  }
}

TEST(TraceParserTest, LoadsTheFixturesNextToThisTest) {
  const auto data = std::filesystem::path(__FILE__).parent_path() / "data";
  Trace small = load_trace((data / "small.trace").string());
  EXPECT_EQ(small.stats.events, 10u);
  EXPECT_EQ(small.stats.live_peak_bytes, 4198400u);
  EXPECT_EQ(small.stats.live_at_end, 0u);
  try {
    load_trace((data / "double_free.trace").string());
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), 6u);
    EXPECT_EQ(e.message(), "expected the ID of a live allocation, but ID 1 was already freed at line 5");
  }
}

// The shipped traces, recorded by torch.opencl.memory.record_trace: every allocation freed by the
// end (the recording ends after the model is deleted), slots reused.
TEST(TraceParserTest, ShippedTracesParseToTheirFigures) {
  struct Case {
    const char* name;
    uint64_t allocations;
    uint64_t live_peak_bytes;
  };
  for (const Case& c : {Case{"transformer_train.trace", 1723, 585520136},
                        Case{"cnn_train.trace", 348, 73380256},
                        Case{"gpt2_adamw.trace", 2767, 52532744},
                        Case{"mlp_sgd.trace", 310, 77880}}) {
    SCOPED_TRACE(c.name);
    Trace trace = load_trace((shipped_traces() / c.name).string());
    EXPECT_EQ(trace.stats.allocations, c.allocations);
    EXPECT_EQ(trace.stats.frees, c.allocations);
    EXPECT_EQ(trace.stats.events, 2 * c.allocations);
    EXPECT_EQ(trace.stats.live_peak_bytes, c.live_peak_bytes);
    EXPECT_EQ(trace.stats.live_at_end, 0u);
    EXPECT_EQ(trace.num_slots, trace.stats.live_peak_count);
    EXPECT_LT(trace.num_slots, c.allocations);  // slots are reused
  }
}

}  // namespace
}  // namespace oclvm::cli
