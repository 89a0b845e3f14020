// vm/device_worker.h — one thread per device that dispatches that device's instructions in order.
//
// One worker serves every stream of its device (compute, h2d, d2h and the user streams): the
// streams are queues of the device, the worker is the one thread that enqueues on them. The
// worker owns its device's allocator: only the worker (or a caller holding its execution right,
// see below) ever touches it, so the allocator takes no lock. Instructions arrive in submission
// order (sequence numbers given under the VM's submission lock) and are dispatched in that order:
// first their waits (soft syncs), then execute().
//
// Caller runs (Note [Caller runs]): when the worker has nothing pending and is not executing, a
// submitting thread may take the worker's execution right and dispatch its own instructions
// itself, which saves the thread hand-off (microseconds) on the synchronous path. Order and
// confinement hold: the execution right is one bit of an atomic state word that one thread at a
// time can set, and nothing of a lower sequence can be pending at that moment. Taking it from an
// idle worker, and giving it back when nothing happened meanwhile, take no lock (Note [The
// execution right without the lock] in device_worker.cc).
//
// Lifecycle: start (constructor) / enqueue / stop. stop() marks the worker stopping: from then on
// no caller takes the execution right, and the thread dispatches, in order, everything pending
// and whatever is appended before it exits (releases its own instructions cause); then it returns
// and is joined.
//
// Thread-safety: enqueue and the counters are thread-safe; the allocator, the queues' in-flight
// and release markers and the foreign queues only with the execution right. The right is
// declared to clang's thread-safety analysis as a capability (ExecutionRight below): taking it
// (try_acquire_idle, acquire_when_idle), giving it back (release_execution) and everything that
// needs it (OCLVM_REQUIRES(right_)) are checked at compile time; code that holds it by a protocol
// the analysis cannot follow says so with assert_execution_right().
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oclvm/storage/allocator.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/queue.h"
#include "oclvm/storage/thread_annotations.h"
#include "oclvm/vm/instruction.h"

namespace oclvm::vm {

// The execution right of one worker, as clang's thread-safety analysis sees it. It holds no
// data: the right itself is the kExecuting bit of the worker's state word.
class OCLVM_CAPABILITY("execution right") ExecutionRight {};

class DeviceWorker {
 public:
  DeviceWorker(VirtualMachine& vm, MemoryBackend& backend, std::unique_ptr<Allocator> allocator);
  ~DeviceWorker();  // stop()
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  Device device() const { return backend_.device(); }
  MemoryBackend& backend() const { return backend_; }

  // Next sequence number; called under the VM's submission lock.
  uint64_t take_sequence() { return ++last_sequence_; }

  // Appends to the pending list (already in sequence order). Thread-safe. Returns false, taking
  // nothing, when the worker thread has already drained and exited after stop().
  bool enqueue(IntrusiveInstructionList& instructions);
  // Caller runs: when nothing is pending and nobody executes, takes the execution right and
  // returns true; the caller then dispatches with dispatch() and gives it back with
  // release_execution(), which first dispatches up to kMaxCombined instructions that other
  // producers queued meanwhile (combining), then wakes the worker thread if work is left.
  bool try_acquire_idle() OCLVM_TRY_ACQUIRE(true, right_);
  // Waits until nothing is pending and nobody executes, then takes the execution right as
  // try_acquire_idle does; false (taking nothing) once the worker is stopping. The caller must not
  // hold an execution right itself (it could be waiting for itself).
  bool acquire_when_idle() OCLVM_TRY_ACQUIRE(true, right_);
  void release_execution() OCLVM_RELEASE(right_);
  static constexpr size_t kMaxCombined = 4096;
  // Dispatches one instruction (waits, execute, error capture, completion accounting) and
  // deletes it. Only with the execution right. Never throws.
  // `count_now`: count it in its batch and the in-flight bound now (false: the caller does, for a
  // whole list it dispatches inline).
  // The caller is counted as holding the right on this thread already (try_acquire_idle,
  // acquire_when_idle, the worker thread), so dispatch reads no thread-local itself.
  void dispatch(Instruction* instruction, bool count_now = true) noexcept OCLVM_REQUIRES(right_);
  // Dispatches the instructions of `list` in order, as dispatch() does, leaving it empty; returns
  // how many there were.
  size_t dispatch_all(IntrusiveInstructionList& list, bool count_now = true) noexcept
      OCLVM_REQUIRES(right_);
  // dispatch() for a caller that executes after stop() under execution_mutex(), holding no right:
  // counts as holding one on this thread while it runs.
  void dispatch_after_shutdown(Instruction* instruction) noexcept
      OCLVM_REQUIRES(execution_mutex_);

  // True on a thread that holds some worker's execution right: a worker thread dispatching, or a
  // caller running a list inline (including callbacks and the deletion of instructions). Such a
  // thread must not wait for the VM: it may be the thread the wait is for.
  static bool holds_execution_right_on_this_thread();
  // For code that holds this worker's right by a protocol the analysis cannot follow (a host
  // section's object, a right chosen at run time): checks, in debug builds, that this thread
  // holds an execution right, and lets the analysis take this worker's as held from here on.
  void assert_execution_right() const OCLVM_ASSERT_CAPABILITY(right_);

  // Drains every pending instruction and joins the thread. Idempotent.
  void stop();

  // OCLVM_DCHECKs (VirtualMachine::check_invariants): nothing pending, nobody holding the
  // execution right, nothing dispatched beyond the last sequence given out. Called under the
  // VM's submission lock, so no sequence is given out meanwhile.
  void check_idle();
  // Nothing pending and the execution right free, as of this moment (check_invariants' wait).
  bool quiet() const { return (state_.load() & (kExecuting | kPending)) == 0; }
  // OCLVM_DCHECKs after stop(): the thread drained everything and returned.
  void check_drained();

