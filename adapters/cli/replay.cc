// adapters/cli/replay.cc — the replay loop and its two report formats.
//
// The loop is the measured part: per event one vector index and one allocator call, no hashing,
// no allocation of its own (the slot table is sized from the trace before the clock starts).
#include "adapters/cli/replay.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"

namespace oclvm::cli {

namespace {


uint64_t delta(int64_t after, int64_t before) {
  OCLVM_DCHECK(after >= before);
  return static_cast<uint64_t>(after - before);
}

// Gives `taken` back to `allocator`, telling the device's memory history first while it is on.
void free_recorded(Allocator& allocator, const Allocation& taken) {
  MemoryHistory& history = allocator.backend().history();
  if (history.on()) {
    const auto address = reinterpret_cast<uintptr_t>(taken.ptr);
    const size_t bytes = allocator.allocated_size(taken);
    history.record(MemoryAction::kFreeRequested, address, bytes, 0);
    history.record(MemoryAction::kFreeCompleted, address, bytes, 0);
  }
  allocator.deallocate(taken);
}

// The slot table of a replay: one Allocation per dense trace slot, empty when nothing is live in
// it (never allocated yet, freed, a zero-byte allocation, or an allocation that ran out of
// memory). finish() frees what is live and empties the cache; if the table dies without it (an
// exception left the loop), the destructor does the same, so a failed replay leaks nothing.
class SlotTable {
 public:
  SlotTable(Allocator& allocator, uint32_t size) : allocator_(allocator), slots_(size) {}
  ~SlotTable() {
    if (finished_) return;
    try {
      finish();
    } catch (const std::exception& e) {
      // Only reachable when the allocator breaks its own contract while another exception is
      // already on its way out; the user is the only one left to tell.
      std::fprintf(stderr, "oclvm: error while cleaning up a failed replay: %s\n", e.what());
    }
  }
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  Allocation& operator[](uint32_t slot) { return slots_[slot]; }

  void finish() {
    finished_ = true;
    free_all();
    allocator_.empty_cache();
  }

  void free_all() {
    for (Allocation& allocation : slots_) {
      if (!allocation) continue;
      Allocation taken = allocation;
      allocation = Allocation{};
      free_recorded(allocator_, taken);
    }
  }

 private:
  Allocator& allocator_;
  std::vector<Allocation> slots_;
  bool finished_ = false;
};

// The series `--plot` draws (ReplayOptions::record_series): the trace's live bytes, as the trace
// says, whatever the allocator did, and what the allocator reserved, after each event.
struct Series {
  uint64_t live = 0;
  ReplayReport* report = nullptr;  // null: not recording

  void record(const TraceEvent& event, const Allocator& allocator) {
    if (report == nullptr) return;
    // A free carries the bytes of its allocation (TraceEvent::bytes).
    live = event.kind == TraceEventKind::kAllocate ? live + event.bytes : live - event.bytes;
    report->live_series.push_back(live);
    const auto reserved =
        static_cast<uint64_t>(allocator.stats().reserved_bytes.aggregate().current);
    report->reserved_series.push_back(reserved);
    // Reserved bytes grow only when a segment is made, so new peaks are rare (one per driver
    // allocation at most) and each copies the segment map once.
    if (reserved > peak_reserved) {
      peak_reserved = reserved;
      report->peak_event = report->reserved_series.size() - 1;
      report->peak_segments = allocator.segments();
    }
  }
  uint64_t peak_reserved = 0;
};

// One pass over the trace, recording block events in the device's memory history while it is on
// (ReplayOptions::snapshot); `snapshot`, when not null, is taken before the leftovers are freed.
// Returns the allocations that ran out of memory.
uint64_t replay_pass(const Trace& trace, Allocator& allocator, SlotTable& slots, Series& series,
                     DeviceMemorySnapshot* snapshot) {
  MemoryHistory& history = allocator.backend().history();
  uint64_t ooms = 0;
  for (const TraceEvent& event : trace.events) {
    Allocation& slot = slots[event.slot];
    if (event.kind == TraceEventKind::kAllocate) {
      OCLVM_DCHECK(!slot);
      try {
        slot = allocator.allocate(static_cast<size_t>(event.bytes));
        if (history.on() && slot) {
          history.record(MemoryAction::kAlloc, reinterpret_cast<uintptr_t>(slot.ptr),
                         allocator.allocated_size(slot), 0);
        }
      } catch (const OutOfMemoryError&) {
        ++ooms;  // the ID counts as never allocated: its free finds an empty slot
        if (history.on()) {
          history.record_oom(static_cast<size_t>(event.bytes), 0, device_free_bytes(allocator));
        }
      }
    } else if (slot) {
      Allocation taken = slot;
      slot = Allocation{};
      free_recorded(allocator, taken);
    }
    series.record(event, allocator);
  }
  if (snapshot != nullptr) {
    history.record(MemoryAction::kSnapshot, 0, 0, 0);
    snapshot->device = allocator.device();
    snapshot->segments = allocator.segments();
    snapshot->events = history.events();
    snapshot->dropped_events = history.dropped();
  }
  series.live = 0;  // the trace's leftovers are freed below
  slots.free_all();  // what the trace leaves live, so the next pass starts clean
  return ooms;
}

// The device's memory history, on for the life of a replay that takes a snapshot.
class HistoryScope {
 public:
  HistoryScope(MemoryHistory& history, bool on) : history_(history), on_(on) {
    if (!on_) return;
    HistoryOptions options;
    options.mode = HistoryMode::kAll;
    options.context = ContextMode::kNone;
    options.clear = true;
    history_.configure(options);
  }
  ~HistoryScope() {
    if (on_) history_.configure(HistoryOptions{});
  }
  HistoryScope(const HistoryScope&) = delete;
  HistoryScope& operator=(const HistoryScope&) = delete;

