// vm/device_worker.cc — the per-device dispatch loop, caller runs, and soft syncs.
#include "oclvm/vm/device_worker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::vm {

namespace {
// > 0 while this thread holds an execution right (see holds_execution_right_on_this_thread).
thread_local int execution_depth = 0;

struct ExecutionScope {
  ExecutionScope() { ++execution_depth; }
  ~ExecutionScope() { --execution_depth; }
};
}  // namespace

bool DeviceWorker::holds_execution_right_on_this_thread() { return execution_depth > 0; }

DeviceQueue& ExecutionContext::queue_on(Device device) const {
  if (device == stream.device()) return stream.queue();
  return worker.foreign_queue(device);
}

DeviceWorker::DeviceWorker(VirtualMachine& vm, MemoryBackend& backend,
                           std::unique_ptr<Allocator> allocator)
    : vm_(vm), backend_(backend), allocator_(std::move(allocator)) {
  thread_ = std::thread([this] { run(); });
}

DeviceWorker::~DeviceWorker() { stop(); }

bool DeviceWorker::enqueue(IntrusiveInstructionList& instructions) {
  {
    MutexLock lock(mutex_);
    if (exited_) return false;
    // While stopping, the thread still drains whatever is appended before it exits.
    pending_.splice(pending_.end(), instructions);
  }
  wake_.notify_one();
  return true;
}

bool DeviceWorker::try_acquire_idle() {
  MutexLock lock(mutex_);
  if (executing_ || stopping_ || !pending_.empty()) return false;
  executing_ = true;
  ++execution_depth;  // until release_execution()
  return true;
}

bool DeviceWorker::acquire_when_idle() {
  MutexLock lock(mutex_);
  ++idle_waiters_;
  while (!stopping_ && (executing_ || !pending_.empty())) idle_.wait(lock.native());
  --idle_waiters_;
  if (stopping_) return false;
  executing_ = true;
  ++execution_depth;  // until release_execution()
  return true;
}

void DeviceWorker::release_execution() {
  // Combining: work that other producers queued while we held the execution right is dispatched
  // here, on this thread, before the right is given back — one wake-up (their ticket) instead of
  // two (the worker thread, then their ticket). Bounded, so a caller is not kept forever.
  size_t combined = 0;
  for (;;) {
    IntrusiveInstructionList batch;
    {
      MutexLock lock(mutex_);
      if (pending_.empty() || stopping_ || combined >= kMaxCombined) {
        executing_ = false;
        --execution_depth;
        if (idle_waiters_ > 0) idle_.notify_all();
        if (pending_.empty() && !stopping_) return;
        break;
      }
      batch.swap(pending_);
    }
    while (!batch.empty()) {
      Instruction& instruction = batch.front();
      batch.pop_front();
      dispatch(&instruction);
      ++combined;
    }
  }
  wake_.notify_one();
}

void DeviceWorker::run() {
  ExecutionScope scope;  // this thread only ever dispatches
  for (;;) {
    IntrusiveInstructionList batch;
    {
      MutexLock lock(mutex_);
      while (executing_ || (pending_.empty() && !stopping_)) wake_.wait(lock.native());
      if (pending_.empty()) {  // stopping, and everything before the stop is dispatched
        exited_ = true;
        return;
      }
      batch.swap(pending_);
      executing_ = true;
    }
    while (!batch.empty()) {
      Instruction& instruction = batch.front();
      batch.pop_front();
      dispatch(&instruction);
    }
    MutexLock lock(mutex_);
    executing_ = false;
    if (idle_waiters_ > 0 && pending_.empty()) idle_.notify_all();
  }
}

namespace {

// The same exception type (Error for one oclvm did not throw), its message prefixed with the
// instruction and its stream.
std::exception_ptr name_error(const Instruction& instruction, std::exception_ptr error) {
  std::string prefix = instruction.name();
  const std::string operands = instruction.describe();
  if (!operands.empty()) prefix += " (" + operands + ")";
  prefix += " on " + instruction.stream().name() + ": ";
  const ErrorInfo info = error_info(error);
  return make_error(info, prefix + info.message);
}

}  // namespace

// Note [Soft sync]: a wait on another stream of this device becomes a marker recorded on that
// stream now (it covers every command that stream has enqueued, including the access waited for,
// because this worker dispatched it earlier) and a device-side wait for it on our stream. A wait
// on another device's stream waits for the signal its StreamSignal sets (Note [Cross-device
// waits] in vm/dependence.cc). Every queue call here is on a queue of this worker's device.
void DeviceWorker::dispatch(Instruction* instruction, bool settle) noexcept {
  // Timing costs two clock reads (~40 ns): only when someone traces.
  const bool timed = vm_.tracing();
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  ExecutionScope scope;  // also covers callers dispatching after shutdown
  std::exception_ptr error = instruction->pre_error_;
  Stream& stream = instruction->stream();
  dispatched_through_ = std::max(dispatched_through_, instruction->sequence_);
  if (!error) try {
    for (const StreamWait& wait : instruction->waits_) {
      if (wait.signal != nullptr) {
        wait.signal->wait();
      } else {
        stream.queue().wait_marker(wait.stream->queue().record_marker());
      }
    }
    ExecutionContext context{vm_, stream, *allocator_, *this};
    instruction->execute(context);
  } catch (...) {
    error = name_error(*instruction, std::current_exception());
  }
  if (instruction->finish_stream_) {
    try {
      stream.queue().finish();
    } catch (...) {
      if (!error) error = name_error(*instruction, std::current_exception());
    }
  }
  const double seconds =
      timed ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() : 0.0;
  Batch* batch = instruction->batch_;
  try {
    vm_.on_dispatched(*instruction, error, seconds, /*settle_now=*/false);
  } catch (...) {
    // Only a throwing trace callback or bad_alloc gets here; dispatch must not throw.
    log_message(LogLevel::kError, "could not record the outcome of %s", instruction->name());
  }
  // May drop the last reference to a blob or tensor; a release that causes goes out detached
  // (make_vm_releaser), since this thread holds the execution right. It happens before the
  // batch is settled, so anything submitted after the ticket returns is ordered after it.
  delete instruction;
  if (settle) vm_.settle(*batch, 1);
}

void DeviceWorker::stop() {
  {
    MutexLock lock(mutex_);
    if (stopping_) {
      if (!thread_.joinable()) return;
    }
    stopping_ = true;
  }
  wake_.notify_one();
  idle_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeviceWorker::check_idle() {
  MutexLock lock(mutex_);
  OCLVM_DCHECK(pending_.empty());
  OCLVM_DCHECK(!executing_);
  // Read under mutex_: the last holder of the execution right wrote it before clearing
  // executing_ under the same mutex.
  OCLVM_DCHECK(dispatched_through_ <= last_sequence_);
}

void DeviceWorker::check_drained() {
  MutexLock lock(mutex_);
  OCLVM_DCHECK(stopping_ && exited_ && pending_.empty());
}

DeviceQueue& DeviceWorker::foreign_queue(Device device) {
  const auto key = static_cast<uint16_t>((static_cast<unsigned>(device.type) << 15) ^
                                         static_cast<uint16_t>(device.index));
  auto it = foreign_queues_.find(key);
  if (it == foreign_queues_.end()) {
    it = foreign_queues_.emplace(key, vm_.devices().backend(device).create_queue()).first;
  }
  return *it->second;
}

}  // namespace oclvm::vm
