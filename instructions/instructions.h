// instructions/instructions.h — the closed instruction set of the VM.
//
// One small final subclass of vm::Instruction per kind; the device is data (the instruction's
// stream), never a subclass. The VM sees only the vm::Instruction interface; callers normally
// build these through InstructionsBuilder (instructions/builder.h), which checks arguments first.
//
//   AllocateBlob          gives a pending BlobObject its BlobStorage from the stream's allocator.
//   ReleaseTensor         gives the blob's memory back, ordered after its last use by a marker
//                         (Note [Stream-ordered release]) or a finish (OCLVM_RELEASE=finish).
//   CopyBlob              host->device, device->host, device->device (one device) and across
//                         devices (staged through host memory, on the destination's stream).
//   FillBlob              fills a byte range with a repeated 1/2/4/8-byte pattern.
//   SoftSyncStream        makes one stream's queue wait, on the device, for another's commands.
//   Barrier               finishes its stream's queue, then calls a host callback.
//   AccessBlobByCallback  maps a byte range for host read or write around a callback.
//   MapBlob / UnmapBlob   map a byte range for the caller's own thread, until it unmaps.
//   EmptyCache / ResetStats / QueryStats / SetMemoryLimit   allocator control, on the device's
//                         worker.
//   ConfigureMemoryHistory / TakeMemorySnapshot   start or stop the allocator's memory history;
//                         copy its segments, blocks and history out.
//   RecordEvent / WaitEvent   record a point of a stream into a StreamEvent; make a stream wait
//                         for it (torch's events).
//   RecordBlobUse         marks a blob as used by a stream, so that its next write (its release
//                         included) waits for that stream (torch's recordStream).
//   LaunchKernel          runs an OpenCL C kernel over an ND range, with blobs, scalars and local
//                         memory as its arguments (Note [Kernel launches]).
//   NativeCall            hands the stream's driver queue and blob ranges as driver buffers to a
//                         body of the caller's (a BLAS library), which enqueues on them (Note
//                         [Native commands] in storage/queue.h).
//
// Byte ranges. Every offset an instruction takes counts from the blob's element 0, i.e. from byte
// storage_offset * dtype_size of its storage (0 for byte blobs). The range an instruction may
// address is that point up to the end of the storage (blob_capacity_bytes). Builders check ranges
// against BlobObject::required_bytes(), which is all they may read of a blob that another thread
// may be allocating; execute() checks them again against the storage itself.
//
// Operands (what the VM orders accesses by): AllocateBlob, ReleaseTensor, FillBlob write their
// blob; CopyBlob reads its source and writes its destination; AccessBlobByCallback reads or writes
// by its mode; RecordBlobUse reads its blob; LaunchKernel and NativeCall read or write each blob
// argument by its access (a blob named twice is one operand, written if either use writes); the
// others have none.
//
// Errors of execute() are InvalidArgument ("Expected ..., but got ...") for a blob whose storage
// does not exist (its AllocateBlob failed or has not run) or is already released, and for ranges
// outside the storage; OutOfMemoryError from the allocator; BackendError from the queues. The VM
// prefixes them with the instruction's name and stream. See Note [Releasing a blob without
// storage] for the one exception.
//
// Thread-safety: an instruction is built by one thread and then executed by exactly one thread
// (vm/instruction.h). describe() reads only what the builder set plus the blob's storage pointer;
// call it from the executing thread or after the sync point.
#pragma once

#include <boost/container/small_vector.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "oclvm/instructions/memory_snapshot.h"
#include "oclvm/storage/kernel.h"
#include "oclvm/storage/memory_history.h"
#include "oclvm/storage/queue.h"
#include "oclvm/storage/stats.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/storage/thread_annotations.h"
#include "oclvm/vm/instruction.h"