 private:
  MemoryHistory& history_;
  const bool on_;
};

std::string with_human_size(uint64_t bytes) {
  return std::to_string(bytes) + " (" + format_bytes(bytes) + ")";
}

std::string format_double(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

ReplayReport replay(const Trace& trace, Allocator& allocator, const ReplayOptions& options) {
  if (options.repeat == 0) {
    throw InvalidArgument("Expected a replay repeat count of at least 1, but got 0");
  }
  ReplayReport report;
  report.trace = trace.file;
  report.allocator = allocator.name();
  report.device = allocator.device().str();
  report.limit_bytes = allocator.memory_limit();
  report.repeat = options.repeat;
  report.live_peak_bytes = trace.stats.live_peak_bytes;

  const DeviceStats before = allocator.stats();
  allocator.reset_peak_stats();
  uint64_t ooms = 0;
  DeviceStats after_loop;
  {
    HistoryScope history(allocator.backend().history(), options.snapshot != nullptr);
    SlotTable slots(allocator, trace.num_slots);
    Series series;
    if (options.record_series) {
      series.report = &report;
      report.live_series.reserve(trace.events.size() * options.repeat);
      report.reserved_series.reserve(trace.events.size() * options.repeat);
    }
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t pass = 0; pass < options.repeat; ++pass) {
      const bool last = pass + 1 == options.repeat;
      ooms += replay_pass(trace, allocator, slots, series, last ? options.snapshot : nullptr);
    }
    const auto stop = std::chrono::steady_clock::now();
    report.seconds = std::chrono::duration<double>(stop - start).count();
    after_loop = allocator.stats();
    slots.finish();
  }
  const DeviceStats after = allocator.stats();

  report.events = trace.stats.events * options.repeat;
  report.reserved_peak_bytes = static_cast<uint64_t>(after_loop.reserved_bytes.aggregate().peak);
  report.allocated_peak_bytes = static_cast<uint64_t>(after_loop.allocated_bytes.aggregate().peak);
  report.ratio = report.live_peak_bytes == 0 ? 0.0
                                             : static_cast<double>(report.reserved_peak_bytes) /
                                                   static_cast<double>(report.live_peak_bytes);
  report.backend_allocs = delta(after.num_device_alloc, before.num_device_alloc);
  report.backend_frees = delta(after.num_device_free, before.num_device_free);
  report.ooms = delta(after.num_ooms, before.num_ooms);
  report.alloc_retries = delta(after.num_alloc_retries, before.num_alloc_retries);
  report.events_per_s = report.seconds > 0 ? static_cast<double>(report.events) / report.seconds : 0;
  // The allocator counts exactly the OutOfMemoryErrors the loop caught.
  OCLVM_DCHECK(report.ooms == ooms);
  return report;
}

std::string format_text(const ReplayReport& r) {
  struct Line {
    const char* key;
    std::string value;
  };
  const Line lines[] = {
      {"trace", r.trace},
      {"allocator", r.allocator},
      {"device", r.device},
      {"limit_bytes", r.limit_bytes == 0 ? std::string("none") : with_human_size(r.limit_bytes)},
      {"repeat", std::to_string(r.repeat)},
      {"events", std::to_string(r.events)},
      {"live_peak_bytes", with_human_size(r.live_peak_bytes)},
      {"reserved_peak_bytes", with_human_size(r.reserved_peak_bytes)},
      {"allocated_peak_bytes", with_human_size(r.allocated_peak_bytes)},
      {"ratio", format_double("%.4f", r.ratio) + " (reserved peak / live peak)"},
      {"backend_allocs", std::to_string(r.backend_allocs)},
      {"backend_frees", std::to_string(r.backend_frees)},
      {"ooms", std::to_string(r.ooms)},
      {"alloc_retries", std::to_string(r.alloc_retries)},
      {"seconds", format_double("%.6f", r.seconds)},
      {"events_per_s", format_double("%.0f", r.events_per_s)},
  };
  size_t width = 0;
  for (const Line& line : lines) width = std::max(width, std::string_view(line.key).size());
  std::string out;
  for (const Line& line : lines) {
    out += line.key;
    out += ':';
    out.append(width - std::string_view(line.key).size() + 1, ' ');
    out += line.value;
    out += '\n';
  }
  return out;
}

std::string format_json(const ReplayReport& r) {
  std::string out = "{";
  auto add = [&out](const char* key, const std::string& value) {
    if (out.size() > 1) out += ", ";
    out += json_string(key);
    out += ": ";
    out += value;
  };
  add("trace", json_string(r.trace));
  add("allocator", json_string(r.allocator));
  add("device", json_string(r.device));
  add("limit_bytes", std::to_string(r.limit_bytes));
  add("repeat", std::to_string(r.repeat));
  add("events", std::to_string(r.events));
  add("live_peak_bytes", std::to_string(r.live_peak_bytes));
  add("reserved_peak_bytes", std::to_string(r.reserved_peak_bytes));
  add("allocated_peak_bytes", std::to_string(r.allocated_peak_bytes));
  add("ratio", format_double("%.6f", r.ratio));
  add("backend_allocs", std::to_string(r.backend_allocs));
  add("backend_frees", std::to_string(r.backend_frees));
  add("ooms", std::to_string(r.ooms));
  add("alloc_retries", std::to_string(r.alloc_retries));
  add("seconds", format_double("%.6f", r.seconds));
  add("events_per_s", format_double("%.1f", r.events_per_s));
  out += "}";
  return out;
}

}  // namespace oclvm::cli
