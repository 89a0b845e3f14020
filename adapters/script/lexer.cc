// adapters/script/lexer.cc — tokens of a line, and the cursor's operand and literal readers.
// See adapters/script/lexer.h.
#include "adapters/script/lexer.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "oclvm/storage/options.h"

namespace oclvm::script {

ScriptError::ScriptError(std::string file, int line, int column, std::string message)
    : InvalidArgument(line > 0 ? file + ":" + std::to_string(line) + ":" + std::to_string(column) +
                                     ": error: " + message
                               : file + ": error: " + message),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(std::move(message)) {}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ends_word(char c) {
  return c == ' ' || c == '\t' || c == '#' || c == '"' || c == '=' || c == '[' || c == ']' ||
         c == ',' || c == '<' || c == '>' || c == '!';
}

}  // namespace

bool is_identifier(std::string_view text) {
  if (text.empty()) return false;
  auto head = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto tail = [&](char c) { return head(c) || (c >= '0' && c <= '9'); };
  if (!head(text[0])) return false;
  return std::all_of(text.begin() + 1, text.end(), tail);
}

bool looks_like_device(std::string_view text) {
  return text == "cpu" || text == "opencl" || text.find(':') != std::string_view::npos;
}

std::vector<Token> tokenize(std::string_view content, const std::string& file, int line_number) {
  std::vector<Token> tokens;
  auto column_of = [](size_t index) { return static_cast<int>(index) + 1; };
  auto fail = [&](size_t index, const std::string& message) {
    throw ScriptError(file, line_number, column_of(index), message);
  };
  size_t i = 0;
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
          fail(i, "Expected \\\" or \\\\ after a backslash in a string, but got '" +
                      std::string(content.substr(i, 2)) + "'");
        }
        value += d;
        ++i;
      }
      if (!closed) fail(begin, "Expected a closing \" for this string, but the line ends");
      tokens.push_back({Token::Kind::kString, value, column_of(begin), column_of(i)});
      continue;
    }
    auto two = content.substr(i, 2);
    if (two == "->" || two == "<=" || two == ">=" || two == "!=") {
      tokens.push_back({Token::Kind::kPunct, std::string(two), column_of(i), column_of(i + 2)});
      i += 2;
      continue;
    }
    if (c == '=' || c == '[' || c == ']' || c == ',' || c == '<' || c == '>') {
      tokens.push_back({Token::Kind::kPunct, std::string(1, c), column_of(i), column_of(i + 1)});
      ++i;
      continue;
    }
    if (c == '!') fail(i, "Expected != or a word, but got '!'");
    while (i < content.size() && !ends_word(content[i])) {
      if (content[i] == '-' && i + 1 < content.size() && content[i + 1] == '>') break;
      ++i;
    }
    tokens.push_back({Token::Kind::kWord, std::string(content.substr(begin, i - begin)),
                      column_of(begin), column_of(i)});
  }
  return tokens;
}

// ---------------------------------------------------------------------------------------------
// TokenCursor

TokenCursor::TokenCursor(std::vector<Token> tokens, const std::string& file, int line)
    : tokens_(std::move(tokens)),
      file_(file),
      line_(line),
      end_column_(tokens_.empty() ? 1 : tokens_.back().end_column) {}

std::string TokenCursor::consumed() const {
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

void TokenCursor::fail(int column, const std::string& message) const {
  throw ScriptError(file_, line_, column, message);
}

const Token& TokenCursor::take(const std::string& what) {
  if (at_end()) {
    fail(end_column_, "Expected " + what + ", but the line ends after '" + consumed() + "'");
  }
  return tokens_[next_++];
}

const Token& TokenCursor::take_word(const std::string& what) {
  const Token& token = take(what);
  if (token.kind != Token::Kind::kWord) {
    fail(token, "Expected " + what + ", but got '" + token.shown() + "'");
  }
  return token;
}

void TokenCursor::take_punct(std::string_view mark, const std::string& what) {
  const Token& token = take(what);
  if (!token.is_punct(mark)) fail(token, "Expected " + what + ", but got '" + token.shown() + "'");
}

void TokenCursor::take_keyword(std::string_view keyword) {
  const Token& token = take("'" + std::string(keyword) + "'");
  if (!token.is_word(keyword)) {
    fail(token, "Expected '" + std::string(keyword) + "', but got '" + token.shown() + "'");
  }
}

bool TokenCursor::accept_punct(std::string_view mark) {
  if (at_end() || !tokens_[next_].is_punct(mark)) return false;
  ++next_;
  return true;
}

bool TokenCursor::accept_word(std::string_view word) {
  if (at_end() || !tokens_[next_].is_word(word)) return false;
  ++next_;
  return true;
}

void TokenCursor::finish() const {
  if (!at_end()) {
    const Token& token = tokens_[next_];
    fail(token, "Expected the end of the line after '" + consumed() + "', but got '" +
                    token.shown() + "'");
  }
}

// ---------------------------------------------------------------------------------------------
// Literals

uint64_t TokenCursor::size_of(const Token& token, const std::string& what, bool allow_zero) const {
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

uint64_t TokenCursor::take_size(const std::string& what, bool allow_zero) {
  return size_of(take_word(what), what, allow_zero);
}

uint64_t TokenCursor::count_of(const Token& token, const std::string& what, uint64_t max) const {
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

int64_t TokenCursor::take_value(const std::string& what) {
  const Token& token = take_word(what);
  uint64_t value = size_of(token, what, /*allow_zero=*/true);
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    fail(token, "Expected " + what + " of at most 2^63-1 (statistics are int64_t), but got '" +
                    token.text + "'");
  }
  return static_cast<int64_t>(value);
}

std::pair<uint64_t, unsigned> TokenCursor::take_pattern() {
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

Comparison TokenCursor::take_comparison() {
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

std::vector<uint8_t> TokenCursor::take_bytes(const std::string& what, uint64_t& script_bytes) {
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
    if (token.kind != Token::Kind::kWord || byte_text.size() != 2 || hex_value(byte_text[0]) < 0 ||
        hex_value(byte_text[1]) < 0) {
      fail(token, "Expected a byte as two hex digits (such as 0f or ab, or ab*16 for 16 of "
                  "them), but got '" + token.shown() + "'");
    }
    if (count > kMaxInlineBytes - bytes.size()) {
      fail(token, "Expected at most " + std::to_string(kMaxInlineBytes) +
                      " inline bytes on one line, but got more");
    }
    if (count > kMaxScriptInlineBytes - script_bytes - bytes.size()) {
      fail(token, "Expected at most " + std::to_string(kMaxScriptInlineBytes) +
                      " inline bytes in one script, but got more");
    }
    uint8_t value = static_cast<uint8_t>(hex_value(byte_text[0]) * 16 + hex_value(byte_text[1]));
    bytes.insert(bytes.end(), count, value);
  }
  script_bytes += bytes.size();
  return bytes;
}

}  // namespace oclvm::script