namespace oclvm {

enum class ResetKind : uint8_t { kPeak, kAccumulated };
enum class HostAccess : uint8_t { kRead, kWrite };

// Byte offset of the blob's element 0 in its storage: storage_offset * dtype_size. Throws
// InvalidArgument when that overflows size_t.
size_t blob_base_bytes(const BlobObject& blob);
// Bytes the builder may address in `blob`: required_bytes() minus blob_base_bytes() (0 when the
// base lies beyond). Reads nothing that an executing AllocateBlob writes.
size_t blob_capacity_bytes(const BlobObject& blob);
// "u8[4096] on opencl:0": names a blob in messages without touching its storage.
std::string blob_label(const BlobObject& blob);

// ---------------------------------------------------------------------------------------------

class AllocateBlob final : public vm::Instruction {
 public:
  // `blob` must be pending (no storage) and on the stream's device.
  // `memory_context` (may be null) is where the request came from, for the device's memory
  // history (storage/memory_history.h).
  AllocateBlob(vm::Stream& stream, std::shared_ptr<BlobObject> blob,
               std::shared_ptr<const MemoryContext> memory_context = nullptr);
  const char* name() const override { return "AllocateBlob"; }
  bool needs_finish() const override { return false; }
  // Allocates blob->required_bytes() from context.allocator (0 bytes: an empty allocation that
  // touches no driver) and attaches it. On a throw (OutOfMemoryError, or a blob that already has
  // storage) the blob keeps no storage and nothing is held. While the device's memory history is
  // on, records the alloc (or the oom).
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;
  const std::shared_ptr<BlobObject>& blob() const { return operands()[0].blob; }

 private:
  const std::shared_ptr<const MemoryContext> memory_context_;
};

// Note [Releasing a blob without storage]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A ReleaseTensor whose blob has no storage is a no-op, not an error. The only way to get there is
// a blob whose AllocateBlob failed (out of memory, say) or was never submitted: the failure was
// already reported at that AllocateBlob's sync point, and the releaser of a TensorStorage built
// around such a blob would otherwise report a second, confusing error from a destructor. There is
// no memory to free, so nothing leaks. A blob that HAS storage is released exactly once: a second
// ReleaseTensor is InvalidArgument ("Expected a live blob, but got one already released ...").
class ReleaseTensor final : public vm::Instruction {
 public:
  // `stream` is the blob's producer stream (InstructionsBuilder::release picks it).
  // `memory_context` as for AllocateBlob.
  ReleaseTensor(vm::Stream& stream, std::shared_ptr<BlobObject> blob,
                std::shared_ptr<const MemoryContext> memory_context = nullptr);
  const char* name() const override { return "ReleaseTensor"; }
  bool needs_finish() const override { return false; }
  // Orders the block's next users after every command that used it (a marker on the stream, or
  // a finish with OCLVM_RELEASE=finish: Note [Stream-ordered release]; the VM has made the queue
  // wait for every other stream that used the blob), then releases the storage — also when that
  // fails, whose error is then the instruction's (Note [A release whose ordering fails]). See
  // Note [Releasing a blob without storage]. A storage that context.allocator did not make (a blob
  // of another VM) is InvalidArgument, and is left alone.
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;
  bool runs_after_shutdown() const override { return true; }
  const std::shared_ptr<BlobObject>& blob() const { return operands()[0].blob; }

 private:
  const std::shared_ptr<const MemoryContext> memory_context_;
};

// One class for the four copy directions: they share the range checks and the operand rules.
//
// Host memory: a host->device copy is a non-blocking write and a device->host copy a non-blocking
// read, so the host buffer must stay valid (and, for a read, untouched) until the list's sync
// point — or until a Barrier on the same stream after it. A cross-device copy is synchronous on
// the destination's worker: it reads the source through that worker's private queue of the
// source device into a staging buffer (blocking), then writes it to the destination (blocking),
// in chunks of kStagingChunkBytes.
class CopyBlob final : public vm::Instruction {
 public:
  enum class Kind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice, kCrossDevice };
  static constexpr size_t kStagingChunkBytes = size_t{16} << 20;

