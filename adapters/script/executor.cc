// adapters/script/executor.cc — the Executor: one step() per statement kind, dispatched with
// std::visit over Statement::op; batches, runs, expectations, tracing and leaks.
// See adapters/script/executor.h.
#include "adapters/script/executor.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "oclvm/instructions/builder.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/hex.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/thread_annotations.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::script {

std::string ExecuteResult::describe(const Script& script, size_t i) const {
  const Failure& failure = failures.at(i);
  return script.file + ":" + std::to_string(failure.line) + ": " + failure.message;
}

namespace {

struct Outcome {
  bool failed = false;
  ErrorKind kind = ErrorKind::kAny;
  std::string message;
};

// The kind an `expect error` names; kAny for the errors it has no name for.
ErrorKind kind_of(ErrorInfo::Type type) {
  switch (type) {
    case ErrorInfo::Type::kOutOfMemory: return ErrorKind::kOutOfMemory;
    case ErrorInfo::Type::kInvalidArgument: return ErrorKind::kInvalidArgument;
    case ErrorInfo::Type::kBackend: return ErrorKind::kBackend;
    default: return ErrorKind::kAny;
  }
}

Outcome outcome_of(const std::exception_ptr& error) {
  if (!error) return Outcome{};
  ErrorInfo info = error_info(error);
  return Outcome{true, kind_of(info.type), std::move(info.message)};
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
    for (size_t i = 0; i < script_.events.size(); ++i) {
      events_.push_back(std::make_shared<StreamEvent>());
    }
    blobs_.resize(script_.blobs.size());
  }

  void execute() {
    const std::vector<Statement>& statements = script_.statements;
    for (size_t i = 0; i < statements.size(); ++i) {
      const Statement& statement = statements[i];
      line_ = statement.line;
      std::visit([&](const auto& op) { step(op); }, statement.op);
      if (is_expectation(statement.op)) ++result_.expectations;
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

  void step(const op::Alloc& alloc) {
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
  }
  void step(const op::Release& release) {
    build([&] { builder_.release(blob(release.blob)); });
  }
  void step(const op::Write& write) {
    build([&] {
      builder_.copy_host_to_device(write.data.data(), blob(write.dst.index), write.dst.offset,
                                   write.data.size(), stream_or_null(write.stream));
    });
  }
  void step(const op::Copy& copy) {
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
  }
  void step(const op::Fill& fill) {
    build([&] {
      builder_.fill(blob(fill.dst.index), fill.dst.offset, fill.bytes, fill.pattern,
                    fill.pattern_size, stream_or_null(fill.stream));
    });
  }
  void step(const op::SoftSync& sync) {
    build([&] { builder_.soft_sync(stream(sync.from), stream(sync.to)); });
  }
  void step(const op::Barrier& barrier) {
    build([&] {
      builder_.barrier(stream(barrier.stream),
                       [this] { barriers_.fetch_add(1, std::memory_order_acq_rel); });
    });
  }
  void step(const op::RecordEvent& record) {
    build([&] {
      builder_.record_event(stream(record.stream), events_[static_cast<size_t>(record.event)]);
    });
  }
  void step(const op::WaitEvent& wait) {
    build([&] {
      builder_.wait_event(stream(wait.stream), events_[static_cast<size_t>(wait.event)]);
    });
  }
  void step(const op::Launch& launch) {
    build([&] {
      const KernelDecl& decl = script_.kernels[static_cast<size_t>(launch.kernel)];
      std::vector<LaunchArg> args;
      args.reserve(launch.args.size());
      for (const KernelArgument& arg : launch.args) {
        switch (arg.kind) {
          case LaunchArg::Kind::kBlob:
            args.push_back(LaunchArg::of_blob(blob(arg.place.index), arg.place.offset, arg.access));
            break;
          case LaunchArg::Kind::kScalar:
            args.push_back(LaunchArg::of_scalar(arg.type, arg.bytes.data()));
            break;
          case LaunchArg::Kind::kLocal:
            args.push_back(LaunchArg::local(arg.local_bytes));
            break;
        }
      }
      builder_.launch(stream(launch.stream), KernelSource{decl.source, decl.name, decl.options},
                      launch.range, args);
    });
  }
  void step(const op::RecordBlobUse& use) {
    build([&] { builder_.record_blob_use(stream(use.stream), blob(use.blob)); });
  }
  void step(const op::AccessRead& read) {
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
  }
  void step(const op::AccessWrite& write) {
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
  }
  void step(const op::EmptyCache& empty) {
    build([&] { builder_.empty_cache(empty.device); });
  }
  void step(const op::ResetStats& reset) {
    build([&] { builder_.reset_stats(reset.device, reset.kind); });
  }
  void step(const op::SetMemoryLimit& limit) {
    build([&] { builder_.set_memory_limit(limit.device, limit.bytes); });
  }
  void step(const op::Query& query) {
    build([&] {
      auto stats = std::make_unique<DeviceStats>();
      stats->num_ooms = -1;  // sentinel: still -1 when the query did not run
      builder_.query_stats(query.device, stats.get());
      queries_.push_back(PendingQuery{line_, query.device, std::move(stats)});
    });
  }
  void step(const op::Run&) {
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
  }

  // --- Expectations (each counts as one, see execute()).

  void step(const op::ExpectError& expect) {
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
  }

  void step(const op::ExpectStat& expect) {
    DeviceStats stats;
    std::string what = expect.key.name;
    if (expect.key.name != expect.key.canonical) what += " (" + expect.key.canonical + ")";
    what += " of " + expect.device.str();
    try {
      builder_.query_stats(expect.device, &stats);
    } catch (const std::exception& e) {
      builder_.take();
      fail("could not query " + what + ": " + e.what());
      return;
    }
    batch_lines_.assign(builder_.size(), line_);
    Outcome outcome = outcome_of(submit());
    if (outcome.failed) {
      fail("could not query " + what + ": " + outcome.message);
      return;
    }
    int64_t seen = expect.key.read(stats);
    if (!compare(seen, expect.comparison, expect.value)) {
      fail("expected " + what + " " + comparison_text(expect.comparison) + " " +
           std::to_string(expect.value) + ", but got " + std::to_string(seen));
    }
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

  void step(const op::ExpectBytes& expect) {
    std::optional<std::vector<uint8_t>> seen = read_place(expect.place, expect.bytes.size());
    if (!seen) return;
    size_t shown = std::min<size_t>(expect.bytes.size(), 16);
    std::string wanted = "= " + hex_bytes(expect.bytes.data(), shown) +
                         (expect.bytes.size() > shown ? " ..." : "");
    compare_bytes(expect.place, *seen, wanted, [&](size_t i) { return expect.bytes[i]; });
  }

  void step(const op::ExpectFill& expect) {
    std::optional<std::vector<uint8_t>> seen = read_place(expect.place, expect.bytes);
    if (!seen) return;
    const int digits = static_cast<int>(2 * expect.pattern_size);
    std::string wanted = "filled with " + hex(expect.pattern, digits);
    compare_bytes(expect.place, *seen, wanted,
                  [&](size_t i) { return pattern_byte(expect.pattern, expect.pattern_size, i); });
  }

  void step(const op::ExpectBarriers& expect) {
    int64_t seen = barriers_.load(std::memory_order_acquire);
    if (!compare(seen, expect.comparison, expect.value)) {
      fail("expected barriers " + std::string(comparison_text(expect.comparison)) + " " +
           std::to_string(expect.value) + " (callbacks run so far), but got " +
           std::to_string(seen));
    }
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
  std::vector<std::shared_ptr<StreamEvent>> events_;  // per EventDecl
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
