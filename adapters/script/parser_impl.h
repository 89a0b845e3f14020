// adapters/script/parser_impl.h — the Parser behind parse_script (parser.h), private to
// adapters/script: parser.cc has the line loop, the names, the operands every statement takes and
// the table of statements; statements.cc has each statement's parse function.
//
// Thread-safety: a Parser is one call of parse_script, confined to its thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "adapters/script/parser.h"

namespace oclvm::script::detail {

// "a, b, c or d".
std::string join_or(const std::vector<std::string>& items);

// The keywords of a table of rules, in its order.
template <typename Rule>
std::vector<std::string> keywords_of(std::span<const Rule> rules) {
  std::vector<std::string> keywords;
  for (const Rule& rule : rules) keywords.emplace_back(rule.keyword);
  return keywords;
}

class Parser {
 public:
  Parser(std::string_view text, std::string file, const ParseOptions& options)
      : text_(text), options_(options) {
    script_.file = std::move(file);
  }

  Script parse();

 private:
  using ParseFunction = void (Parser::*)(const Token& keyword);

  // A statement of the language. kStatements has one row per keyword; nothing else lists them.
  struct StatementRule {
    std::string_view keyword;
    bool option;  // an option: before every other statement, at most once
    ParseFunction parse;
  };

  // A word after `access` or `expect` that selects the statement's form.
  struct FormRule {
    std::string_view keyword;
    ParseFunction parse;
  };

  TokenCursor& in() { return *cursor_; }

  void parse_line(int line, std::string_view content);

  // Dispatches on the word after the keyword (`access read`, `expect error`); returns false when
  // no form matches (the cursor is then past that word).
  bool parse_form(std::span<const FormRule> forms, const Token& keyword, const Token& word);

  // --- Devices, names, streams, places.

  size_t device_limit() const;

  Device device_of(const Token& token);
  Device take_device(const std::string& what = "a device (opencl:N or cpu)");

  enum class NameKind : uint8_t { kStream, kHost, kEvent, kBlob, kKernel };
  struct NameEntry {
    NameKind kind;
    int index;
    int line;
  };
  static const char* kind_name(NameKind kind);

  // A new name: an identifier, not reserved, not declared before.
  std::string declare(const Token& token, const char* what);

  // The index of a declared name of `kind`; `described` says what was expected when the token is
  // no declared name ("a stream (a name declared by `stream`, ...)").
  int index_of(const Token& token, NameKind kind, const std::string& described);

  StreamRef stream_of(const Token& token);
  StreamRef take_stream(const std::string& what = "a stream or device");
  std::optional<StreamRef> take_on();
  // `on STREAM` where the stream is not optional.
  StreamRef take_required_on();

  int take_event();
  // A blob's name alone, as `release` and `record_blob_use` take it.
  int take_blob(const Token& keyword, const std::string& what);

  // NAME or NAME[OFFSET], of a blob or a host buffer (as `allowed` says).
  Place take_place(const std::string& what, bool blobs_allowed, bool hosts_allowed);
  // The next token (for messages that name it later); fails like take() when the line ends.
  const Token& peek_or_take(const std::string& what);

  // Host places are checked here: nothing else stops a copy from writing past a host buffer.
  void check_host_range(const Place& place, uint64_t bytes, int column);

  std::vector<uint8_t> take_bytes(const std::string& what);

  // --- Adding statements.

  void add(const Token& keyword, Operation op);
  // An instruction: it joins the batch of the next `run`.
  void add_instruction(const Token& keyword, Operation op);
  // Before an expectation other than `expect error`: everything built must have run.
  void require_run_before(const Token& keyword);

  // --- Options.

  void check_option_place(const Token& keyword);

  void parse_require(const Token&);

  void parse_allocator(const Token&);

  void parse_limit(const Token&);

  void parse_caller_runs(const Token&);

  // --- Declarations.

  void parse_stream(const Token&);

  void parse_host(const Token&);

  void parse_kernel(const Token&);

  // [N, N, N]: one to three sizes (0 allowed: a launch over nothing).
  uint32_t take_dims(std::array<size_t, 3>* sizes, const std::string& what);

  KernelArgument take_kernel_argument();

  void parse_launch(const Token& keyword);

  void parse_event(const Token&);

  // --- Instructions.

  void parse_alloc(const Token& keyword);

  void parse_release(const Token& keyword);

  // `PLACE [on STREAM] = BYTES`: the operands of `write` (op::Write) and `access write`
  // (op::AccessWrite), which differ in the instruction they build.
  template <typename WriteOp>
  void parse_inline_write(const Token& keyword, const std::string& what) {
    WriteOp write;
    write.dst = take_place(what, true, false);
    write.stream = take_on();
    in().take_punct("=", "'=' and the bytes to write");
    write.data = take_bytes("the bytes to write");
    add_instruction(keyword, std::move(write));
  }

  void parse_write(const Token& keyword);

  void parse_copy(const Token& keyword);

  void parse_fill(const Token& keyword);

  void parse_soft_sync(const Token& keyword);

  void parse_barrier(const Token& keyword);

  void parse_record_event(const Token& keyword);

  void parse_wait_event(const Token& keyword);

  void parse_record_blob_use(const Token& keyword);

  void parse_access(const Token& keyword);

  void parse_access_read(const Token& keyword);

  void parse_access_write(const Token& keyword);

  void parse_empty_cache(const Token& keyword);

  void parse_reset_stats(const Token& keyword);

  void parse_set_memory_limit(const Token& keyword);

  void parse_query(const Token& keyword) { add_instruction(keyword, op::Query{take_device()}); }

  void parse_run(const Token& keyword);

  // --- Expectations.

  void parse_expect(const Token& keyword);

  void parse_expect_error(const Token& keyword);

  void parse_expect_bytes(const Token& keyword);

  void parse_expect_fill(const Token& keyword);

  void parse_expect_barriers(const Token& keyword);

  // --- The tables: every keyword of the language appears once, here.

  // The statements, in the order "Expected a statement (...)" lists them.
  static std::span<const StatementRule> statements();
  // `access read|write`.
  static std::span<const FormRule> access_forms();
  // `expect error|bytes|fill|barriers`; any other word is a statistic's name.
  static std::span<const FormRule> expect_forms();

  // --- State.

  std::string_view text_;
  const ParseOptions options_;
  Script script_;
  std::optional<TokenCursor> cursor_;  // of the current line

  std::unordered_map<std::string, NameEntry> names_;
  std::unordered_map<std::string, int> option_lines_;
  int first_statement_line_ = 0;  // 0: only options so far
  int pending_line_ = 0;          // first instruction not yet followed by a `run` (0: none)
  int pending_column_ = 0;
  bool after_run_ = false;        // the previous statement is a `run`
  uint64_t inline_bytes_ = 0;     // of every byte list so far; <= kMaxScriptInlineBytes
  uint64_t host_bytes_ = 0;       // of every host buffer so far; <= kMaxScriptHostBytes
};

}  // namespace oclvm::script::detail