  // `stream` must be on dst's device.
  static std::unique_ptr<CopyBlob> host_to_device(vm::Stream& stream, const void* src,
                                                  std::shared_ptr<BlobObject> dst,
                                                  size_t dst_offset, size_t bytes);
  // `stream` must be on src's device.
  static std::unique_ptr<CopyBlob> device_to_host(vm::Stream& stream,
                                                  std::shared_ptr<BlobObject> src,
                                                  size_t src_offset, void* dst, size_t bytes);
  // kDeviceToDevice when both blobs are on one device (`stream` on it); kCrossDevice otherwise
  // (`stream` on dst's device).
  static std::unique_ptr<CopyBlob> blob_to_blob(vm::Stream& stream, std::shared_ptr<BlobObject> src,
                                                size_t src_offset, std::shared_ptr<BlobObject> dst,
                                                size_t dst_offset, size_t bytes);

  const char* name() const override { return "CopyBlob"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

  Kind kind() const { return kind_; }
  size_t bytes() const { return bytes_; }

 private:
  CopyBlob(vm::Stream& stream, Kind kind, std::shared_ptr<BlobObject> src, size_t src_offset,
           const void* host_src, std::shared_ptr<BlobObject> dst, size_t dst_offset,
           void* host_dst, size_t bytes);
  void copy_across_devices(vm::ExecutionContext& context);

  // Immutable after construction. Exactly one of src_blob_ / host_src_ and one of dst_blob_ /
  // host_dst_ is set, as kind_ says.
  const Kind kind_;
  const std::shared_ptr<BlobObject> src_blob_;
  const size_t src_offset_;
  const void* const host_src_;
  const std::shared_ptr<BlobObject> dst_blob_;
  const size_t dst_offset_;
  void* const host_dst_;
  const size_t bytes_;
};

class FillBlob final : public vm::Instruction {
 public:
  // pattern_size is 1, 2, 4 or 8: the low pattern_size bytes of `pattern`, least significant
  // first, repeated. offset and bytes are multiples of pattern_size (the builder checks).
  FillBlob(vm::Stream& stream, std::shared_ptr<BlobObject> blob, size_t offset, size_t bytes,
           uint64_t pattern, size_t pattern_size);
  const char* name() const override { return "FillBlob"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  const size_t offset_;
  const size_t bytes_;
  const uint64_t pattern_;
  const size_t pattern_size_;
  std::array<uint8_t, 8> pattern_bytes_{};  // pattern_, least significant byte first
};

// Runs on `to`: records a marker on `from`'s queue and makes `to`'s queue wait for it on the
// device. Both streams are of one device, so one worker dispatches both in submission order and
// the marker covers every command `from` was given before this instruction.
class SoftSyncStream final : public vm::Instruction {
 public:
  SoftSyncStream(vm::Stream& from, vm::Stream& to);
  const char* name() const override { return "SoftSyncStream"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  vm::Stream& from_;
};

class Barrier final : public vm::Instruction {
 public:
  Barrier(vm::Stream& stream, std::function<void()> callback);
  const char* name() const override { return "Barrier"; }
  bool waits_on_host() const override { return true; }
  // Finishes the stream's queue, then calls the callback on the executing thread. An exception
  // from the callback is the instruction's error. The callback runs on the device's worker (or a
  // caller holding its execution right): it must not run lists on the VM nor drop the last owner
  // of a TensorStorage (whose releaser runs a list), which would wait for that worker itself.
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  std::function<void()> callback_;
};

class AccessBlobByCallback final : public vm::Instruction {
 public:
  using Callback = std::function<void(void* host, size_t bytes)>;
  AccessBlobByCallback(vm::Stream& stream, std::shared_ptr<BlobObject> blob, size_t offset,
                       size_t bytes, HostAccess mode, Callback callback);
  const char* name() const override { return "AccessBlobByCallback"; }
  bool waits_on_host() const override { return true; }
  // Maps the range (blocking, after every earlier command of the stream), calls the callback with
  // the host pointer and the size, and unmaps — also when the callback throws, whose exception is
  // then the instruction's error. A 0-byte range calls back with (nullptr, 0). The callback
  // must not use the VM (see Barrier::execute).
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  const size_t offset_;
  const size_t bytes_;
  const HostAccess mode_;
  Callback callback_;
};

// Note [Host mappings]
// ~~~~~~~~~~~~~~~~~~~~
// MapBlob gives the host a pointer to a byte range of a blob for as long as the caller needs it,
// not just for a callback: the caller runs MapBlob, reads or writes through host() on its own
// thread, then runs UnmapBlob of the same mapping. On a device whose memory the host reaches
// directly (DeviceProperties::host_unified_memory: PoCL's CPU devices, integrated GPUs) the
// pointer is the buffer's own memory and nothing is copied; elsewhere the driver stages.
// Ordering: MapBlob is an access of the blob (a read, or a write for HostAccess::kWrite) on its
// stream, so it runs after the blob's last writer (and, mapping for write, after every earlier
// access), and the map itself waits for every earlier command of the stream. UnmapBlob is the same
// access again, so every device access submitted after it waits for it, and for a write mapping
// sees what the host wrote. Between the two the host owns the range: a device access of the same
// bytes that another thread submits in between is a race the caller must prevent, as with any
// two unsynchronised users of one tensor. Every MapBlob must be followed by its UnmapBlob before
// the blob is released (a ReleaseTensor does not unmap).
//
// Thread-safety: MapBlob::execute writes the mapping on the device's worker, the caller reads
// host() after MapBlob's sync point and stops using it before submitting UnmapBlob, whose
// execute reads it on the worker: the VM's sync points order the three.
class HostMapping {
 public:
  HostMapping(std::shared_ptr<BlobObject> blob, size_t offset, size_t bytes, HostAccess mode);
  HostMapping(const HostMapping&) = delete;
  HostMapping& operator=(const HostMapping&) = delete;

