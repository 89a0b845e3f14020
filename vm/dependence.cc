// vm/dependence.cc — the dependence analysis and the cross-device signal.
#include "oclvm/vm/dependence.h"

#include "oclvm/storage/errors.h"
#include "oclvm/vm/device_worker.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::vm {

// ---------------------------------------------------------------------------------------------
// Cross-device waits.

void Signal::set() {
  {
    MutexLock lock(mutex_);
    set_ = true;
  }
  cv_.notify_all();
}

void Signal::wait() {
  MutexLock lock(mutex_);
  while (!set_) cv_.wait(lock.native());
}

namespace {

// Note [Cross-device waits]: an instruction that must wait for an access on a stream of another
// device gets this instruction placed on that stream, right after the access in that worker's
// sequence. It finishes the stream's queue on its own worker and then sets the signal the
// dependent instruction waits for on its worker. So no thread ever enqueues on, records a marker
// on, or finishes a queue that another worker owns (PoCL's drivers have been seen to deadlock
// when two threads enqueue on one queue).
class StreamSignal final : public Instruction {
 public:
  StreamSignal(Stream& stream, std::shared_ptr<Signal> signal)
      : Instruction(stream), signal_(std::move(signal)) {}
  const char* name() const override { return "StreamSignal"; }
  bool runs_after_shutdown() const override { return true; }
  void execute(ExecutionContext& context) override {
    try {
      context.stream.queue().finish();
    } catch (...) {
      signal_->set();  // the waiter goes on; this error reaches the batch
      throw;
    }
    signal_->set();
  }

 private:
  std::shared_ptr<Signal> signal_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// The analysis.

// Note [Dependence rules]: per blob, the OneFlow rules. A reader waits for the last writer; a
// writer waits for the last writer and every reader since. Accesses on the instruction's own
// stream need no wait (the queue is in order, and the worker dispatches in order). A wait on
// another stream of the same device is a soft sync (Note [Soft sync] in vm/device_worker.cc); a
// wait on another device's stream is a signal (Note [Cross-device waits]). design/vm.md has the
// long form.
void DependenceAnalysis::analyze(Instruction& instruction, IntrusiveInstructionList& extra) {
  const StreamId self = instruction.stream().id();
  const Device device = instruction.stream().device();
  auto add_wait = [&](const BlobAccess& access) {
    if (access.stream == kNoStream || access.stream == self) return;
    Stream* other = vm_.find_stream(access.stream);
    OCLVM_DCHECK(other != nullptr);
    for (StreamWait& wait : instruction.waits_) {
      // One wait per stream covers every earlier access on it: the marker or the signal is placed
      // after all of them.
      if (wait.stream == other) return;
    }
    std::shared_ptr<Signal> signal;
    if (other->device() != device) {
      signal = std::make_shared<Signal>();
      auto* post = new StreamSignal(*other, signal);
      post->batch_ = instruction.batch_;
      post->sequence_ = other->worker().take_sequence();
      extra.push_back(*post);
    }
    instruction.waits_.push_back(StreamWait{other, access.sequence, std::move(signal)});
  };
  const BlobAccess now{self, instruction.sequence_};
  for (const Operand& operand : instruction.operands()) {
    BlobRecords& records = records_of(*operand.blob);
    records.owner = &vm_;  // the VM refused blobs of another VM before the analysis
    add_wait(records.last_write);
    if (operand.access == Access::kWrite) {
      for (const BlobAccess& read : records.reads) add_wait(read);
      records.last_write = now;
      records.reads.clear();
    } else {
      bool found = false;
      for (BlobAccess& read : records.reads) {
        if (read.stream == self) {
          read.sequence = now.sequence;
          found = true;
        }
      }
      if (!found) records.reads.push_back(now);
    }
  }
}

bool DependenceAnalysis::accessed_only_through(const BlobObject& blob, const DeviceWorker& worker,
                                               uint64_t through) const {
  const BlobRecords* records = find_records(blob);
  if (records == nullptr) return true;
  auto within = [&](const BlobAccess& access) {
    if (access.stream == kNoStream) return true;
    const Stream* stream = vm_.find_stream(access.stream);
    return stream != nullptr && &stream->worker() == &worker && access.sequence <= through;
  };
  if (!within(records->last_write)) return false;
  for (const BlobAccess& read : records->reads) {
    if (!within(read)) return false;
  }
  return true;
}

}  // namespace oclvm::vm
