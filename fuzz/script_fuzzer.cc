// fuzz/script_fuzzer.cc — libFuzzer target for the instruction script parser (parse_script).
//
// The input's bytes are the text of a script, parsed as `oclvm run` parses it on a machine with
// one OpenCL device. Only the parse step runs: parsing needs no device and no VM
// (adapters/script/parser.h), while executing random scripts would allocate device memory and be
// slow.
//
// Outcomes:
//   - ScriptError: the expected answer to a malformed script;
//   - a Script: the invariants ast.h promises of a parsed script are checked below (indices
//     valid, names unique, host ranges in bounds, `run` structure, the parser's own bounds on
//     sizes and inline bytes); a violation is a finding, since execute() relies on them;
//   - anything else is a finding (fuzz/fuzz_check.h).
//
// Built twice from this file: with clang's -fsanitize=fuzzer as build-fuzz/fuzz/script_fuzzer
// (fuzz/CMakeLists.txt, `make fuzz`), and with the normal compiler as oclvm_fuzz_replay_script,
// whose main() (fuzz/replay_main.cc) replays fuzz/regressions/script and fuzz/corpus/script under
// ctest.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "adapters/script/script.h"
#include "fuzz/fuzz_check.h"
#include "oclvm/storage/allocator_registry.h"

namespace {

using namespace oclvm;
using namespace oclvm::script;

// What `oclvm run` passes on a machine with one OpenCL device.
constexpr size_t kOpenCLDevices = 1;

// Every invariant of a parsed Script (adapters/script/ast.h, design/scripts.md "What the parser
// checks"), checked against the Script alone.
class ScriptChecker {
 public:
  explicit ScriptChecker(const Script& script) : script_(script) {}

  void check() {
    check_options();
    check_declarations();
    bool pending = false;    // an instruction not yet followed by a `run`
    bool after_run = false;  // the previous statement is a `run`
    int previous_line = 0;
    allocated_.assign(script_.blobs.size(), false);
    size_t expectations = 0;
    for (const Statement& statement : script_.statements) {
      OCLVM_FUZZ_CHECK(statement.line > previous_line);  // one statement per line, in order
      OCLVM_FUZZ_CHECK(statement.column >= 1);
      previous_line = statement.line;
      line_ = statement.line;
      const Operation& op = statement.op;
      if (const auto* alloc = std::get_if<op::Alloc>(&op)) {
        // Each blob has exactly one `alloc`, on its declaring line, before any use.
        OCLVM_FUZZ_CHECK(valid_index(alloc->blob, script_.blobs.size()));
        OCLVM_FUZZ_CHECK(!allocated_[static_cast<size_t>(alloc->blob)]);
        allocated_[static_cast<size_t>(alloc->blob)] = true;
        OCLVM_FUZZ_CHECK(script_.blobs[static_cast<size_t>(alloc->blob)].line == statement.line);
      }
      std::visit([&](const auto& o) { check_operation(o); }, op);

      bool is_run = std::holds_alternative<op::Run>(op);
      bool is_expect_error = std::holds_alternative<op::ExpectError>(op);
      bool expectation = is_expectation(op);
      if (is_expect_error) OCLVM_FUZZ_CHECK(after_run);
      if (expectation) {
        OCLVM_FUZZ_CHECK(!pending);
        ++expectations;
      }
      if (!is_run && !expectation) pending = true;
      if (is_run) pending = false;
      after_run = is_run;
    }
    OCLVM_FUZZ_CHECK(!pending);  // no instruction after the last `run`
    OCLVM_FUZZ_CHECK(expectations == script_.expectation_count());
    for (bool a : allocated_) OCLVM_FUZZ_CHECK(a);  // every declared blob came from an `alloc`
  }

 private:
  static bool valid_index(int index, size_t size) {
    return index >= 0 && static_cast<size_t>(index) < size;
  }

  size_t device_limit() const {
    return std::max(kOpenCLDevices, script_.options.required_devices);
  }
  bool valid_device(const Device& device) const {
    if (device.type == DeviceType::kCpu) return device.index == 0;
    return device.index >= 0 && static_cast<size_t>(device.index) < device_limit();
  }

  void check_options() {
    const ScriptOptions& o = script_.options;
    OCLVM_FUZZ_CHECK(o.required_devices <= 32767);
    if (!o.allocator.empty()) {
      bool registered = false;
      for (const auto& entry : AllocatorRegistry::instance().entries()) {
        registered = registered || entry.first == o.allocator;
      }
      OCLVM_FUZZ_CHECK(registered);
    }
  }