  // The range's first byte on the host: valid from MapBlob's sync point until UnmapBlob is
  // submitted; nullptr for a 0-byte range and while not mapped.
  void* host() const { return host_; }
  bool mapped() const { return mapped_; }
  size_t bytes() const { return bytes_; }
  HostAccess mode() const { return mode_; }
  const std::shared_ptr<BlobObject>& blob() const { return blob_; }

 private:
  friend class MapBlob;
  friend class UnmapBlob;
  const std::shared_ptr<BlobObject> blob_;
  const size_t offset_;
  const size_t bytes_;
  const HostAccess mode_;
  const Segment* segment_ = nullptr;  // set by MapBlob: the segment holding the range
  void* host_ = nullptr;
  bool mapped_ = false;
};

class MapBlob final : public vm::Instruction {
 public:
  // `stream` is on the mapping's blob's device.
  MapBlob(vm::Stream& stream, std::shared_ptr<HostMapping> mapping);
  const char* name() const override { return "MapBlob"; }
  // Maps the range (blocking: after every earlier command of the stream). Throws InvalidArgument
  // for a mapping already mapped or a blob without live storage, BackendError when the driver
  // refuses; then nothing is mapped.
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  std::shared_ptr<HostMapping> mapping_;
};

class UnmapBlob final : public vm::Instruction {
 public:
  UnmapBlob(vm::Stream& stream, std::shared_ptr<HostMapping> mapping);
  const char* name() const override { return "UnmapBlob"; }
  // Ends the mapping (host() is null afterwards). A mapping that is not mapped (its MapBlob
  // failed) is a no-op, so a caller may always pair its MapBlob with an UnmapBlob. Throws
  // BackendError when the driver refuses; the mapping then counts as ended.
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  std::shared_ptr<HostMapping> mapping_;
};

class EmptyCache final : public vm::Instruction {
 public:
  explicit EmptyCache(vm::Stream& stream) : vm::Instruction(stream) {}
  const char* name() const override { return "EmptyCache"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;
};

class ResetStats final : public vm::Instruction {
 public:
  ResetStats(vm::Stream& stream, ResetKind kind) : vm::Instruction(stream), kind_(kind) {}
  const char* name() const override { return "ResetStats"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  const ResetKind kind_;
};

class QueryStats final : public vm::Instruction {
 public:
  // `out` (not null) receives the allocator's statistics when the instruction runs, and
  // `limit_out`, when not null, its memory limit (0: none).
  QueryStats(vm::Stream& stream, DeviceStats* out, uint64_t* limit_out = nullptr)
      : vm::Instruction(stream), out_(out), limit_out_(limit_out) {}
  const char* name() const override { return "QueryStats"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;
  // Reading statistics is safe on the caller's thread after shutdown (it only reads the allocator,
  // under the worker's execution right), so a stopped VM can still report them.
  bool runs_after_shutdown() const override { return true; }

 private:
  DeviceStats* const out_;
  uint64_t* const limit_out_;
};

// Starts, changes or stops the device's memory history (MemoryHistory::configure).
class ConfigureMemoryHistory final : public vm::Instruction {
 public:
  ConfigureMemoryHistory(vm::Stream& stream, const HistoryOptions& options)
      : vm::Instruction(stream), options_(options) {}
  const char* name() const override { return "ConfigureMemoryHistory"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  const HistoryOptions options_;
};

// Fills `out` (not null) with the device's segments and blocks, the contexts the history kept for
// its live blocks, and (when `with_events`) the history's events; records a snapshot event first.
// Like QueryStats, it runs after shutdown too.
class TakeMemorySnapshot final : public vm::Instruction {
 public:
  TakeMemorySnapshot(vm::Stream& stream, DeviceMemorySnapshot* out, bool with_events)
      : vm::Instruction(stream), out_(out), with_events_(with_events) {}
  const char* name() const override { return "TakeMemorySnapshot"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override { return stream().device().str(); }
  bool runs_after_shutdown() const override { return true; }

 private:
  DeviceMemorySnapshot* const out_;
  const bool with_events_;
};

// Sets the device allocator's limit on reserved bytes (0: none); see Allocator::set_memory_limit
// for what a limit under the reserved bytes does.
class SetMemoryLimit final : public vm::Instruction {
 public:
  SetMemoryLimit(vm::Stream& stream, uint64_t bytes) : vm::Instruction(stream), bytes_(bytes) {}
  const char* name() const override { return "SetMemoryLimit"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  const uint64_t bytes_;
};

// ---------------------------------------------------------------------------------------------
// Events and stream uses.

// A point in one stream's command order that the host and other streams can wait for: what
// torch calls an Event. RecordEvent sets the point (each record replaces the previous one, as
// CUDA's does); WaitEvent, query() and synchronize() use the point recorded when they run. A
// timing event also keeps the host time at which its recorded work had completed.
//
// Thread-safety: thread-safe. RecordEvent writes it on a worker; any thread may read it. One
// mutex guards the record; waits happen outside it.
class StreamEvent {
 public:
  explicit StreamEvent(bool timing = false) : timing_(timing) {}
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;

