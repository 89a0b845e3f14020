// adapters/script/lexer.h — a script line as tokens, and a cursor that reads operands from them.
//
// The script language is line-oriented (design/scripts.md, "Lexical rules"): each line is cut into
// tokens on its own by tokenize() — words, "strings" and the marks `= [ ] , -> < <= > >= !=`; `#`
// starts a comment. The parser then reads one statement from a TokenCursor over that line. The
// cursor knows how to say what it expected where: every take_* either returns what it promises
// or throws ScriptError at the offending token ("Expected WHAT, but got 'X'"), or just past the
// line's last token when the line ends too early ("Expected WHAT, but the line ends after
// '...'"). It also reads the literals that need no names: byte counts with K/M/G suffixes, whole
// numbers, fill patterns, comparisons, statistic values and byte lists.
//
// Main types: ScriptError (every malformed script, with its location), Token, TokenCursor.
//
// Thread-safety: tokenize is a pure function; a TokenCursor is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapters/script/ast.h"
#include "oclvm/storage/errors.h"

namespace oclvm::script {

// A malformed script. what() is "FILE:LINE:COL: error: MESSAGE" (or "FILE: error: MESSAGE" when
// the file itself cannot be read, line() == 0). Lines and columns count from 1.
class ScriptError : public InvalidArgument {
 public:
  ScriptError(std::string file, int line, int column, std::string message);
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }
  // The message without the location.
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  int line_;
  int column_;
  std::string message_;
};

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

// The tokens of one line (without its line end). Throws ScriptError, located at FILE:LINE, for an
// unterminated string, a bad escape or a lone '!'.
std::vector<Token> tokenize(std::string_view line, const std::string& file, int line_number);

// A letter or _, then letters, digits or _.
bool is_identifier(std::string_view text);
// A word that names a device (as opposed to a declared name): `cpu`, `opencl`, or one with ':'.
bool looks_like_device(std::string_view text);

// Reads one line's tokens left to right. Every failure throws ScriptError at this line.
class TokenCursor {
 public:
  TokenCursor(std::vector<Token> tokens, const std::string& file, int line);

  int line() const { return line_; }
  bool at_end() const { return next_ >= tokens_.size(); }
  // The next token, or nullptr at the end of the line.
  const Token* peek() const { return at_end() ? nullptr : &tokens_[next_]; }
  // What came before the cursor, for "after '...'" in messages.
  std::string consumed() const;

  [[noreturn]] void fail(int column, const std::string& message) const;
  [[noreturn]] void fail(const Token& token, const std::string& message) const {
    fail(token.column, message);
  }

  // The next token, which must exist: "Expected WHAT, but the line ends after '...'".
  const Token& take(const std::string& what);
  // The next token, which must be a word.
  const Token& take_word(const std::string& what);
  // The next token, which must be the mark `mark`.
  void take_punct(std::string_view mark, const std::string& what);
  // The next token, which must be the word `keyword`.
  void take_keyword(std::string_view keyword);
  // Takes the mark `mark` or the word `word` when it comes next; false otherwise.
  bool accept_punct(std::string_view mark);
  bool accept_word(std::string_view word);
  // The line must have no more tokens.
  void finish() const;

  // --- Literals.

  // A byte count or offset: digits with an optional K/M/G suffix (Options' parse_byte_size).
  uint64_t size_of(const Token& token, const std::string& what, bool allow_zero) const;
  uint64_t take_size(const std::string& what, bool allow_zero = false);
  // Plain decimal digits, at most `max`.
  uint64_t count_of(const Token& token, const std::string& what, uint64_t max) const;
  // A statistic value or count: a byte count of at most 2^63 - 1.
  int64_t take_value(const std::string& what);
  // 0x followed by 2, 4, 8 or 16 hex digits: {pattern, its width in bytes (1, 2, 4 or 8)}.
  std::pair<uint64_t, unsigned> take_pattern();
  Comparison take_comparison();
  // The rest of the line as bytes: `ab`, or `ab*COUNT` for COUNT copies; at least one, at most
  // kMaxInlineBytes. `script_bytes` counts the inline bytes of the whole script so far; they stay
  // within kMaxScriptInlineBytes.
  std::vector<uint8_t> take_bytes(const std::string& what, uint64_t& script_bytes);

 private:
  const std::vector<Token> tokens_;
  const std::string& file_;
  const int line_;
  const int end_column_;  // just past the line's last token
  size_t next_ = 0;       // cursor into tokens_
};

}  // namespace oclvm::script
