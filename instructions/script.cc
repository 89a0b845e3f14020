// instructions/script.cc — the script parser (tokens, statements, static checks) and executor.
//
// Parsing is line by line: a line is cut into tokens (words, "strings", punctuation), its first
// word selects the statement, and each statement parses its operands left to right with a cursor
// that knows how to say what it expected where. Everything the parser can check is checked before
// execute() ever sees the Script; see instructions/script.h for the split.
#include "oclvm/instructions/script.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "oclvm/storage/allocator_registry.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/options.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::script {

// ---------------------------------------------------------------------------------------------
// Small public helpers.

ScriptError::ScriptError(std::string file, int line, int column, std::string message)
    : InvalidArgument(line > 0 ? file + ":" + std::to_string(line) + ":" + std::to_string(column) +
                                     ": error: " + message
                               : file + ": error: " + message),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(std::move(message)) {}

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOutOfMemory: return "out_of_memory";
    case ErrorKind::kInvalidArgument: return "invalid_argument";
    case ErrorKind::kBackend: return "backend";
    case ErrorKind::kAny: return "error";
  }
  return "error";
}

const char* comparison_text(Comparison comparison) {
  switch (comparison) {
    case Comparison::kEqual: return "=";
    case Comparison::kNotEqual: return "!=";
    case Comparison::kLess: return "<";
    case Comparison::kLessEqual: return "<=";
    case Comparison::kGreater: return ">";
    case Comparison::kGreaterEqual: return ">=";
  }
  return "?";
}

bool compare(int64_t seen, Comparison comparison, int64_t expected) {
  switch (comparison) {
    case Comparison::kEqual: return seen == expected;
    case Comparison::kNotEqual: return seen != expected;
    case Comparison::kLess: return seen < expected;
    case Comparison::kLessEqual: return seen <= expected;
    case Comparison::kGreater: return seen > expected;
    case Comparison::kGreaterEqual: return seen >= expected;
  }
  return false;
}

int64_t StatKey::read(const DeviceStats& stats) const {
  if (scalar != nullptr) return stats.*scalar;
  return ((stats.*array)[static_cast<size_t>(pool)]).*field;
}

namespace {

struct PoolName {
  const char* name;
  StatType pool;
};
constexpr PoolName kPools[] = {
    {"all", StatType::kAggregate},
    {"small_pool", StatType::kSmallPool},
    {"large_pool", StatType::kLargePool},
};

struct FieldName {
  const char* name;
  int64_t Stat::*field;
};
constexpr FieldName kFields[] = {
    {"current", &Stat::current},
    {"peak", &Stat::peak},
    {"allocated", &Stat::allocated},
    {"freed", &Stat::freed},
};

// Short names: what people write most. Each stands for a PyTorch-style key of the aggregate pool.
struct ShortName {
  const char* name;
  const char* canonical;
};
constexpr ShortName kShortNames[] = {
    {"allocated", "allocated_bytes.all.current"},
    {"reserved", "reserved_bytes.all.current"},
    {"requested", "requested_bytes.all.current"},
    {"active", "active_bytes.all.current"},
    {"inactive_split_bytes", "inactive_split_bytes.all.current"},
    {"peak_allocated", "allocated_bytes.all.peak"},
    {"peak_reserved", "reserved_bytes.all.peak"},
    {"peak_requested", "requested_bytes.all.peak"},
    {"peak_active", "active_bytes.all.peak"},
    {"allocations", "allocation.all.current"},
    {"peak_allocations", "allocation.all.peak"},
    {"segments", "segment.all.current"},
    {"peak_segments", "segment.all.peak"},
    {"active_blocks", "active.all.current"},
    {"inactive_splits", "inactive_split.all.current"},
    {"num_allocs", "allocation.all.allocated"},
    {"num_frees", "allocation.all.freed"},
    {"num_segment_allocs", "segment.all.allocated"},
    {"num_segment_frees", "segment.all.freed"},
    {"total_allocated", "allocated_bytes.all.allocated"},
    {"total_freed", "allocated_bytes.all.freed"},
};

std::optional<StatKey> find_canonical(std::string_view name) {
  for (const StatCounterField& s : kStatCounterFields) {
    if (name == s.name) {
      StatKey key;
      key.canonical = s.name;
      key.scalar = s.member;
      return key;
    }
  }
  size_t first = name.find('.');
  if (first == std::string_view::npos) return std::nullopt;
  size_t second = name.find('.', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  std::string_view array_name = name.substr(0, first);
  std::string_view pool_name = name.substr(first + 1, second - first - 1);
  std::string_view field_name = name.substr(second + 1);
  StatKey key;
  key.canonical = std::string(name);
  for (const StatArrayField& a : kStatArrayFields) {
    if (array_name == a.name) key.array = a.member;
  }
  bool pool_found = false;
  for (const PoolName& p : kPools) {
    if (pool_name == p.name) {
      key.pool = p.pool;
      pool_found = true;
    }
  }
  for (const FieldName& f : kFields) {
    if (field_name == f.name) key.field = f.field;
  }
  if (key.array == nullptr || !pool_found || key.field == nullptr) return std::nullopt;
  return key;
}

}  // namespace

std::optional<StatKey> find_stat(std::string_view name) {
  std::string_view canonical = name;
  for (const ShortName& s : kShortNames) {
    if (name == s.name) canonical = s.canonical;
  }
  std::optional<StatKey> key = find_canonical(canonical);
  if (key) key->name = std::string(name);
  return key;
}

size_t Script::expectation_count() const {
  size_t count = 0;
  for (const Statement& statement : statements) {
    const Operation& op = statement.op;
    if (std::holds_alternative<op::ExpectError>(op) || std::holds_alternative<op::ExpectStat>(op) ||
        std::holds_alternative<op::ExpectBytes>(op) || std::holds_alternative<op::ExpectFill>(op) ||
        std::holds_alternative<op::ExpectBarriers>(op)) {
      ++count;
    }
  }
  return count;
}

std::string ExecuteResult::describe(const Script& script, size_t i) const {
  const Failure& failure = failures.at(i);
  return script.file + ":" + std::to_string(failure.line) + ": " + failure.message;
}

// ---------------------------------------------------------------------------------------------
// Parsing.

namespace {

struct Token {
  enum class Kind : uint8_t { kWord, kString, kPunct };
  Kind kind;
  std::string text;  // a word, a punctuation mark, or a string's unescaped contents
  int column;        // 1-based, of the first character
  int end_column;    // 1-based, just past the last character

