// adapters/script/ast.h — the parsed form of an instruction script (design/scripts.md).
//
// What parse_script (parser.h) makes of a script's text and what execute (executor.h) runs: the
// options, the declarations (streams, host buffers, events, blobs) and the statements, one per
// line, each an alternative of Operation. Names are resolved to indices and devices to Devices
// while parsing, so nothing here refers to text any more, except what messages need (names,
// lines).
//
// Main types: Script (options, declarations, statements), Statement and Operation (the op::
// structs, one per statement kind), Place and StreamRef (operands), StatKey (a statistic named in
// an `expect`; find_stat knows the names), ErrorKind and Comparison.
//
// Promises of a Script that parse_script returned (the executor relies on them; the fuzzer
// checks them, fuzz/script_fuzzer.cc): every index in a statement is valid; names are unique
// across every kind of declaration; host places lie within their buffer; sizes are > 0 where an
// op:: comment does not say otherwise; every instruction is followed by a `run` before the next
// expectation and before the end; each ExpectError directly follows a Run. The structs are
// public so that tests can check what the parser made of a line.
//
// Thread-safety: plain values. A Script is only read once parsed; several threads may execute one
// Script at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "oclvm/instructions/instructions.h"  // ResetKind
#include "oclvm/storage/device.h"
#include "oclvm/storage/stats.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/vm/stream.h"

namespace oclvm::script {

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

// `event NAME`: a StreamEvent (instructions.h), recorded and waited for by `record_event` and
// `wait_event`. Never recorded, it is nothing to wait for.
struct EventDecl {
  std::string name;
  int line = 0;
};

// `kernel NAME = "SOURCE" [options "OPTIONS"]`: an OpenCL C program that defines a __kernel
// called NAME, which `launch NAME` runs (compiled when the first launch of it is built).
struct KernelDecl {
  std::string name;
  std::string source;
  std::string options;
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

// One argument of a `launch`: `read|write|readwrite PLACE` (a blob), `TYPE VALUE` (an OpenCL C
// scalar: char ... double) or `local SIZE`.
struct KernelArgument {
  LaunchArg::Kind kind = LaunchArg::Kind::kScalar;
  Place place;                                // kBlob (a blob place)
  KernelAccess access = KernelAccess::kRead;  // kBlob
  ScalarType type = ScalarType::kInt;         // kScalar
  std::array<uint8_t, 8> bytes{};             // kScalar: the value, least significant byte first
  uint64_t local_bytes = 0;                   // kLocal
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
struct RecordEvent {       // record_event EVENT on STREAM
  int event;               // into Script::events
  StreamRef stream;
};
struct WaitEvent {         // wait_event EVENT on STREAM
  int event;
  StreamRef stream;
};
struct Launch {            // launch KERNEL [G,...] [[L,...]] [ARG, ARG, ...] on STREAM
  int kernel;              // into Script::kernels
  LaunchRange range;       // global, and local (all 0 when not given)
  std::vector<KernelArgument> args;
  StreamRef stream;
};
struct RecordBlobUse {     // record_blob_use NAME on STREAM
  int blob;
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
struct SetMemoryLimit {    // set_memory_limit DEVICE BYTES
  Device device;
  uint64_t bytes;          // may be 0: no limit
};
struct Query {             // query DEVICE    (prints the statistics after the run)
  Device device;
};
struct Run {};             // run
// The base of every `expect` statement (is_expectation); it adds nothing else.
struct Expectation {};
struct ExpectError : Expectation {  // expect error KIND ["TEXT"]
  ErrorKind kind;
  std::string substring;   // empty: any message
};
struct ExpectStat : Expectation {  // expect STAT DEVICE OP VALUE
  StatKey key;
  Device device;
  Comparison comparison;
  int64_t value;
};
struct ExpectBytes : Expectation {  // expect bytes PLACE = BYTES
  Place place;
  std::vector<uint8_t> bytes;
};
struct ExpectFill : Expectation {  // expect fill PLACE SIZE PATTERN
  Place place;
  uint64_t bytes;
  uint64_t pattern;
  unsigned pattern_size;
};
struct ExpectBarriers : Expectation {  // expect barriers OP N
  Comparison comparison;
  int64_t value;
};
}  // namespace op

using Operation =
    std::variant<op::Alloc, op::Release, op::Write, op::Copy, op::Fill, op::SoftSync, op::Barrier,
                 op::Launch, op::RecordEvent, op::WaitEvent, op::RecordBlobUse, op::AccessRead,
                 op::AccessWrite, op::EmptyCache, op::ResetStats, op::SetMemoryLimit, op::Query,
                 op::Run, op::ExpectError, op::ExpectStat, op::ExpectBytes, op::ExpectFill,
                 op::ExpectBarriers>;

// Whether the operation is an `expect` line (each counts as one expectation in the summary).
bool is_expectation(const Operation& op);

struct Statement {
  int line = 0;
  int column = 0;  // of the statement's keyword
  Operation op;
};

// A parsed script; its invariants are listed at the top of this file.
struct Script {
  std::string file;
  ScriptOptions options;
  std::vector<StreamDecl> streams;
  std::vector<HostDecl> hosts;
  std::vector<EventDecl> events;
  std::vector<BlobDecl> blobs;
  std::vector<KernelDecl> kernels;
  std::vector<Statement> statements;

  // Number of `expect` lines.
  size_t expectation_count() const;
};

// "1 byte", "2 bytes": a count and its noun, for messages.
std::string plural(uint64_t n, const char* one, const char* many);

}  // namespace oclvm::script
