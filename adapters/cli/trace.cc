// adapters/cli/trace.cc — the `oclvm-trace v1` parser: lines to dense-slot events.
//
// One pass over the text. A hash map from ID to its record exists only while parsing; it keeps
// freed IDs too (with the lines of their `a` and `f`), so a reused ID is reported with where it
// was used before. Slots of freed allocations go on a free stack and are handed out again.
#include "adapters/cli/trace.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

namespace oclvm::cli {

namespace {

std::string format_trace_error(const std::string& file, size_t line, const std::string& message) {
  if (line == 0) return file + ": error: " + message;
  return file + ":" + std::to_string(line) + ": error: " + message;
}

// Splits a line into fields separated by spaces and tabs. Every field is counted; the first
// kMaxFields are kept (no event has more).
constexpr size_t kMaxFields = 3;

struct Fields {
  std::string_view field[kMaxFields];
  size_t count = 0;  // fields on the line
};

Fields split_fields(std::string_view line) {
  Fields fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size()) break;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (fields.count < kMaxFields) fields.field[fields.count] = line.substr(start, i - start);
    ++fields.count;
  }
  return fields;
}

std::string_view trim(std::string_view text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && (text[begin] == ' ' || text[begin] == '\t')) ++begin;
  while (end > begin && (text[end - 1] == ' ' || text[end - 1] == '\t' || text[end - 1] == '\r')) {
    --end;
  }
  return text.substr(begin, end - begin);
}

