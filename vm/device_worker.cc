// vm/device_worker.cc — the per-device dispatch loop, caller runs, and soft syncs.
#include "oclvm/vm/device_worker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/hot_thread_local.h"
#include "oclvm/storage/log.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::vm {

namespace {
// > 0 while this thread holds an execution right (see holds_execution_right_on_this_thread).
OCLVM_HOT_TLS thread_local int execution_depth = 0;

struct ExecutionScope {
  ExecutionScope() { ++execution_depth; }
  ~ExecutionScope() { --execution_depth; }
};
}  // namespace

bool DeviceWorker::holds_execution_right_on_this_thread() { return execution_depth > 0; }

void DeviceWorker::assert_execution_right() const {
  OCLVM_DCHECK(holds_execution_right_on_this_thread());
}

DeviceQueue& ExecutionContext::queue_on(Device device) const {
  if (device == stream.device()) return stream.queue();
  worker.assert_execution_right();  // contexts exist only inside dispatch()
  return worker.foreign_queue(device);
}

DeviceWorker::DeviceWorker(VirtualMachine& vm, MemoryBackend& backend,
                           std::unique_ptr<Allocator> allocator)
    : vm_(vm), backend_(backend), allocator_(std::move(allocator)) {
  // Note [Stream-ordered release]: a segment goes back to the driver only after the commands
  // queued on its freed blocks have completed. The guard runs where the allocator runs: with the
  // execution right.
  // The analysis cannot see that the allocator calls it only with the right held.
  allocator_->set_segment_release_guard(
      [this]() OCLVM_NO_THREAD_SAFETY_ANALYSIS { finish_in_flight(); });
  thread_ = std::thread([this] { run(); });
}

DeviceWorker::~DeviceWorker() {
  stop();
  // Empty in practice (the thread finished it on exit, and releases after that finish their
  // queue); it must be, before the queues' owners go: the VM destroys its streams first.
  finish_in_flight();
  allocator_->set_segment_release_guard({});
}

// Note [The execution right without the lock]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every synchronous list that runs on its caller's thread takes the worker's execution right and
// gives it back; under mutex_ that was two lock round trips per list. The right is now the
// kExecuting bit of state_, next to bits mirroring what mutex_ guards (kPending, kStopping,
// kIdleWaiters, each changed only under mutex_). try_acquire_idle sets kExecuting with one
// compare-and-swap when none of kExecuting, kPending and kStopping is set (waiters in
// acquire_when_idle do not stop a caller, as before). release_execution clears it with one
// compare-and-swap from exactly kExecuting; any other bit means someone may need us (work queued
// meanwhile, to combine or wake the worker for; a waiter in acquire_when_idle; a stop), and the
// release takes the lock as before. Nothing is lost between the two: a thread that sets a bit
// under mutex_ and then finds kExecuting set either makes the holder's compare-and-swap fail (the
// holder then takes mutex_, notifies the idle waiters under it and wakes the worker thread after
// it), or comes after it and finds the right free. The worker thread and acquire_when_idle read
// the bits under mutex_ and take the right with the same compare-and-swap, since a lock-free
// taker may race them. The acquire / release orders make the next holder see everything the last
// one did (the allocator has no lock of its own).

// The two primitives are the right itself (state_'s bit), which the analysis takes on trust.
bool DeviceWorker::take_right_unless(uint32_t busy) OCLVM_NO_THREAD_SAFETY_ANALYSIS {
  uint32_t state = state_.load(std::memory_order_relaxed);
  do {
    if ((state & busy) != 0) return false;
  } while (!state_.compare_exchange_weak(state, state | kExecuting, std::memory_order_acquire,
                                         std::memory_order_relaxed));
  return true;
}

void DeviceWorker::give_right_back() OCLVM_NO_THREAD_SAFETY_ANALYSIS {
  state_.fetch_and(~kExecuting, std::memory_order_release);
}

bool DeviceWorker::enqueue(IntrusiveInstructionList& instructions) {
  {
    MutexLock lock(mutex_);
    if (exited_) return false;
    // While stopping, the thread still drains whatever is appended before it exits.
    pending_.splice(pending_.end(), instructions);
    if (!pending_.empty()) state_.fetch_or(kPending);
  }
  wake_.notify_one();
  return true;
}

bool DeviceWorker::try_acquire_idle() {
  // Waiters in acquire_when_idle do not stop a caller, as before (kIdleWaiters is not busy).
  if (!take_right_unless(kExecuting | kPending | kStopping)) return false;
  ++execution_depth;  // until release_execution()
  return true;
}

