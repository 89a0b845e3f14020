// vm/dependence.h — what the VM records of each blob, and the dependence analysis that turns
// those records into an instruction's waits.
//
//   BlobAccess           one access: (stream, its position in the stream's worker sequence).
//   BlobRecords          per blob: the VM that owns the records, the producer and last-used
//                        streams, the last writer and the readers since. Kept in the blob's
//                        extension slot (BlobObject::extension(), Note [Extension slot] in
//                        storage/extension_slot.h): no allocation and no lookup per blob.
//   DependenceAnalysis   the rules (Note [Dependence rules] in vm/dependence.cc): for each
//                        operand of a new instruction, the waits it needs, then its own access
//                        recorded. A wait on another device places a StreamSignal instruction
//                        on the awaited stream (Note [Cross-device waits] in vm/dependence.cc).
//   Signal               set by that StreamSignal on the awaited stream's worker, waited for by
//                        the dependent instruction's worker before it dispatches.
//
// Promises: an instruction waits for every earlier conflicting access on another stream, and
// for nothing on its own stream; a wait always names an earlier sequence, so waits form no
// cycle. Records of a blob name the streams of one VM only (BlobRecords::owner); the VM refuses
// a list with another VM's blob before the analysis sees it.
//
// Thread-safety: the VM holds one DependenceAnalysis, guarded by its submission lock
// (VirtualMachine::dependences_, OCLVM_GUARDED_BY), and the analysis is the only writer of a
// blob's records once the blob is shared. The one other writer is set_producer_stream, on the
// thread that made the blob, before anyone else can see it; producer_stream() may then be read
// from any thread (no writer changes that field again). Every other field is read and written
// under the submission lock, or after a sync point by the thread that waited (tests). Signal is
// thread-safe.
#pragma once

#include <boost/container/small_vector.hpp>

#include <condition_variable>
#include <cstdint>

#include "oclvm/storage/extension_slot.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/storage/thread_annotations.h"
#include "oclvm/vm/instruction.h"
#include "oclvm/vm/stream.h"

namespace oclvm::vm {

class VirtualMachine;
class DeviceWorker;

// One access of a blob.
struct BlobAccess {
  StreamId stream = kNoStream;  // kNoStream: no access
  uint64_t sequence = 0;        // the instruction's position in its worker's sequence (1-based)
};

// The VM's records of one blob.
struct BlobRecords {
  // The VM whose stream ids these records use; null until a VM's analysis first sees the blob.
  const VirtualMachine* owner = nullptr;
  // The stream whose instruction created the contents (set by InstructionsBuilder::allocate_blob;
  // kNoStream for a blob made around an existing storage). A release frees on it.
  StreamId producer = kNoStream;
  // The latest writer (stream == kNoStream: none yet).
  BlobAccess last_write;
  // The readers since last_write, at most one per stream (its latest read).
  boost::container::small_vector<BlobAccess, 2> reads;
};
static_assert(sizeof(BlobRecords) <= ExtensionSlot::kBytes,
              "BlobRecords outgrew the blob's extension slot: raise ExtensionSlot::kBytes");

// The blob's records; nullptr while no VM and no builder has recorded anything of it. One load.
inline const BlobRecords* find_records(const BlobObject& blob) {
  return blob.extension().find<BlobRecords>();
}
// The blob's records, made empty on first use. A load and a compare once they exist.
inline BlobRecords& records_of(BlobObject& blob) {
  return blob.extension().get_or_emplace<BlobRecords>();
}

// The blob's producer stream (kNoStream when none was set).
inline StreamId producer_stream(const BlobObject& blob) {
  const BlobRecords* records = find_records(blob);
  return records == nullptr ? kNoStream : records->producer;
}
// Only before the blob is shared with another thread (or on a single-threaded test).
inline void set_producer_stream(BlobObject& blob, StreamId stream) {
  records_of(blob).producer = stream;
}

// Set by a StreamSignal instruction on another device's worker once that stream's commands up to
// the awaited access have completed; waited for by the dependent instruction's worker.
class Signal {
 public:
  void set();
  void wait();

 private:
  Mutex mutex_;
  std::condition_variable cv_;
  bool set_ OCLVM_GUARDED_BY(mutex_) = false;
};

// The analysis of one VM. Stateless besides the VM it reads streams from: the state is in the
// blobs' records. Thread-compatible: the VM calls it under its submission lock only.
class DependenceAnalysis {
 public:
  explicit DependenceAnalysis(const VirtualMachine& vm) : vm_(vm) {}

  // Computes `instruction`'s waits from its operands' records (Note [Dependence rules]) and
  // records its accesses; its stream, sequence and batch must be set. A wait on a stream of
  // another device adds a StreamSignal instruction, sequenced on that stream's worker, to
  // `extra`, to be handed out before `instruction`. May throw std::bad_alloc, after recording
  // some accesses: the instruction must then still take its place in the sequence.
  void analyze(Instruction& instruction, IntrusiveInstructionList& extra);

  // True when another VM's analysis has recorded accesses of `blob` (its stream ids would mean
  // nothing here). Checked for every operand of every list: one load and two compares.
  bool used_by_another_vm(const BlobObject& blob) const {
    const BlobRecords* records = find_records(blob);
    return records != nullptr && records->owner != nullptr && records->owner != &vm_;
  }

  // True when every recorded access of `blob` is on `worker`'s streams at a sequence up to
  // `through`: what a list run in a host section may use (Note [Lists run in a host section]
  // in vm/virtual_machine.cc).
  bool accessed_only_through(const BlobObject& blob, const DeviceWorker& worker,
                             uint64_t through) const;

 private:
  const VirtualMachine& vm_;
};

}  // namespace oclvm::vm