  bool is_word(std::string_view word) const { return kind == Kind::kWord && text == word; }
  bool is_punct(std::string_view mark) const { return kind == Kind::kPunct && text == mark; }
  // How the token reads in a message.
  std::string shown() const { return kind == Kind::kString ? "\"" + text + "\"" : text; }
};

bool is_identifier(std::string_view text) {
  if (text.empty()) return false;
  auto head = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto tail = [&](char c) { return head(c) || (c >= '0' && c <= '9'); };
  if (!head(text[0])) return false;
  return std::all_of(text.begin() + 1, text.end(), tail);
}

// A word that names a device (as opposed to a declared name).
bool looks_like_device(std::string_view text) {
  return text == "cpu" || text == "opencl" || text.find(':') != std::string_view::npos;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

constexpr const char* kStatementKeywords =
    "alloc, release, write, copy, fill, soft_sync, barrier, access, empty_cache, reset_stats, "
    "query, run, expect, stream, host, require, allocator, limit or caller_runs";

class Parser {
 public:
  Parser(std::string_view text, std::string file, const ParseOptions& options)
      : text_(text), options_(options) {
    script_.file = std::move(file);
  }

  Script parse() {
    size_t start = 0;
    int line = 0;
    while (start <= text_.size()) {
      size_t end = text_.find('\n', start);
      if (end == std::string_view::npos) end = text_.size();
      ++line;
      std::string_view content = text_.substr(start, end - start);
      if (!content.empty() && content.back() == '\r') content.remove_suffix(1);
      parse_line(line, content);
      if (end == text_.size()) break;
      start = end + 1;
    }
    if (pending_line_ != 0) {
      fail_at(pending_line_, pending_column_,
              "Expected a `run` after this instruction, but the script ends before one");
    }
    return std::move(script_);
  }

 private:
  // --- Locations and errors.

  [[noreturn]] void fail_at(int line, int column, const std::string& message) const {
    throw ScriptError(script_.file, line, column, message);
  }
  [[noreturn]] void fail(int column, const std::string& message) const {
    fail_at(line_, column, message);
  }
  [[noreturn]] void fail(const Token& token, const std::string& message) const {
    fail(token.column, message);
  }

  // --- Tokens of the current line.

  void tokenize(std::string_view content) {
    tokens_.clear();
    next_ = 0;
    size_t i = 0;
    auto column_of = [](size_t index) { return static_cast<int>(index) + 1; };
    while (i < content.size()) {
      char c = content[i];
      if (c == ' ' || c == '\t') {
        ++i;
        continue;
      }
      if (c == '#') break;
      size_t begin = i;
      if (c == '"') {
        std::string value;
        ++i;
        bool closed = false;
        while (i < content.size()) {
          char d = content[i];
          if (d == '"') {
            closed = true;
            ++i;
            break;
          }
          if (d == '\\') {
            if (i + 1 < content.size() && (content[i + 1] == '"' || content[i + 1] == '\\')) {
              value += content[i + 1];
              i += 2;
              continue;
            }
            fail(column_of(i), "Expected \\\" or \\\\ after a backslash in a string, but got '" +
                                   std::string(content.substr(i, 2)) + "'");
          }
          value += d;
          ++i;
        }
        if (!closed) {
          fail(column_of(begin), "Expected a closing \" for this string, but the line ends");
        }
        tokens_.push_back({Token::Kind::kString, value, column_of(begin), column_of(i)});
        continue;
      }
      auto two = content.substr(i, 2);
      if (two == "->" || two == "<=" || two == ">=" || two == "!=") {
        tokens_.push_back({Token::Kind::kPunct, std::string(two), column_of(i), column_of(i + 2)});
        i += 2;
        continue;
      }
      if (c == '=' || c == '[' || c == ']' || c == ',' || c == '<' || c == '>') {
        tokens_.push_back({Token::Kind::kPunct, std::string(1, c), column_of(i), column_of(i + 1)});
        ++i;
        continue;
      }
      if (c == '!') fail(column_of(i), "Expected != or a word, but got '!'");
      while (i < content.size()) {
        char d = content[i];
        if (d == ' ' || d == '\t' || d == '#' || d == '"' || d == '=' || d == '[' || d == ']' ||
            d == ',' || d == '<' || d == '>' || d == '!') {
          break;
        }
        if (d == '-' && i + 1 < content.size() && content[i + 1] == '>') break;
        ++i;
      }
      tokens_.push_back({Token::Kind::kWord, std::string(content.substr(begin, i - begin)),
                         column_of(begin), column_of(i)});
    }
    end_column_ = tokens_.empty() ? 1 : tokens_.back().end_column;
  }

  bool at_end() const { return next_ >= tokens_.size(); }
  const Token* peek() const { return at_end() ? nullptr : &tokens_[next_]; }
  // What came before the cursor, for "after '...'" in messages.
  std::string consumed() const {
    std::string text;
    for (size_t i = 0; i < next_; ++i) {
      const Token& t = tokens_[i];
      bool glue = t.is_punct("[") || t.is_punct("]") || t.is_punct(",") ||
                  (i > 0 && (tokens_[i - 1].is_punct("[") || tokens_[i - 1].is_punct(",")));
      if (i > 0 && !glue) text += ' ';
      text += t.shown();
    }
    return text;
  }
  // The next token, which must exist: "Expected WHAT, but the line ends after '...'".
  const Token& take(const std::string& what) {
    if (at_end()) {
      fail(end_column_, "Expected " + what + ", but the line ends after '" + consumed() + "'");
    }
    return tokens_[next_++];
  }
  const Token& take_word(const std::string& what) {
    const Token& token = take(what);
    if (token.kind != Token::Kind::kWord) {
      fail(token, "Expected " + what + ", but got '" + token.shown() + "'");
    }
    return token;
  }
  void take_punct(std::string_view mark, const std::string& what) {
    const Token& token = take(what);
    if (!token.is_punct(mark)) {
      fail(token, "Expected " + what + ", but got '" + token.shown() + "'");
    }
  }
  void take_keyword(std::string_view keyword) {
    const Token& token = take("'" + std::string(keyword) + "'");
    if (!token.is_word(keyword)) {
      fail(token, "Expected '" + std::string(keyword) + "', but got '" + token.shown() + "'");
    }
  }
  bool accept_punct(std::string_view mark) {
    if (!at_end() && tokens_[next_].is_punct(mark)) {
      ++next_;
      return true;
    }
    return false;
  }
  void finish() {
    if (!at_end()) {
      const Token& token = tokens_[next_];
      fail(token, "Expected the end of the line after '" + consumed() + "', but got '" +
                      token.shown() + "'");
    }
  }

  // --- Numbers.

  // A byte count or offset: digits with an optional K/M/G suffix (Options' parse_byte_size).
  uint64_t size_of(const Token& token, const std::string& what, bool allow_zero) const {
    uint64_t value = 0;
    try {
      value = parse_byte_size(token.text, what);
    } catch (const InvalidArgument& e) {
      fail(token, e.what());
    }
    if (!allow_zero && value == 0) {
      fail(token, "Expected " + what + " greater than 0, but got '" + token.text + "'");
    }
    return value;
  }
  uint64_t take_size(const std::string& what, bool allow_zero = false) {
    return size_of(take_word(what), what, allow_zero);
  }
  // Plain decimal digits, at most `max`.
  uint64_t count_of(const Token& token, const std::string& what, uint64_t max) const {
    uint64_t value = 0;
    const char* begin = token.text.data();
    const char* end = begin + token.text.size();
    auto [stop, ec] = std::from_chars(begin, end, value);
    if (token.kind != Token::Kind::kWord || stop == begin || stop != end ||
        ec == std::errc::result_out_of_range || value > max) {
      bool digits_only = token.kind == Token::Kind::kWord && stop == end && stop != begin;
      const char* why = digits_only ? " (too large)" : "";
      fail(token, "Expected " + what + " as a whole number from 0 to " + std::to_string(max) +
                      ", but got '" + token.shown() + "'" + why);
    }
    return value;
  }

  // --- Devices, names, streams, places.

  size_t device_limit() const {
    return std::max(options_.opencl_devices, script_.options.required_devices);
  }

  Device device_of(const Token& token) const {
    Device device;
    try {
      device = parse_device(token.text);
    } catch (const InvalidArgument& e) {
      fail(token, e.what());
    }
    if (device.type == DeviceType::kOpenCL && static_cast<size_t>(device.index) >= device_limit()) {
      std::string present = plural(options_.opencl_devices, "OpenCL device", "OpenCL devices");
      std::string hint = script_.options.required_devices == 0
                             ? "; a script that needs more says `require devices " +
                                   std::to_string(device.index + 1) + "`"
                             : "";
      std::string last = std::to_string(device_limit() - 1);
      std::string range = device_limit() == 0   ? "cpu"
                          : device_limit() == 1 ? "opencl:0 or cpu"
                                                : "opencl:0 to opencl:" + last + ", or cpu";
      fail(token, "Expected a device that exists (" + range + "), but got '" + token.text + "' (" +
                      present + " present" + hint + ")");
    }
    return device;
  }
  Device take_device(const std::string& what = "a device (opencl:N or cpu)") {
    const Token& token = take_word(what);
    if (!looks_like_device(token.text)) {
      fail(token, "Expected " + what + ", but got '" + token.text + "'");
    }
    return device_of(token);
  }

  enum class NameKind : uint8_t { kStream, kHost, kBlob };
  struct NameEntry {
    NameKind kind;
    int index;
    int line;
  };
  static const char* kind_name(NameKind kind) {
    switch (kind) {
      case NameKind::kStream: return "a stream";
      case NameKind::kHost: return "a host buffer";
      case NameKind::kBlob: return "a blob";
    }
    return "a name";
  }

  // A new name: an identifier, not reserved, not declared before.
  std::string declare(const Token& token, const char* what) {
    static const char* const kReserved[] = {"cpu", "opencl", "on"};
    if (!is_identifier(token.text)) {
      fail(token, std::string("Expected ") + what +
                      " name (a letter or _ followed by letters, digits or _), but got '" +
                      token.shown() + "'");
    }
    for (const char* reserved : kReserved) {
      if (token.text == reserved) {
        fail(token, std::string("Expected ") + what + " name, but got the reserved word '" +
                        token.text + "'");
      }
    }
    if (auto it = names_.find(token.text); it != names_.end()) {
      fail(token, "Expected a new name, but '" + token.text + "' is already " +
                      kind_name(it->second.kind) + " (declared at line " +
                      std::to_string(it->second.line) + ")");
    }
    return token.text;
  }

  StreamRef stream_of(const Token& token) const {
    if (token.kind == Token::Kind::kWord && looks_like_device(token.text)) {
      return StreamRef{-1, device_of(token)};
    }
    auto it = names_.find(token.text);
    if (token.kind != Token::Kind::kWord || it == names_.end()) {
      fail(token, "Expected a stream (a name declared by `stream`, or a device such as opencl:0), "
                  "but got '" + token.shown() + "'");
    }
    if (it->second.kind != NameKind::kStream) {
      fail(token, "Expected a stream, but '" + token.text + "' is " + kind_name(it->second.kind) +
                      " (declared at line " + std::to_string(it->second.line) + ")");
    }
    const StreamDecl& decl = script_.streams[static_cast<size_t>(it->second.index)];
    return StreamRef{it->second.index, decl.device};
  }
  StreamRef take_stream(const std::string& what = "a stream or device") {
    return stream_of(take(what));
  }
  std::optional<StreamRef> take_on() {
    if (at_end() || !tokens_[next_].is_word("on")) return std::nullopt;
    ++next_;
    return take_stream("a stream or device after 'on'");
  }

  // NAME or NAME[OFFSET], of a blob or a host buffer (as `allowed` says).
  Place take_place(const std::string& what, bool blobs_allowed, bool hosts_allowed) {
    const Token& token = take(what);
    auto it = names_.find(token.text);
    if (token.kind != Token::Kind::kWord || it == names_.end() ||
        it->second.kind == NameKind::kStream ||
        (it->second.kind == NameKind::kBlob && !blobs_allowed) ||
        (it->second.kind == NameKind::kHost && !hosts_allowed)) {
      std::string seen = "'" + token.shown() + "'";
      if (token.kind == Token::Kind::kWord && it != names_.end()) {
        seen += " (" + std::string(kind_name(it->second.kind)) + ", declared at line " +
                std::to_string(it->second.line) + ")";
      } else if (token.kind == Token::Kind::kWord && is_identifier(token.text)) {
        seen += " (nothing of that name is declared before this line)";
      }
      fail(token, "Expected " + what + ", but got " + seen);
    }
    Place place;
    place.kind = it->second.kind == NameKind::kBlob ? Place::Kind::kBlob : Place::Kind::kHost;
    place.index = it->second.index;
    if (accept_punct("[")) {
      place.offset = take_size("an offset in bytes", /*allow_zero=*/true);
      take_punct("]", "']' after the offset");
    }
    return place;
  }

  // Host places are checked here: nothing else stops a copy from writing past a host buffer.
  void check_host_range(const Place& place, uint64_t bytes, int column) const {
    if (place.kind != Place::Kind::kHost) return;
    const HostDecl& host = script_.hosts[static_cast<size_t>(place.index)];
    uint64_t end = place.offset + bytes;
    if (end < place.offset || end > host.size) {
      std::string end_text = end < place.offset ? "past 2^64" : std::to_string(end);
      fail(column, "Expected " + host.name + "[" + std::to_string(place.offset) + ".." + end_text +
                       ") to lie within host buffer " + host.name + " (" +
                       plural(host.size, "byte", "bytes") + ", line " + std::to_string(host.line) +
                       "), but it ends at " + end_text);
    }
  }

  // --- Data.

  // The rest of the line as bytes: `ab`, or `ab*COUNT` for COUNT copies. At least one.
  std::vector<uint8_t> take_bytes(const std::string& what) {
    std::vector<uint8_t> bytes;
    if (at_end()) take(what);  // fails: the line ends
    while (!at_end()) {
      const Token& token = tokens_[next_++];
      std::string_view text = token.text;
      std::string_view byte_text = text;
      uint64_t count = 1;
      if (auto star = text.find('*'); star != std::string_view::npos) {
        byte_text = text.substr(0, star);
        Token count_token = token;
        count_token.text = std::string(text.substr(star + 1));
        count_token.column = token.column + static_cast<int>(star) + 1;
        count = size_of(count_token, "a repeat count", /*allow_zero=*/false);
      }
      if (token.kind != Token::Kind::kWord || byte_text.size() != 2 ||
          hex_value(byte_text[0]) < 0 || hex_value(byte_text[1]) < 0) {
        fail(token, "Expected a byte as two hex digits (such as 0f or ab, or ab*16 for 16 of "
                    "them), but got '" + token.shown() + "'");
      }
      if (count > kMaxInlineBytes - bytes.size()) {
        fail(token, "Expected at most " + std::to_string(kMaxInlineBytes) +
                        " inline bytes on one line, but got more");
      }
      if (count > kMaxScriptInlineBytes - inline_bytes_ - bytes.size()) {
        fail(token, "Expected at most " + std::to_string(kMaxScriptInlineBytes) +
                        " inline bytes in one script, but got more");
      }
      uint8_t value = static_cast<uint8_t>(hex_value(byte_text[0]) * 16 + hex_value(byte_text[1]));
      bytes.insert(bytes.end(), count, value);
    }
    inline_bytes_ += bytes.size();
    return bytes;
  }

  // 0x followed by 2, 4, 8 or 16 hex digits: a 1, 2, 4 or 8-byte pattern.
  std::pair<uint64_t, unsigned> take_pattern() {
    const Token& token = take_word("a fill pattern (0xab, 0xabcd, 0xdeadbeef or 16 hex digits)");
    std::string_view text = token.text;
    std::string_view digits = text.starts_with("0x") ? text.substr(2) : std::string_view();
    bool ok = digits.size() == 2 || digits.size() == 4 || digits.size() == 8 || digits.size() == 16;
    uint64_t value = 0;
    for (char c : digits) {
      if (hex_value(c) < 0) ok = false;
      value = (value << 4) | static_cast<uint64_t>(std::max(hex_value(c), 0));
    }
    if (!ok) {
      fail(token, "Expected a fill pattern of 0x and 2, 4, 8 or 16 hex digits (a 1, 2, 4 or "
                  "8-byte pattern), but got '" + token.text + "'");
    }
    return {value, static_cast<unsigned>(digits.size() / 2)};
  }

  Comparison take_comparison() {
    const Token& token = take("a comparison (=, !=, <, <=, >, >=)");
    static const std::pair<const char*, Comparison> kMarks[] = {
        {"=", Comparison::kEqual},     {"!=", Comparison::kNotEqual},
        {"<", Comparison::kLess},      {"<=", Comparison::kLessEqual},
        {">", Comparison::kGreater},   {">=", Comparison::kGreaterEqual}};
    for (const auto& [mark, comparison] : kMarks) {
      if (token.is_punct(mark)) return comparison;
    }
    fail(token, "Expected a comparison (=, !=, <, <=, >, >=), but got '" + token.shown() + "'");
  }

  int64_t take_value(const std::string& what) {
    const Token& token = take_word(what);
    uint64_t value = size_of(token, what, /*allow_zero=*/true);
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(token, "Expected " + what + " of at most 2^63-1 (statistics are int64_t), but got '" +
                      token.text + "'");
    }
    return static_cast<int64_t>(value);
  }

  // --- Statements.

  void add(const Token& keyword, Operation op) {
    script_.statements.push_back(Statement{line_, keyword.column, std::move(op)});
  }
  // An instruction: it joins the batch of the next `run`.
  void add_instruction(const Token& keyword, Operation op) {
    if (pending_line_ == 0) {
      pending_line_ = line_;
      pending_column_ = keyword.column;
    }
    after_run_ = false;
    add(keyword, std::move(op));
  }
  // An expectation other than `expect error`: everything built must have run.
  void require_no_pending(const Token& keyword) {
    if (pending_line_ != 0) {
      fail(keyword, "Expected a `run` before this expectation, but the instructions from line " +
                        std::to_string(pending_line_) + " on have not been run");
    }
    after_run_ = false;
  }

  void parse_line(int line, std::string_view content) {
    line_ = line;
    tokenize(content);
    if (tokens_.empty()) return;
    const Token& keyword = tokens_[next_++];
    if (keyword.kind != Token::Kind::kWord) {
      fail(keyword, std::string("Expected a statement (") + kStatementKeywords + "), but got '" +
                        keyword.shown() + "'");
    }
    const std::string& k = keyword.text;
    if (k == "require" || k == "allocator" || k == "limit" || k == "caller_runs") {
      parse_option(keyword);
    } else {
      if (first_statement_line_ == 0) first_statement_line_ = line_;
      if (k == "stream") parse_stream(keyword);
      else if (k == "host") parse_host(keyword);
      else if (k == "alloc") parse_alloc(keyword);
      else if (k == "release") parse_release(keyword);
      else if (k == "write") parse_write(keyword);
      else if (k == "copy") parse_copy(keyword);
      else if (k == "fill") parse_fill(keyword);
      else if (k == "soft_sync") parse_soft_sync(keyword);
      else if (k == "barrier") parse_barrier(keyword);
      else if (k == "access") parse_access(keyword);
      else if (k == "empty_cache") parse_empty_cache(keyword);
      else if (k == "reset_stats") parse_reset_stats(keyword);
      else if (k == "query") parse_query(keyword);
      else if (k == "run") parse_run(keyword);
      else if (k == "expect") parse_expect(keyword);
      else {
        fail(keyword, std::string("Expected a statement (") + kStatementKeywords + "), but got '" +
                          k + "'");
      }
    }
    finish();
  }

  void parse_option(const Token& keyword) {
    const std::string& k = keyword.text;
    if (first_statement_line_ != 0) {
      fail(keyword, "Expected `" + k + "` among the options before the first statement (line " +
                        std::to_string(first_statement_line_) + "), but got it after");
    }
    if (auto [it, inserted] = option_lines_.emplace(k, line_); !inserted) {
      fail(keyword, "Expected one `" + k + "` line, but got a second one (the first is at line " +
                        std::to_string(it->second) + ")");
    }
    ScriptOptions& o = script_.options;
    if (k == "require") {
      take_keyword("devices");
      const Token& count = take_word("a number of OpenCL devices");
      o.required_devices = count_of(count, "a number of OpenCL devices", 32767);
      if (o.required_devices == 0) {
        fail(count, "Expected a number of OpenCL devices greater than 0, but got '0'");
      }
    } else if (k == "allocator") {
      const Token& name = take_word("an allocator name");
      std::vector<std::string> names;
      for (const auto& entry : AllocatorRegistry::instance().entries()) {
        names.push_back(entry.first);
      }
      if (std::find(names.begin(), names.end(), name.text) == names.end()) {
        std::string list;
        for (size_t i = 0; i < names.size(); ++i) {
          list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
        }
        fail(name, "Expected an allocator (" + list + "), but got '" + name.text + "'");
      }
      o.allocator = name.text;
    } else if (k == "limit") {
      o.memory_limit = take_size("a memory limit");
    } else {  // caller_runs
      const Token& value = take_word("on or off");
      if (value.text != "on" && value.text != "off") {
        fail(value, "Expected on or off, but got '" + value.text + "'");
      }
      o.caller_runs = value.text == "on";
    }
  }

  void parse_stream(const Token&) {
    StreamDecl decl;
    decl.name = declare(take_word("a stream name"), "a stream");
    decl.line = line_;
    take_punct("=", "'=' after the stream name");
    decl.device = take_device();
    const Token& role = take_word("a stream role (compute, h2d, d2h or user N)");
    if (role.text == "compute") {
      decl.role = vm::StreamRole::kCompute;
    } else if (role.text == "h2d") {
      decl.role = vm::StreamRole::kHostToDevice;
    } else if (role.text == "d2h") {
      decl.role = vm::StreamRole::kDeviceToHost;
    } else if (role.text == "user") {
      decl.role = vm::StreamRole::kUser;
      decl.user_index = static_cast<int>(
          count_of(take_word("a user stream number"), "a user stream number", 1'000'000));
    } else {
      fail(role,
           "Expected a stream role (compute, h2d, d2h or user N), but got '" + role.text + "'");
    }
    names_[decl.name] = {NameKind::kStream, static_cast<int>(script_.streams.size()), line_};
    script_.streams.push_back(std::move(decl));
  }

  void parse_host(const Token&) {
    HostDecl decl;
    decl.name = declare(take_word("a host buffer name"), "a host buffer");
    decl.line = line_;
    if (accept_punct("=")) {
      decl.initial = take_bytes("the host buffer's bytes");
      decl.size = decl.initial.size();
    } else {
      const Token& size = take_word("a size in bytes or '= BYTES'");
      decl.size = size_of(size, "a host buffer size", /*allow_zero=*/false);
      if (decl.size > kMaxHostBuffer) {
        fail(size, "Expected a host buffer of at most " + std::to_string(kMaxHostBuffer) +
                       " bytes, but got " + std::to_string(decl.size));
      }
      if (decl.size > kMaxScriptHostBytes - host_bytes_) {
        fail(size, "Expected at most " + std::to_string(kMaxScriptHostBytes) +
                       " bytes of host buffers in one script, but got more");
      }
    }
    host_bytes_ += decl.size;
    names_[decl.name] = {NameKind::kHost, static_cast<int>(script_.hosts.size()), line_};
    script_.hosts.push_back(std::move(decl));
  }

  void parse_alloc(const Token& keyword) {
    const Token& name_token = take_word("a blob name");
    std::string name = declare(name_token, "a blob");
    take_punct("=", "'=' after the blob name");
    op::Alloc alloc;
    alloc.stream = take_stream("a stream or device to allocate on");
    const Token& size = take_word("a size in bytes or a typed shape such as f32[2,3]");
    std::optional<DType> dtype;
    for (int d = static_cast<int>(DType::kF32); d <= static_cast<int>(DType::kBool); ++d) {
      if (size.text == dtype_name(static_cast<DType>(d))) dtype = static_cast<DType>(d);
    }
    if (dtype) {
      alloc.dtype = dtype;
      take_punct("[", "'[' and the shape after the element type");
      if (!accept_punct("]")) {
        while (true) {
          const Token& dim = take_word("a dimension");
          constexpr auto kMaxDim = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
          alloc.shape.push_back(static_cast<int64_t>(count_of(dim, "a dimension", kMaxDim)));
          if (accept_punct("]")) break;
          take_punct(",", "',' or ']'");
        }
      }
    } else {
      alloc.bytes = size_of(size, "a blob size", /*allow_zero=*/false);
    }
    alloc.blob = static_cast<int>(script_.blobs.size());
    names_[name] = {NameKind::kBlob, alloc.blob, line_};
    script_.blobs.push_back(BlobDecl{name, line_});
    add_instruction(keyword, std::move(alloc));
  }

  void parse_release(const Token& keyword) {
    Place place = take_place("a blob to release", true, false);
    if (place.offset != 0) fail(keyword, "Expected a blob name without an offset after release");
    add_instruction(keyword, op::Release{place.index});
  }

  void parse_write(const Token& keyword) {
    op::Write write;
    write.dst = take_place("a blob to write to", true, false);
    write.stream = take_on();
    take_punct("=", "'=' and the bytes to write");
    write.data = take_bytes("the bytes to write");
    add_instruction(keyword, std::move(write));
  }

  void parse_copy(const Token& keyword) {
    op::Copy copy;
    const Token& source = *peek_or_take("a blob or host buffer to copy from");
    copy.src = take_place("a blob or host buffer to copy from", true, true);
    take_punct("->", "'->' after the source");
    const Token& destination = *peek_or_take("a blob or host buffer to copy to");
    copy.dst = take_place("a blob or host buffer to copy to", true, true);
    if (copy.src.kind == Place::Kind::kHost && copy.dst.kind == Place::Kind::kHost) {
      fail(destination, "Expected a blob on at least one side of a copy, but both '" + source.text +
                            "' and '" + destination.text + "' are host buffers");
    }
    const Token& size = take_word("a size in bytes");
    copy.bytes = size_of(size, "a copy size", /*allow_zero=*/false);
    check_host_range(copy.src, copy.bytes, size.column);
    check_host_range(copy.dst, copy.bytes, size.column);
    copy.stream = take_on();
    add_instruction(keyword, std::move(copy));
  }
  // The next token (for messages that name it later); fails like take() when the line ends.
  const Token* peek_or_take(const std::string& what) {
    if (at_end()) take(what);
    return peek();
  }

  void parse_fill(const Token& keyword) {
    op::Fill fill;
    fill.dst = take_place("a blob to fill", true, false);
    fill.bytes = take_size("a fill size");
    std::tie(fill.pattern, fill.pattern_size) = take_pattern();
    fill.stream = take_on();
    add_instruction(keyword, std::move(fill));
  }

  void parse_soft_sync(const Token& keyword) {
    op::SoftSync sync;
    sync.from = take_stream("the stream to sync from");
    take_punct("->", "'->' after the first stream");
    sync.to = take_stream("the stream that waits");
    add_instruction(keyword, std::move(sync));
  }

  void parse_barrier(const Token& keyword) {
    add_instruction(keyword, op::Barrier{take_stream("a stream or device")});
  }

  void parse_access(const Token& keyword) {
    const Token& mode = take_word("read or write");
    if (mode.text == "read") {
      op::AccessRead read;
      read.src = take_place("a blob to read", true, false);
      const Token& size = take_word("a size in bytes");
      read.bytes = size_of(size, "an access size", /*allow_zero=*/false);
      take_punct("->", "'->' and a host buffer to read into");
      const Token& host = *peek_or_take("a host buffer to read into");
      read.dst = take_place("a host buffer to read into", false, true);
      check_host_range(read.dst, read.bytes, host.column);
      read.stream = take_on();
      add_instruction(keyword, std::move(read));
    } else if (mode.text == "write") {
      op::AccessWrite write;
      write.dst = take_place("a blob to write", true, false);
      write.stream = take_on();
      take_punct("=", "'=' and the bytes to write");
      write.data = take_bytes("the bytes to write");
      add_instruction(keyword, std::move(write));
    } else {
      fail(mode, "Expected read or write, but got '" + mode.text + "'");
    }
  }

  void parse_empty_cache(const Token& keyword) {
    add_instruction(keyword, op::EmptyCache{take_device()});
  }

  void parse_reset_stats(const Token& keyword) {
    op::ResetStats reset;
    reset.device = take_device();
    const Token& kind = take_word("peak or accumulated");
    if (kind.text == "peak") {
      reset.kind = ResetKind::kPeak;
    } else if (kind.text == "accumulated") {
      reset.kind = ResetKind::kAccumulated;
    } else {
      fail(kind, "Expected peak or accumulated, but got '" + kind.text + "'");
    }
    add_instruction(keyword, std::move(reset));
  }

  void parse_query(const Token& keyword) { add_instruction(keyword, op::Query{take_device()}); }

  void parse_run(const Token& keyword) {
    add(keyword, op::Run{});
    pending_line_ = 0;
    after_run_ = true;
  }

  void parse_expect(const Token& keyword) {
    const Token& what = take_word("what to expect (error, bytes, fill, barriers or a statistic)");
    if (what.text == "error") {
      if (!after_run_) {
        std::string seen;
        if (script_.statements.empty()) {
          seen = "no statement comes before it";
        } else if (std::holds_alternative<op::ExpectError>(script_.statements.back().op)) {
          seen = "it follows another `expect error` (line " +
                 std::to_string(script_.statements.back().line) + "); one per run";
        } else {
          seen = "it follows line " + std::to_string(script_.statements.back().line) +
                 ", which is not a `run`";
        }
        fail(keyword, "Expected `expect error` right after a `run`, but " + seen);
      }
      after_run_ = false;
      op::ExpectError expect;
      const Token& kind =
          take_word("an error kind (out_of_memory, invalid_argument, backend or error)");
      static const std::pair<const char*, ErrorKind> kKinds[] = {
          {"out_of_memory", ErrorKind::kOutOfMemory},
          {"invalid_argument", ErrorKind::kInvalidArgument},
          {"backend", ErrorKind::kBackend},
          {"error", ErrorKind::kAny}};
      bool found = false;
      for (const auto& [name, value] : kKinds) {
        if (kind.text == name) {
          expect.kind = value;
          found = true;
        }
      }
      if (!found) {
        fail(kind, "Expected an error kind (out_of_memory, invalid_argument, backend or error), "
                   "but got '" + kind.text + "'");
      }
      if (!at_end()) {
        const Token& text = take("a message substring in double quotes");
        if (text.kind != Token::Kind::kString) {
          fail(text,
               "Expected a message substring in double quotes, but got '" + text.shown() + "'");
        }
        expect.substring = text.text;
      }
      add(keyword, std::move(expect));
      return;
    }
    require_no_pending(keyword);
    if (what.text == "bytes") {
      op::ExpectBytes expect;
      const Token& place_token = *peek_or_take("a blob or host buffer");
      expect.place = take_place("a blob or host buffer", true, true);
      take_punct("=", "'=' and the expected bytes");
      expect.bytes = take_bytes("the expected bytes");
      check_host_range(expect.place, expect.bytes.size(), place_token.column);
      add(keyword, std::move(expect));
    } else if (what.text == "fill") {
      op::ExpectFill expect;
      const Token& place_token = *peek_or_take("a blob or host buffer");
      expect.place = take_place("a blob or host buffer", true, true);
      expect.bytes = take_size("a size in bytes");
      if (expect.bytes > kMaxInlineBytes) {
        fail(place_token, "Expected at most " + std::to_string(kMaxInlineBytes) +
                              " bytes to check, but got " + std::to_string(expect.bytes));
      }
      std::tie(expect.pattern, expect.pattern_size) = take_pattern();
      check_host_range(expect.place, expect.bytes, place_token.column);
      add(keyword, std::move(expect));
    } else if (what.text == "barriers") {
      op::ExpectBarriers expect;
      expect.comparison = take_comparison();
      expect.value = take_value("a number of barriers");
      add(keyword, std::move(expect));
    } else {
      std::optional<StatKey> key = find_stat(what.text);
      if (!key) {
        fail(what, "Expected error, bytes, fill, barriers or a statistic (allocated, reserved, "
                   "requested, active, peak_allocated, peak_reserved, allocations, segments, "
                   "num_allocs, num_frees, num_ooms, num_alloc_retries, num_device_alloc, "
                   "num_device_free, ... or ARRAY.POOL.FIELD such as reserved_bytes.all.peak), but "
                   "got '" + what.text + "'");
      }
      op::ExpectStat expect;
      expect.key = std::move(*key);
      expect.device = take_device();
      expect.comparison = take_comparison();
      expect.value = take_value("a statistic value");
      add(keyword, std::move(expect));
    }
  }

  // --- State.

  std::string_view text_;
  const ParseOptions options_;
  Script script_;

  std::vector<Token> tokens_;  // of the current line
  size_t next_ = 0;            // cursor into tokens_
  int line_ = 0;
  int end_column_ = 1;         // just past the current line's last token

  std::unordered_map<std::string, NameEntry> names_;
  std::unordered_map<std::string, int> option_lines_;
  int first_statement_line_ = 0;  // 0: only options so far
  int pending_line_ = 0;          // first instruction not yet followed by a `run` (0: none)
  int pending_column_ = 0;
  bool after_run_ = false;        // the previous statement is a `run`
  uint64_t inline_bytes_ = 0;     // of every byte list so far; <= kMaxScriptInlineBytes
  uint64_t host_bytes_ = 0;       // of every host buffer so far; <= kMaxScriptHostBytes
};

}  // namespace

Script parse_script(std::string_view text, std::string file, const ParseOptions& options) {
  return Parser(text, std::move(file), options).parse();
}

Script load_script(const std::string& path, const ParseOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ScriptError(path, 0, 0, "Expected a script file, but got a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ScriptError(path, 0, 0,
                      std::string("Expected a readable script file, but opening it failed (") +
                          std::strerror(errno) + ")");
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_script(buffer.str(), path, options);
}

// ---------------------------------------------------------------------------------------------
// Execution.

namespace {

struct Outcome {
  bool failed = false;
  ErrorKind kind = ErrorKind::kAny;
  std::string message;
};

Outcome outcome_of(const std::exception_ptr& error) {
  Outcome outcome;
  if (!error) return outcome;
  outcome.failed = true;
  try {
    std::rethrow_exception(error);
  } catch (const OutOfMemoryError& e) {
    outcome.kind = ErrorKind::kOutOfMemory;
    outcome.message = e.what();
  } catch (const InvalidArgument& e) {
    outcome.kind = ErrorKind::kInvalidArgument;
    outcome.message = e.what();
  } catch (const BackendError& e) {
    outcome.kind = ErrorKind::kBackend;
    outcome.message = e.what();
  } catch (const std::exception& e) {
    outcome.kind = ErrorKind::kAny;
    outcome.message = e.what();
  } catch (...) {
    outcome.kind = ErrorKind::kAny;
    outcome.message = "an exception that is not a std::exception";
  }
  return outcome;
}

std::string hex_bytes(const uint8_t* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < size; ++i) {
    if (i > 0) text += ' ';
    text += kDigits[data[i] >> 4];
    text += kDigits[data[i] & 15];
  }
  return text;
}

// The byte at `index` of a little-endian `size`-byte pattern repeated from offset 0 of the range.
uint8_t pattern_byte(uint64_t pattern, unsigned size, uint64_t index) {
  return static_cast<uint8_t>(pattern >> (8 * (index % size)));
}

std::string pattern_text(uint64_t pattern, unsigned size) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "0x%0*" PRIx64, static_cast<int>(2 * size), pattern);
  return buffer;
}