bool DeviceWorker::acquire_when_idle() {
  if (try_acquire_idle()) return true;  // idle now: no lock, no wait
  MutexLock lock(mutex_);
  if (++idle_waiters_ == 1) state_.fetch_or(kIdleWaiters);
  const auto stop_waiting = [&]() OCLVM_REQUIRES(mutex_) {
    if (--idle_waiters_ == 0) state_.fetch_and(~kIdleWaiters);
  };
  for (;;) {
    if (stopping_) {
      stop_waiting();
      return false;
    }
    if (take_right_unless(kExecuting | kPending)) break;
    idle_.wait(lock.native());
  }
  stop_waiting();
  ++execution_depth;  // until release_execution()
  return true;
}

// Unchecked inside: the lock-free path gives the right back with its own compare-and-swap,
// which the analysis cannot see as give_right_back(). Its callers are checked against RELEASE.
void DeviceWorker::release_execution() OCLVM_NO_THREAD_SAFETY_ANALYSIS {
  // Nothing happened meanwhile that anyone waits on: give the right back without the lock.
  uint32_t alone = kExecuting;
  if (state_.compare_exchange_strong(alone, 0, std::memory_order_release,
                                     std::memory_order_relaxed)) {
    --execution_depth;
    return;
  }
  // Combining: work that other producers queued while we held the execution right is dispatched
  // here, on this thread, before the right is given back — one wake-up (their ticket) instead of
  // two (the worker thread, then their ticket). Bounded, so a caller is not kept forever.
  size_t combined = 0;
  for (;;) {
    IntrusiveInstructionList batch;
    {
      MutexLock lock(mutex_);
      if (pending_.empty() || stopping_ || combined >= kMaxCombined) {
        give_right_back();
        --execution_depth;
        if (idle_waiters_ > 0) idle_.notify_all();
        if (pending_.empty() && !stopping_) return;
        break;
      }
      batch.swap(pending_);
      state_.fetch_and(~kPending);
    }
    combined += dispatch_all(batch);
  }
  wake_.notify_one();
}

void DeviceWorker::run() {
  ExecutionScope scope;  // this thread only ever dispatches
  for (;;) {
    IntrusiveInstructionList batch;
    {
      MutexLock lock(mutex_);
      for (;;) {
        if (!pending_.empty()) {
          if (take_right_unless(kExecuting)) break;  // else a caller holds it: wait for it
        } else if (stopping_ && !executing()) {
          // Stopping, and everything before the stop is dispatched. Nobody can take the right
          // any more (kStopping), so the queues are this thread's to finish.
          assert_execution_right();
          finish_in_flight();
          finish_releases_ = true;
          exited_ = true;
          return;
        }
        wake_.wait(lock.native());
      }
      batch.swap(pending_);
      state_.fetch_and(~kPending);
    }
    dispatch_all(batch);
    MutexLock lock(mutex_);
    give_right_back();
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
void DeviceWorker::dispatch(Instruction* instruction, bool count_now) noexcept {
  // Timing costs two clock reads (~40 ns): only when someone traces.
  const bool timed = vm_.tracing();
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  std::exception_ptr error = std::move(instruction->submission_error_);
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
      Batch* const owner = instruction->batch_;
      if (owner != nullptr && owner->shared && !owner->detached) {
        end_with_marker(*owner, stream.queue());
      } else {
        stream.queue().finish();
      }
    } catch (...) {
      if (!error) error = name_error(*instruction, std::current_exception());
    }
  }
  const double seconds =
      timed ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() : 0.0;
  Batch* batch = instruction->batch_;
  try {
    vm_.on_dispatched(*instruction, error, seconds, /*count_now=*/false);
  } catch (...) {
    // Only a throwing trace callback or bad_alloc gets here; dispatch must not throw.
    log_message(LogLevel::kError, "could not record the outcome of %s", instruction->name());
  }
  // May drop the last reference to a blob or tensor; a release that causes goes out detached
  // (make_vm_releaser), since this thread holds the execution right. It happens before the
  // batch is counted done, so anything submitted after the ticket returns is ordered after it.
  delete instruction;
  if (count_now) vm_.count_done(*batch, 1);
}

// Note [Batches that end with a marker]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A synchronous run() finishes each queue its list used (its caller is about to wait anyway). An
// asynchronous submission (a Ticket) does not: the last instruction of the batch on each stream
// records a marker there, the batch keeps it, and Ticket::wait waits for the markers after the
// batch is counted done. So the worker goes on dispatching while the device works, and the host
// waits only at a ticket. What relies on a batch's commands having completed without waiting for
// its ticket finishes the queues first: a host section on entry (finish_in_flight), a segment given
// back to the driver (the allocator's guard), a blocking map or read (its queue's order), and the
// worker thread before it exits; a stream-ordered release keeps its marker here too (Note
// [Stream-ordered release] in instructions/instructions.cc). The markers of the last
// kMaxBatchesInFlight batches and releases are kept here; the oldest is waited for when one more
// comes, which bounds what the device has queued and what those batches hold (their host buffers
// stay the caller's until its ticket returns). A detached batch (a release from a destructor)
// ends like a synchronous one: it finishes where it needs a finish, which a release alone does
// not.
void DeviceWorker::end_with_marker(Batch& batch, DeviceQueue& queue) {
  std::shared_ptr<QueueMarker> marker = queue.record_marker();
  {
    MutexLock lock(batch.mutex);
    batch.markers.push_back(marker);
  }
  keep_in_flight(queue, std::move(marker));
}

