// vm/virtual_machine.h — the VirtualMachine, tickets and vm::Run.
//
// The VM owns one DeviceWorker per device (each owning that device's allocator, chosen by the
// AllocatorRegistry from Options) and the streams. Callers build an InstructionList (see
// instructions/builder.h) and hand it over:
//
//   vm::Run(list)      synchronous: returns when every instruction has been dispatched and every
//                      queue the list touched has finished; rethrows the first error.
//   vm::Submit(list)   asynchronous: returns a Ticket; Ticket::wait() is the sync point.
//
// Note [Submission]: under one submission lock the VM gives each instruction the next sequence
// number of its device's worker and computes its waits from its operands' access records (the
// dependence analysis, vm/dependence.h), then hands the instructions to their workers in order
// — or, on an idle single device, dispatches them on the caller's thread (Note [Caller runs] in
// virtual_machine.cc).
//
// Backpressure: at most VmOptions::max_in_flight submitted-but-undispatched instructions; a
// producer blocks past it (a list larger than the bound is admitted alone).
//
// Errors: a failing instruction records an exception of the same type (InvalidArgument,
// OutOfMemoryError, BackendError, Error) whose message starts with the instruction, its stream and
// device: "AllocateBlob on opencl:0/compute: Out of memory on opencl:0: ...". The VM and the other
// instructions go on; the first error of a submission is rethrown at its sync point.
//
// Shutdown: drains every pending instruction and joins the workers. Afterwards (a late caller
// first waits for that drain) an instruction that runs_after_shutdown() (ReleaseTensor,
// QueryStats) executes on the caller's thread; anything else is an Error ("Expected a running
// VM, but it has been shut down").
//
// Thread-safety: thread-safe; any number of producer threads may submit at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/memory_history.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/queue.h"
#include "oclvm/storage/stats.h"
#include "oclvm/storage/thread_annotations.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/device_worker.h"
#include "oclvm/vm/instruction.h"
#include "oclvm/vm/stream.h"

namespace oclvm::vm {

struct TraceEvent {
  const Instruction& instruction;
  const Stream& stream;
  double seconds;           // wall time of waits + execute on the dispatching thread
  const char* error;        // nullptr when it succeeded
};

struct VmOptions {
  // Bound on submitted-but-undispatched instructions (backpressure).
  size_t max_in_flight = 16384;
  // Let an idle device's instructions run on the submitting thread (Note [Caller runs]).
  bool caller_runs = true;
};

// One submission: what a Ticket waits for. The instructions themselves are owned by the VM from
// submission on and deleted by the thread that dispatches them, right after dispatch.
//
// Note [Batch lifetime]: the Batch lives as long as its Ticket. The thread that counts the last
// instruction done sets `done` and notifies under `mutex`, and Ticket::wait returns only after
// seeing `done` under `mutex`, so that thread has let go of the batch before the ticket can free
// it. (A lock-free "remaining == 0" exit would let a ticket free the batch while that thread is
// still about to notify it.)
//
// The VM co-owns every batch of submit() and submit_detached() it has instructions of (`self`,
// dropped by the thread that counts the last instruction done), so a Ticket that is dropped before
// wait() — or a detached submission with no ticket at all — never leaves workers writing into freed
// memory. run() keeps its batch on its own stack instead: it returns only after seeing `done` under
// `mutex`, the same rule a ticket's wait follows, so no heap batch and no co-ownership are needed.
//
// Its state is private to the VM, its workers and Ticket: every field is the submission
// protocol's, and the lock annotations say which need `mutex`.
class Batch {
 public:
  Batch() = default;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

 private:
  friend class VirtualMachine;
  friend class DeviceWorker;
  friend class Ticket;

  std::atomic<size_t> remaining{0};     // instructions not yet dispatched
  Mutex mutex;
  // Made by the first waiter: a batch dispatched by its own caller (most synchronous lists) is
  // never waited for, and a condition variable costs an atomic operation to destroy.
  std::optional<std::condition_variable> done_cv OCLVM_GUARDED_BY(mutex);
  bool done OCLVM_GUARDED_BY(mutex) = false;  // remaining reached 0
  std::exception_ptr first_error OCLVM_GUARDED_BY(mutex);
  std::shared_ptr<Batch> self OCLVM_GUARDED_BY(mutex);  // the VM's reference until done
  // Recorded after the batch's last command on each queue, for an asynchronous batch (Note
  // [Batches that end with a marker] in vm/device_worker.cc); Ticket::wait waits for them.
  std::vector<std::shared_ptr<QueueMarker>> markers OCLVM_GUARDED_BY(mutex);
  bool detached = false;                // no ticket: errors are reported on stderr
  bool shared = false;                  // made by new_batch, co-owned through `self`; false for
                                        // run()'s batch on its caller's stack

