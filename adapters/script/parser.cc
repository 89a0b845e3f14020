// adapters/script/parser.cc — the Parser: one statement per line, dispatched from kStatements.
//
// parse() walks the text line by line. Each line becomes a TokenCursor (lexer.h); its first word
// is looked up in kStatements, the one table of the language's statements, and that row's parse
// function reads the operands left to right. Options are checked there too (before the first
// statement, at most once each). Names are resolved while parsing: one namespace for streams,
// host buffers, events and blobs, each declared once and before its use.
//
// The state that spans lines (names, whether instructions wait for a `run`, the byte budgets) is
// what makes the structural checks of parser.h possible; the parse functions of the table are
// the only writers of the Script. The parse functions themselves are in statements.cc, the class
// they share in parser_impl.h.
#include "adapters/script/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <utility>
#include <vector>

#include "adapters/script/parser_impl.h"

namespace oclvm::script {
namespace detail {

// "a, b, c or d".
std::string join_or(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  }
  return text;
}

Script Parser::parse() {
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
    throw ScriptError(script_.file, pending_line_, pending_column_,
                      "Expected a `run` after this instruction, but the script ends before one");
  }
  return std::move(script_);
}

void Parser::parse_line(int line, std::string_view content) {
  cursor_.emplace(tokenize(content, script_.file, line), script_.file, line);
  if (in().at_end()) return;
  const Token& keyword = in().take("a statement");
  const StatementRule* rule = nullptr;
  for (const StatementRule& candidate : statements()) {
    if (keyword.is_word(candidate.keyword)) rule = &candidate;
  }
  if (rule == nullptr) {
    static const std::string kKeywords = join_or(keywords_of(statements()));
    in().fail(keyword,
              "Expected a statement (" + kKeywords + "), but got '" + keyword.shown() + "'");
  }
  if (rule->option) {
    check_option_place(keyword);
  } else if (first_statement_line_ == 0) {
    first_statement_line_ = line;
  }
  (this->*rule->parse)(keyword);
  in().finish();
}

bool Parser::parse_form(std::span<const FormRule> forms, const Token& keyword,
                        const Token& word) {
  for (const FormRule& form : forms) {
    if (word.is_word(form.keyword)) {
      (this->*form.parse)(keyword);
      return true;
    }
  }
  return false;
}

size_t Parser::device_limit() const {
  return std::max(options_.opencl_devices, script_.options.required_devices);
}

Device Parser::device_of(const Token& token) {
  Device device;
  try {
    device = parse_device(token.text);
  } catch (const InvalidArgument& e) {
    in().fail(token, e.what());
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
    in().fail(token, "Expected a device that exists (" + range + "), but got '" + token.text +
                         "' (" + present + " present" + hint + ")");
  }
  return device;
}

Device Parser::take_device(const std::string& what) {
  const Token& token = in().take_word(what);
  if (!looks_like_device(token.text)) {
    in().fail(token, "Expected " + what + ", but got '" + token.text + "'");
  }
  return device_of(token);
}

const char* Parser::kind_name(NameKind kind) {
  switch (kind) {
    case NameKind::kStream: return "a stream";
    case NameKind::kHost: return "a host buffer";
    case NameKind::kEvent: return "an event";
    case NameKind::kBlob: return "a blob";
    case NameKind::kKernel: return "a kernel";
  }
  return "a name";
}

std::string Parser::declare(const Token& token, const char* what) {
  static const char* const kReserved[] = {"cpu", "opencl", "on"};
  if (!is_identifier(token.text)) {
    in().fail(token, std::string("Expected ") + what +
                         " name (a letter or _ followed by letters, digits or _), but got '" +
                         token.shown() + "'");
  }
  for (const char* reserved : kReserved) {
    if (token.text == reserved) {
      in().fail(token, std::string("Expected ") + what + " name, but got the reserved word '" +
                           token.text + "'");
    }
  }
  if (auto it = names_.find(token.text); it != names_.end()) {
    in().fail(token, "Expected a new name, but '" + token.text + "' is already " +
                         kind_name(it->second.kind) + " (declared at line " +
                         std::to_string(it->second.line) + ")");
  }
  return token.text;
}

int Parser::index_of(const Token& token, NameKind kind, const std::string& described) {
  auto it = names_.find(token.text);
  if (token.kind != Token::Kind::kWord || it == names_.end()) {
    in().fail(token, "Expected " + described + ", but got '" + token.shown() + "'");
  }
  if (it->second.kind != kind) {
    in().fail(token, std::string("Expected ") + kind_name(kind) + ", but '" + token.text +
                         "' is " + kind_name(it->second.kind) + " (declared at line " +
                         std::to_string(it->second.line) + ")");
  }
  return it->second.index;
}

StreamRef Parser::stream_of(const Token& token) {
  if (token.kind == Token::Kind::kWord && looks_like_device(token.text)) {
    return StreamRef{-1, device_of(token)};
  }
  int index = index_of(token, NameKind::kStream,
                       "a stream (a name declared by `stream`, or a device such as opencl:0)");
  return StreamRef{index, script_.streams[static_cast<size_t>(index)].device};
}

StreamRef Parser::take_stream(const std::string& what) {
  return stream_of(in().take(what));
}