// What the parser remembers about an ID it has seen.
struct IdRecord {
  size_t allocated_at = 0;  // line of its `a`
  size_t freed_at = 0;      // line of its `f`; 0 while live
  uint32_t slot = 0;        // valid while live
  uint64_t bytes = 0;       // BYTES of its `a`
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view file) : text_(text) { trace_.file = file; }

  Trace run() {
    bool header_seen = false;
    size_t pos = 0;
    size_t line_number = 0;
    while (pos < text_.size()) {
      size_t newline = text_.find('\n', pos);
      if (newline == std::string_view::npos) newline = text_.size();
      std::string_view line = trim(text_.substr(pos, newline - pos));
      pos = newline + 1;
      line_ = ++line_number;
      if (line.empty()) continue;
      if (!header_seen) {
        if (line != kTraceHeader) {
          fail("expected the header '" + std::string(kTraceHeader) + "' as the first line, but got '" +
               std::string(line) + "'");
        }
        header_seen = true;
        continue;
      }
      if (line.front() == '#') continue;
      parse_event(line);
    }
    if (!header_seen) {
      line_ = line_number == 0 ? 1 : line_number;
      fail("expected the header '" + std::string(kTraceHeader) + "', but got " +
           (line_number == 0 ? "an empty file" : "only blank lines"));
    }
    trace_.stats.live_at_end = trace_.stats.allocations - trace_.stats.frees;
    trace_.stats.live_at_end_bytes = live_bytes_;
    trace_.num_slots = static_cast<uint32_t>(next_slot_);
    OCLVM_DCHECK(trace_.num_slots == trace_.stats.live_peak_count);
    return std::move(trace_);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw TraceError(trace_.file, line_, message);
  }

  uint64_t parse_number(std::string_view text, const char* what) const {
    uint64_t value = 0;
    const char* begin = text.data();
    const char* end = begin + text.size();
    auto [stop, ec] = std::from_chars(begin, end, value);
    if (ec == std::errc::result_out_of_range) {
      fail(std::string("expected ") + what + " to fit in 64 bits, but got '" + std::string(text) +
           "'");
    }
    if (ec != std::errc() || stop != end) {
      fail(std::string("expected ") + what + " to be an unsigned decimal number, but got '" +
           std::string(text) + "'");
    }
    return value;
  }

  void expect_operands(const Fields& fields, size_t expected, const char* form) const {
    size_t got = fields.count - 1;
    if (got == expected) return;
    fail(std::string("expected '") + form + "' with " + std::to_string(expected) + " operand" +
         (expected == 1 ? "" : "s") + ", but got " + std::to_string(got));
  }

  void parse_event(std::string_view line) {
    Fields fields = split_fields(line);
    std::string_view kind = fields.field[0];
    if (kind == "a") {
      expect_operands(fields, 2, "a ID BYTES");
      uint64_t id = parse_number(fields.field[1], "ID");
      uint64_t bytes = parse_number(fields.field[2], "BYTES");
      if constexpr (std::numeric_limits<size_t>::max() < std::numeric_limits<uint64_t>::max()) {
        if (bytes > std::numeric_limits<size_t>::max()) {
          fail("expected BYTES to fit in size_t, but got '" + std::string(fields.field[2]) + "'");
        }
      }
      on_allocate(id, bytes);
    } else if (kind == "f") {
      expect_operands(fields, 1, "f ID");
      on_free(parse_number(fields.field[1], "ID"));
    } else {
      fail("expected an event 'a ID BYTES' or 'f ID', but got '" + std::string(kind) + "'");
    }
  }

  void on_allocate(uint64_t id, uint64_t bytes) {
    auto [it, inserted] = ids_.try_emplace(id);
    IdRecord& record = it->second;
    if (!inserted) {
      if (record.freed_at == 0) {
        fail("expected a new ID, but ID " + std::to_string(id) + " is live (allocated at line " +
             std::to_string(record.allocated_at) + ")");
      }
      fail("expected a new ID, but ID " + std::to_string(id) + " was used before (allocated at line " +
           std::to_string(record.allocated_at) + ", freed at line " +
           std::to_string(record.freed_at) + ")");
    }
    if (bytes > std::numeric_limits<uint64_t>::max() - live_bytes_) {
      fail("expected the live bytes to fit in 64 bits, but allocating " + std::to_string(bytes) +
           " more on top of " + std::to_string(live_bytes_) + " overflows");
    }
    uint32_t slot = 0;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      if (next_slot_ == std::numeric_limits<uint32_t>::max()) {
        fail("expected at most " + std::to_string(next_slot_) +
             " allocations live at once, but got more");
      }
      slot = static_cast<uint32_t>(next_slot_++);
    }
    record.allocated_at = line_;
    record.slot = slot;
    record.bytes = bytes;

    trace_.events.push_back(TraceEvent{bytes, slot, TraceEventKind::kAllocate});
    TraceStats& stats = trace_.stats;
    ++stats.events;
    ++stats.allocations;
    stats.total_bytes = bytes > std::numeric_limits<uint64_t>::max() - stats.total_bytes
                            ? std::numeric_limits<uint64_t>::max()
                            : stats.total_bytes + bytes;
    live_bytes_ += bytes;
    ++live_count_;
    if (live_bytes_ > stats.live_peak_bytes) stats.live_peak_bytes = live_bytes_;
    if (live_count_ > stats.live_peak_count) stats.live_peak_count = live_count_;
  }

  void on_free(uint64_t id) {
    auto it = ids_.find(id);
    if (it == ids_.end()) {
      fail("expected the ID of a live allocation, but ID " + std::to_string(id) +
           " was never allocated");
    }
    IdRecord& record = it->second;
    if (record.freed_at != 0) {
      fail("expected the ID of a live allocation, but ID " + std::to_string(id) +
           " was already freed at line " + std::to_string(record.freed_at));
    }
    record.freed_at = line_;
    free_slots_.push_back(record.slot);
    trace_.events.push_back(TraceEvent{record.bytes, record.slot, TraceEventKind::kFree});
    ++trace_.stats.events;
    ++trace_.stats.frees;
    live_bytes_ -= record.bytes;
    --live_count_;
  }

  std::string_view text_;
  Trace trace_;
  size_t line_ = 0;  // line being parsed, 1-based
  std::unordered_map<uint64_t, IdRecord> ids_;
  std::vector<uint32_t> free_slots_;
  uint64_t next_slot_ = 0;  // slots ever handed out
  uint64_t live_bytes_ = 0;
  uint64_t live_count_ = 0;
};

}  // namespace

TraceError::TraceError(std::string file, size_t line, std::string message)
    : InvalidArgument(format_trace_error(file, line, message)),
      file_(std::move(file)),
      line_(line),
      message_(std::move(message)) {}

Trace parse_trace(std::string_view text, std::string_view file) {
  return Parser(text, file).run();
}

Trace load_trace(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw TraceError(path, 0, "expected a trace file, but got a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw TraceError(path, 0, std::string("expected a readable trace file, but opening it failed (") +
                                  std::strerror(errno) + ")");
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) {
    throw TraceError(path, 0, "expected a readable trace file, but reading it failed");
  }
  return parse_trace(content.str(), path);
}

}  // namespace oclvm::cli