  // The error of a batch that only the calling thread ever saw (run()'s batch, or a host
  // section's list, dispatched on this thread): read without the lock, since every write to it
  // happened on this thread.
  std::exception_ptr error_of_unseen_batch() const OCLVM_NO_THREAD_SAFETY_ANALYSIS {
    return first_error;
  }
};

class Ticket {
 public:
  Ticket() = default;
  explicit Ticket(std::shared_ptr<Batch> batch) : batch_(std::move(batch)) {}
  // Blocks until every instruction is dispatched and every device command the batch enqueued
  // has completed (the markers its last instruction on each stream recorded: Note [Batches that
  // end with a marker]); rethrows the first error, a failed command's among them. Idempotent: a
  // second wait returns at once (rethrowing the same error).
  void wait();
  // Never waits: rethrows the first error if one is already recorded (an instruction that failed
  // when it was dispatched, before this call); returns otherwise, whatever is still to run.
  void rethrow_if_failed() const;
  bool valid() const { return batch_ != nullptr; }
  // What wait() does, for a batch that run() keeps on its stack.
  static void wait_for(Batch& batch);

 private:
  std::shared_ptr<Batch> batch_;
};

class VirtualMachine {
 public:
  // Builds one worker per device of `devices` (each with an allocator from the registry).
  VirtualMachine(DeviceManager& devices, const Options& options, const VmOptions& vm_options = {});
  ~VirtualMachine();  // shutdown()
  VirtualMachine(const VirtualMachine&) = delete;
  VirtualMachine& operator=(const VirtualMachine&) = delete;

  // The process-wide VM over DeviceManager::instance(), created on first use; shut down by an
  // atexit handler and never destroyed (tensors freed later still find it).
  static VirtualMachine& instance();
  // Note [Exit after the driver's compiler ran] (virtual_machine.cc): called after a kernel was
  // compiled for this VM's devices; for the process-wide VM, the first call registers its exit
  // handler once more, so it runs before the handlers the compiler's libraries registered.
  void after_kernel_build();

  DeviceManager& devices() const { return devices_; }
  const Options& options() const { return options_; }

  // The stream (created on first use). Throws InvalidArgument for an unknown device, and Error
  // past 4096 streams.
  Stream& stream(Device device, StreamRole role = StreamRole::kCompute, int user_index = 0);
  // The stream with this id; nullptr when none.
  Stream* find_stream(StreamId id) const;

  // Asynchronous: hands the instructions to their workers and returns at once (it may block for
  // backpressure only). Dropping the ticket is safe; the error, if any, is then lost.
  [[nodiscard]] Ticket submit(InstructionList&& list) { return submit_impl(std::move(list), false); }
  // Asynchronous like submit(), but a list whose instructions are all of one idle device is
  // dispatched on the calling thread (Note [Caller runs]), as run() would: it returns once their
  // commands are enqueued, with no thread hand-off and no wait for the device (Note [Submitted
  // here]). Otherwise, and for a list with an instruction that waits on the host
  // (Instruction::waits_on_host), it is submit().
  [[nodiscard]] Ticket submit_here(InstructionList&& list);
  // For releases from destructors that may run while this thread holds a device's execution
  // right (an instruction dropped the last tensor reference): never waits, never blocks for
  // backpressure, never dispatches inline. Errors are printed on stderr.
  void submit_detached(InstructionList&& list);
  // Synchronous: submit + Ticket::wait, with the batch on this thread's stack. On an idle single
  // device the instructions are dispatched on the calling thread (Note [Caller runs]).
  void run(InstructionList&& list);

  // Drains every pending instruction and joins the workers; idempotent (a second caller waits
  // for the drain). Throws Error, changing nothing, when called first from a thread that holds a
  // device's execution right (an instruction callback): it would join the thread it stands in.
  void shutdown();
  bool is_shut_down() const { return shut_down_.load(std::memory_order_acquire); }
  // After shutdown() has drained: `device`'s allocator statistics, read on this thread under its
  // worker's execution mutex, with no instruction and no queue (what QueryStats reports). Throws
  // Error before the drain, InvalidArgument for an unknown device.
  DeviceStats stats_after_shutdown(Device device);

