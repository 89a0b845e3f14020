// adapters/cli/replay.h — replaying a parsed allocation trace through a real allocator.
//
// replay() drives an Allocator (and so a real device: every block is really allocated by the
// allocator from its backend) with the events of a Trace, and measures what the allocator held
// for it. The trace's own live peak is the lower bound; the allocator's reserved peak over it is
// the overhead of the allocator's policy (rounding, segment sizes, fragmentation).
//
// Semantics:
//   - Before the first event the allocator's peaks are reset (reset_peak_stats), so the reported
//     reserved peak belongs to this replay. Counters (device allocations, out-of-memory events) are
//     reported as differences between the stats after and before, so they are not reset.
//   - An allocation that throws OutOfMemoryError is counted (ReplayReport::ooms) and the replay
//     goes on as if that ID had never been allocated: its free is skipped.
//   - Allocations still live at the end of a pass (the trace may leave some) are freed then, so
//     every pass starts from the same state; after the last pass the cache is emptied.
//   - Any other exception (InvalidArgument for a request larger than the device's largest
//     allocation, BackendError) propagates after everything the replay holds has been freed and the
//     cache emptied: a failed replay leaves nothing live.
//
// Thread-safety: replay() uses the allocator exclusively for its duration (allocators are
// thread-compatible, storage/allocator.h). Reports are values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adapters/cli/trace.h"
#include "oclvm/instructions/memory_snapshot.h"
#include "oclvm/storage/allocator.h"

namespace oclvm::cli {

struct ReplayOptions {
  // Passes over the whole trace (>= 1). More than one measures the steady state, when the cache
  // already holds what the trace needs. Throws InvalidArgument when 0.
  uint64_t repeat = 1;
  // Keep the trace's live bytes and the allocator's reserved bytes after every event (of every
  // pass) in ReplayReport::live_series / reserved_series, and the segment map at the reserved
  // peak (peak_segments), for a picture (`--plot`). Each event then also reads the allocator's
  // statistics, and each new peak its segments, which `seconds` includes.
  bool record_series = false;
  // When not null, receives a memory snapshot (instructions/memory_snapshot.h) taken at the end
  // of the last pass, before the trace's leftovers are freed: the allocator's segments and blocks
  // then, and the history of every pass (segment_alloc / alloc / free_requested / free_completed
  // / segment_free / oom, stream 0, no frames). The device's memory history is on during the
  // replay and off after it.
  DeviceMemorySnapshot* snapshot = nullptr;
};

struct ReplayReport {
  std::string trace;                 // Trace::file
  std::string allocator;             // Allocator::name()
  std::string device;                // Device::str() of the allocator's device
  uint64_t limit_bytes = 0;          // Allocator::memory_limit(); 0 = none
  uint64_t repeat = 1;               // passes run

  uint64_t events = 0;               // events replayed over all passes (trace events x repeat)
  uint64_t live_peak_bytes = 0;      // the trace's live peak (TraceStats::live_peak_bytes)
  uint64_t reserved_peak_bytes = 0;  // peak of stats().reserved_bytes[AGGREGATE] over all passes
  uint64_t allocated_peak_bytes = 0; // peak of stats().allocated_bytes[AGGREGATE] (after rounding)
  double ratio = 0;                  // reserved_peak_bytes / live_peak_bytes; 0 when live peak is 0
  uint64_t backend_allocs = 0;       // segments created from the driver (num_device_alloc delta)
  uint64_t backend_frees = 0;        // segments given back to the driver (num_device_free delta),
                                     // including those released by the final empty_cache
  uint64_t ooms = 0;                 // allocations that ended in OutOfMemoryError (num_ooms delta)
  uint64_t alloc_retries = 0;        // allocations that needed the cache freed first
  double seconds = 0;                // wall time of the event loop over all passes (steady_clock),
                                     // without the final empty_cache
  double events_per_s = 0;           // events / seconds; 0 when seconds is 0
  std::vector<uint64_t> live_series;      // with record_series: bytes the trace holds live
  std::vector<uint64_t> reserved_series;  // with record_series: reserved_bytes, all pools
  // With record_series: the allocator's segments and blocks right after the event at which its
  // reserved bytes first reached their peak (peak_event, an index into the series).
  std::vector<SegmentSnapshot> peak_segments;
  uint64_t peak_event = 0;
};

// Replays `trace` through `allocator` (see the semantics above). Throws InvalidArgument for
// options.repeat == 0 (before touching the allocator).
ReplayReport replay(const Trace& trace, Allocator& allocator, const ReplayOptions& options = {});

// Readable multi-line report: aligned "key: value" lines, byte counts as raw numbers followed by a
// human size ("301772800 (287.79 MiB)").
std::string format_text(const ReplayReport& report);

// Exactly one JSON object on one line, with the keys trace, allocator, device, limit_bytes, repeat,
// events, live_peak_bytes, reserved_peak_bytes, allocated_peak_bytes, ratio, backend_allocs,
// backend_frees, ooms, alloc_retries, seconds, events_per_s.
std::string format_json(const ReplayReport& report);

}  // namespace oclvm::cli