  // Names unique across streams, hosts and blobs; host buffers within the parser's bounds.
  void check_declarations() {
    std::set<std::string> names;
    for (const StreamDecl& stream : script_.streams) {
      OCLVM_FUZZ_CHECK(names.insert(stream.name).second);
      OCLVM_FUZZ_CHECK(valid_device(stream.device));
      OCLVM_FUZZ_CHECK(stream.user_index >= 0 && stream.user_index <= 1'000'000);
    }
    for (const HostDecl& host : script_.hosts) {
      OCLVM_FUZZ_CHECK(names.insert(host.name).second);
      OCLVM_FUZZ_CHECK(host.size > 0);
      OCLVM_FUZZ_CHECK(host.initial.empty() || host.initial.size() == host.size);
      OCLVM_FUZZ_CHECK(host.size <= kMaxHostBuffer);
      if (!host.initial.empty()) check_bytes(host.initial);
    }
    for (const EventDecl& event : script_.events) {
      OCLVM_FUZZ_CHECK(names.insert(event.name).second);
      OCLVM_FUZZ_CHECK(event.line >= 1);
    }
    for (const BlobDecl& blob : script_.blobs) OCLVM_FUZZ_CHECK(names.insert(blob.name).second);
    for (const std::string& name : names) {
      OCLVM_FUZZ_CHECK(name != "cpu" && name != "opencl" && name != "on");
    }
  }

  void check_stream(const StreamRef& stream) {
    OCLVM_FUZZ_CHECK(valid_device(stream.device));
    if (stream.stream == -1) return;
    OCLVM_FUZZ_CHECK(valid_index(stream.stream, script_.streams.size()));
    const StreamDecl& decl = script_.streams[static_cast<size_t>(stream.stream)];
    OCLVM_FUZZ_CHECK(decl.device == stream.device);
    OCLVM_FUZZ_CHECK(decl.line < line_);  // declared before use
  }
  void check_stream(const std::optional<StreamRef>& stream) {
    if (stream) check_stream(*stream);
  }

  // A place of a declared blob (allocated before) or host buffer; host ranges lie in the buffer.
  void check_place(const Place& place, uint64_t bytes) {
    if (place.kind == Place::Kind::kBlob) {
      OCLVM_FUZZ_CHECK(valid_index(place.index, script_.blobs.size()));
      OCLVM_FUZZ_CHECK(allocated_[static_cast<size_t>(place.index)]);
      return;
    }
    OCLVM_FUZZ_CHECK(valid_index(place.index, script_.hosts.size()));
    const HostDecl& host = script_.hosts[static_cast<size_t>(place.index)];
    OCLVM_FUZZ_CHECK(host.line < line_);
    OCLVM_FUZZ_CHECK(place.offset <= host.size && bytes <= host.size - place.offset);
  }

  // A byte list; all of them together stay within the script's budget.
  void check_bytes(const std::vector<uint8_t>& bytes) {
    OCLVM_FUZZ_CHECK(!bytes.empty() && bytes.size() <= kMaxInlineBytes);
    inline_bytes_ += bytes.size();
    OCLVM_FUZZ_CHECK(inline_bytes_ <= kMaxScriptInlineBytes);
  }
  static void check_pattern(uint64_t pattern, unsigned size) {
    OCLVM_FUZZ_CHECK(size == 1 || size == 2 || size == 4 || size == 8);
    OCLVM_FUZZ_CHECK(size == 8 || pattern < (uint64_t{1} << (8 * size)));
  }

