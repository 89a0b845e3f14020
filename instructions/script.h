// instructions/script.h — the instruction script language: parse a script, then execute it.
//
// A script is a small line-oriented text that names streams, host buffers and blobs, builds
// instructions with InstructionsBuilder, runs them with vm::Run (`run`), and states what must hold
// afterwards (`expect`). design/scripts.md is the reference of the language; in short:
//
//   require devices 2              # options first: they configure the script's VM
//   allocator caching
//   limit 8M
//   stream s2 = opencl:0 user 1    # named streams; a device name is its compute stream
//   host h 64                      # named host buffers (zeroed, or `= ab cd*4`)
//   alloc b = opencl:0 4096        # named blobs, allocated on a stream
//   fill b[0] 4096 0xab on s2      # every instruction of builder.h, see design/scripts.md
//   run                            # one vm::Run of what was built since the last run
//   expect allocated opencl:0 = 4K # expectations: statistics, bytes, errors, barriers
//   expect fill b[0] 4096 0xab
//   release b
//   run
//
// Two phases (the promise `oclvm run` and the tests rely on):
//   parse_script   reads the whole text and checks everything that can be known without running:
//                  syntax, names declared before use and not twice, devices present, numbers that
//                  fit, positive sizes, host-buffer bounds, `run` before expectations, `expect
//                  error` right after a `run`. The first problem throws ScriptError, whose what()
//                  is "FILE:LINE:COL: error: message"; no VM is created, nothing runs.
//   execute        runs a parsed Script on a fresh VirtualMachine built from the script's options
//                  and reports every expectation that did not hold (ExecuteResult). What can only
//                  be known when running (out of memory, a copy past a blob's end, a released blob,
//                  a double release) is the VM's and the builder's business: the run fails and the
//                  script states it with `expect error ...`. Blobs still live at the end are
//                  released and each is reported as a failure "leaked blob b (4096 bytes)".
//
// Types: Script (the parsed form: options, declarations, statements), ScriptError, ParseOptions,
// ExecuteOptions, ExecuteResult, Failure. The parsed form is public so that tests can check what
// the parser made of a line.
//
// Thread-safety: parse_script is a pure function. execute uses its own VM; one Script may be
// executed by several threads at once (it is only read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/stats.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/vm/stream.h"