  // Checks the VM's bookkeeping, aborting through OCLVM_DCHECK on a broken rule. Only while
  // nothing is in flight: every list of this VM finished (its ticket waited for, or its drain
  // done), no thread submitting, no host section open. The tests call it after their runs;
  // shutdown() checks every worker's part after the drain.
  //
  // A finished ticket does not mean a quiet VM: the worker that counted the last instruction done
  // still gives back its execution right and its in-flight count after waking the waiter, and
  // an instruction it deleted may have sent a detached release. So the check first waits, up to
  // `grace`, for the VM to fall quiet (nothing in flight, no live batch, every worker with
  // nothing pending and its right free), then checks; a VM that never falls quiet fails it. The
  // rules:
  //   - instructions in flight (admitted, not yet counted done) == 0, and no batch is alive (a
  //     batch is alive from its submission until its last instruction is counted done), so every
  //     batch that was submitted has had each of its instructions counted done exactly once;
  //   - every worker: nothing pending, nobody holding its execution right, and nothing
  //     dispatched beyond the last sequence number it gave out;
  //   - streams: each stream is published in the table at its own id, on its device's worker,
  //     and each worker's cached compute stream is that device's compute stream.
  void check_invariants(std::chrono::milliseconds grace = std::chrono::seconds(10));

  // Called with every dispatched instruction (for `oclvm run --trace`); set before use.
  void set_trace(std::function<void(const TraceEvent&)> trace) { trace_ = std::move(trace); }
  bool tracing() const { return static_cast<bool>(trace_); }

  // Contexts for the memory history (storage/memory_history.h). A builder asks for one when it
  // makes an AllocateBlob (at_free false) or a ReleaseTensor (at_free true), on the thread that
  // builds: null unless `mode` asks for a context there and a capture function is set; otherwise
  // what the function returns (it runs on that thread, under no lock of the VM's). Thread-safe;
  // off, the question costs one relaxed load.
  using ContextCapture = std::function<std::shared_ptr<const MemoryContext>()>;
  void set_memory_context_capture(ContextCapture capture);
  void set_memory_context_mode(ContextMode mode) {
    context_mode_.store(mode, std::memory_order_relaxed);
  }
  std::shared_ptr<const MemoryContext> capture_memory_context(bool at_free) const {
    const ContextMode mode = context_mode_.load(std::memory_order_relaxed);
    if (mode == ContextMode::kNone || (at_free && mode != ContextMode::kAll)) return nullptr;
    return capture_memory_context_slow();
  }