  bool timing() const { return timing_; }
  // Whether a RecordEvent has run for it.
  bool recorded() const;
  // True when never recorded or when the recorded point has completed. Never blocks.
  bool query() const;
  // Blocks until the recorded point has completed (at once when never recorded).
  void synchronize() const;
  // Milliseconds from `start`'s completed point to this one's. Throws InvalidArgument unless both
  // are timing events that were recorded.
  double elapsed_ms_since(const StreamEvent& start) const;

 private:
  friend class RecordEvent;
  friend class WaitEvent;
  void set(std::shared_ptr<QueueMarker> marker, std::chrono::steady_clock::time_point completed);
  std::shared_ptr<QueueMarker> marker() const;
  // Whether the event was recorded, and its completed point.
  std::pair<bool, std::chrono::steady_clock::time_point> completion() const;

  const bool timing_;
  mutable Mutex mutex_;
  std::shared_ptr<QueueMarker> marker_ OCLVM_GUARDED_BY(mutex_);
  std::chrono::steady_clock::time_point completed_at_ OCLVM_GUARDED_BY(mutex_);  // timing events
};

class RecordEvent final : public vm::Instruction {
 public:
  RecordEvent(vm::Stream& stream, std::shared_ptr<StreamEvent> event);
  const char* name() const override { return "RecordEvent"; }
  // Records a marker after every command the stream was given before this instruction into the
  // event. A timing event first finishes the stream's queue and stamps the host clock, so its
  // time is when that work had completed (OpenCL profiling is not enabled on oclvm's queues).
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  const std::shared_ptr<StreamEvent> event_;
};

class WaitEvent final : public vm::Instruction {
 public:
  WaitEvent(vm::Stream& stream, std::shared_ptr<StreamEvent> event);
  const char* name() const override { return "WaitEvent"; }
  // Makes the stream's later commands wait for the event's recorded point: on the device when it
  // was recorded on the same device, by waiting on the executing thread otherwise. An event never
  // recorded is no-op. The point is the one recorded when this runs: a RecordEvent of another
  // device in the same list is not ordered before it (the VM orders devices by blob operands only).
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  const std::shared_ptr<StreamEvent> event_;
};

// Records that the stream uses the blob, like CUDA's recordStream: the blob is a read operand on
// this stream, so the VM's dependence analysis makes the blob's next write — its ReleaseTensor
// included — wait for every command the stream was given up to here. Runs nothing itself.
class RecordBlobUse final : public vm::Instruction {
 public:
  RecordBlobUse(vm::Stream& stream, std::shared_ptr<BlobObject> blob);
  const char* name() const override { return "RecordBlobUse"; }
  void execute(vm::ExecutionContext&) override {}
  std::string describe() const override;
};

// ---------------------------------------------------------------------------------------------
// Kernels.

// Note [Kernel launches]
// ~~~~~~~~~~~~~~~~~~~~~~
// LaunchKernel enqueues one kernel on its stream's queue. The kernel was compiled (or found in the
// device's kernel cache, storage/kernel.h) when the list was built, and the builder matched every
// argument to a parameter then: a blob to a `__global`/`__constant` pointer followed by a `ulong`
// offset (Note [Blob arguments]), a scalar to a parameter of the same OpenCL C type, a local size
// to a `__local` pointer; and each blob argument's offset lies within what the blob may address.
// So what execute() can still find wrong is only what the builder cannot see: a blob without live
// storage (InvalidArgument) and the driver's refusals (BackendError). The kernel may touch any
// byte of a blob argument from its offset to the end of the blob's storage; the caller's ranges
// and the kernel's indexing keep it inside, as for any OpenCL buffer.
enum class KernelAccess : uint8_t { kRead, kWrite, kReadWrite };

// "read", "write", "read-write".
const char* kernel_access_name(KernelAccess access);

// One argument of a launch as the builder takes it (InstructionsBuilder::launch).
struct LaunchArg {
  enum class Kind : uint8_t { kBlob, kScalar, kLocal };
  Kind kind = Kind::kScalar;
  std::shared_ptr<BlobObject> blob;  // kBlob
  size_t offset = 0;                 // kBlob: bytes from the blob's element 0
  KernelAccess access = KernelAccess::kRead;  // kBlob
  ScalarType scalar = ScalarType::kInt;       // kScalar
  std::array<uint8_t, 8> bytes{};             // kScalar: the value, least significant byte first
  size_t local_bytes = 0;                     // kLocal