  Allocator& allocator() OCLVM_REQUIRES(right_) { return *allocator_; }
  // The allocator for a caller that holds execution_mutex() after stop() (its statistics).
  Allocator& allocator_after_shutdown() OCLVM_REQUIRES(execution_mutex_) { return *allocator_; }
  // The highest sequence dispatched so far (instructions run in a host section take this place
  // rather than a new one: Note [Lists run in a host section]).
  uint64_t dispatched_through() const { return dispatched_through_; }
  DeviceQueue& foreign_queue(Device device) OCLVM_REQUIRES(right_);
  // Note [Batches that end with a marker]: finishes every queue that an asynchronous batch left
  // commands on, so the host may touch the device's memory (host sections) or the process may
  // exit. Only with the execution right. Never throws: a driver failure is logged (the batch's
  // own ticket reports it too, from its marker).
  void finish_in_flight() noexcept OCLVM_REQUIRES(right_);
  // Note [Stream-ordered release] (instructions/instructions.cc). Only with the execution right.
  // order_release: a release on `queue` is about to give its block back. Records a marker after
  // every command of `queue` so far (none when the queue is idle, or when its last release's
  // marker already follows every command), which joins the in-flight markers; with
  // ReleaseMode::kFinish, and after the thread has exited, finishes `queue` instead. Throws what
  // the driver throws.
  void order_release(DeviceQueue& queue) OCLVM_REQUIRES(right_);
  // order_allocation: an allocation on `queue` is about to take a block. Makes `queue` wait, on the
  // device, for the latest release marker of each other queue of this device that it has not
  // waited for yet, so a block freed there is idle before this queue's commands touch it.
  void order_allocation(DeviceQueue& queue) OCLVM_REQUIRES(right_);
  // Taken by callers that execute after stop() (runs_after_shutdown instructions).
  Mutex& execution_mutex() OCLVM_RETURN_CAPABILITY(execution_mutex_) { return execution_mutex_; }

 private:
  void run();

  VirtualMachine& vm_;
  MemoryBackend& backend_;
  const std::unique_ptr<Allocator> allocator_;

  // Bits of state_. kExecuting: someone holds the execution right. The others mirror, for the
  // lock-free paths, what mutex_ guards: pending_ is not empty, stopping_, idle_waiters_ > 0.
  static constexpr uint32_t kExecuting = 1;
  static constexpr uint32_t kPending = 2;
  static constexpr uint32_t kStopping = 4;
  static constexpr uint32_t kIdleWaiters = 8;
  // Sets kExecuting when none of `busy` is set; false, changing nothing, otherwise.
  bool take_right_unless(uint32_t busy) OCLVM_TRY_ACQUIRE(true, right_);
  // Clears kExecuting (release: the next holder sees our writes).
  void give_right_back() OCLVM_RELEASE(right_);
  bool executing() const { return (state_.load() & kExecuting) != 0; }

  Mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;           // acquire_when_idle's waiters: kExecuting went off
  int idle_waiters_ OCLVM_GUARDED_BY(mutex_) = 0;
  IntrusiveInstructionList pending_ OCLVM_GUARDED_BY(mutex_);
  // Changed by the lock-free paths (kExecuting only) and under mutex_ (every bit).
  std::atomic<uint32_t> state_{0};
  bool stopping_ OCLVM_GUARDED_BY(mutex_) = false;
  bool exited_ OCLVM_GUARDED_BY(mutex_) = false;  // the thread drained and returned

  ExecutionRight right_;
  Mutex execution_mutex_;  // the execution right after stop()
  uint64_t last_sequence_ = 0;             // guarded by the VM's submission lock
  uint64_t dispatched_through_ = 0;        // only with the execution right
  std::unordered_map<uint16_t, std::unique_ptr<DeviceQueue>> foreign_queues_
      OCLVM_GUARDED_BY(right_);
  // Note [Batches that end with a marker]: the marker that ended each asynchronous batch on a
  // queue, oldest first, while its commands may still run; at most kMaxBatchesInFlight (the
  // oldest is waited for past that). Only with the execution right.
  static constexpr size_t kMaxBatchesInFlight = 64;
  struct InFlight {
    DeviceQueue* queue;
    std::shared_ptr<QueueMarker> marker;
    uint64_t commands;  // queue->commands() just after the marker was recorded
  };
  std::deque<InFlight> in_flight_ OCLVM_GUARDED_BY(right_);
  void end_with_marker(Batch& batch, DeviceQueue& queue) OCLVM_REQUIRES(right_);
  void keep_in_flight(DeviceQueue& queue, std::shared_ptr<QueueMarker> marker)
      OCLVM_REQUIRES(right_);
  // The latest release marker of each queue that released since the last finish_in_flight, and
  // the queues that have waited for it (order_allocation). Only with the execution right.
  struct ReleaseMarker {
    DeviceQueue* queue = nullptr;
    std::shared_ptr<QueueMarker> marker;
    uint64_t commands = 0;  // queue->commands() just after the marker was recorded
    std::vector<DeviceQueue*> waited;
  };
  // The in-flight marker of `queue` that follows every command of it so far, if there is one.
  const InFlight* latest_marker_of(const DeviceQueue& queue) const OCLVM_REQUIRES(right_);
  std::vector<ReleaseMarker> release_markers_ OCLVM_GUARDED_BY(right_);
  // Set by the thread as it exits: releases after that (runs_after_shutdown) finish their queue.
  bool finish_releases_ OCLVM_GUARDED_BY(right_) = false;

  std::thread thread_;
};

}  // namespace oclvm::vm
