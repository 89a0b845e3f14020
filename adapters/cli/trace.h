// adapters/cli/trace.h — allocation traces in the `oclvm-trace v1` text format, parsed for replay.
//
// The format (design/storage.md and this header): one event a line,
//
//   # oclvm-trace v1        the header; it must be the first non-empty line
//   a ID BYTES              allocate BYTES bytes and call the allocation ID
//   f ID                    free the allocation ID
//   # anything              a comment (the line's first non-blank character is '#')
//
// blank lines are ignored; fields are separated by spaces or tabs; a trailing '\r' is ignored.
// ID and BYTES are unsigned decimal numbers (no sign, no suffix) that fit in 64 bits; BYTES must
// also fit in size_t. An ID names one allocation for the whole file: allocating an ID that is live,
// or that was allocated and freed before, is an error, and so is freeing an ID that is not live.
// BYTES == 0 is allowed: it is replayed as allocate(0), which by the Allocator contract returns an
// empty handle and touches nothing. Allocations still live at the end of the file are allowed; the
// parser counts them (TraceStats::live_at_end) and the replay frees them after the last event.
//
// Parsed form. IDs are mapped to dense slots at parse time, so that a replay indexes a vector and
// does no hashing per event. A slot is reused once its allocation is freed, so the slot table
// holds at most as many entries as the trace ever has live at once (TraceStats::live_peak_count).
//
// Errors. Every malformed input throws TraceError, whose what() reads `FILE:LINE: error: message`
// (compiler style; LINE is 1-based) and which carries the three parts separately. Nothing is
// returned from a malformed file.
//
// Thread-safety: parse_trace and load_trace are reentrant; a Trace is a value, immutable once
// returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oclvm/storage/errors.h"

namespace oclvm::cli {

// The exact header line a trace must start with.
inline constexpr std::string_view kTraceHeader = "# oclvm-trace v1";

// A malformed or unreadable trace. what() == "FILE:LINE: error: MESSAGE", or "FILE: error: MESSAGE"
// when the problem is the file as a whole (it cannot be read): then line() is 0.
class TraceError : public InvalidArgument {
 public:
  TraceError(std::string file, size_t line, std::string message);

  const std::string& file() const { return file_; }
  size_t line() const { return line_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  size_t line_;
  std::string message_;
};

enum class TraceEventKind : uint8_t { kAllocate, kFree };

// One event of a parsed trace.
struct TraceEvent {
  uint64_t bytes = 0;   // kAllocate: bytes requested (may be 0). kFree: the bytes of the
                        // allocation being freed (from its `a` line), so a replay needs no lookup.
  uint32_t slot = 0;    // dense index of the allocation in the slot table, < Trace::num_slots.
                        // Between an allocation and its free, no other event uses the slot.
  TraceEventKind kind = TraceEventKind::kAllocate;
};

// Facts about the trace itself, independent of any allocator.
struct TraceStats {
  uint64_t events = 0;            // a + f lines
  uint64_t allocations = 0;       // a lines (including BYTES == 0)
  uint64_t frees = 0;             // f lines
  uint64_t total_bytes = 0;       // sum of BYTES over all a lines (saturates at UINT64_MAX)
  uint64_t live_peak_bytes = 0;   // max over time of the sum of BYTES of live allocations: the
                                  // lower bound on what any allocator must hold at once
  uint64_t live_peak_count = 0;   // max over time of the number of live allocations
  uint64_t live_at_end = 0;       // allocations never freed in the file (allocations - frees)
  uint64_t live_at_end_bytes = 0; // their BYTES
};

struct Trace {
  std::string file;                // name used in messages and reports
  std::vector<TraceEvent> events;  // in file order
  uint32_t num_slots = 0;          // size of the slot table a replay needs (== live_peak_count)
  TraceStats stats;
};

// Parses `text`, the whole content of a trace; `file` names it in errors. Throws TraceError.
Trace parse_trace(std::string_view text, std::string_view file);

// Reads and parses the file at `path`. Throws TraceError (line 0) when it cannot be read, and
// TraceError from parse_trace when it is malformed.
Trace load_trace(const std::string& path);

}  // namespace oclvm::cli