Options vm_options_of(const ScriptOptions& script) {
  Options options;
  const Options& environment = DeviceManager::instance().options();
  options.platform = environment.platform;
  options.pocl_default_devices = environment.pocl_default_devices;
  options.allocator = script.allocator;
  options.memory_limit = script.memory_limit;
  return options;
}

class Executor {
 public:
  Executor(const Script& script, const ExecuteOptions& options, ExecuteResult& result)
      : script_(script),
        options_(options),
        result_(result),
        vm_(DeviceManager::instance(), vm_options_of(script.options),
            vm::VmOptions{.max_in_flight = 16384, .caller_runs = script.options.caller_runs}),
        builder_(vm_) {
    if (options_.trace) {
      vm_.set_trace([this](const vm::TraceEvent& event) { trace(event); });
    }
    for (const StreamDecl& decl : script_.streams) {
      streams_.push_back(&vm_.stream(decl.device, decl.role, decl.user_index));
    }
    for (const HostDecl& decl : script_.hosts) {
      std::vector<uint8_t> buffer = decl.initial;
      buffer.resize(decl.size, 0);
      hosts_.push_back(std::move(buffer));
    }
    blobs_.resize(script_.blobs.size());
  }

  void execute() {
    const std::vector<Statement>& statements = script_.statements;
    for (size_t i = 0; i < statements.size(); ++i) {
      const Statement& statement = statements[i];
      line_ = statement.line;
      bool checked = std::visit([&](const auto& op) { return step(op); }, statement.op);
      if (checked) ++result_.expectations;
      bool error_expected = i + 1 < statements.size() &&
                            std::holds_alternative<op::ExpectError>(statements[i + 1].op);
      if (std::holds_alternative<op::Run>(statement.op) && last_run_.failed && !error_expected) {
        fail("run failed with " + std::string(error_kind_name(last_run_.kind)) + ": " +
             last_run_.message + " (no `expect error` follows this run)");
      }
    }
    release_leftovers();
  }