void DeviceWorker::keep_in_flight(DeviceQueue& queue, std::shared_ptr<QueueMarker> marker) {
  in_flight_.push_back(InFlight{&queue, std::move(marker), queue.commands()});
  if (in_flight_.size() > kMaxBatchesInFlight) {
    try {
      in_flight_.front().marker->wait();
    } catch (...) {
      // The batch that recorded it reports the failure from its own ticket.
    }
    in_flight_.pop_front();
  }
}

void DeviceWorker::finish_in_flight() noexcept {
  for (auto& [queue, marker, commands] : in_flight_) {
    try {
      queue->finish();  // at most one driver call per queue: later ones find nothing outstanding
    } catch (const std::exception& e) {
      log_message(LogLevel::kError, "finishing %s before host access failed: %s",
                  backend_.device().str().c_str(), e.what());
    }
  }
  in_flight_.clear();
  release_markers_.clear();  // each was in in_flight_, or waited for when it left
}

void DeviceWorker::order_release(DeviceQueue& queue) {
  if (finish_releases_ || vm_.options().release == ReleaseMode::kFinish) {
    queue.finish();
    return;
  }
  if (queue.idle()) return;  // a completed finish covered every command: nothing can use the block
  auto it = std::find_if(release_markers_.begin(), release_markers_.end(),
                         [&](const ReleaseMarker& r) { return r.queue == &queue; });
  if (it != release_markers_.end() && it->commands == queue.commands()) return;
  // The marker that ended the batch just before often follows every command already. A marker
  // is recorded (and kept in flight) before any record changes, so a failure leaves none stale.
  std::shared_ptr<QueueMarker> marker;
  if (const InFlight* latest = latest_marker_of(queue)) {
    marker = latest->marker;
  } else {
    marker = queue.record_marker();
    keep_in_flight(queue, marker);
  }
  if (it == release_markers_.end()) {
    release_markers_.push_back(ReleaseMarker{&queue, std::move(marker), queue.commands(), {}});
    return;
  }
  it->marker = std::move(marker);
  it->commands = queue.commands();
  it->waited.clear();
}

const DeviceWorker::InFlight* DeviceWorker::latest_marker_of(const DeviceQueue& queue) const {
  for (auto it = in_flight_.rbegin(); it != in_flight_.rend(); ++it) {
    if (it->queue == &queue) return it->commands == queue.commands() ? &*it : nullptr;
  }
  return nullptr;
}

void DeviceWorker::order_allocation(DeviceQueue& queue) {
  for (ReleaseMarker& release : release_markers_) {
    if (release.queue == &queue ||
        std::find(release.waited.begin(), release.waited.end(), &queue) != release.waited.end()) {
      continue;
    }
    queue.wait_marker(release.marker);
    release.waited.push_back(&queue);
  }
}

size_t DeviceWorker::dispatch_all(IntrusiveInstructionList& list, bool count_now) noexcept {
  size_t count = 0;
  while (!list.empty()) {
    Instruction& instruction = list.front();
    list.pop_front();
    dispatch(&instruction, count_now);
    ++count;
  }
  return count;
}

void DeviceWorker::dispatch_after_shutdown(Instruction* instruction) noexcept {
  ExecutionScope scope;
  assert_execution_right();  // execution_mutex_ stands for it once the thread is gone
  dispatch(instruction);
}

void DeviceWorker::stop() {
  {
    MutexLock lock(mutex_);
    if (stopping_) {
      if (!thread_.joinable()) return;
    }
    stopping_ = true;
    state_.fetch_or(kStopping);
  }
  wake_.notify_one();
  idle_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeviceWorker::check_idle() {
  MutexLock lock(mutex_);
  OCLVM_DCHECK(pending_.empty());
  OCLVM_DCHECK(!executing());
  // The bits the lock-free paths read mirror what mutex_ guards.
  const uint32_t state = state_.load();
  OCLVM_DCHECK(((state & kPending) != 0) == !pending_.empty());
  OCLVM_DCHECK(((state & kStopping) != 0) == stopping_);
  OCLVM_DCHECK(((state & kIdleWaiters) != 0) == (idle_waiters_ > 0));
  // Read after kExecuting was seen clear: the last holder of the execution right wrote it before
  // clearing the bit (release), and the load of state_ is sequentially consistent (acquire).
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
