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
// the only writers of the Script.
#include "adapters/script/parser.h"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oclvm/storage/allocator_registry.h"

namespace oclvm::script {
namespace {

// "a, b, c or d".
std::string join_or(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  }
  return text;
}

// The keywords of a table of rules, in its order.
template <typename Rule>
std::vector<std::string> keywords_of(std::span<const Rule> rules) {
  std::vector<std::string> keywords;
  for (const Rule& rule : rules) keywords.emplace_back(rule.keyword);
  return keywords;
}

// Parses `text` as a value of `type` into `out` (scalar_type_size(type) bytes, least significant
// first). False when it is not one, or does not fit the type.
bool scalar_from_text(ScalarType type, const std::string& text, uint8_t* out) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (type == ScalarType::kFloat || type == ScalarType::kDouble) {
    double value = 0;
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr != end) return false;
    if (type == ScalarType::kDouble) {
      std::memcpy(out, &value, sizeof value);
    } else {
      const float narrow = static_cast<float>(value);
      std::memcpy(out, &narrow, sizeof narrow);
    }
    return true;
  }
  const size_t size = scalar_type_size(type);
  const bool is_signed = type == ScalarType::kChar || type == ScalarType::kShort ||
                         type == ScalarType::kInt || type == ScalarType::kLong;
  if (is_signed) {
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(begin, end, value);
    const int64_t limit = size == 8 ? std::numeric_limits<int64_t>::max()
                                    : (int64_t{1} << (8 * size - 1)) - 1;
    if (ec != std::errc() || ptr != end || value > limit || value < -limit - 1) return false;
    std::memcpy(out, &value, size);  // little-endian: the low bytes
  } else {
    uint64_t value = 0;
    auto [ptr, ec] = std::from_chars(begin, end, value);
    const uint64_t limit = size == 8 ? std::numeric_limits<uint64_t>::max()
                                     : (uint64_t{1} << (8 * size)) - 1;
    if (ec != std::errc() || ptr != end || value > limit) return false;
    std::memcpy(out, &value, size);
  }
  return true;
}

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
      throw ScriptError(script_.file, pending_line_, pending_column_,
                        "Expected a `run` after this instruction, but the script ends before one");
    }
    return std::move(script_);
  }

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

  void parse_line(int line, std::string_view content) {
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

  // Dispatches on the word after the keyword (`access read`, `expect error`); returns false when
  // no form matches (the cursor is then past that word).
  bool parse_form(std::span<const FormRule> forms, const Token& keyword, const Token& word) {
    for (const FormRule& form : forms) {
      if (word.is_word(form.keyword)) {
        (this->*form.parse)(keyword);
        return true;
      }
    }
    return false;
  }

  // --- Devices, names, streams, places.

  size_t device_limit() const {
    return std::max(options_.opencl_devices, script_.options.required_devices);
  }

  Device device_of(const Token& token) {
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
  Device take_device(const std::string& what = "a device (opencl:N or cpu)") {
    const Token& token = in().take_word(what);
    if (!looks_like_device(token.text)) {
      in().fail(token, "Expected " + what + ", but got '" + token.text + "'");
    }
    return device_of(token);
  }

  enum class NameKind : uint8_t { kStream, kHost, kEvent, kBlob, kKernel };
  struct NameEntry {
    NameKind kind;
    int index;
    int line;
  };
  static const char* kind_name(NameKind kind) {
    switch (kind) {
      case NameKind::kStream: return "a stream";
      case NameKind::kHost: return "a host buffer";
      case NameKind::kEvent: return "an event";
      case NameKind::kBlob: return "a blob";
      case NameKind::kKernel: return "a kernel";
    }
    return "a name";
  }

  // A new name: an identifier, not reserved, not declared before.
  std::string declare(const Token& token, const char* what) {
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

  // The index of a declared name of `kind`; `described` says what was expected when the token is
  // no declared name ("a stream (a name declared by `stream`, ...)").
  int index_of(const Token& token, NameKind kind, const std::string& described) {
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

  StreamRef stream_of(const Token& token) {
    if (token.kind == Token::Kind::kWord && looks_like_device(token.text)) {
      return StreamRef{-1, device_of(token)};
    }
    int index = index_of(token, NameKind::kStream,
                         "a stream (a name declared by `stream`, or a device such as opencl:0)");
    return StreamRef{index, script_.streams[static_cast<size_t>(index)].device};
  }
  StreamRef take_stream(const std::string& what = "a stream or device") {
    return stream_of(in().take(what));
  }
  std::optional<StreamRef> take_on() {
    if (!in().accept_word("on")) return std::nullopt;
    return take_stream("a stream or device after 'on'");
  }
  // `on STREAM` where the stream is not optional.
  StreamRef take_required_on() {
    in().take_keyword("on");
    return take_stream("a stream or device after 'on'");
  }

  int take_event() {
    return index_of(in().take("an event"), NameKind::kEvent,
                    "an event (a name declared by `event`)");
  }
  // A blob's name alone, as `release` and `record_blob_use` take it.
  int take_blob(const Token& keyword, const std::string& what) {
    Place place = take_place(what, true, false);
    if (place.offset != 0) {
      in().fail(keyword, "Expected a blob name without an offset after " + keyword.text);
    }
    return place.index;
  }

  // NAME or NAME[OFFSET], of a blob or a host buffer (as `allowed` says).
  Place take_place(const std::string& what, bool blobs_allowed, bool hosts_allowed) {
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
  // The next token (for messages that name it later); fails like take() when the line ends.
  const Token& peek_or_take(const std::string& what) {
    if (in().at_end()) in().take(what);
    return *in().peek();
  }

  // Host places are checked here: nothing else stops a copy from writing past a host buffer.
  void check_host_range(const Place& place, uint64_t bytes, int column) {
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

  std::vector<uint8_t> take_bytes(const std::string& what) {
    return in().take_bytes(what, inline_bytes_);
  }

  // --- Adding statements.

  void add(const Token& keyword, Operation op) {
    script_.statements.push_back(Statement{in().line(), keyword.column, std::move(op)});
  }
  // An instruction: it joins the batch of the next `run`.
  void add_instruction(const Token& keyword, Operation op) {
    if (pending_line_ == 0) {
      pending_line_ = in().line();
      pending_column_ = keyword.column;
    }
    after_run_ = false;
    add(keyword, std::move(op));
  }
  // Before an expectation other than `expect error`: everything built must have run.
  void require_run_before(const Token& keyword) {
    if (pending_line_ != 0) {
      in().fail(keyword, "Expected a `run` before this expectation, but the instructions from "
                         "line " + std::to_string(pending_line_) + " on have not been run");
    }
    after_run_ = false;
  }

  // --- Options.

  void check_option_place(const Token& keyword) {
    const std::string& k = keyword.text;
    if (first_statement_line_ != 0) {
      in().fail(keyword, "Expected `" + k + "` among the options before the first statement "
                         "(line " + std::to_string(first_statement_line_) + "), but got it after");
    }
    if (auto [it, inserted] = option_lines_.emplace(k, in().line()); !inserted) {
      in().fail(keyword, "Expected one `" + k + "` line, but got a second one (the first is at "
                         "line " + std::to_string(it->second) + ")");
    }
  }

  void parse_require(const Token&) {
    in().take_keyword("devices");
    const Token& count = in().take_word("a number of OpenCL devices");
    size_t& required = script_.options.required_devices;
    required = in().count_of(count, "a number of OpenCL devices", 32767);
    if (required == 0) {
      in().fail(count, "Expected a number of OpenCL devices greater than 0, but got '0'");
    }
  }

  void parse_allocator(const Token&) {
    const Token& name = in().take_word("an allocator name");
    std::vector<std::string> names;
    for (const auto& entry : AllocatorRegistry::instance().entries()) {
      names.push_back(entry.first);
    }
    if (std::find(names.begin(), names.end(), name.text) == names.end()) {
      in().fail(name,
                "Expected an allocator (" + join_or(names) + "), but got '" + name.text + "'");
    }
    script_.options.allocator = name.text;
  }

  void parse_limit(const Token&) {
    script_.options.memory_limit = in().take_size("a memory limit");
  }

  void parse_caller_runs(const Token&) {
    const Token& value = in().take_word("on or off");
    if (value.text != "on" && value.text != "off") {
      in().fail(value, "Expected on or off, but got '" + value.text + "'");
    }
    script_.options.caller_runs = value.text == "on";
  }

  // --- Declarations.

  void parse_stream(const Token&) {
    StreamDecl decl;
    decl.name = declare(in().take_word("a stream name"), "a stream");
    decl.line = in().line();
    in().take_punct("=", "'=' after the stream name");
    decl.device = take_device();
    const Token& role = in().take_word("a stream role (compute, h2d, d2h or user N)");
    if (role.text == "compute") {
      decl.role = vm::StreamRole::kCompute;
    } else if (role.text == "h2d") {
      decl.role = vm::StreamRole::kHostToDevice;
    } else if (role.text == "d2h") {
      decl.role = vm::StreamRole::kDeviceToHost;
    } else if (role.text == "user") {
      decl.role = vm::StreamRole::kUser;
      decl.user_index = static_cast<int>(in().count_of(in().take_word("a user stream number"),
                                                       "a user stream number", 1'000'000));
    } else {
      in().fail(role, "Expected a stream role (compute, h2d, d2h or user N), but got '" +
                          role.text + "'");
    }
    names_[decl.name] = {NameKind::kStream, static_cast<int>(script_.streams.size()), decl.line};
    script_.streams.push_back(std::move(decl));
  }

  void parse_host(const Token&) {
    HostDecl decl;
    decl.name = declare(in().take_word("a host buffer name"), "a host buffer");
    decl.line = in().line();
    if (in().accept_punct("=")) {
      decl.initial = take_bytes("the host buffer's bytes");
      decl.size = decl.initial.size();
    } else {
      const Token& size = in().take_word("a size in bytes or '= BYTES'");
      decl.size = in().size_of(size, "a host buffer size", /*allow_zero=*/false);
      if (decl.size > kMaxHostBuffer) {
        in().fail(size, "Expected a host buffer of at most " + std::to_string(kMaxHostBuffer) +
                            " bytes, but got " + std::to_string(decl.size));
      }
      if (decl.size > kMaxScriptHostBytes - host_bytes_) {
        in().fail(size, "Expected at most " + std::to_string(kMaxScriptHostBytes) +
                            " bytes of host buffers in one script, but got more");
      }
    }
    host_bytes_ += decl.size;
    names_[decl.name] = {NameKind::kHost, static_cast<int>(script_.hosts.size()), decl.line};
    script_.hosts.push_back(std::move(decl));
  }

  void parse_kernel(const Token&) {
    KernelDecl decl;
    decl.name = declare(in().take_word("a kernel name"), "a kernel");
    decl.line = in().line();
    in().take_punct("=", "'=' after the kernel name");
    const Token& source = in().take("the kernel's OpenCL C source, in a string");
    if (source.kind != Token::Kind::kString) {
      in().fail(source, "Expected the kernel's OpenCL C source in a string, but got '" +
                            source.shown() + "'");
    }
    decl.source = source.text;
    if (in().accept_word("options")) {
      const Token& options = in().take("build options in a string");
      if (options.kind != Token::Kind::kString) {
        in().fail(options, "Expected build options in a string, but got '" + options.shown() +
                               "'");
      }
      decl.options = options.text;
    }
    names_[decl.name] = {NameKind::kKernel, static_cast<int>(script_.kernels.size()), decl.line};
    script_.kernels.push_back(std::move(decl));
  }

  // [N, N, N]: one to three sizes (0 allowed: a launch over nothing).
  uint32_t take_dims(std::array<size_t, 3>* sizes, const std::string& what) {
    in().take_punct("[", "'[' before the " + what);
    uint32_t dims = 0;
    do {
      if (dims == 3) {
        in().fail(peek_or_take("a size"), "Expected at most 3 dimensions of the " + what);
      }
      (*sizes)[dims++] = in().take_size("a " + what, /*allow_zero=*/true);
    } while (in().accept_punct(","));
    in().take_punct("]", "']' after the " + what);
    return dims;
  }

  KernelArgument take_kernel_argument() {
    KernelArgument arg;
    const Token& word = in().take_word("a kernel argument (read|write|readwrite BLOB, a type and "
                                       "a value such as float 2.5, or local SIZE)");
    if (word.text == "read" || word.text == "write" || word.text == "readwrite") {
      arg.kind = LaunchArg::Kind::kBlob;
      arg.access = word.text == "read"    ? KernelAccess::kRead
                   : word.text == "write" ? KernelAccess::kWrite
                                          : KernelAccess::kReadWrite;
      arg.place = take_place("a blob to pass to the kernel", true, false);
    } else if (word.text == "local") {
      arg.kind = LaunchArg::Kind::kLocal;
      arg.local_bytes = in().take_size("a local-memory size in bytes");
    } else if (scalar_type_from_name(word.text, &arg.type)) {
      arg.kind = LaunchArg::Kind::kScalar;
      const Token& value = in().take_word(std::string("a ") + word.text + " value");
      if (!scalar_from_text(arg.type, value.text, arg.bytes.data())) {
        in().fail(value, std::string("Expected a ") + word.text + " value, but got '" +
                             value.text + "'");
      }
    } else {
      in().fail(word, "Expected a kernel argument (read, write or readwrite and a blob; char, "
                      "uchar, short, ushort, int, uint, long, ulong, float or double and a "
                      "value; or local and a size), but got '" + word.shown() + "'");
    }
    return arg;
  }

  void parse_launch(const Token& keyword) {
    op::Launch launch;
    launch.kernel = index_of(in().take("a kernel"), NameKind::kKernel,
                             "a kernel (a name declared by `kernel`)");
    launch.range.dims = take_dims(&launch.range.global, "global size");
    if (in().peek() != nullptr && in().peek()->is_punct("[")) {
      const uint32_t local_dims = take_dims(&launch.range.local, "local size");
      if (local_dims != launch.range.dims) {
        in().fail(keyword, "Expected a local size of " + std::to_string(launch.range.dims) +
                               " dimensions like the global size, but got " +
                               std::to_string(local_dims));
      }
    }
    if (in().peek() != nullptr && !in().peek()->is_word("on")) {
      do {
        launch.args.push_back(take_kernel_argument());
      } while (in().accept_punct(","));
    }
    launch.stream = take_required_on();
    add_instruction(keyword, std::move(launch));
  }

  void parse_event(const Token&) {
    EventDecl decl{declare(in().take_word("an event name"), "an event"), in().line()};
    names_[decl.name] = {NameKind::kEvent, static_cast<int>(script_.events.size()), decl.line};
    script_.events.push_back(std::move(decl));
  }

  // --- Instructions.

  void parse_alloc(const Token& keyword) {
    std::string name = declare(in().take_word("a blob name"), "a blob");
    in().take_punct("=", "'=' after the blob name");
    op::Alloc alloc;
    alloc.stream = take_stream("a stream or device to allocate on");
    const Token& size = in().take_word("a size in bytes or a typed shape such as f32[2,3]");
    std::optional<DType> dtype;
    for (int d = static_cast<int>(DType::kF32); d <= static_cast<int>(DType::kBool); ++d) {
      if (size.text == dtype_name(static_cast<DType>(d))) dtype = static_cast<DType>(d);
    }
    if (dtype) {
      alloc.dtype = dtype;
      in().take_punct("[", "'[' and the shape after the element type");
      if (!in().accept_punct("]")) {
        while (true) {
          const Token& dim = in().take_word("a dimension");
          constexpr auto kMaxDim = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
          alloc.shape.push_back(static_cast<int64_t>(in().count_of(dim, "a dimension", kMaxDim)));
          if (in().accept_punct("]")) break;
          in().take_punct(",", "',' or ']'");
        }
      }
    } else {
      alloc.bytes = in().size_of(size, "a blob size", /*allow_zero=*/false);
    }
    alloc.blob = static_cast<int>(script_.blobs.size());
    names_[name] = {NameKind::kBlob, alloc.blob, in().line()};
    script_.blobs.push_back(BlobDecl{name, in().line()});
    add_instruction(keyword, std::move(alloc));
  }

  void parse_release(const Token& keyword) {
    add_instruction(keyword, op::Release{take_blob(keyword, "a blob to release")});
  }

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

  void parse_write(const Token& keyword) {
    parse_inline_write<op::Write>(keyword, "a blob to write to");
  }

  void parse_copy(const Token& keyword) {
    op::Copy copy;
    const Token& source = peek_or_take("a blob or host buffer to copy from");
    copy.src = take_place("a blob or host buffer to copy from", true, true);
    in().take_punct("->", "'->' after the source");
    const Token& destination = peek_or_take("a blob or host buffer to copy to");
    copy.dst = take_place("a blob or host buffer to copy to", true, true);
    if (copy.src.kind == Place::Kind::kHost && copy.dst.kind == Place::Kind::kHost) {
      in().fail(destination, "Expected a blob on at least one side of a copy, but both '" +
                                 source.text + "' and '" + destination.text +
                                 "' are host buffers");
    }
    const Token& size = in().take_word("a size in bytes");
    copy.bytes = in().size_of(size, "a copy size", /*allow_zero=*/false);
    check_host_range(copy.src, copy.bytes, size.column);
    check_host_range(copy.dst, copy.bytes, size.column);
    copy.stream = take_on();
    add_instruction(keyword, std::move(copy));
  }

  void parse_fill(const Token& keyword) {
    op::Fill fill;
    fill.dst = take_place("a blob to fill", true, false);
    fill.bytes = in().take_size("a fill size");
    std::tie(fill.pattern, fill.pattern_size) = in().take_pattern();
    fill.stream = take_on();
    add_instruction(keyword, std::move(fill));
  }

  void parse_soft_sync(const Token& keyword) {
    op::SoftSync sync;
    sync.from = take_stream("the stream to sync from");
    in().take_punct("->", "'->' after the first stream");
    sync.to = take_stream("the stream that waits");
    add_instruction(keyword, std::move(sync));
  }

  void parse_barrier(const Token& keyword) {
    add_instruction(keyword, op::Barrier{take_stream("a stream or device")});
  }

  void parse_record_event(const Token& keyword) {
    op::RecordEvent record;
    record.event = take_event();
    record.stream = take_required_on();
    add_instruction(keyword, std::move(record));
  }

  void parse_wait_event(const Token& keyword) {
    op::WaitEvent wait;
    wait.event = take_event();
    wait.stream = take_required_on();
    add_instruction(keyword, std::move(wait));
  }

  void parse_record_blob_use(const Token& keyword) {
    op::RecordBlobUse use;
    use.blob = take_blob(keyword, "a blob whose use to record");
    use.stream = take_required_on();
    add_instruction(keyword, std::move(use));
  }

  void parse_access(const Token& keyword) {
    static const std::string kModes = join_or(keywords_of(access_forms()));
    const Token& mode = in().take_word(kModes);
    if (!parse_form(access_forms(), keyword, mode)) {
      in().fail(mode, "Expected " + kModes + ", but got '" + mode.text + "'");
    }
  }

  void parse_access_read(const Token& keyword) {
    op::AccessRead read;
    read.src = take_place("a blob to read", true, false);
    const Token& size = in().take_word("a size in bytes");
    read.bytes = in().size_of(size, "an access size", /*allow_zero=*/false);
    in().take_punct("->", "'->' and a host buffer to read into");
    const Token& host = peek_or_take("a host buffer to read into");
    read.dst = take_place("a host buffer to read into", false, true);
    check_host_range(read.dst, read.bytes, host.column);
    read.stream = take_on();
    add_instruction(keyword, std::move(read));
  }

  void parse_access_write(const Token& keyword) {
    parse_inline_write<op::AccessWrite>(keyword, "a blob to write");
  }

  void parse_empty_cache(const Token& keyword) {
    add_instruction(keyword, op::EmptyCache{take_device()});
  }

  void parse_reset_stats(const Token& keyword) {
    op::ResetStats reset;
    reset.device = take_device();
    const Token& kind = in().take_word("peak or accumulated");
    if (kind.text == "peak") {
      reset.kind = ResetKind::kPeak;
    } else if (kind.text == "accumulated") {
      reset.kind = ResetKind::kAccumulated;
    } else {
      in().fail(kind, "Expected peak or accumulated, but got '" + kind.text + "'");
    }
    add_instruction(keyword, std::move(reset));
  }

  void parse_set_memory_limit(const Token& keyword) {
    op::SetMemoryLimit limit;
    limit.device = take_device();
    limit.bytes = in().take_size("a memory limit in bytes (0: none)", /*allow_zero=*/true);
    add_instruction(keyword, std::move(limit));
  }

  void parse_query(const Token& keyword) { add_instruction(keyword, op::Query{take_device()}); }

  void parse_run(const Token& keyword) {
    add(keyword, op::Run{});
    pending_line_ = 0;
    after_run_ = true;
  }

  // --- Expectations.

  void parse_expect(const Token& keyword) {
    static const std::string kForms = [] {
      std::vector<std::string> forms = keywords_of(expect_forms());
      forms.emplace_back("a statistic");
      return join_or(forms);
    }();
    const Token& what = in().take_word("what to expect (" + kForms + ")");
    if (parse_form(expect_forms(), keyword, what)) return;
    require_run_before(keyword);
    std::optional<StatKey> key = find_stat(what.text);
    if (!key) {
      in().fail(what, "Expected " + kForms + " (allocated, reserved, requested, active, "
                      "peak_allocated, peak_reserved, allocations, segments, num_allocs, "
                      "num_frees, num_ooms, num_alloc_retries, num_device_alloc, "
                      "num_device_free, ... or ARRAY.POOL.FIELD such as "
                      "reserved_bytes.all.peak), but got '" + what.text + "'");
    }
    op::ExpectStat expect;
    expect.key = std::move(*key);
    expect.device = take_device();
    expect.comparison = in().take_comparison();
    expect.value = in().take_value("a statistic value");
    add(keyword, std::move(expect));
  }

  void parse_expect_error(const Token& keyword) {
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
      in().fail(keyword, "Expected `expect error` right after a `run`, but " + seen);
    }
    after_run_ = false;
    op::ExpectError expect;
    static const std::pair<const char*, ErrorKind> kKinds[] = {
        {"out_of_memory", ErrorKind::kOutOfMemory},
        {"invalid_argument", ErrorKind::kInvalidArgument},
        {"backend", ErrorKind::kBackend},
        {"error", ErrorKind::kAny}};
    static const std::string kKindList = [] {
      std::vector<std::string> names;
      for (const auto& k : kKinds) names.emplace_back(k.first);
      return "an error kind (" + join_or(names) + ")";
    }();
    const Token& kind = in().take_word(kKindList);
    auto found = std::find_if(std::begin(kKinds), std::end(kKinds),
                              [&](const auto& k) { return kind.text == k.first; });
    if (found == std::end(kKinds)) {
      in().fail(kind, "Expected " + kKindList + ", but got '" + kind.text + "'");
    }
    expect.kind = found->second;
    if (!in().at_end()) {
      const Token& text = in().take("a message substring in double quotes");
      if (text.kind != Token::Kind::kString) {
        in().fail(text,
                  "Expected a message substring in double quotes, but got '" + text.shown() + "'");
      }
      expect.substring = text.text;
    }
    add(keyword, std::move(expect));
  }

  void parse_expect_bytes(const Token& keyword) {
    op::ExpectBytes expect;
    require_run_before(keyword);
    const Token& place_token = peek_or_take("a blob or host buffer");
    expect.place = take_place("a blob or host buffer", true, true);
    in().take_punct("=", "'=' and the expected bytes");
    expect.bytes = take_bytes("the expected bytes");
    check_host_range(expect.place, expect.bytes.size(), place_token.column);
    add(keyword, std::move(expect));
  }

  void parse_expect_fill(const Token& keyword) {
    op::ExpectFill expect;
    require_run_before(keyword);
    const Token& place_token = peek_or_take("a blob or host buffer");
    expect.place = take_place("a blob or host buffer", true, true);
    expect.bytes = in().take_size("a size in bytes");
    if (expect.bytes > kMaxInlineBytes) {
      in().fail(place_token, "Expected at most " + std::to_string(kMaxInlineBytes) +
                                 " bytes to check, but got " + std::to_string(expect.bytes));
    }
    std::tie(expect.pattern, expect.pattern_size) = in().take_pattern();
    check_host_range(expect.place, expect.bytes, place_token.column);
    add(keyword, std::move(expect));
  }

  void parse_expect_barriers(const Token& keyword) {
    op::ExpectBarriers expect;
    require_run_before(keyword);
    expect.comparison = in().take_comparison();
    expect.value = in().take_value("a number of barriers");
    add(keyword, std::move(expect));
  }

  // --- The tables: every keyword of the language appears once, here.

  // The statements, in the order "Expected a statement (...)" lists them.
  static std::span<const StatementRule> statements() {
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
  // `access read|write`.
  static std::span<const FormRule> access_forms() {
    static constexpr FormRule kAccessForms[] = {
        {"read", &Parser::parse_access_read},
        {"write", &Parser::parse_access_write},
    };
    return kAccessForms;
  }
  // `expect error|bytes|fill|barriers`; any other word is a statistic's name.
  static std::span<const FormRule> expect_forms() {
    static constexpr FormRule kExpectForms[] = {
        {"error", &Parser::parse_expect_error},
        {"bytes", &Parser::parse_expect_bytes},
        {"fill", &Parser::parse_expect_fill},
        {"barriers", &Parser::parse_expect_barriers},
    };
    return kExpectForms;
  }

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

}  // namespace oclvm::script