 private:
  // --- Helpers.

  void fail(std::string message) { fail_at(line_, std::move(message)); }
  void fail_at(int line, std::string message) {
    result_.failures.push_back(Failure{line, std::move(message)});
  }

  vm::Stream& stream(const StreamRef& ref) {
    if (ref.stream < 0) return vm_.stream(ref.device);
    return *streams_[static_cast<size_t>(ref.stream)];
  }
  vm::Stream* stream_or_null(const std::optional<StreamRef>& ref) {
    return ref ? &stream(*ref) : nullptr;
  }
  const std::string& blob_name(int index) const {
    return script_.blobs[static_cast<size_t>(index)].name;
  }
  // The blob object of a name; throws InvalidArgument when its `alloc` was never built.
  std::shared_ptr<BlobObject> blob(int index) const {
    const std::shared_ptr<BlobObject>& object = blobs_[static_cast<size_t>(index)];
    if (object == nullptr) {
      throw InvalidArgument("Expected blob " + blob_name(index) +
                            " to exist, but its `alloc` (line " +
                            std::to_string(script_.blobs[static_cast<size_t>(index)].line) +
                            ") was dropped with a batch that failed to build");
    }
    return object;
  }
  uint8_t* host(const Place& place) {
    return hosts_[static_cast<size_t>(place.index)].data() + place.offset;
  }
  std::string place_text(const Place& place, uint64_t bytes) const {
    const std::string& name = place.kind == Place::Kind::kBlob
                                  ? blob_name(place.index)
                                  : script_.hosts[static_cast<size_t>(place.index)].name;
    return name + "[" + std::to_string(place.offset) + ".." +
           std::to_string(place.offset + bytes) + ")";
  }

