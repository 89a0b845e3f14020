// instructions/builder.h — InstructionsBuilder: builds lists of the closed instruction set.
//
// One method per instruction of the closed set, which instructions/instructions.h lists and
// describes: allocate_blob (AllocateBlob), release (ReleaseTensor), copy_host_to_device /
// copy_device_to_host / copy (CopyBlob), fill (FillBlob), soft_sync (SoftSyncStream), barrier
// (Barrier), access (AccessBlobByCallback), map / unmap (MapBlob / UnmapBlob), empty_cache,
// reset_stats, query_stats, set_memory_limit, configure_memory_history, take_memory_snapshot,
// record_event, wait_event, record_blob_use (the instruction of the same name), launch
// (LaunchKernel) and native (NativeCall).
//
// The builder checks what it can when building (unknown device, zero size where not allowed,
// offsets and sizes against blob sizes, pattern sizes) and throws InvalidArgument before anything
// is submitted; what can only be known when running (out of memory, a released blob) fails at the
// sync point. Host buffers passed to copies must stay valid until the list's sync point.
//
// Details of the checks and choices (all build-time errors are InvalidArgument and add nothing):
//   - Offsets count from the blob's element 0; ranges are checked against what the blob may
//     address (blob_capacity_bytes in instructions.h). offset + bytes may not overflow. Zero-byte
//     copies, fills and accesses are allowed and do nothing (an access calls back with nullptr, 0).
//   - A stream passed in must belong to this builder's VM and be on the blob's device (for a copy
//     across devices, on the destination's device). Without one, the compute stream of that
//     device is used.
//   - allocate_blob refuses more than the device's largest single allocation
//     (DeviceProperties::max_alloc_bytes), so SIZE_MAX fails here, not at the sync point.
//   - copy() within one blob refuses overlapping ranges.
//   - fill() refuses a pattern wider than pattern_size bytes.
//   - soft_sync() takes two different streams of one device: the VM orders streams of different
//     devices itself (host-side waits from the operands), and a marker recorded by one worker on
//     another worker's stream would not cover that stream's undispatched instructions.
//   - launch() compiles the kernel when it is not in the device's kernel cache (a build failure is
//     KernelBuildError with the compiler's log), then matches every argument to its parameters:
//     a blob to a __global/__constant pointer and a ulong offset (OCLVM_BLOB), a scalar to a
//     parameter of its OpenCL C type, a local size to a __local pointer; all parameters filled.
//     Each blob argument is on the stream's device and its offset within what the blob may
//     address. A local size must divide the global size in every dimension.
//   - The checks read only the immutable parts of a BlobObject (device, layout, required_bytes),
//     never its storage, which a worker may be attaching at that moment. So a released blob, or one
//     whose AllocateBlob failed, is only detected when the instruction runs.
//
// Thread-safety: a builder is used by one thread; the lists it makes may be submitted from any.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "oclvm/instructions/instructions.h"  // ResetKind, HostAccess and the instruction classes
#include "oclvm/storage/stats.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/vm/instruction.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm {

class InstructionsBuilder {
 public:
  // Builds lists for `vm`: its streams and devices (there is no default VM; the process-wide
  // one is vm::VirtualMachine::instance(), a Runtime's is Runtime::builder()).
  explicit InstructionsBuilder(vm::VirtualMachine& vm);

  vm::VirtualMachine& vm() const { return vm_; }
  // The compute stream of `device` (shorthand for vm().stream(device)).
  vm::Stream& stream(Device device) const;

  // A new byte blob of `bytes` (> 0) bytes on `stream`'s device, allocated on `stream`, which
  // becomes its producer stream.
  std::shared_ptr<BlobObject> allocate_blob(vm::Stream& stream, size_t bytes);
  // A typed contiguous blob (numel may be 0: then nothing is allocated from the driver).
  std::shared_ptr<BlobObject> allocate_blob(vm::Stream& stream, const Dims& shape,
                                            DType dtype);
  // Frees the blob's storage on its producer stream (ReleaseTensor).
  void release(std::shared_ptr<BlobObject> blob);

