// instructions/runtime.cc — Runtime: a DeviceManager and a VirtualMachine owned together, and the
// wrappers that run one instruction for a caller who wants no lists.
#include "oclvm/instructions/runtime.h"

#include <cstdio>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"
#include "oclvm/version.h"

namespace oclvm {

const char* library_version() noexcept { return OCLVM_VERSION_STRING; }

namespace {

// Builds one list with `build(builder)` and runs it synchronously on `vm`.
template <typename Build>
void run_one(vm::VirtualMachine& vm, Build&& build) {
  InstructionsBuilder builder(vm);
  build(builder);
  vm.run(builder.take());
}

}  // namespace

// Note [Runtime core lifetime]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The devices and the VM live in one Core, shared by the Runtime and by the releaser of every
// TensorStorage it made. So a storage that outlives the Runtime still finds its allocator: the
// Runtime's destructor shuts the VM down (drain, join), and the storage's ReleaseTensor later runs
// on the thread that drops it (runs_after_shutdown). The Core goes with its last reference.
//
// Blobs that an embedder allocated with the builder and did not wrap hold no reference: their
// BlobStorage points at an allocator of the Core. If any is still allocated when the last
// reference goes, deleting the Core would leave it dangling, so retire() reports it and keeps the
// Core instead, for the rest of the process, in a list that is never destroyed (reachable, so
// LeakSanitizer does not call it lost; the VM is already shut down: no thread keeps running). The
// check reads the drained VM's allocators directly (VirtualMachine::stats_after_shutdown), with
// no instruction and no queue, so it works on any thread, also one dispatching for another VM.
struct Runtime::Core {
  Core(std::unique_ptr<DeviceManager> discovered, const vm::VmOptions& vm_options)
      : devices(std::move(discovered)),
        vm(*devices, devices->options(), vm_options),
        device_list(devices->devices()) {}

  // Shuts down, then deletes `core` unless blobs of it are still allocated (see the Note).
  static void retire(Core* core) noexcept;
  // Records `core` in a list that is never destroyed: it is never deleted, and stays reachable.
  static void keep(Core* core) noexcept;