 private:
  std::shared_ptr<const MemoryContext> capture_memory_context_slow() const;
  friend class DeviceWorker;
  friend class HostSection;
  DeviceWorker& worker(Device device) const;
  size_t worker_index(Device device) const;  // throws InvalidArgument for an unknown device
  Ticket submit_impl(InstructionList&& list, bool caller_runs);
  // Throws Error when this thread holds a device's execution right (it would wait for itself).
  static void check_may_wait();
  // Throws InvalidArgument when an instruction names a stream of another VM.
  void check_own_streams(const IntrusiveInstructionList& items) const;
  // Both checks every submission that may wait makes first; returns the list's length.
  size_t check_submission(const IntrusiveInstructionList& items) const;
  // The first instruction with a blob another VM has used; nullptr when none.
  const Instruction* first_with_foreign_blob(const IntrusiveInstructionList& items) const
      OCLVM_REQUIRES(submit_mutex_);
  static InvalidArgument foreign_blob_error(const Instruction& instruction);
  // Marks the last instruction on each stream to finish that stream's queue after it, where the
  // batch needs a finish there.
  void mark_stream_ends(IntrusiveInstructionList& ordered) const noexcept;
  // HostSection::run: dispatches `list` on this thread, which holds `held`'s execution right
  // (Note [Lists run in a host section]).
  void run_in_section(DeviceWorker& held, InstructionList&& list);
  // What enqueue_batch did with a list.
  enum class Placement {
    kRanHere,    // every instruction was dispatched on this thread (Note [Caller runs])
    kQueued,     // handed to the workers (or run after shutdown): wait for the batch
    kUntouched,  // nothing changed (only when not admitted): admit, then enqueue again
  };
  // Sequences, analysis and hand-off of a batch. The batch is a live one of new_batch, or run()'s
  // own on its stack (no `self`). `admitted`: its count already passed backpressure; false only
  // for run()'s batch (Note [Lists dispatched at once are not admitted]), which then goes on only
  // when this thread can take its device's execution right, and is otherwise left untouched
  // (kUntouched). After kRanHere, run()'s batch is left as it was, with remaining == 0 and the
  // error in first_error, and is never marked done.
  Placement enqueue_batch(Batch& batch, IntrusiveInstructionList& items, bool caller_runs,
                          bool admitted);
  // Called by the dispatching thread after each dispatch. With count_now == false the caller
  // counts the batch done itself later (dispatch: after deleting the instruction; caller runs: once
  // for the whole list).
  void on_dispatched(Instruction& instruction, const std::exception_ptr& error, double seconds,
                     bool count_now);
  // Counts `dispatched` instructions of `batch` as done; the last marks the batch done and wakes
  // its waiters. `notify` false: nobody can be waiting yet (the caller-runs path, before the
  // submitting call returns), so the condition variable is left alone.
  void count_done(Batch& batch, size_t dispatched, bool notify = true);
  void run_after_shutdown(IntrusiveInstructionList& list);
  void wait_drained();       // until shutdown() has joined every worker
  std::shared_ptr<Batch> new_batch(size_t count, bool detached);
  void live_batch_done() { live_batches_.fetch_sub(1); }  // a live batch's last instruction
  bool quiet() const;  // check_invariants' wait: nothing in flight, every worker idle
  void admit(size_t count);  // backpressure: blocks while the bound would be passed
  void wake_producers();     // after in_flight_ went down

  DeviceManager& devices_;
  const Options options_;
  const VmOptions vm_options_;
  std::function<void(const TraceEvent&)> trace_;
  std::atomic<ContextMode> context_mode_{ContextMode::kNone};
  mutable Mutex context_mutex_;
  std::shared_ptr<const ContextCapture> context_capture_ OCLVM_GUARDED_BY(context_mutex_);

  std::vector<std::unique_ptr<DeviceWorker>> workers_;  // opencl:0..N-1, then cpu; immutable

  // Streams: created under streams_mutex_, published in stream_table_ (index == id) so that
  // find_stream, which the builder and the dependence analysis call per instruction, takes no
  // lock. compute_streams_ caches each worker's compute stream for stream(device).
  static constexpr size_t kMaxStreams = 4096;
  mutable Mutex streams_mutex_;
  std::vector<std::unique_ptr<Stream>> streams_ OCLVM_GUARDED_BY(streams_mutex_);
  std::unique_ptr<std::atomic<Stream*>[]> stream_table_;
  std::unique_ptr<std::atomic<Stream*>[]> compute_streams_;  // per worker index

  Mutex submit_mutex_;  // Note [Submission]
  // enqueue_batch's per-worker lists (index as workers_), empty between submissions: kept here so
  // that a submission builds none and nothing allocates under the lock.
  std::vector<IntrusiveInstructionList> per_worker_ OCLVM_GUARDED_BY(submit_mutex_);
  // Computes waits and records accesses in the blobs it is given (vm/dependence.h): those records
  // are the analysis's, so every call is made under the submission lock.
  DependenceAnalysis dependences_ OCLVM_GUARDED_BY(submit_mutex_){*this};

  // Backpressure: in_flight_ is atomic so that dispatch costs no lock; producers that must wait
  // register in flight_waiters_ and sleep on flight_cv_.
  std::atomic<size_t> in_flight_{0};
  // Batches of submit() and submit_detached() with instructions, not yet all counted done (run()'s
  // batch lives on its caller's stack, which returns only once it is done).
  std::atomic<size_t> live_batches_{0};
  std::atomic<size_t> flight_waiters_{0};
  Mutex flight_mutex_;
  std::condition_variable flight_cv_;

  std::atomic<bool> shut_down_{false};
  Mutex drain_mutex_;
  std::condition_variable drain_cv_;
  bool drained_ OCLVM_GUARDED_BY(drain_mutex_) = false;  // every worker stopped and joined
};

// The process-wide VM's Run and Submit.
void Run(InstructionList&& list);
[[nodiscard]] Ticket Submit(InstructionList&& list);

}  // namespace oclvm::vm