namespace oclvm::script {

// ---------------------------------------------------------------------------------------------
// Errors and locations.

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

// ---------------------------------------------------------------------------------------------
// The parsed form.

// Upper bounds the parser enforces so that a script cannot make the tool itself allocate
// without limit (these are host memory of the executor, not device memory).
inline constexpr uint64_t kMaxInlineBytes = uint64_t{64} << 20;  // one byte list
// All byte lists of one script together: without it, each 16-byte line `host hN = ab*64M` made
// the parser hold 64 MiB more (fuzz/regressions/script/inline_bytes_per_script.oclvm).
inline constexpr uint64_t kMaxScriptInlineBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxHostBuffer = uint64_t{256} << 20;  // one `host` buffer
// All `host` buffers of one script together (the executor allocates each of them).
inline constexpr uint64_t kMaxScriptHostBytes = uint64_t{1} << 30;

// Options lines, which come before every other statement.
struct ScriptOptions {
  size_t required_devices = 0;  // `require devices N`: skip the script when fewer OpenCL devices
  std::string allocator;        // `allocator NAME`; empty: the registry's default
  uint64_t memory_limit = 0;    // `limit BYTES`: Options::memory_limit (every device); 0: none
  bool caller_runs = true;      // `caller_runs on|off`: VmOptions::caller_runs
};

// `stream NAME = DEVICE ROLE`.
struct StreamDecl {
  std::string name;
  Device device;
  vm::StreamRole role = vm::StreamRole::kCompute;
  int user_index = 0;  // for `user N`
  int line = 0;
};

// `host NAME SIZE` (zeroed) or `host NAME = BYTES` (initialized; size == bytes.size()).
struct HostDecl {
  std::string name;
  uint64_t size = 0;
  std::vector<uint8_t> initial;  // empty: zero-filled
  int line = 0;
};

// `alloc NAME = ...`: the statement that creates the blob.
struct BlobDecl {
  std::string name;
  int line = 0;
};

// A stream operand: a declared stream, or the compute stream of a device.
struct StreamRef {
  int stream = -1;  // index into Script::streams; -1: the compute stream of `device`
  Device device;    // the stream's device (also set for declared streams)
  friend bool operator==(const StreamRef&, const StreamRef&) = default;
};

// A byte position in a blob or a host buffer: `NAME` or `NAME[OFFSET]`.
struct Place {
  enum class Kind : uint8_t { kBlob, kHost };
  Kind kind = Kind::kBlob;
  int index = 0;        // into Script::blobs or Script::hosts
  uint64_t offset = 0;
};

enum class ErrorKind : uint8_t { kOutOfMemory, kInvalidArgument, kBackend, kAny };
// "out_of_memory", "invalid_argument", "backend", "error".
const char* error_kind_name(ErrorKind kind);

enum class Comparison : uint8_t { kEqual, kNotEqual, kLess, kLessEqual, kGreater, kGreaterEqual };
// "=", "!=", "<", "<=", ">", ">=".
const char* comparison_text(Comparison comparison);
bool compare(int64_t seen, Comparison comparison, int64_t expected);

// One statistic of DeviceStats: either a Stat of a StatArray (array, pool, field) or a scalar.
struct StatKey {
  std::string name;       // as written in the script ("allocated", "reserved_bytes.all.peak")
  std::string canonical;  // the PyTorch-style key ("allocated_bytes.all.current", "num_ooms")
  StatArray DeviceStats::*array = nullptr;
  StatType pool = StatType::kAggregate;
  int64_t Stat::*field = nullptr;
  int64_t DeviceStats::*scalar = nullptr;  // set instead of array/field for the num_* counters

  int64_t read(const DeviceStats& stats) const;
};
// The key a script name stands for; nullopt when there is none. See design/scripts.md for the
// names (short ones like "peak_reserved", and every PyTorch-style "ARRAY.POOL.FIELD").
std::optional<StatKey> find_stat(std::string_view name);

// The statements. Sizes are > 0 unless said otherwise.
namespace op {
struct Alloc {             // alloc NAME = STREAM SIZE | alloc NAME = STREAM DTYPE[D0,D1,...]
  int blob;
  StreamRef stream;
  uint64_t bytes = 0;      // byte form
  std::optional<DType> dtype;  // typed form (then bytes == 0 and shape holds the dims, may be 0)
  std::vector<int64_t> shape;
};
struct Release {           // release NAME
  int blob;
};
struct Write {             // write PLACE [on STREAM] = BYTES      (host->device from inline bytes)
  Place dst;
  std::vector<uint8_t> data;
  std::optional<StreamRef> stream;
};
struct Copy {              // copy PLACE -> PLACE SIZE [on STREAM]  (h2d, d2h or d2d)
  Place src;
  Place dst;
  uint64_t bytes;
  std::optional<StreamRef> stream;
};
struct Fill {              // fill PLACE SIZE PATTERN [on STREAM]
  Place dst;
  uint64_t bytes;
  uint64_t pattern;
  unsigned pattern_size;   // 1, 2, 4 or 8: from the pattern's hex digits (0xab, 0xabcd, ...)
  std::optional<StreamRef> stream;
};
struct SoftSync {          // soft_sync STREAM -> STREAM
  StreamRef from;
  StreamRef to;
};
struct Barrier {           // barrier STREAM
  StreamRef stream;
};
struct AccessRead {        // access read PLACE SIZE -> HOSTPLACE [on STREAM]
  Place src;
  uint64_t bytes;
  Place dst;
  std::optional<StreamRef> stream;
};
struct AccessWrite {       // access write PLACE [on STREAM] = BYTES
  Place dst;
  std::vector<uint8_t> data;
  std::optional<StreamRef> stream;
};
struct EmptyCache {        // empty_cache DEVICE
  Device device;
};
struct ResetStats {        // reset_stats DEVICE peak|accumulated
  Device device;
  ResetKind kind;
};
struct Query {             // query DEVICE    (prints the statistics after the run)
  Device device;
};
struct Run {};             // run
struct ExpectError {       // expect error KIND ["TEXT"]
  ErrorKind kind;
  std::string substring;   // empty: any message
};
struct ExpectStat {        // expect STAT DEVICE OP VALUE
  StatKey key;
  Device device;
  Comparison comparison;
  int64_t value;
};
struct ExpectBytes {       // expect bytes PLACE = BYTES
  Place place;
  std::vector<uint8_t> bytes;
};
struct ExpectFill {        // expect fill PLACE SIZE PATTERN
  Place place;
  uint64_t bytes;
  uint64_t pattern;
  unsigned pattern_size;
};
struct ExpectBarriers {    // expect barriers OP N
  Comparison comparison;
  int64_t value;
};
}  // namespace op

using Operation =
    std::variant<op::Alloc, op::Release, op::Write, op::Copy, op::Fill, op::SoftSync, op::Barrier,
                 op::AccessRead, op::AccessWrite, op::EmptyCache, op::ResetStats, op::Query,
                 op::Run, op::ExpectError, op::ExpectStat, op::ExpectBytes, op::ExpectFill,
                 op::ExpectBarriers>;

struct Statement {
  int line = 0;
  int column = 0;  // of the statement's keyword
  Operation op;
};

// A parsed script. Invariants (established by parse_script): every index in a statement is valid;
// names are unique across streams, hosts and blobs; host places are in bounds; every instruction is
// followed by a `run` before the next expectation and before the end; each ExpectError directly
// follows a Run.
struct Script {
  std::string file;
  ScriptOptions options;
  std::vector<StreamDecl> streams;
  std::vector<HostDecl> hosts;
  std::vector<BlobDecl> blobs;
  std::vector<Statement> statements;