std::optional<StreamRef> Parser::take_on() {
  if (!in().accept_word("on")) return std::nullopt;
  return take_stream("a stream or device after 'on'");
}

StreamRef Parser::take_required_on() {
  in().take_keyword("on");
  return take_stream("a stream or device after 'on'");
}

int Parser::take_event() {
  return index_of(in().take("an event"), NameKind::kEvent,
                  "an event (a name declared by `event`)");
}

int Parser::take_blob(const Token& keyword, const std::string& what) {
  Place place = take_place(what, true, false);
  if (place.offset != 0) {
    in().fail(keyword, "Expected a blob name without an offset after " + keyword.text);
  }
  return place.index;
}

Place Parser::take_place(const std::string& what, bool blobs_allowed, bool hosts_allowed) {
  const Token& token = in().take(what);
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
    in().fail(token, "Expected " + what + ", but got " + seen);
  }
  Place place;
  place.kind = it->second.kind == NameKind::kBlob ? Place::Kind::kBlob : Place::Kind::kHost;
  place.index = it->second.index;
  if (in().accept_punct("[")) {
    place.offset = in().take_size("an offset in bytes", /*allow_zero=*/true);
    in().take_punct("]", "']' after the offset");
  }
  return place;
}

const Token& Parser::peek_or_take(const std::string& what) {
  if (in().at_end()) in().take(what);
  return *in().peek();
}

void Parser::check_host_range(const Place& place, uint64_t bytes, int column) {
  if (place.kind != Place::Kind::kHost) return;
  const HostDecl& host = script_.hosts[static_cast<size_t>(place.index)];
  uint64_t end = place.offset + bytes;
  if (end < place.offset || end > host.size) {
    std::string end_text = end < place.offset ? "past 2^64" : std::to_string(end);
    in().fail(column, "Expected " + host.name + "[" + std::to_string(place.offset) + ".." +
                          end_text + ") to lie within host buffer " + host.name + " (" +
                          plural(host.size, "byte", "bytes") + ", line " +
                          std::to_string(host.line) + "), but it ends at " + end_text);
  }
}

std::vector<uint8_t> Parser::take_bytes(const std::string& what) {
  return in().take_bytes(what, inline_bytes_);
}

void Parser::add(const Token& keyword, Operation op) {
  script_.statements.push_back(Statement{in().line(), keyword.column, std::move(op)});
}

void Parser::add_instruction(const Token& keyword, Operation op) {
  if (pending_line_ == 0) {
    pending_line_ = in().line();
    pending_column_ = keyword.column;
  }
  after_run_ = false;
  add(keyword, std::move(op));
}

void Parser::require_run_before(const Token& keyword) {
  if (pending_line_ != 0) {
    in().fail(keyword, "Expected a `run` before this expectation, but the instructions from "
                       "line " + std::to_string(pending_line_) + " on have not been run");
  }
  after_run_ = false;
}

std::span<const Parser::StatementRule> Parser::statements() {
  static constexpr StatementRule kStatements[] = {
      {"alloc", false, &Parser::parse_alloc},
      {"release", false, &Parser::parse_release},
      {"write", false, &Parser::parse_write},
      {"copy", false, &Parser::parse_copy},
      {"fill", false, &Parser::parse_fill},
      {"soft_sync", false, &Parser::parse_soft_sync},
      {"barrier", false, &Parser::parse_barrier},
      {"launch", false, &Parser::parse_launch},
      {"record_event", false, &Parser::parse_record_event},
      {"wait_event", false, &Parser::parse_wait_event},
      {"record_blob_use", false, &Parser::parse_record_blob_use},
      {"access", false, &Parser::parse_access},
      {"empty_cache", false, &Parser::parse_empty_cache},
      {"reset_stats", false, &Parser::parse_reset_stats},
      {"set_memory_limit", false, &Parser::parse_set_memory_limit},
      {"query", false, &Parser::parse_query},
      {"run", false, &Parser::parse_run},
      {"expect", false, &Parser::parse_expect},
      {"stream", false, &Parser::parse_stream},
      {"host", false, &Parser::parse_host},
      {"event", false, &Parser::parse_event},
      {"kernel", false, &Parser::parse_kernel},
      {"require", true, &Parser::parse_require},
      {"allocator", true, &Parser::parse_allocator},
      {"limit", true, &Parser::parse_limit},
      {"caller_runs", true, &Parser::parse_caller_runs},
  };
  return kStatements;
}

std::span<const Parser::FormRule> Parser::access_forms() {
  static constexpr FormRule kAccessForms[] = {
      {"read", &Parser::parse_access_read},
      {"write", &Parser::parse_access_write},
  };
  return kAccessForms;
}

std::span<const Parser::FormRule> Parser::expect_forms() {
  static constexpr FormRule kExpectForms[] = {
      {"error", &Parser::parse_expect_error},
      {"bytes", &Parser::parse_expect_bytes},
      {"fill", &Parser::parse_expect_fill},
      {"barriers", &Parser::parse_expect_barriers},
  };
  return kExpectForms;
}

}  // namespace detail

Script parse_script(std::string_view text, std::string file, const ParseOptions& options) {
  return detail::Parser(text, std::move(file), options).parse();
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

}  // namespace oclvm::script
