// adapters/script/statements.cc — the parse function of each statement of the script language
// (Parser in parser_impl.h): options, declarations, instructions and expectations, each reading
// its operands left to right and adding what it declares or runs to the Script.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adapters/script/parser_impl.h"
#include "oclvm/storage/allocator_registry.h"

namespace oclvm::script::detail {
namespace {

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

}  // namespace

void Parser::check_option_place(const Token& keyword) {
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

void Parser::parse_require(const Token&) {
  in().take_keyword("devices");
  const Token& count = in().take_word("a number of OpenCL devices");
  size_t& required = script_.options.required_devices;
  required = in().count_of(count, "a number of OpenCL devices", 32767);
  if (required == 0) {
    in().fail(count, "Expected a number of OpenCL devices greater than 0, but got '0'");
  }
}

void Parser::parse_allocator(const Token&) {
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

void Parser::parse_limit(const Token&) {
  script_.options.memory_limit = in().take_size("a memory limit");
}

void Parser::parse_caller_runs(const Token&) {
  const Token& value = in().take_word("on or off");
  if (value.text != "on" && value.text != "off") {
    in().fail(value, "Expected on or off, but got '" + value.text + "'");
  }
  script_.options.caller_runs = value.text == "on";
}

void Parser::parse_stream(const Token&) {
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

void Parser::parse_host(const Token&) {
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

void Parser::parse_kernel(const Token&) {
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

uint32_t Parser::take_dims(std::array<size_t, 3>* sizes, const std::string& what) {
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

KernelArgument Parser::take_kernel_argument() {
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

void Parser::parse_launch(const Token& keyword) {
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

void Parser::parse_event(const Token&) {
  EventDecl decl{declare(in().take_word("an event name"), "an event"), in().line()};
  names_[decl.name] = {NameKind::kEvent, static_cast<int>(script_.events.size()), decl.line};
  script_.events.push_back(std::move(decl));
}

void Parser::parse_alloc(const Token& keyword) {
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

void Parser::parse_release(const Token& keyword) {
  add_instruction(keyword, op::Release{take_blob(keyword, "a blob to release")});
}

void Parser::parse_write(const Token& keyword) {
  parse_inline_write<op::Write>(keyword, "a blob to write to");
}

void Parser::parse_copy(const Token& keyword) {
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

void Parser::parse_fill(const Token& keyword) {
  op::Fill fill;
  fill.dst = take_place("a blob to fill", true, false);
  fill.bytes = in().take_size("a fill size");
  std::tie(fill.pattern, fill.pattern_size) = in().take_pattern();
  fill.stream = take_on();
  add_instruction(keyword, std::move(fill));
}

void Parser::parse_soft_sync(const Token& keyword) {
  op::SoftSync sync;
  sync.from = take_stream("the stream to sync from");
  in().take_punct("->", "'->' after the first stream");
  sync.to = take_stream("the stream that waits");
  add_instruction(keyword, std::move(sync));
}

void Parser::parse_barrier(const Token& keyword) {
  add_instruction(keyword, op::Barrier{take_stream("a stream or device")});
}

void Parser::parse_record_event(const Token& keyword) {
  op::RecordEvent record;
  record.event = take_event();
  record.stream = take_required_on();
  add_instruction(keyword, std::move(record));
}

void Parser::parse_wait_event(const Token& keyword) {
  op::WaitEvent wait;
  wait.event = take_event();
  wait.stream = take_required_on();
  add_instruction(keyword, std::move(wait));
}

void Parser::parse_record_blob_use(const Token& keyword) {
  op::RecordBlobUse use;
  use.blob = take_blob(keyword, "a blob whose use to record");
  use.stream = take_required_on();
  add_instruction(keyword, std::move(use));
}

void Parser::parse_access(const Token& keyword) {
  static const std::string kModes = join_or(keywords_of(access_forms()));
  const Token& mode = in().take_word(kModes);
  if (!parse_form(access_forms(), keyword, mode)) {
    in().fail(mode, "Expected " + kModes + ", but got '" + mode.text + "'");
  }
}

void Parser::parse_access_read(const Token& keyword) {
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

void Parser::parse_access_write(const Token& keyword) {
  parse_inline_write<op::AccessWrite>(keyword, "a blob to write");
}

void Parser::parse_empty_cache(const Token& keyword) {
  add_instruction(keyword, op::EmptyCache{take_device()});
}

void Parser::parse_reset_stats(const Token& keyword) {
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

void Parser::parse_set_memory_limit(const Token& keyword) {
  op::SetMemoryLimit limit;
  limit.device = take_device();
  limit.bytes = in().take_size("a memory limit in bytes (0: none)", /*allow_zero=*/true);
  add_instruction(keyword, std::move(limit));
}

void Parser::parse_run(const Token& keyword) {
  add(keyword, op::Run{});
  pending_line_ = 0;
  after_run_ = true;
}

void Parser::parse_expect(const Token& keyword) {
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

void Parser::parse_expect_error(const Token& keyword) {
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

void Parser::parse_expect_bytes(const Token& keyword) {
  op::ExpectBytes expect;
  require_run_before(keyword);
  const Token& place_token = peek_or_take("a blob or host buffer");
  expect.place = take_place("a blob or host buffer", true, true);
  in().take_punct("=", "'=' and the expected bytes");
  expect.bytes = take_bytes("the expected bytes");
  check_host_range(expect.place, expect.bytes.size(), place_token.column);
  add(keyword, std::move(expect));
}

void Parser::parse_expect_fill(const Token& keyword) {
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

void Parser::parse_expect_barriers(const Token& keyword) {
  op::ExpectBarriers expect;
  require_run_before(keyword);
  expect.comparison = in().take_comparison();
  expect.value = in().take_value("a number of barriers");
  add(keyword, std::move(expect));
}

}  // namespace oclvm::script::detail