  // Number of `expect` lines.
  size_t expectation_count() const;
};

struct ParseOptions {
  // OpenCL devices present (opencl:0 .. N-1); `cpu` always exists. A script that says `require
  // devices M` may name opencl:0 .. max(N, M)-1 (it is skipped when M > N, see execute).
  size_t opencl_devices = 1;
};

// Parses `text` (the contents of `file`, which is only used in messages). Throws ScriptError.
Script parse_script(std::string_view text, std::string file, const ParseOptions& options);
// Reads and parses a file. Throws ScriptError (also when the file cannot be read).
Script load_script(const std::string& path, const ParseOptions& options);

// ---------------------------------------------------------------------------------------------
// Execution.

struct Failure {
  int line = 0;
  std::string message;  // "expected allocated (...) of opencl:0 = 4096, but got 0", "leaked ..."
};

struct ExecuteOptions {
  // Called with one line per dispatched instruction ("x.oclvm:12 CopyBlob on opencl:0/h2d ...").
  // Empty: no tracing. Called from worker threads, one call at a time.
  std::function<void(const std::string&)> trace;
};

struct ExecuteResult {
  bool skipped = false;
  std::string skip_reason;              // "requires 2 OpenCL devices, 1 present"
  size_t expectations = 0;              // `expect` lines executed
  std::vector<Failure> failures;        // in script order; leaks last
  std::vector<std::string> notes;       // output of `query` ("x.oclvm:9: stats of opencl:0 ...")

  bool ok() const { return failures.empty(); }
  // "x.oclvm:12: expected ..." for failure i.
  std::string describe(const Script& script, size_t i) const;
};

// Runs the script on a fresh VirtualMachine over DeviceManager::instance(), built from
// script.options (not from the environment: the script is its whole configuration, except the
// platform, which is the DeviceManager's). Skips (result.skipped) when the script requires more
// OpenCL devices than exist. Never throws for what the script does; a failure to create the VM
// (a backend error) propagates.
ExecuteResult execute(const Script& script, const ExecuteOptions& options = {});

}  // namespace oclvm::script