  void copy_host_to_device(const void* src, std::shared_ptr<BlobObject> dst, size_t dst_offset,
                           size_t bytes, vm::Stream* stream = nullptr);
  void copy_device_to_host(std::shared_ptr<BlobObject> src, size_t src_offset, void* dst,
                           size_t bytes, vm::Stream* stream = nullptr);
  // Same device: one device copy. Different devices: staged through host memory.
  void copy(std::shared_ptr<BlobObject> src, size_t src_offset, std::shared_ptr<BlobObject> dst,
            size_t dst_offset, size_t bytes, vm::Stream* stream = nullptr);
  // pattern_size: 1, 2, 4 or 8 bytes of `pattern` (little-endian low bytes); bytes and offset
  // must be multiples of it.
  void fill(std::shared_ptr<BlobObject> blob, size_t offset, size_t bytes, uint64_t pattern,
            size_t pattern_size = 1, vm::Stream* stream = nullptr);
  void soft_sync(vm::Stream& from, vm::Stream& to);
  void barrier(vm::Stream& stream, std::function<void()> callback);
  void access(std::shared_ptr<BlobObject> blob, size_t offset, size_t bytes, HostAccess mode,
              std::function<void(void* host, size_t bytes)> callback, vm::Stream* stream = nullptr);
  // Note [Host mappings] (instructions.h): map() returns the mapping that MapBlob fills at the
  // sync point; unmap() ends it. `stream` defaults to the blob's device's compute stream.
  std::shared_ptr<HostMapping> map(std::shared_ptr<BlobObject> blob, size_t offset, size_t bytes,
                                   HostAccess mode, vm::Stream* stream = nullptr);
  void unmap(std::shared_ptr<HostMapping> mapping, vm::Stream* stream = nullptr);
  void empty_cache(Device device);
  void reset_stats(Device device, ResetKind kind);
  // Writes the device's statistics to *out, and its memory limit to *limit_out when that is not
  // null, when it runs (both must outlive the sync point).
  void query_stats(Device device, DeviceStats* out, uint64_t* limit_out = nullptr);
  // Sets the device allocator's limit on reserved bytes (0: none).
  void set_memory_limit(Device device, uint64_t bytes);
  // The device's memory history (storage/memory_history.h): configure it, or take a snapshot
  // into `out` (instructions/memory_snapshot.h) when the list runs. Throws InvalidArgument for
  // max_entries == 0 or a null `out`.
  void configure_memory_history(Device device, const HistoryOptions& options);
  void take_memory_snapshot(Device device, DeviceMemorySnapshot* out, bool with_events = true);

  // Events (instructions.h, StreamEvent) and stream uses.
  void record_event(vm::Stream& stream, std::shared_ptr<StreamEvent> event);
  void wait_event(vm::Stream& stream, std::shared_ptr<StreamEvent> event);
  // `stream` must be on the blob's device.
  void record_blob_use(vm::Stream& stream, std::shared_ptr<BlobObject> blob);

  // Kernels (Note [Kernel launches] in instructions.h). kernel() compiles `source` for `device`
  // or finds it in the device's kernel cache; a caller that launches one kernel often keeps the
  // result and launches it, which skips the cache's lookup. Throws KernelBuildError,
  // InvalidArgument (the host device, an unknown kernel name).
  std::shared_ptr<const Kernel> kernel(Device device, const KernelSource& source) const;
  void launch(vm::Stream& stream, const KernelSource& source, const LaunchRange& range,
              const std::vector<LaunchArg>& args);
  void launch(vm::Stream& stream, std::shared_ptr<const Kernel> kernel, const LaunchRange& range,
              const std::vector<LaunchArg>& args) {
    launch(stream, std::move(kernel), range, args.data(), args.size());
  }
  void launch(vm::Stream& stream, std::shared_ptr<const Kernel> kernel, const LaunchRange& range,
              std::initializer_list<LaunchArg> args) {
    launch(stream, std::move(kernel), range, args.begin(), args.size());
  }
  void launch(vm::Stream& stream, std::shared_ptr<const Kernel> kernel, const LaunchRange& range,
              const LaunchArg* args, size_t count);

  // Native commands (Note [Native commands] in storage/queue.h): `body` runs on the stream's
  // device worker, in stream order, with the stream's driver queue and each arg's range as a
  // driver buffer, and enqueues its commands there (a BLAS library's). The VM orders it by the
  // args' accesses like a kernel. Throws InvalidArgument, changing nothing, for a stream of
  // another VM, a device without driver objects (the host), a null blob or one of another device,
  // a range outside its blob, an empty body, or more than 255 args.
  void native(vm::Stream& stream, std::string label, const std::vector<NativeArg>& args,
              NativeBody body);

  // The instructions built so far, in order; the builder starts over empty.
  vm::InstructionList take();
  size_t size() const { return list_.size(); }

 private:
  vm::VirtualMachine& vm_;
  vm::InstructionList list_;
};

// The releaser for TensorStorage (storage/storage_objects.h) on the VM: builds a ReleaseTensor
// for the blob and runs it synchronously (vm::Run), so the memory is back in the allocator and the
// producer queue is finished when the last front-end owner's destructor returns.
TensorStorage::Releaser make_vm_releaser(vm::VirtualMachine& vm);
// What that releaser does, for releasers that capture more than the VM: a ReleaseTensor of `blob`
// run on `vm` — detached when this thread holds a device's execution right (an instruction
// callback dropped the last owner), where waiting could wait for itself.
void release_through(vm::VirtualMachine& vm, std::shared_ptr<BlobObject> blob);
// For a caller whose allocation failed after its AllocateBlob ran (a later instruction of the
// list, the stream's finish, or making the blob's owner): gives the block back through the VM
// when the blob has one, and swallows what that release throws, so that the caller rethrows the
// first error. The blob's destructor must not do it: it may not touch the allocator.
void release_after_failure(vm::VirtualMachine& vm, const std::shared_ptr<BlobObject>& blob) noexcept;

// A TensorStorage whose contiguous blob is allocated on `device` by an AllocateBlob run through
// the VM, released by `releaser` (empty: make_vm_releaser(vm)). Throws what the builder or the
// AllocateBlob threw; then nothing is held.
std::shared_ptr<TensorStorage> make_tensor_storage(vm::VirtualMachine& vm, Device device,
                                                   const Dims& shape, DType dtype,
                                                   TensorStorage::Releaser releaser = {});

}  // namespace oclvm