  // Builds one statement's instructions into the current batch. A builder error (its checks run
  // while building) voids the whole batch: nothing of it is submitted, and its `run` fails with
  // that error. Statements after the error in the same batch are skipped.
  template <typename Fn>
  void build(Fn&& fn) {
    if (build_error_) return;
    size_t before = builder_.size();
    try {
      fn();
    } catch (...) {
      build_error_ = std::current_exception();
    }
    for (size_t k = before; k < builder_.size(); ++k) batch_lines_.push_back(line_);
  }

  // Submits what has been built (one vm::Run) and returns its error, if any.
  std::exception_ptr submit() {
    vm::InstructionList list = builder_.take();
    std::vector<int> lines = std::move(batch_lines_);
    batch_lines_.clear();
    if (build_error_) {
      std::exception_ptr error = build_error_;
      build_error_ = nullptr;
      return error;  // `list` dies here: nothing of the batch runs
    }
    if (options_.trace) {
      MutexLock lock(trace_mutex_);
      instruction_lines_.clear();
      size_t k = 0;
      for (const vm::Instruction& instruction : list.items()) {
        instruction_lines_[&instruction] = k < lines.size() ? lines[k] : line_;
        ++k;
      }
    }
    std::exception_ptr error;
    try {
      vm_.run(std::move(list));
    } catch (...) {
      error = std::current_exception();
    }
    if (options_.trace) {
      MutexLock lock(trace_mutex_);
      instruction_lines_.clear();
    }
    return error;
  }

