// vm/virtual_machine.cc — submission (the dependence analysis it runs is vm/dependence.cc), sync
// points, shutdown.
#include "oclvm/vm/virtual_machine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "oclvm/storage/allocator_registry.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"

namespace oclvm::vm {

// ---------------------------------------------------------------------------------------------
// Ticket.

void Ticket::wait() {
  if (batch_ != nullptr) wait_for(*batch_);
}

void Ticket::rethrow_if_failed() const {
  if (batch_ == nullptr) return;
  std::exception_ptr error;
  {
    MutexLock lock(batch_->mutex);
    error = batch_->first_error;
  }
  if (error) std::rethrow_exception(error);
}

void Ticket::wait_for(Batch& batch) {
  if (batch.remaining.load() != 0 && DeviceWorker::holds_execution_right_on_this_thread()) {
    throw Error(
        "Expected Ticket::wait outside instruction callbacks, but got a call from a thread that "
        "dispatches instructions; it could be waiting for itself");
  }
  // Another thread dispatching this batch (a worker, or a caller combining it) usually finishes
  // within microseconds: yield a few times before sleeping. See Note [Batch lifetime].
  for (int i = 0; i < 64 && batch.remaining.load() != 0; ++i) std::this_thread::yield();
  std::vector<std::shared_ptr<QueueMarker>> markers;
  {
    MutexLock lock(batch.mutex);
    if (!batch.done && !batch.done_cv) batch.done_cv.emplace();
    while (!batch.done) batch.done_cv->wait(lock.native());
    if (batch.markers.empty()) {
      if (batch.first_error) std::rethrow_exception(batch.first_error);
      return;
    }
    markers = batch.markers;  // copied: another waiter of the same batch waits for them too
  }
  // Note [Batches that end with a marker]: the device's part, outside the lock.
  std::exception_ptr failed;
  for (const std::shared_ptr<QueueMarker>& marker : markers) {
    try {
      marker->wait();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  MutexLock lock(batch.mutex);
  if (failed && !batch.first_error) batch.first_error = failed;
  if (batch.first_error) std::rethrow_exception(batch.first_error);
}

// ---------------------------------------------------------------------------------------------
// Construction and streams.

VirtualMachine::VirtualMachine(DeviceManager& devices, const Options& options,
                               const VmOptions& vm_options)
    : devices_(devices),
      options_(options),
      vm_options_(vm_options),
      stream_table_(new std::atomic<Stream*>[kMaxStreams]),
      compute_streams_(new std::atomic<Stream*>[devices.devices().size()]) {
  for (size_t i = 0; i < kMaxStreams; ++i) stream_table_[i].store(nullptr);
  for (size_t i = 0; i < devices.devices().size(); ++i) compute_streams_[i].store(nullptr);
  for (Device device : devices_.devices()) {
    MemoryBackend& backend = devices_.backend(device);
    workers_.push_back(std::make_unique<DeviceWorker>(
        *this, backend, AllocatorRegistry::instance().create(backend, options_)));
  }
  MutexLock lock(submit_mutex_);
  per_worker_.resize(workers_.size());
}

VirtualMachine::~VirtualMachine() { shutdown(); }

namespace {

std::atomic<VirtualMachine*> process_vm{nullptr};

// Drain and join at exit; tensors destroyed later release on their own thread
// (runs_after_shutdown). The VM is never deleted, so such releases still find it.
void shut_down_at_exit() {
  try {
    VirtualMachine::instance().shutdown();
  } catch (const Error&) {
    // exit() from inside an instruction callback: the workers are left to the process's end.
  }
}

}  // namespace

VirtualMachine& VirtualMachine::instance() {
  static VirtualMachine* const vm = [] {
    auto* created = new VirtualMachine(DeviceManager::instance(), DeviceManager::instance().options());
    std::atexit(shut_down_at_exit);
    process_vm.store(created);
    return created;
  }();
  return *vm;
}

// Note [Exit after the driver's compiler ran]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// exit() runs its handlers in the reverse order of their registration. The process-wide VM
// registers its shutdown when it is made, usually before any kernel is compiled. PoCL compiles
// with LLVM and clang, whose function-local statics (the real file system, among others) are
// registered for destruction when first used: during the first clBuildProgram, later than the
// VM. So at exit they were destroyed first, and the VM's shutdown then waited for kernels still
// in flight while PoCL's device thread compiled their work-group functions with the destroyed
// objects: exit_probe crashed (SIGSEGV in llvm::vfs::FileSystem::exists, or "LLVM ERROR") in
// every mode with a fresh PoCL cache. Registering the shutdown once more after the first build
// puts it after those statics, so it runs, and drains the device, before they go; shutdown() is
// idempotent, so the first registration's later call returns at once.
void VirtualMachine::after_kernel_build() {
  if (process_vm.load() != this) return;
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(shut_down_at_exit); });
}

size_t VirtualMachine::worker_index(Device device) const {
  if (!devices_.has(device)) devices_.backend(device);  // throws the "Expected one of" message
  if (device.type == DeviceType::kCpu) return workers_.size() - 1;
  return static_cast<size_t>(device.index);
}

DeviceWorker& VirtualMachine::worker(Device device) const { return *workers_[worker_index(device)]; }

Stream& VirtualMachine::stream(Device device, StreamRole role, int user_index) {
  const size_t index = worker_index(device);
  if (role == StreamRole::kCompute) {
    if (Stream* cached = compute_streams_[index].load(std::memory_order_acquire)) return *cached;
  }
  if (role != StreamRole::kUser) user_index = 0;
  if (user_index < 0) {
    throw InvalidArgument("Expected a user stream index >= 0, but got " +
                          std::to_string(user_index));
  }
  MutexLock lock(streams_mutex_);
  for (const auto& stream : streams_) {
    if (stream->device() == device && stream->role() == role &&
        stream->user_index() == user_index) {
      return *stream;
    }
  }
  if (streams_.size() == kMaxStreams) {
    throw Error("Expected at most " + std::to_string(kMaxStreams) +
                " streams in one VM, but another was asked for on " + device.str());
  }
  const auto id = static_cast<StreamId>(streams_.size());
  streams_.push_back(std::make_unique<Stream>(id, role, user_index,
                                              devices_.backend(device).create_queue(),
                                              *workers_[index]));
  Stream* created = streams_.back().get();
  stream_table_[static_cast<size_t>(id)].store(created, std::memory_order_release);
  if (role == StreamRole::kCompute) compute_streams_[index].store(created, std::memory_order_release);
  return *created;
}

Stream* VirtualMachine::find_stream(StreamId id) const {
  if (id < 0 || static_cast<size_t>(id) >= kMaxStreams) return nullptr;
  return stream_table_[static_cast<size_t>(id)].load(std::memory_order_acquire);
}

void VirtualMachine::set_memory_context_capture(ContextCapture capture) {
  auto shared = capture ? std::make_shared<const ContextCapture>(std::move(capture)) : nullptr;
  MutexLock lock(context_mutex_);
  context_capture_ = std::move(shared);
}

std::shared_ptr<const MemoryContext> VirtualMachine::capture_memory_context_slow() const {
  std::shared_ptr<const ContextCapture> capture;
  {
    MutexLock lock(context_mutex_);
    capture = context_capture_;
  }
  return capture != nullptr ? (*capture)() : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Submission.

void VirtualMachine::admit(size_t count) {
  const size_t bound = vm_options_.max_in_flight;
  size_t current = in_flight_.load();
  for (;;) {
    // A list larger than the bound is admitted alone.
    if (current != 0 && current + count > bound) {
      MutexLock lock(flight_mutex_);
      flight_waiters_.fetch_add(1);
      flight_cv_.wait(lock.native(), [&] {
        current = in_flight_.load();
        return current == 0 || current + count <= bound;
      });
      flight_waiters_.fetch_sub(1);
    }
    if (in_flight_.compare_exchange_weak(current, current + count)) return;
  }
}

void VirtualMachine::check_own_streams(const IntrusiveInstructionList& items) const {
  for (const Instruction& instruction : items) {
    // A list built with another VM's builder names that VM's streams: refuse it whole, before
    // anything is assigned, instead of dispatching to workers that are not ours.
    if (find_stream(instruction.stream().id()) != &instruction.stream()) {
      throw InvalidArgument(std::string("Expected instructions built for this VM, but got ") +
                            instruction.name() + " on " + instruction.stream().name() +
                            ", a stream of another VM");
    }
  }
}

const Instruction* VirtualMachine::first_with_foreign_blob(
    const IntrusiveInstructionList& items) const {
  // A blob keeps the access records of the VM that first used it; another VM's stream ids would
  // mean nothing here.
  for (const Instruction& instruction : items) {
    for (const Operand& operand : instruction.operands()) {
      if (dependences_.used_by_another_vm(*operand.blob)) return &instruction;
    }
  }
  return nullptr;
}

InvalidArgument VirtualMachine::foreign_blob_error(const Instruction& instruction) {
  return InvalidArgument(std::string("Expected blobs of this VM in ") + instruction.name() +
                         " on " + instruction.stream().name() +
                         ", but got one that another VM has used");
}

// The last instruction of a batch on each stream finishes that stream's queue, on the stream's
// own worker, so the sync point needs no queue call of its own; unless no instruction of the
// batch on that stream needs it (Instruction::needs_finish: a list of allocations and releases,
// unless OCLVM_RELEASE=finish asks for every list to finish as it did before frees were ordered).
// Allocates nothing (it runs under the submission lock): an instruction is the last on its
// stream when the scan to the next one on the same stream finds none, which is short for the
// lists callers make; then one scan back asks its stream's instructions.
void VirtualMachine::mark_stream_ends(IntrusiveInstructionList& ordered) const noexcept {
  const bool finish_every_list = options_.release == ReleaseMode::kFinish;
  for (auto it = ordered.begin(); it != ordered.end(); ++it) {
    bool later = false;
    for (auto next = std::next(it); next != ordered.end() && !later; ++next) {
      later = &next->stream() == &it->stream();
    }
    bool needed = false;
    if (!later) {
      for (auto earlier = ordered.begin(); !needed; ++earlier) {
        needed = &earlier->stream() == &it->stream() &&
                 (finish_every_list || earlier->needs_finish());
        if (earlier == it) break;
      }
    }
    it->finish_stream_ = needed;
  }
}

// A batch of `count` instructions, done at once when there are none, else owned by itself until its
// last instruction is counted done (Note [Batch lifetime]). Its guarded members are set without the
// lock, which the analysis cannot tell is safe: no other thread can see the batch yet.
std::shared_ptr<Batch> VirtualMachine::new_batch(size_t count, bool detached)
    OCLVM_NO_THREAD_SAFETY_ANALYSIS {
  auto batch = std::allocate_shared<Batch>(pool::PoolAllocator<Batch>());
  batch->detached = detached;
  batch->shared = true;
  if (count == 0) {
    batch->done = true;
    return batch;
  }
  batch->remaining.store(count);
  batch->self = batch;
  live_batches_.fetch_add(1);
  return batch;
}

void VirtualMachine::check_may_wait() {
  if (DeviceWorker::holds_execution_right_on_this_thread()) {
    // Waiting from inside a dispatch would wait for the very worker this thread stands in for.
    throw Error(
        "Expected vm::Run and Submit outside instruction callbacks (Barrier, "
        "AccessBlobByCallback), but got a call from inside one; it would wait for itself");
  }
}

size_t VirtualMachine::check_submission(const IntrusiveInstructionList& items) const {
  check_may_wait();
  check_own_streams(items);
  return items.size();
}

Ticket VirtualMachine::submit_impl(InstructionList&& list, bool caller_runs) {
  IntrusiveInstructionList& items = list.items();
  const size_t count = check_submission(items);
  std::shared_ptr<Batch> batch = new_batch(count, /*detached=*/false);
  if (count == 0) return Ticket(batch);
  admit(count);
  enqueue_batch(*batch, items, caller_runs, /*admitted=*/true);
  return Ticket(std::move(batch));
}

// Note [Submitted here]
// ~~~~~~~~~~~~~~~~~~~~
// An eager runtime launches one small list per operator and waits only where the host needs a
// result. submit() hands every list to the worker thread, which costs a wake-up per list when the
// worker sleeps; run() dispatches on the caller's thread but waits for the device. submit_here()
// takes the caller's path of run() (Note [Caller runs]: one device, idle, nobody holding its
// right) with a ticket's batch: the commands are enqueued on this thread, the batch ends with a
// marker on each queue it used instead of a finish (Note [Batches that end with a marker] in
// vm/device_worker.cc), and the call returns. A failure in dispatch is in the ticket at once
// (Ticket::rethrow_if_failed); a failed device command only when it is waited for. A list the
// caller cannot dispatch at once goes to the worker as with submit(), and so does one with an
// instruction that waits on the host, which on this thread could wait for the caller itself.
Ticket VirtualMachine::submit_here(InstructionList&& list) {
  bool here = vm_options_.caller_runs;
  for (const Instruction& instruction : list.items()) here = here && !instruction.waits_on_host();
  return submit_impl(std::move(list), here);
}

// Note [Lists dispatched at once are not admitted]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Backpressure bounds the instructions waiting in the workers' pending lists. A synchronous list
// that the caller dispatches at once (Note [Caller runs]) never waits there, so run() first tries
// that without admission, which spares every allocation and release two atomic read-modify-writes
// of in_flight_. When the device is busy (or the VM shut down, or a blob foreign) nothing has
// changed yet: the list is admitted (maybe sleeping, never under the submission lock) and
// submitted again, as before. One case is decided only by the analysis, after the right was
// taken: waits on another device's stream add StreamSignals there, so the list cannot run here
// alone. It is then queued as any list is, counted in flight without waiting (as StreamSignals
// always are), and the right is given back, which dispatches this device's share; such a list
// may pass max_in_flight by its own length, as a detached release may.
//
// The path of every synchronous list (an allocation, a release, a host section's list outside a
// section): the batch lives here, so a run allocates no batch and shares no reference count.
void VirtualMachine::run(InstructionList&& list) {
  IntrusiveInstructionList& items = list.items();
  const size_t count = check_submission(items);
  if (count == 0) return;
  Batch batch;
  // Relaxed: the submission lock publishes the batch to any thread that dispatches from it.
  batch.remaining.store(count, std::memory_order_relaxed);
  Placement placed = vm_options_.caller_runs
                         ? enqueue_batch(batch, items, /*caller_runs=*/true, /*admitted=*/false)
                         : Placement::kUntouched;
  if (placed == Placement::kUntouched) {
    admit(count);
    placed = enqueue_batch(batch, items, vm_options_.caller_runs, /*admitted=*/true);
  }
  if (placed == Placement::kRanHere) {
    // Dispatched on this thread: no other thread ever saw the batch, so there is nothing to
    // wait for, nobody to wake and no lock to take; only an error to report.
    if (std::exception_ptr error = batch.error_of_unseen_batch()) std::rethrow_exception(error);
    return;
  }
  Ticket::wait_for(batch);
}

void VirtualMachine::submit_detached(InstructionList&& list) {
  IntrusiveInstructionList& items = list.items();
  const size_t count = items.size();
  if (count == 0) return;
  std::shared_ptr<Batch> batch = new_batch(count, /*detached=*/true);
  in_flight_.fetch_add(count);  // never blocks: the caller may be the thread that would unblock it
  enqueue_batch(*batch, items, /*caller_runs=*/false, /*admitted=*/true);
}

namespace {

// The worker of every instruction in `items` when they share one; nullptr otherwise.
DeviceWorker* only_worker(const IntrusiveInstructionList& items) {
  DeviceWorker* single = nullptr;
  for (const Instruction& instruction : items) {
    DeviceWorker& owner = instruction.stream().worker();
    if (single != nullptr && single != &owner) return nullptr;
    single = &owner;
  }
  return single;
}

}  // namespace

// Unchecked by the thread-safety analysis: the execution right it may take belongs to a worker
// chosen at run time (inline_worker), which the analysis cannot follow across the branches. The
// inline dispatch below asserts it (DeviceWorker::assert_execution_right).
VirtualMachine::Placement VirtualMachine::enqueue_batch(Batch& batch,
                                                        IntrusiveInstructionList& items,
                                                        bool caller_runs, bool admitted)
    OCLVM_NO_THREAD_SAFETY_ANALYSIS {
  const size_t count = items.size();
  OCLVM_DCHECK(admitted || !batch.shared);  // count_done() would count what was never admitted
  // The worker whose execution right this call holds, once it holds one.
  DeviceWorker* inline_worker = nullptr;
  IntrusiveInstructionList ordered;  // the list in dispatch order, with StreamSignals added
  bool here = false;                 // `ordered` is dispatched on this thread
  {
    MutexLock lock(submit_mutex_);
    if (shut_down_.load()) {
      if (!admitted) return Placement::kUntouched;  // the paths below count it as admitted
      lock.unlock();
      for (Instruction& instruction : items) instruction.batch_ = &batch;
      if (batch.detached) {
        // Maybe a worker releasing during its own drain: hand each instruction to its worker
        // while it still drains, else run it here (after the drain, callers take turns).
        while (!items.empty()) {
          Instruction& instruction = items.front();
          items.pop_front();
          IntrusiveInstructionList one;
          one.push_back(instruction);
          if (!instruction.stream().worker().enqueue(one)) run_after_shutdown(one);
        }
      } else {
        wait_drained();  // never overtake work still pending (this is not a worker thread)
        run_after_shutdown(items);
      }
      return Placement::kQueued;
    }
    // Checked before anything changes, so a refused list leaves no trace.
    if (const Instruction* refused = first_with_foreign_blob(items)) {
      if (!admitted) return Placement::kUntouched;
      const InvalidArgument error = foreign_blob_error(*refused);
      lock.unlock();
      in_flight_.fetch_sub(count);
      wake_producers();
      if (batch.shared) {
        // No instruction was handed out, so nobody will count the batch done: drop the VM's
        // reference, or the batch owns itself and leaks (LeakSanitizer, `make asan`, on
        // VmOwnershipTest.ABlobBelongsToTheFirstVmThatUsesIt).
        {
          MutexLock batch_lock(batch.mutex);
          batch.self.reset();  // the submitting call still holds its own reference
        }
        live_batch_done();  // it never will be
      }
      throw error;
    }
    if (!admitted) {
      // Note [Lists dispatched at once are not admitted]: go on only with the right in hand.
      DeviceWorker* only = only_worker(items);
      if (only == nullptr || !only->try_acquire_idle()) return Placement::kUntouched;
      inline_worker = only;
    }
    DeviceWorker* single = nullptr;
    bool several = false;
    while (!items.empty()) {
      Instruction& instruction = items.front();
      items.pop_front();
      DeviceWorker& owner = instruction.stream().worker();
      instruction.batch_ = &batch;
      instruction.sequence_ = owner.take_sequence();
      IntrusiveInstructionList extra;
      try {
        dependences_.analyze(instruction, extra);
      } catch (...) {
        // Out of memory in the analysis: the instruction still takes its place (records may
        // already name its sequence) but reports the error instead of running.
        instruction.submission_error_ = std::current_exception();
      }
      if (!extra.empty()) {
        several = true;
        ordered.splice(ordered.end(), extra);
      }
      ordered.push_back(instruction);
      if (single == nullptr) single = &owner;
      several = several || single != &owner;
    }
    mark_stream_ends(ordered);
    const size_t added = ordered.size() - count;
    if (added > 0) batch.remaining.fetch_add(added);
    here = !several &&
           (inline_worker != nullptr || (caller_runs && single->try_acquire_idle()));
    if (here) {
      inline_worker = single;
    } else {
      // Admitted without waiting: the StreamSignals the analysis added (they unblock their
      // waiters), and a list that was not admitted but cannot run here after all.
      const size_t unadmitted = admitted ? added : ordered.size();
      if (unadmitted > 0) in_flight_.fetch_add(unadmitted);
      // Hand each worker its instructions in order, still under the lock, so that every
      // worker's pending list stays in sequence order across producers.
      while (!ordered.empty()) {
        Instruction& instruction = ordered.front();
        ordered.pop_front();
        DeviceWorker& owner = instruction.stream().worker();
        size_t index = 0;
        while (workers_[index].get() != &owner) ++index;
        per_worker_[index].push_back(instruction);
      }
      for (size_t i = 0; i < workers_.size(); ++i) {
        if (!per_worker_[i].empty()) workers_[i]->enqueue(per_worker_[i]);
      }
    }
  }
  if (!here) {
    // A right taken for a list that was not admitted: giving it back dispatches its share.
    if (inline_worker != nullptr) inline_worker->release_execution();
    return Placement::kQueued;
  }
  // Note [Caller runs]: nothing of a lower sequence is pending on this worker, and we hold its
  // execution right, so dispatching here keeps order and confinement.
  // The batch is counted done once at the end: nobody else waits for its instructions one by one.
  inline_worker->assert_execution_right();
  const size_t dispatched = inline_worker->dispatch_all(ordered, /*count_now=*/false);
  if (batch.shared) {
    count_done(batch, dispatched, /*notify=*/false);  // the submitting call has not returned yet
  } else {
    // run()'s own batch: its caller reads the outcome on this thread, nothing else to mark.
    batch.remaining.store(0, std::memory_order_relaxed);
    if (admitted) {
      in_flight_.fetch_sub(dispatched);
      wake_producers();
    }
  }
  inline_worker->release_execution();
  return Placement::kRanHere;
}

// Note [Lists run in a host section]: the section holds `held`'s execution right and the
// worker was idle when it began, so the list is dispatched here at once, on this thread, as one
// step of the section: ahead of lists other threads submitted for the device since the section
// began (those run when it ends). Its instructions take the section's place in the worker's
// sequence (dispatched_through), so later lists order after them. Two kinds of list could not
// keep that order and are refused, changing nothing: one with an access record of an instruction
// still pending on this device (it would have to run before that instruction, which runs after the
// section), and one with a record on another device (its wait could be for a worker that waits
// for this section). Lists of new blobs — allocations in a section — have neither.
void VirtualMachine::run_in_section(DeviceWorker& held, InstructionList&& list) {
  held.assert_execution_right();  // the host section's
  IntrusiveInstructionList& items = list.items();
  if (items.empty()) return;
  check_own_streams(items);
  const uint64_t place = held.dispatched_through();
  for (const Instruction& instruction : items) {
    if (&instruction.stream().worker() != &held) {
      throw InvalidArgument(std::string("Expected instructions for the host section's device, "
                                        "but got ") +
                            instruction.name() + " on " + instruction.stream().name());
    }
  }
  Batch batch;  // every instruction is dispatched on this thread, before returning
  batch.remaining.store(items.size(), std::memory_order_relaxed);
  IntrusiveInstructionList ordered;
  {
    MutexLock lock(submit_mutex_);
    if (shut_down_.load()) {
      throw Error("Expected a running VM, but it has been shut down (a list run in a host "
                  "section)");
    }
    if (const Instruction* refused = first_with_foreign_blob(items)) {
      throw foreign_blob_error(*refused);
    }
    for (const Instruction& instruction : items) {
      for (const Operand& operand : instruction.operands()) {
        if (!dependences_.accessed_only_through(*operand.blob, held, place)) {
          throw InvalidArgument(
              std::string("Expected a list of blobs that no pending instruction and no other "
                          "device uses, to run in a host section, but got ") +
              instruction.name() + " on " + instruction.stream().name());
        }
      }
    }
    while (!items.empty()) {
      Instruction& instruction = items.front();
      items.pop_front();
      instruction.batch_ = &batch;
      instruction.sequence_ = place;
      IntrusiveInstructionList extra;
      try {
        dependences_.analyze(instruction, extra);
      } catch (...) {
        instruction.submission_error_ = std::current_exception();  // out of memory in the analysis
      }
      OCLVM_DCHECK(extra.empty());  // no record on another device
      ordered.push_back(instruction);
    }
    mark_stream_ends(ordered);
  }
  // Dispatched here and now, as a list run() dispatches on its caller's thread (Note [Lists
  // dispatched at once are not admitted]): never pending, so never counted in flight, and no
  // other thread sees the batch, so nobody is woken and its error is read without the lock.
  held.dispatch_all(ordered, /*count_now=*/false);
  batch.remaining.store(0, std::memory_order_relaxed);
  if (std::exception_ptr error = batch.error_of_unseen_batch()) std::rethrow_exception(error);
}

void VirtualMachine::on_dispatched(Instruction& instruction, const std::exception_ptr& error,
                                   double seconds, bool count_now) {
  if (trace_) {
    const std::string message = error ? [&] {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
    }() : std::string();
    trace_(TraceEvent{instruction, instruction.stream(), seconds,
                      error ? message.c_str() : nullptr});
  }
  Batch& batch = *instruction.batch_;
  if (error) {
    MutexLock lock(batch.mutex);
    if (!batch.first_error) batch.first_error = error;
  }
  if (count_now) count_done(batch, 1);
}

void VirtualMachine::count_done(Batch& batch, size_t dispatched, bool notify) {
  // The last one marks the batch done; the batch must not be touched after the unlock (Note
  // [Batch lifetime]).
  bool was_live = false;  // made by new_batch (a section's own list is not)
  if (batch.remaining.fetch_sub(dispatched) == dispatched) {
    std::shared_ptr<Batch> last_reference;  // dies after the unlock, maybe freeing the batch
    {
      MutexLock lock(batch.mutex);
      batch.done = true;
      last_reference = std::move(batch.self);
      was_live = last_reference != nullptr;
      if (batch.detached && batch.first_error) {
        try {
          std::rethrow_exception(batch.first_error);
        } catch (const std::exception& e) {
          log_message(LogLevel::kError, "a detached release failed: %s", e.what());
        }
      }
      if (notify && batch.done_cv) batch.done_cv->notify_all();
    }
  }
  in_flight_.fetch_sub(dispatched);
  if (was_live) live_batch_done();
  wake_producers();
}

void VirtualMachine::wake_producers() {
  if (flight_waiters_.load() > 0) {
    MutexLock lock(flight_mutex_);
    flight_cv_.notify_all();
  }
}

// ---------------------------------------------------------------------------------------------
// Shutdown.

void VirtualMachine::shutdown() {
  const bool in_dispatch = DeviceWorker::holds_execution_right_on_this_thread();
  {
    MutexLock lock(submit_mutex_);
    if (shut_down_.load()) {
      if (!in_dispatch) wait_drained();
      return;
    }
    if (in_dispatch) {
      // Stopping the workers joins them: one of them may be this thread, or wait for it.
      throw Error(
          "Expected shutdown() outside instruction callbacks (Barrier, AccessBlobByCallback), "
          "but got a call from a thread that dispatches instructions; it would wait for itself");
    }
    shut_down_.store(true);
  }
  for (auto& worker : workers_) worker->stop();
  for (auto& worker : workers_) worker->check_drained();
  {
    MutexLock lock(drain_mutex_);
    drained_ = true;
  }
  drain_cv_.notify_all();
}

DeviceStats VirtualMachine::stats_after_shutdown(Device device) {
  DeviceWorker& owner = worker(device);
  {
    MutexLock lock(drain_mutex_);
    if (!drained_) {
      throw Error("Expected a VM that has been shut down and drained, but " + device.str() +
                  "'s worker may still be running");
    }
  }
  // Late releases take the same mutex to run on their caller's thread (run_after_shutdown).
  MutexLock lock(owner.execution_mutex());
  return owner.allocator_after_shutdown().stats();
}

bool VirtualMachine::quiet() const {
  if (in_flight_.load() != 0 || live_batches_.load() != 0) return false;
  return std::all_of(workers_.begin(), workers_.end(),
                     [](const std::unique_ptr<DeviceWorker>& worker) { return worker->quiet(); });
}

void VirtualMachine::check_invariants(std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!quiet() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  MutexLock submission(submit_mutex_);  // no list is analysed or handed out meanwhile
  OCLVM_DCHECK(in_flight_.load() == 0);
  OCLVM_DCHECK(live_batches_.load() == 0);
  for (const auto& worker : workers_) worker->check_idle();
  MutexLock streams(streams_mutex_);
  for (const std::unique_ptr<Stream>& stream : streams_) {
    const auto id = static_cast<size_t>(stream->id());
    OCLVM_DCHECK(id < kMaxStreams && stream_table_[id].load() == stream.get());
    OCLVM_DCHECK(stream->worker().device() == stream->device());
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Stream* compute = compute_streams_[i].load();
    OCLVM_DCHECK(compute == nullptr || (&compute->worker() == workers_[i].get() &&
                                        compute->role() == StreamRole::kCompute));
  }
}

void VirtualMachine::wait_drained() {
  MutexLock lock(drain_mutex_);
  while (!drained_) drain_cv_.wait(lock.native());
}

void VirtualMachine::run_after_shutdown(IntrusiveInstructionList& items) {
  while (!items.empty()) {
    Instruction& instruction = items.front();
    items.pop_front();
    DeviceWorker& owner = instruction.stream().worker();
    if (instruction.runs_after_shutdown()) {
      // The worker thread is gone; callers take turns with the execution right.
      MutexLock lock(owner.execution_mutex());
      owner.dispatch_after_shutdown(&instruction);
    } else {
      on_dispatched(instruction,
                    std::make_exception_ptr(
                        Error(std::string("Expected a running VM, but it has been shut down (") +
                              instruction.name() + " on " + instruction.stream().name() + ")")),
                    0.0, /*count_now=*/true);
      delete &instruction;
    }
  }
}

void Run(InstructionList&& list) { VirtualMachine::instance().run(std::move(list)); }

Ticket Submit(InstructionList&& list) { return VirtualMachine::instance().submit(std::move(list)); }

}  // namespace oclvm::vm
