// vm/instruction.h — the unit of work of the VM: Instruction, its operands, InstructionList.
//
// An instruction belongs to one stream and names the blobs it reads and writes (its operands).
// The VM computes its dependencies from the operands when it is submitted (design/vm.md: a writer
// waits for every earlier access, a reader for the last writer), dispatches it on the worker of its
// stream's device after them, and records any exception it throws in its error slot.
//
// The instruction set is closed and lives in instructions/ (one small subclass per kind); the VM
// only sees this interface. Instructions move between lists by a Boost.Intrusive hook: no
// allocation per move, O(1) unlink.
//
// Lifecycle: kPending (built, maybe submitted) -> kDispatched (execute() returned or threw; its
// device commands are enqueued) -> kDone (the sync point has seen its queue finished). An
// InstructionList owns its instructions and deletes them when it dies.
//
// Thread-safety: an instruction is built by one thread, then owned by the VM: execute() runs on
// exactly one thread (its device's worker, or a caller holding that worker's execution right).
#pragma once

#include <boost/container/small_vector.hpp>
#include <boost/intrusive/list.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "oclvm/storage/allocator.h"
#include "oclvm/storage/small_object_pool.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/vm/stream.h"

namespace oclvm::vm {

class VirtualMachine;
class Batch;

enum class Access : uint8_t { kRead, kWrite };

struct Operand {
  std::shared_ptr<BlobObject> blob;
  Access access;
};

// What execute() may use. Everything here belongs to the executing worker.
struct ExecutionContext {
  VirtualMachine& vm;
  Stream& stream;          // the instruction's stream; its queue takes the commands
  Allocator& allocator;    // the allocator of the stream's device (confined to this worker)
  DeviceWorker& worker;    // the worker executing (or whose execution right the caller holds)

  // A queue on `device` that only this worker enqueues on: cross-device copies read their source
  // through it. Created on first use; for the worker's own device, the stream's queue.
  DeviceQueue& queue_on(Device device) const;
};

class Signal;  // vm/dependence.h

// A wait computed at submission by the dependence analysis (vm/dependence.h). For another stream
// of the same device: a device-side soft sync (`signal` is null). For a stream of another device:
// `signal`, set by the StreamSignal instruction the analysis placed on that stream right after
// the awaited access (Note [Cross-device waits] in vm/dependence.cc). `sequence` is the awaited
// access in that stream's worker.
struct StreamWait {
  Stream* stream;
  uint64_t sequence;
  std::shared_ptr<Signal> signal;
};

class Instruction {
 public:
  explicit Instruction(Stream& stream) : stream_(&stream) {}
  virtual ~Instruction() = default;
  // Instructions are made and deleted at instruction rate, often on different threads: their
  // memory comes from the small-object pool (storage/small_object_pool.h). The sized delete gets
  // the dynamic size through the virtual destructor.
  static void* operator new(size_t bytes) { return pool::allocate(bytes); }
  static void operator delete(void* pointer, size_t bytes) noexcept {
    pool::deallocate(pointer, bytes);
  }
  Instruction(const Instruction&) = delete;
  Instruction& operator=(const Instruction&) = delete;

  // The kind: "AllocateBlob", "ReleaseTensor", "CopyBlob", ...
  virtual const char* name() const = 0;
  // Does the work: enqueues commands on context.stream.queue() (and may wait on the host). Runs
  // after every dependency. Throws on failure (InvalidArgument, OutOfMemoryError, BackendError);
  // the VM records the error and the caller sees it at its sync point.
  virtual void execute(ExecutionContext& context) = 0;
  // Operands and parameters for --trace lines and error messages, e.g. "b0 4096 B".
  virtual std::string describe() const { return ""; }
  // True for instructions that may still run after shutdown, on the caller's thread (releases
  // of objects destroyed during process exit).
  virtual bool runs_after_shutdown() const { return false; }
  // True when a synchronous list must finish this instruction's stream at its end for the
  // instruction's effect to be complete; false for instructions that enqueue nothing a caller
  // waits for (allocations, releases: Note [Stream-ordered release]).
  virtual bool needs_finish() const { return true; }
  // True for instructions whose execution may wait on something the host does (a Barrier's or a
  // callback's): VirtualMachine::submit_here leaves a list with one to the worker, since
  // dispatched on the submitting thread it could wait for that thread.
  virtual bool waits_on_host() const { return false; }

  Stream& stream() const { return *stream_; }
  // Two operands live inline (every instruction but LaunchKernel has two or fewer).
  using Operands = boost::container::small_vector<Operand, 2>;
  const Operands& operands() const { return operands_; }
  // Set at submission: the position in its worker's sequence, and the waits the dependence
  // analysis found (empty when every earlier access was on the same stream).
  uint64_t sequence() const { return sequence_; }
  const std::vector<StreamWait>& waits() const { return waits_; }

  boost::intrusive::list_member_hook<> list_hook;

 protected:
  void add_operand(std::shared_ptr<BlobObject> blob, Access access) {
    operands_.push_back(Operand{std::move(blob), access});
  }
  // Makes operand `index` a write (an instruction that names one blob twice, writing it once).
  void upgrade_to_write(size_t index) { operands_[index].access = Access::kWrite; }
  // The index of `blob` among the operands, added with `access` when it is not one yet, made a
  // write when it is and `access` writes (a blob named twice is one operand).
  size_t operand_for(const std::shared_ptr<BlobObject>& blob, Access access) {
    for (size_t i = 0; i < operands_.size(); ++i) {
      if (operands_[i].blob != blob) continue;
      if (access == Access::kWrite) upgrade_to_write(i);
      return i;
    }
    add_operand(blob, access);
    return operands_.size() - 1;
  }

 private:
  friend class VirtualMachine;
  friend class DeviceWorker;
  friend class DependenceAnalysis;

  Stream* stream_;
  Operands operands_;
  // Set at submission, under the VM's submission lock.
  uint64_t sequence_ = 0;          // position in the worker's sequence (1-based)
  std::vector<StreamWait> waits_;  // cross-stream / cross-device dependencies
  Batch* batch_ = nullptr;         // the submission it belongs to
  bool finish_stream_ = false;     // last of its batch on its stream, which a member needs_finish
  // Its submission failed (bad_alloc in the analysis): dispatch reports this instead of waiting
  // and executing.
  std::exception_ptr submission_error_;
};

using IntrusiveInstructionList = boost::intrusive::list<
    Instruction,
    boost::intrusive::member_hook<Instruction, boost::intrusive::list_member_hook<>,
                                  &Instruction::list_hook>,
    boost::intrusive::constant_time_size<true>>;

// An owning list of instructions, in submission order. Move-only.
class InstructionList {
 public:
  InstructionList() = default;
  InstructionList(InstructionList&& other) noexcept { list_.swap(other.list_); }
  InstructionList& operator=(InstructionList&& other) noexcept {
    clear();
    list_.swap(other.list_);
    return *this;
  }
  ~InstructionList() { clear(); }

  void push_back(std::unique_ptr<Instruction> instruction) { list_.push_back(*instruction.release()); }
  size_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  void clear() {
    list_.clear_and_dispose([](Instruction* i) { delete i; });
  }
  IntrusiveInstructionList& items() { return list_; }
  const IntrusiveInstructionList& items() const { return list_; }

 private:
  IntrusiveInstructionList list_;
};

}  // namespace oclvm::vm
