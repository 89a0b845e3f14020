// fuzz/trace_fuzzer.cc — libFuzzer target for the allocation trace parser (cli::parse_trace).
//
// The input's bytes are the text of an `oclvm-trace v1` file (adapters/cli/trace.h). Only the
// parse step runs; a replay would allocate device memory.
//
// Outcomes:
//   - TraceError: the expected answer to a malformed trace;
//   - a Trace: its promises are checked below by replaying the events against a slot table of
//     its own (every slot below num_slots, no slot allocated twice or freed while free, a free
//     carries its allocation's bytes, and the statistics equal what the replay counts); a
//     violation is a finding, since `oclvm replay` indexes its slot table with these events;
//   - anything else is a finding (fuzz/fuzz_check.h).
//
// Built twice from this file: with clang's -fsanitize=fuzzer as build-fuzz/fuzz/trace_fuzzer
// (fuzz/CMakeLists.txt, `make fuzz`), and with the normal compiler as oclvm_fuzz_replay_trace,
// whose main() (fuzz/replay_main.cc) replays fuzz/regressions/trace and fuzz/corpus/trace under
// ctest.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "adapters/cli/trace.h"
#include "fuzz/fuzz_check.h"

namespace {

using namespace oclvm;
using namespace oclvm::cli;

void check_trace(const Trace& trace) {
  const TraceStats& stats = trace.stats;
  OCLVM_FUZZ_CHECK(trace.events.size() == stats.events);
  OCLVM_FUZZ_CHECK(stats.events == stats.allocations + stats.frees);
  OCLVM_FUZZ_CHECK(trace.num_slots == stats.live_peak_count);

  struct Slot {
    bool live = false;
    uint64_t bytes = 0;
  };
  std::vector<Slot> slots(trace.num_slots);
  uint64_t live_bytes = 0;
  uint64_t live_count = 0;
  uint64_t peak_bytes = 0;
  uint64_t peak_count = 0;
  uint64_t total_bytes = 0;  // saturating, as TraceStats::total_bytes
  uint64_t allocations = 0;
  for (const TraceEvent& event : trace.events) {
    OCLVM_FUZZ_CHECK(event.slot < trace.num_slots);
    Slot& slot = slots[event.slot];
    if (event.kind == TraceEventKind::kAllocate) {
      OCLVM_FUZZ_CHECK(!slot.live);
      slot = {true, event.bytes};
      OCLVM_FUZZ_CHECK(event.bytes <= std::numeric_limits<uint64_t>::max() - live_bytes);
      live_bytes += event.bytes;
      ++live_count;
      ++allocations;
      total_bytes = event.bytes > std::numeric_limits<uint64_t>::max() - total_bytes
                        ? std::numeric_limits<uint64_t>::max()
                        : total_bytes + event.bytes;
      peak_bytes = std::max(peak_bytes, live_bytes);
      peak_count = std::max(peak_count, live_count);
    } else {
      OCLVM_FUZZ_CHECK(event.kind == TraceEventKind::kFree);
      OCLVM_FUZZ_CHECK(slot.live);
      OCLVM_FUZZ_CHECK(slot.bytes == event.bytes);
      slot.live = false;
      live_bytes -= event.bytes;
      --live_count;
    }
  }
  OCLVM_FUZZ_CHECK(allocations == stats.allocations);
  OCLVM_FUZZ_CHECK(total_bytes == stats.total_bytes);
  OCLVM_FUZZ_CHECK(peak_bytes == stats.live_peak_bytes);
  OCLVM_FUZZ_CHECK(peak_count == stats.live_peak_count);
  OCLVM_FUZZ_CHECK(live_count == stats.live_at_end);
  OCLVM_FUZZ_CHECK(live_bytes == stats.live_at_end_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Trace trace;
  try {
    trace = parse_trace(text, "fuzz.trace");
  } catch (const TraceError&) {
    return 0;  // a malformed trace, refused as it should be
  } catch (...) {
    fuzz::unexpected_exception("parse_trace threw something other than TraceError", __FILE__,
                               __LINE__);
  }
  OCLVM_FUZZ_CHECK(trace.file == "fuzz.trace");
  check_trace(trace);
  return 0;
}