  void trace(const vm::TraceEvent& event) {
    MutexLock lock(trace_mutex_);
    std::string text = script_.file;
    if (auto it = instruction_lines_.find(&event.instruction); it != instruction_lines_.end()) {
      text += ":" + std::to_string(it->second);
    }
    text += ": ";
    text += event.instruction.name();
    text += " on " + event.stream.name();
    std::string describe = event.instruction.describe();
    if (!describe.empty()) text += " " + describe;
    if (!event.instruction.operands().empty()) {
      text += " [";
      bool first = true;
      for (const vm::Operand& operand : event.instruction.operands()) {
        if (!first) text += ", ";
        first = false;
        auto it = blob_names_.find(operand.blob.get());
        text += it != blob_names_.end() ? it->second : std::string("?");
        text += operand.access == vm::Access::kRead ? " read" : " write";
      }
      text += "]";
    }
    char duration[48];
    std::snprintf(duration, sizeof duration, " %.1f us", event.seconds * 1e6);
    text += duration;
    if (event.error != nullptr) text += std::string(" FAILED: ") + event.error;
    options_.trace(text);
  }

  // --- Instructions.

  bool step(const op::Alloc& alloc) {
    build([&] {
      std::shared_ptr<BlobObject> object =
          alloc.dtype ? builder_.allocate_blob(stream(alloc.stream),
                                               Dims(alloc.shape.begin(), alloc.shape.end()),
                                               *alloc.dtype)
                      : builder_.allocate_blob(stream(alloc.stream), alloc.bytes);
      blobs_[static_cast<size_t>(alloc.blob)] = object;
      MutexLock lock(trace_mutex_);
      blob_names_[object.get()] = blob_name(alloc.blob);
    });
    return false;
  }
  bool step(const op::Release& release) {
    build([&] { builder_.release(blob(release.blob)); });
    return false;
  }
  bool step(const op::Write& write) {
    build([&] {
      builder_.copy_host_to_device(write.data.data(), blob(write.dst.index), write.dst.offset,
                                   write.data.size(), stream_or_null(write.stream));
    });
    return false;
  }
  bool step(const op::Copy& copy) {
    build([&] {
      vm::Stream* on = stream_or_null(copy.stream);
      if (copy.src.kind == Place::Kind::kHost) {
        builder_.copy_host_to_device(host(copy.src), blob(copy.dst.index), copy.dst.offset,
                                     copy.bytes, on);
      } else if (copy.dst.kind == Place::Kind::kHost) {
        builder_.copy_device_to_host(blob(copy.src.index), copy.src.offset, host(copy.dst),
                                     copy.bytes, on);
      } else {
        builder_.copy(blob(copy.src.index), copy.src.offset, blob(copy.dst.index), copy.dst.offset,
                      copy.bytes, on);
      }
    });
    return false;
  }
  bool step(const op::Fill& fill) {
    build([&] {
      builder_.fill(blob(fill.dst.index), fill.dst.offset, fill.bytes, fill.pattern,
                    fill.pattern_size, stream_or_null(fill.stream));
    });
    return false;
  }
  bool step(const op::SoftSync& sync) {
    build([&] { builder_.soft_sync(stream(sync.from), stream(sync.to)); });
    return false;
  }
  bool step(const op::Barrier& barrier) {
    build([&] {
      builder_.barrier(stream(barrier.stream),
                       [this] { barriers_.fetch_add(1, std::memory_order_acq_rel); });
    });
    return false;
  }
  bool step(const op::AccessRead& read) {
    build([&] {
      uint8_t* destination = host(read.dst);
      uint64_t expected = read.bytes;
      builder_.access(
          blob(read.src.index), read.src.offset, read.bytes, HostAccess::kRead,
          [destination, expected](void* mapped, size_t bytes) {
            if (bytes != expected) {
              throw Error("Expected a mapping of " + std::to_string(expected) +
                          " bytes for `access read`, but got " + std::to_string(bytes));
            }
            std::memcpy(destination, mapped, bytes);
          },
          stream_or_null(read.stream));
    });
    return false;
  }
  bool step(const op::AccessWrite& write) {
    build([&] {
      const std::vector<uint8_t>* data = &write.data;
      builder_.access(
          blob(write.dst.index), write.dst.offset, write.data.size(), HostAccess::kWrite,
          [data](void* mapped, size_t bytes) {
            if (bytes != data->size()) {
              throw Error("Expected a mapping of " + std::to_string(data->size()) +
                          " bytes for `access write`, but got " + std::to_string(bytes));
            }
            std::memcpy(mapped, data->data(), bytes);
          },
          stream_or_null(write.stream));
    });
    return false;
  }
  bool step(const op::EmptyCache& empty) {
    build([&] { builder_.empty_cache(empty.device); });
    return false;
  }
  bool step(const op::ResetStats& reset) {
    build([&] { builder_.reset_stats(reset.device, reset.kind); });
    return false;
  }
  bool step(const op::Query& query) {
    build([&] {
      auto stats = std::make_unique<DeviceStats>();
      stats->num_ooms = -1;  // sentinel: still -1 when the query did not run
      builder_.query_stats(query.device, stats.get());
      queries_.push_back(PendingQuery{line_, query.device, std::move(stats)});
    });
    return false;
  }
  bool step(const op::Run&) {
    last_run_ = outcome_of(submit());
    for (PendingQuery& query : queries_) {
      std::string note = script_.file + ":" + std::to_string(query.line) + ": statistics of " +
                         query.device.str();
      if (query.stats->num_ooms < 0) {
        note += ": not available (the query did not run)\n";
      } else {
        note += ":\n" + query.stats->to_string();
      }
      result_.notes.push_back(std::move(note));
    }
    queries_.clear();
    return false;
  }

