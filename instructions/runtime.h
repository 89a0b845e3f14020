// instructions/runtime.h — Runtime: the one object an embedder holds (design/embedding.md).
//
// A Runtime owns, for its lifetime, a DeviceManager (the devices of one OpenCL platform plus the
// host device `cpu`) and a VirtualMachine over them (one device worker per device, each owning its
// device's allocator). Everything an eager tensor runtime needs from oclvm goes through it: list
// devices, create storages, build and run instruction lists, read and control the allocators'
// statistics, shut down. It never touches the process-wide VirtualMachine::instance() nor
// DeviceManager::instance(): two Runtimes in one process are independent (their blobs may not be
// mixed: the VM refuses them).
//
// Ownership rules (the contract an embedder follows; design/embedding.md has the long form):
//   - A TensorStorage made by create_storage() (or with releaser()) may outlive the Runtime: it
//     keeps the Runtime's devices and allocators alive, and its memory goes back when it dies
//     (after shutdown, its ReleaseTensor runs on the thread that drops it).
//   - Blobs made with builder() and not wrapped in a TensorStorage must be released (a
//     ReleaseTensor, InstructionsBuilder::release) before the Runtime is destroyed. A Runtime that
//     finds such blobs still allocated when it goes away says so on stderr and keeps its devices
//     (a deliberate leak) so that those blobs stay valid; nothing crashes.
//   - Builders, streams, lists and tickets belong to the Runtime that made them and must not be
//     used after it is destroyed; a list is run only by the Runtime whose builder made it.
//
// Thread-safety: thread-safe. Any number of threads may call any member at once, except that the
// destructor must not race with other calls (as for any object). The VM's rule holds for every
// call that waits (run, create_storage, stats, shutdown, ...): not from inside an instruction
// callback (Barrier, AccessBlobByCallback), where it throws Error instead of waiting for itself.
// The destructor may run inside a callback (the callback held the last owner): a thread of its
// own then shuts the VM down once the dispatch has returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/instructions/memory_snapshot.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/stats.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/vm/host_section.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm {

// Where a device address lies (Runtime::find): the device whose memory holds it, and the segment
// (one allocation from the driver, which a caching allocator carves into many blobs) around it.
struct FoundAddress {
  Device device;
  uintptr_t segment_address = 0;  // device address of the segment's byte 0
  size_t segment_bytes = 0;       // the segment's size
  size_t offset = 0;              // the address's offset in the segment
};

class Runtime {
 public:
  // Discovers the devices of `options.platform` (with `options.faults` injected, if any) and
  // starts one device worker per device with the allocator `options.allocator` names (the
  // registry's default when empty) under `options.memory_limit` (0: none). `vm_options` bounds the
  // instructions in flight and chooses whether callers may run instructions inline.
  // Environment variables are not read: pass Options::from_environment() for them.
  // Throws InvalidArgument (a platform or allocator that does not exist; the message lists what
  // does), BackendError (an OpenCL call failed). On a throw nothing is left running.
  explicit Runtime(const Options& options = Options{}, const vm::VmOptions& vm_options = {});
  // The same in two steps, for an embedder that must learn its devices before it may start
  // threads (PyTorch asks for the device count at import, and programs fork after that; a forked
  // child has none of its parent's threads): `devices` were discovered earlier
  // (DeviceManager(options), which starts no thread of oclvm's), and the Runtime takes them over
  // with their options and starts the device workers now. Throws InvalidArgument for null
  // `devices` or an allocator that does not exist, BackendError; on a throw `devices` is gone too.
  explicit Runtime(std::unique_ptr<DeviceManager> devices, const vm::VmOptions& vm_options = {});
  // shutdown(), then lets go of the devices (see the ownership rules above). Never throws.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Options& options() const;

  // ---- Devices --------------------------------------------------------------------------------
  // opencl:0 .. opencl:N-1 in the platform's order, then cpu. Never empty (cpu is always there).
  const std::vector<Device>& devices() const;
  // The OpenCL devices only (N above; 0 on a machine without an OpenCL platform).
  size_t opencl_device_count() const;
  // Name, platform, driver version, memory, largest allocation, alignment. Throws
  // InvalidArgument naming the devices that exist when `device` is not one of them.
  const DeviceProperties& properties(Device device) const;
  // Whether a tensor library's operators compute on `device` with its own kernels
  // (DeviceManager::native_kernels: OCLVM_KERNELS, else every device but a CPU one). Throws as
  // properties().
  bool native_kernels(Device device) const;
  // The device memory of this Runtime holding `device_address`: any byte of a live segment of one
  // of its devices (a blob's BlobStorage::device_address() plus an offset below its size is one).
  // nullopt for any other address: host memory, memory given back to the driver, another
  // Runtime's. O(1), takes no instruction and never waits for a worker. The memory must stay
  // allocated during the call (the caller holds the blob); device addresses are never
  // dereferenceable on the host (BlobStorage::host_address() is where the host reads).
  std::optional<FoundAddress> find(const void* device_address) const;