  void check_operation(const op::Alloc& o) {
    check_stream(o.stream);
    if (o.dtype) {
      OCLVM_FUZZ_CHECK(o.bytes == 0);
      for (int64_t dim : o.shape) OCLVM_FUZZ_CHECK(dim >= 0);
    } else {
      OCLVM_FUZZ_CHECK(o.bytes > 0 && o.shape.empty());
    }
  }
  void check_operation(const op::Release& o) {
    OCLVM_FUZZ_CHECK(valid_index(o.blob, script_.blobs.size()));
    OCLVM_FUZZ_CHECK(allocated_[static_cast<size_t>(o.blob)]);
  }
  void check_operation(const op::Write& o) {
    OCLVM_FUZZ_CHECK(o.dst.kind == Place::Kind::kBlob);
    check_place(o.dst, o.data.size());
    check_bytes(o.data);
    check_stream(o.stream);
  }
  void check_operation(const op::Copy& o) {
    OCLVM_FUZZ_CHECK(o.bytes > 0);
    OCLVM_FUZZ_CHECK(o.src.kind == Place::Kind::kBlob || o.dst.kind == Place::Kind::kBlob);
    check_place(o.src, o.bytes);
    check_place(o.dst, o.bytes);
    check_stream(o.stream);
  }
  void check_operation(const op::Fill& o) {
    OCLVM_FUZZ_CHECK(o.bytes > 0 && o.dst.kind == Place::Kind::kBlob);
    check_place(o.dst, o.bytes);
    check_pattern(o.pattern, o.pattern_size);
    check_stream(o.stream);
  }
  void check_operation(const op::SoftSync& o) {
    check_stream(o.from);
    check_stream(o.to);
  }
  void check_operation(const op::Barrier& o) {
    check_stream(o.stream);
  }
  void check_operation(const op::Launch& o) {
    OCLVM_FUZZ_CHECK(valid_index(o.kernel, script_.kernels.size()));
    OCLVM_FUZZ_CHECK(script_.kernels[static_cast<size_t>(o.kernel)].line < line_);
    OCLVM_FUZZ_CHECK(o.range.dims >= 1 && o.range.dims <= 3);
    for (const KernelArgument& arg : o.args) {
      if (arg.kind == LaunchArg::Kind::kBlob) {
        OCLVM_FUZZ_CHECK(arg.place.kind == Place::Kind::kBlob);
        check_place(arg.place, 0);
      }
      if (arg.kind == LaunchArg::Kind::kLocal) OCLVM_FUZZ_CHECK(arg.local_bytes > 0);
    }
    check_stream(o.stream);
  }
  void check_event(int event) {
    OCLVM_FUZZ_CHECK(valid_index(event, script_.events.size()));
    OCLVM_FUZZ_CHECK(script_.events[static_cast<size_t>(event)].line < line_);  // declared before
  }
  void check_operation(const op::RecordEvent& o) {
    check_event(o.event);
    check_stream(o.stream);
  }
  void check_operation(const op::WaitEvent& o) {
    check_event(o.event);
    check_stream(o.stream);
  }
  void check_operation(const op::RecordBlobUse& o) {
    check_place(Place{Place::Kind::kBlob, o.blob, 0}, 0);
    check_stream(o.stream);
  }
  void check_operation(const op::AccessRead& o) {
    OCLVM_FUZZ_CHECK(o.bytes > 0);
    OCLVM_FUZZ_CHECK(o.src.kind == Place::Kind::kBlob && o.dst.kind == Place::Kind::kHost);
    check_place(o.src, o.bytes);
    check_place(o.dst, o.bytes);
    check_stream(o.stream);
  }
  void check_operation(const op::AccessWrite& o) {
    OCLVM_FUZZ_CHECK(o.dst.kind == Place::Kind::kBlob);
    check_place(o.dst, o.data.size());
    check_bytes(o.data);
    check_stream(o.stream);
  }
  void check_operation(const op::EmptyCache& o) {
    OCLVM_FUZZ_CHECK(valid_device(o.device));
  }
  void check_operation(const op::ResetStats& o) {
    OCLVM_FUZZ_CHECK(valid_device(o.device));
  }
  void check_operation(const op::SetMemoryLimit& o) {
    OCLVM_FUZZ_CHECK(valid_device(o.device));
  }
  void check_operation(const op::Query& o) {
    OCLVM_FUZZ_CHECK(valid_device(o.device));
  }
  void check_operation(const op::Run&) {}
  void check_operation(const op::ExpectError&) {}
  void check_operation(const op::ExpectStat& o) {
    OCLVM_FUZZ_CHECK(valid_device(o.device));
    OCLVM_FUZZ_CHECK(o.value >= 0);
    OCLVM_FUZZ_CHECK(find_stat(o.key.name).has_value());
    bool member_form = o.key.array != nullptr && o.key.field != nullptr;
    OCLVM_FUZZ_CHECK((o.key.scalar != nullptr) != member_form);  // exactly one of the two forms
  }
  void check_operation(const op::ExpectBytes& o) {
    check_place(o.place, o.bytes.size());
    check_bytes(o.bytes);
  }
  void check_operation(const op::ExpectFill& o) {
    OCLVM_FUZZ_CHECK(o.bytes > 0 && o.bytes <= kMaxInlineBytes);
    check_place(o.place, o.bytes);
    check_pattern(o.pattern, o.pattern_size);
  }
  void check_operation(const op::ExpectBarriers& o) {
    OCLVM_FUZZ_CHECK(o.value >= 0);
  }

  const Script& script_;
  int line_ = 0;                  // of the statement being checked
  std::vector<bool> allocated_;   // per blob: its `alloc` came before
  uint64_t inline_bytes_ = 0;     // of the byte lists checked so far
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ParseOptions options;
  options.opencl_devices = kOpenCLDevices;
  Script script;
  try {
    script = parse_script(text, "fuzz.oclvm", options);
  } catch (const ScriptError&) {
    return 0;  // a malformed script, refused as it should be
  } catch (...) {
    fuzz::unexpected_exception("parse_script threw something other than ScriptError", __FILE__,
                               __LINE__);
  }
  OCLVM_FUZZ_CHECK(script.file == "fuzz.oclvm");
  ScriptChecker(script).check();
  return 0;
}