  // --- Expectations. Each returns true: it counts as one expectation.

  bool step(const op::ExpectError& expect) {
    std::string wanted = std::string(error_kind_name(expect.kind)) +
                         (expect.substring.empty() ? ""
                                                   : " containing \"" + expect.substring + "\"");
    if (!last_run_.failed) {
      fail("expected the run to fail with " + wanted + ", but it succeeded");
    } else if (expect.kind != ErrorKind::kAny && expect.kind != last_run_.kind) {
      fail("expected the run to fail with " + wanted + ", but it failed with " +
           error_kind_name(last_run_.kind) + ": " + last_run_.message);
    } else if (last_run_.message.find(expect.substring) == std::string::npos) {
      fail("expected the run to fail with " + wanted +
           ", but the message is: " + last_run_.message);
    }
    return true;
  }

  bool step(const op::ExpectStat& expect) {
    DeviceStats stats;
    std::string what = expect.key.name;
    if (expect.key.name != expect.key.canonical) what += " (" + expect.key.canonical + ")";
    what += " of " + expect.device.str();
    try {
      builder_.query_stats(expect.device, &stats);
    } catch (const std::exception& e) {
      builder_.take();
      fail("could not query " + what + ": " + e.what());
      return true;
    }
    batch_lines_.assign(builder_.size(), line_);
    Outcome outcome = outcome_of(submit());
    if (outcome.failed) {
      fail("could not query " + what + ": " + outcome.message);
      return true;
    }
    int64_t seen = expect.key.read(stats);
    if (!compare(seen, expect.comparison, expect.value)) {
      fail("expected " + what + " " + comparison_text(expect.comparison) + " " +
           std::to_string(expect.value) + ", but got " + std::to_string(seen));
    }
    return true;
  }