  // Declared first: the VM's workers use its backends until they stop. Never null.
  const std::unique_ptr<DeviceManager> devices;
  vm::VirtualMachine vm;
  const std::vector<Device> device_list;
};

namespace {

// " opencl:0 (2 blobs, 8.00 KiB)" for every device of a drained `vm` with live allocations;
// empty when none. Reads the allocators directly: no instruction, no queue.
std::string live_allocations(vm::VirtualMachine& vm, const std::vector<Device>& devices) {
  std::string live;
  for (Device device : devices) {
    const DeviceStats stats = vm.stats_after_shutdown(device);
    const Stat& blocks = stats.allocation.aggregate();
    const Stat& bytes = stats.allocated_bytes.aggregate();
    if (blocks.current > 0) {
      live += " " + device.str() + " (" + std::to_string(blocks.current) + " blobs, " +
              format_bytes(static_cast<uint64_t>(bytes.current)) + ")";
    }
  }
  return live;
}

}  // namespace

void Runtime::Core::retire(Core* core) noexcept {
  try {
    // Already done by ~Runtime in every ordinary path; throws Error from inside an instruction
    // callback if it was not.
    core->vm.shutdown();
    const std::string live = live_allocations(core->vm, core->device_list);
    if (live.empty()) {
      delete core;
      return;
    }
    log_message(LogLevel::kWarning,
                "a Runtime was destroyed while blobs allocated through its builder were still "
                "live on%s; its devices and allocators are kept (leaked) so that those blobs "
                "stay valid. Release every blob (InstructionsBuilder::release) or wrap it in a "
                "TensorStorage before destroying the Runtime.",
                live.c_str());
  } catch (const std::exception& e) {
    log_message(LogLevel::kError,
                "a Runtime could not check for live blobs at its end (%s); its devices and "
                "allocators are kept (leaked)",
                e.what());
  }
  keep(core);
}

void Runtime::Core::keep(Core* core) noexcept {
  static std::mutex* const kept_mutex = new std::mutex;
  static std::vector<Core*>* const kept = new std::vector<Core*>;
  std::lock_guard<std::mutex> lock(*kept_mutex);
  try {
    kept->push_back(core);
  } catch (const std::bad_alloc&) {
    // Unrecorded, the Core is still never deleted; only a leak checker would notice.
  }
}

Runtime::Runtime(const Options& options, const vm::VmOptions& vm_options)
    : Runtime(std::make_unique<DeviceManager>(options), vm_options) {}

namespace {

std::unique_ptr<DeviceManager> checked(std::unique_ptr<DeviceManager> devices) {
  if (devices == nullptr) throw InvalidArgument("Expected discovered devices, but got none");
  return devices;
}

}  // namespace

Runtime::Runtime(std::unique_ptr<DeviceManager> devices, const vm::VmOptions& vm_options)
    : core_(new Core(checked(std::move(devices)), vm_options), &Core::retire) {}

Runtime::~Runtime() {
  if (!vm::DeviceWorker::holds_execution_right_on_this_thread()) {
    // The Core is retired with core_ here, or later by the releaser of the last TensorStorage.
    core_->vm.shutdown();
    return;
  }
  // Note [A Runtime destroyed inside a callback]: the last owner of the Runtime died inside an
  // instruction callback (a callback that held it), on a thread that dispatches. Shutting down
  // here would join the very worker this thread is, or wait for it. A thread of its own shuts
  // down instead, once this dispatch has returned, and retires the Core.
  std::shared_ptr<Core> core = std::move(core_);
  try {
    std::thread([core]() mutable {
      core->vm.shutdown();
      core.reset();
    }).detach();
  } catch (const std::exception& e) {
    // `core` dies below: retire() cannot shut down on this thread either, so it keeps the Core.
    log_message(LogLevel::kError,
                "a Runtime destroyed inside an instruction callback could not start the thread "
                "that shuts it down (%s)",
                e.what());
  }
}

const Options& Runtime::options() const { return core_->devices->options(); }

// ---------------------------------------------------------------------------------------------
// Devices

const std::vector<Device>& Runtime::devices() const { return core_->device_list; }

size_t Runtime::opencl_device_count() const { return core_->devices->opencl_device_count(); }

const DeviceProperties& Runtime::properties(Device device) const {
  return core_->devices->backend(device).properties();
}

bool Runtime::native_kernels(Device device) const {
  return core_->devices->native_kernels(device);
}

std::optional<FoundAddress> Runtime::find(const void* device_address) const {
  // Every segment of every device of the process has its own range of the one AddressSpace;
  // the segment's backend says whose it is. The caller keeps the memory allocated, so the
  // segment cannot go away while it is read here.
  const ResolvedAddress where =
      AddressSpace::instance().resolve(reinterpret_cast<uintptr_t>(device_address));
  if (where.segment == nullptr || where.segment->backend == nullptr) return std::nullopt;
  const Device device = where.segment->backend->device();
  if (!core_->devices->has(device) || &core_->devices->backend(device) != where.segment->backend) {
    return std::nullopt;  // a segment of another Runtime's (or the process-wide VM's) devices
  }
  return FoundAddress{device, where.segment->address, where.segment->size, where.offset};
}

// ---------------------------------------------------------------------------------------------
// Storages

std::shared_ptr<TensorStorage> Runtime::create_storage(Device device, const Dims& shape,
                                                       DType dtype) {
  return make_tensor_storage(core_->vm, device, shape, dtype, releaser());
}

std::shared_ptr<TensorStorage> Runtime::create_storage(Device device, size_t bytes) {
  if (bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw InvalidArgument("Expected a storage of at most " +
                          std::to_string(std::numeric_limits<int64_t>::max()) +
                          " bytes, but got " + std::to_string(bytes));
  }
  return create_storage(device, Dims{static_cast<int64_t>(bytes)}, DType::kU8);
}

TensorStorage::Releaser Runtime::releaser() const {
  // Holding the Core is what lets a storage outlive the Runtime (Note [Runtime core lifetime]).
  // The capture is one shared_ptr, small enough for std::function's inline storage: making a
  // storage allocates nothing for its releaser.
  return [core = core_](std::shared_ptr<BlobObject> blob) {
    release_through(core->vm, std::move(blob));
  };
}

// ---------------------------------------------------------------------------------------------
// Instructions

InstructionsBuilder Runtime::builder() { return InstructionsBuilder(core_->vm); }

vm::Stream& Runtime::stream(Device device, vm::StreamRole role, int user_index) {
  return core_->vm.stream(device, role, user_index);
}

vm::Stream* Runtime::find_stream(vm::StreamId id) const { return core_->vm.find_stream(id); }

void Runtime::run(vm::InstructionList&& list) { core_->vm.run(std::move(list)); }

std::optional<vm::HostSection> Runtime::host_section(Device device) {
  return vm::HostSection::enter(core_->vm, device);
}

void* Runtime::host_address(const TensorStorage& storage) {
  const std::shared_ptr<BlobStorage>& blob = storage.blob()->storage();
  return blob == nullptr ? nullptr : blob->host_address();
}

vm::Ticket Runtime::submit(vm::InstructionList&& list) {
  return core_->vm.submit(std::move(list));
}

vm::Ticket Runtime::submit_here(vm::InstructionList&& list) {
  return core_->vm.submit_here(std::move(list));
}

// ---------------------------------------------------------------------------------------------
// Statistics and allocator control

DeviceStats Runtime::stats(Device device) {
  DeviceStats stats;
  run_one(core_->vm, [&](InstructionsBuilder& b) { b.query_stats(device, &stats); });
  return stats;
}

uint64_t Runtime::memory_limit(Device device) {
  DeviceStats stats;
  uint64_t limit = 0;
  run_one(core_->vm, [&](InstructionsBuilder& b) { b.query_stats(device, &stats, &limit); });
  return limit;
}

void Runtime::set_memory_limit(Device device, uint64_t bytes) {
  run_one(core_->vm, [&](InstructionsBuilder& b) { b.set_memory_limit(device, bytes); });
}

void Runtime::reset_peak_stats(Device device) {
  run_one(core_->vm, [&](InstructionsBuilder& b) { b.reset_stats(device, ResetKind::kPeak); });
}

void Runtime::reset_accumulated_stats(Device device) {
  run_one(core_->vm,
          [&](InstructionsBuilder& b) { b.reset_stats(device, ResetKind::kAccumulated); });
}

void Runtime::empty_cache(Device device) {
  run_one(core_->vm, [&](InstructionsBuilder& b) { b.empty_cache(device); });
}

// ---------------------------------------------------------------------------------------------
// Memory history and snapshots

void Runtime::record_memory_history(const HistoryOptions& options) {
  run_one(core_->vm, [&](InstructionsBuilder& b) {
    for (const Device& device : devices()) b.configure_memory_history(device, options);
  });
  core_->vm.set_memory_context_mode(options.mode == HistoryMode::kOff ? ContextMode::kNone
                                                                      : options.context);
}

void Runtime::set_memory_context_capture(vm::VirtualMachine::ContextCapture capture) {
  core_->vm.set_memory_context_capture(std::move(capture));
}

MemorySnapshot Runtime::memory_snapshot(const std::vector<Device>& devices, bool with_events) {
  const std::vector<Device>& chosen = devices.empty() ? this->devices() : devices;
  MemorySnapshot snapshot;
  snapshot.devices.resize(chosen.size());
  run_one(core_->vm, [&](InstructionsBuilder& b) {
    for (size_t i = 0; i < chosen.size(); ++i) {
      b.take_memory_snapshot(chosen[i], &snapshot.devices[i], with_events);
    }
  });
  return snapshot;
}

// ---------------------------------------------------------------------------------------------
// Lifetime

void Runtime::shutdown() { core_->vm.shutdown(); }

bool Runtime::is_shut_down() const { return core_->vm.is_shut_down(); }

vm::VirtualMachine& Runtime::vm() { return core_->vm; }

}  // namespace oclvm