  // ---- Storages -------------------------------------------------------------------------------
  // A TensorStorage of a contiguous blob of `shape` and `dtype` on `device`, allocated now (an
  // AllocateBlob run synchronously). Its last owner's destructor runs a ReleaseTensor through
  // this Runtime's VM. A shape with a 0 dimension gives a storage without device memory.
  // Throws InvalidArgument (unknown device, negative dimension, more than the device's largest
  // allocation), OutOfMemoryError (the allocator, under its limit, could not serve it), or
  // BackendError; then nothing is allocated.
  std::shared_ptr<TensorStorage> create_storage(Device device, const Dims& shape, DType dtype);
  // A storage of `bytes` bytes (dtype u8); 0 bytes is allowed. Throws as above.
  std::shared_ptr<TensorStorage> create_storage(Device device, size_t bytes);
  // The releaser create_storage gives its storages, for an embedder who allocates its own blobs
  // with builder() and wraps them: TensorStorage(blob, runtime.releaser()).
  TensorStorage::Releaser releaser() const;

  // ---- Instructions ---------------------------------------------------------------------------
  // A builder on this Runtime's VM (instructions/builder.h documents every instruction).
  InstructionsBuilder builder();
  // The stream of `device` with that role, created on first use. Throws InvalidArgument for an
  // unknown device or a negative user index, Error past 4096 streams.
  vm::Stream& stream(Device device, vm::StreamRole role = vm::StreamRole::kCompute,
                     int user_index = 0);
  // The stream with this id (vm::Stream::id()), whatever its device and role; nullptr when this
  // Runtime has none. Never creates one.
  vm::Stream* find_stream(vm::StreamId id) const;
  // Synchronous: returns when every instruction of `list` and every device command it enqueued
  // has completed; rethrows the first error (InvalidArgument, OutOfMemoryError, BackendError,
  // Error, with the instruction and stream named). Throws InvalidArgument, running nothing, for a
  // list built for another Runtime; Error after shutdown() unless every instruction is a release
  // or a statistics query (those then run on the calling thread).
  void run(vm::InstructionList&& list);
  // Asynchronous: returns at once (or after backpressure); Ticket::wait() is the sync point.
  [[nodiscard]] vm::Ticket submit(vm::InstructionList&& list);
  // Asynchronous too, and dispatched on the calling thread when the list's one device is idle:
  // returns once the commands are enqueued (Note [Submitted here] in vm/virtual_machine.cc).
  // What an eager runtime launches its kernels with; Ticket::rethrow_if_failed reports a failed
  // dispatch without waiting.
  [[nodiscard]] vm::Ticket submit_here(vm::InstructionList&& list);

  // ---- Host access (Note [Host sections] in vm/host_section.h) ---------------------------------
  // Waits until `device`'s worker is idle and holds it: while the section lives, no instruction
  // of the device runs, and the host may read and write the device's blobs at their host
  // addresses; run(list) on the section runs a list inside it. nullopt after shutdown and inside
  // an instruction callback. Throws InvalidArgument for an unknown device.
  std::optional<vm::HostSection> host_section(Device device);
  // Where the host reaches byte 0 of `storage`'s blob: on a device whose segments have host
  // addresses (DeviceProperties::host_addressable: the host device, and every OpenCL device with
  // unified memory and fine-grained buffer SVM, PoCL's among them); nullptr elsewhere and for a
  // storage without memory. Use it only inside a host section of the blob's device.
  static void* host_address(const TensorStorage& storage);

  // ---- Statistics and allocator control (each an instruction run on the device's worker) ----
  // A snapshot of the device allocator's statistics (PyTorch's DeviceStats fields). Works after
  // shutdown too.
  DeviceStats stats(Device device);
  // The device's limit on reserved bytes; 0 when there is none.
  uint64_t memory_limit(Device device);
  // Sets it (0: none). A limit under what is reserved now gives cached memory back first; it
  // never takes memory from live blobs (Allocator::set_memory_limit).
  void set_memory_limit(Device device, uint64_t bytes);
  // PyTorch's resetPeakStats (every peak := current) and resetAccumulatedStats.
  void reset_peak_stats(Device device);
  void reset_accumulated_stats(Device device);
  // Gives every cached, unused segment of the device back to the driver.
  void empty_cache(Device device);

  // ---- Memory history and snapshots (storage/memory_history.h, instructions/memory_snapshot.h)
  // Starts, changes or stops the memory history of every device (PyTorch's
  // _record_memory_history, which also covers every device). Throws InvalidArgument for
  // max_entries == 0, Error after shutdown; then nothing changed.
  void record_memory_history(const HistoryOptions& options);
  // Where contexts come from: `capture` runs on the thread that builds each AllocateBlob (and,
  // with ContextMode::kAll, each ReleaseTensor) while the history wants contexts; it must not
  // block on this Runtime. An empty function: no contexts (the default).
  void set_memory_context_capture(vm::VirtualMachine::ContextCapture capture);
  // The segments, blocks and (with_events) recorded events of `devices` (every device when
  // empty), each device at one moment (a TakeMemorySnapshot on its worker). Works after shutdown.
  // Throws InvalidArgument for an unknown device.
  MemorySnapshot memory_snapshot(const std::vector<Device>& devices = {}, bool with_events = true);

  // ---- Lifetime -------------------------------------------------------------------------------
  // Drains every pending instruction and joins the workers. Idempotent; a second caller waits
  // for the first. Afterwards only releases and statistics queries run (on the caller's thread).
  // Throws Error, changing nothing, from inside an instruction callback.
  void shutdown();
  bool is_shut_down() const;

  // The VM itself, for what this class does not wrap (tracing, VmOptions).
  vm::VirtualMachine& vm();

 private:
  struct Core;
  // Shared with every TensorStorage's releaser (Note [Runtime core lifetime], runtime.cc).
  std::shared_ptr<Core> core_;
};

}  // namespace oclvm