  // Reads `bytes` bytes of a place: a host buffer directly, a blob through a device-to-host copy
  // run by the VM. Returns nullopt (after recording a failure) when the read fails.
  std::optional<std::vector<uint8_t>> read_place(const Place& place, uint64_t bytes) {
    if (place.kind == Place::Kind::kHost) {
      const uint8_t* data = host(place);
      return std::vector<uint8_t>(data, data + bytes);
    }
    std::vector<uint8_t> buffer(bytes);
    try {
      builder_.copy_device_to_host(blob(place.index), place.offset, buffer.data(), bytes);
    } catch (const std::exception& e) {
      builder_.take();
      fail("could not read " + place_text(place, bytes) + ": " + e.what());
      return std::nullopt;
    }
    batch_lines_.assign(builder_.size(), line_);
    Outcome outcome = outcome_of(submit());
    if (outcome.failed) {
      fail("could not read " + place_text(place, bytes) + ": " + outcome.message);
      return std::nullopt;
    }
    return buffer;
  }

  // Records a failure for the first byte of `seen` that differs from `expected_at(i)`.
  template <typename Expected>
  void compare_bytes(const Place& place, const std::vector<uint8_t>& seen,
                     const std::string& wanted, Expected&& expected_at) {
    for (size_t i = 0; i < seen.size(); ++i) {
      uint8_t want = expected_at(i);
      if (seen[i] != want) {
        size_t shown = std::min<size_t>(seen.size() - i, 16);
        fail("expected " + place_text(place, seen.size()) + " " + wanted + ", but byte " +
             std::to_string(place.offset + i) + " is " + hex_bytes(&seen[i], 1) + " (expected " +
             hex_bytes(&want, 1) + "); from there it reads " + hex_bytes(&seen[i], shown) +
             (shown < seen.size() - i ? " ..." : ""));
        return;
      }
    }
  }

  bool step(const op::ExpectBytes& expect) {
    std::optional<std::vector<uint8_t>> seen = read_place(expect.place, expect.bytes.size());
    if (!seen) return true;
    size_t shown = std::min<size_t>(expect.bytes.size(), 16);
    std::string wanted = "= " + hex_bytes(expect.bytes.data(), shown) +
                         (expect.bytes.size() > shown ? " ..." : "");
    compare_bytes(expect.place, *seen, wanted, [&](size_t i) { return expect.bytes[i]; });
    return true;
  }

  bool step(const op::ExpectFill& expect) {
    std::optional<std::vector<uint8_t>> seen = read_place(expect.place, expect.bytes);
    if (!seen) return true;
    std::string wanted = "filled with " + pattern_text(expect.pattern, expect.pattern_size);
    compare_bytes(expect.place, *seen, wanted,
                  [&](size_t i) { return pattern_byte(expect.pattern, expect.pattern_size, i); });
    return true;
  }

  bool step(const op::ExpectBarriers& expect) {
    int64_t seen = barriers_.load(std::memory_order_acquire);
    if (!compare(seen, expect.comparison, expect.value)) {
      fail("expected barriers " + std::string(comparison_text(expect.comparison)) + " " +
           std::to_string(expect.value) + " (callbacks run so far), but got " +
           std::to_string(seen));
    }
    return true;
  }

  // Every blob still holding memory at the end is a leak of the script: reported at its `alloc`
  // line, then released so that the VM shuts down clean.
  void release_leftovers() {
    for (size_t i = 0; i < blobs_.size(); ++i) {
      const std::shared_ptr<BlobObject>& object = blobs_[i];
      if (object == nullptr || object->storage() == nullptr || object->storage()->released()) {
        continue;
      }
      line_ = script_.blobs[i].line;
      fail("leaked blob " + script_.blobs[i].name + " (" +
           plural(object->storage()->size(), "byte", "bytes") + "): it is still live at the end of "
           "the script; add `release " + script_.blobs[i].name + "` and a `run`");
      try {
        builder_.release(object);
        batch_lines_.push_back(line_);
      } catch (const std::exception& e) {
        fail("could not release leaked blob " + script_.blobs[i].name + ": " + e.what());
      }
    }
    if (builder_.size() > 0) {
      Outcome outcome = outcome_of(submit());
      if (outcome.failed) fail("releasing the leaked blobs failed: " + outcome.message);
    }
  }

  struct PendingQuery {
    int line;
    Device device;
    std::unique_ptr<DeviceStats> stats;  // written by the QueryStats instruction
  };

  // Immutable for the run.
  const Script& script_;
  const ExecuteOptions& options_;
  ExecuteResult& result_;

  // The VM and what the script has named on it. The VM is declared first among these so that it
  // is destroyed last (after the blobs' last references are gone and their memory released).
  vm::VirtualMachine vm_;
  InstructionsBuilder builder_;
  std::vector<vm::Stream*> streams_;              // per StreamDecl
  std::vector<std::vector<uint8_t>> hosts_;       // per HostDecl; never resized after start
  std::vector<std::shared_ptr<BlobObject>> blobs_;  // per BlobDecl; null until its alloc is built

  // The batch being built.
  std::vector<int> batch_lines_;      // script line of each instruction built, in order
  std::exception_ptr build_error_;    // the first builder error of the batch (voids it)
  std::vector<PendingQuery> queries_;

  Outcome last_run_;
  int line_ = 0;                      // of the statement being executed
  std::atomic<int64_t> barriers_{0};  // barrier callbacks run so far (from worker threads)

  // Tracing: read by worker threads during a run, written between runs.
  Mutex trace_mutex_;
  std::unordered_map<const vm::Instruction*, int> instruction_lines_ OCLVM_GUARDED_BY(trace_mutex_);
  std::unordered_map<const BlobObject*, std::string> blob_names_ OCLVM_GUARDED_BY(trace_mutex_);
};

}  // namespace

ExecuteResult execute(const Script& script, const ExecuteOptions& options) {
  ExecuteResult result;
  size_t present = DeviceManager::instance().opencl_device_count();
  if (script.options.required_devices > present) {
    result.skipped = true;
    result.skip_reason =
        "requires " + plural(script.options.required_devices, "OpenCL device", "OpenCL devices") +
        ", " + std::to_string(present) + " present";
    return result;
  }
  {
    Executor executor(script, options, result);
    executor.execute();
  }
  return result;
}

}  // namespace oclvm::script