  static LaunchArg of_blob(std::shared_ptr<BlobObject> blob, size_t offset, KernelAccess access);
  // A scalar of the given type from the low scalar_type_size(type) bytes of `bytes`.
  static LaunchArg of_scalar(ScalarType type, const void* bytes);
  static LaunchArg of(int8_t v) { return of_scalar(ScalarType::kChar, &v); }
  static LaunchArg of(uint8_t v) { return of_scalar(ScalarType::kUChar, &v); }
  static LaunchArg of(int16_t v) { return of_scalar(ScalarType::kShort, &v); }
  static LaunchArg of(uint16_t v) { return of_scalar(ScalarType::kUShort, &v); }
  static LaunchArg of(int32_t v) { return of_scalar(ScalarType::kInt, &v); }
  static LaunchArg of(uint32_t v) { return of_scalar(ScalarType::kUInt, &v); }
  static LaunchArg of(int64_t v) { return of_scalar(ScalarType::kLong, &v); }
  static LaunchArg of(uint64_t v) { return of_scalar(ScalarType::kULong, &v); }
  static LaunchArg of(float v) { return of_scalar(ScalarType::kFloat, &v); }
  static LaunchArg of(double v) { return of_scalar(ScalarType::kDouble, &v); }
  static LaunchArg local(size_t bytes);
};

// The work-items of a launch: dims (1 to 3) entries of global and local; local all zero lets the
// driver choose the work-group size.
struct LaunchRange {
  uint32_t dims = 1;
  std::array<size_t, 3> global{1, 1, 1};
  std::array<size_t, 3> local{0, 0, 0};
};

class LaunchKernel final : public vm::Instruction {
 public:
  // The builder made `kernel` for the stream's device and checked the `count` arguments at
  // `args` against it.
  LaunchKernel(vm::Stream& stream, std::shared_ptr<const Kernel> kernel, const LaunchRange& range,
               const LaunchArg* args, size_t count);
  const char* name() const override { return "LaunchKernel"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

  const Kernel& kernel() const { return *kernel_; }
  const LaunchRange& range() const { return range_; }

 private:
  // An argument as kept: a blob is named by its operand (the operands hold the blobs, once each).
  // 16 bytes: a launch's instruction is written once per launch, and its size is memory traffic.
  struct Slot {
    LaunchArg::Kind kind = LaunchArg::Kind::kScalar;
    KernelAccess access = KernelAccess::kRead;  // kBlob
    ScalarType scalar = ScalarType::kInt;       // kScalar
    uint8_t operand = 0;                        // kBlob: index in operands()
    union {
      std::array<uint8_t, 8> bytes;  // kScalar
      size_t value = 0;              // kBlob: offset; kLocal: bytes
    };
  };

  const std::shared_ptr<const Kernel> kernel_;
  const LaunchRange range_;
  boost::container::small_vector<Slot, 6> slots_;
};

// ---------------------------------------------------------------------------------------------
// NativeCall (Note [Native commands] in storage/queue.h)

// A blob range a native call touches, and how.
struct NativeArg {
  std::shared_ptr<BlobObject> blob;
  size_t offset = 0;  // bytes from the blob's element 0
  size_t bytes = 0;   // the range's length
  KernelAccess access = KernelAccess::kRead;
};

// A NativeArg as the body sees it; all zero for a range of 0 bytes.
struct NativeBuffer {
  void* memory = nullptr;  // the driver's buffer object holding the range (OpenCL: a cl_mem)
  size_t offset = 0;       // bytes from that object's start to the range
  size_t bytes = 0;
};

// What a native call's body is given, on the stream's device worker.
struct NativeCallContext {
  void* queue = nullptr;                  // the stream's driver queue (OpenCL: cl_command_queue)
  std::span<const NativeBuffer> buffers;  // one per NativeArg, in their order
  Device device;
};

// Enqueues commands on context.queue that touch only the buffers' ranges, as their accesses say,
// and returns without waiting for them; throws on failure (the call's error). It runs holding the
// device's execution right: it must not use the VM, and keeps nothing it was given.
using NativeBody = std::function<void(const NativeCallContext&)>;

class NativeCall final : public vm::Instruction {
 public:
  // The builder checked the args (blobs of the stream's device, ranges within them) and `body`.
  // `label` names the call in describe() and errors ("clblast::Gemm").
  NativeCall(vm::Stream& stream, std::string label, const std::vector<NativeArg>& args,
             NativeBody body);
  const char* name() const override { return "NativeCall"; }
  void execute(vm::ExecutionContext& context) override;
  std::string describe() const override;

 private:
  struct Slot {
    uint8_t operand;  // index in operands()
    KernelAccess access;
    size_t offset;
    size_t bytes;
  };
  const std::string label_;
  const NativeBody body_;
  boost::container::small_vector<Slot, 4> slots_;
};

}  // namespace oclvm
