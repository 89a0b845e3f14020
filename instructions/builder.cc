// instructions/builder.cc — InstructionsBuilder: argument checks, stream choice, list building;
// the VM releaser and make_tensor_storage.
//
// Every public builder method checks all of its arguments before it creates anything, so a throw
// leaves the list exactly as it was. Checks read only what is immutable in a BlobObject (device,
// dtype, shape, storage offset, required_bytes): its storage may be being attached by a worker on
// another thread at the same moment.
#include "oclvm/instructions/builder.h"

#include <utility>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/hex.h"
#include "oclvm/vm/dependence.h"

namespace oclvm {
namespace {

std::string range_text(size_t offset, size_t bytes) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
         std::to_string(bytes) + ")";
}

void check_not_null(const std::shared_ptr<BlobObject>& blob, const char* role) {
  if (blob == nullptr) {
    throw InvalidArgument(std::string("Expected a ") + role + " blob, but got a null pointer");
  }
}

// [offset, offset + bytes) must lie within what the blob may address (blob_capacity_bytes).
void check_blob_range(const BlobObject& blob, size_t offset, size_t bytes, const char* role) {
  const size_t capacity = blob_capacity_bytes(blob);
  size_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > capacity) {
    throw InvalidArgument(std::string("Expected a ") + role + " range within the " +
                          std::to_string(capacity) + " bytes of " + blob_label(blob) +
                          ", but got " + range_text(offset, bytes));
  }
}

void check_stream_device(const vm::Stream& stream, Device device, const char* whose) {
  if (stream.device() != device) {
    throw InvalidArgument("Expected a stream on " + device.str() + " (" + whose +
                          "), but got " + stream.name());
  }
}

// The largest single allocation the device allows (the allocator would refuse more).
void check_allocation_size(const vm::VirtualMachine& vm, Device device, size_t bytes) {
  const uint64_t max_bytes = vm.devices().backend(device).properties().max_alloc_bytes;
  if (bytes > max_bytes) {
    throw InvalidArgument("Expected a blob of at most " + std::to_string(max_bytes) +
                          " bytes (the largest allocation on " + device.str() + "), but got " +
                          std::to_string(bytes) + " bytes");
  }
}

// Throws unless `stream` is one of this builder's VM (a stream of another VM would be dispatched
// by that VM's worker with this VM's bookkeeping).
void check_own_stream(const vm::VirtualMachine& vm, const vm::Stream& stream) {
  if (vm.find_stream(stream.id()) != &stream) {
    throw InvalidArgument("Expected a stream of this builder's VM, but got " + stream.name() +
                          " of another VM");
  }
}

}  // namespace

InstructionsBuilder::InstructionsBuilder(vm::VirtualMachine& vm) : vm_(vm) {}

vm::Stream& InstructionsBuilder::stream(Device device) const { return vm_.stream(device); }

// ---------------------------------------------------------------------------------------------
// Blobs

std::shared_ptr<BlobObject> InstructionsBuilder::allocate_blob(vm::Stream& stream, size_t bytes) {
  check_own_stream(vm_, stream);
  if (bytes == 0) {
    throw InvalidArgument(
        "Expected a byte blob of at least 1 byte, but got 0 bytes (a typed blob with no elements "
        "is the empty blob)");
  }
  check_allocation_size(vm_, stream.device(), bytes);
  auto blob = std::allocate_shared<BlobObject>(pool::PoolAllocator<BlobObject>(), stream.device(), bytes);
  vm::set_producer_stream(*blob, stream.id());
  list_.push_back(std::make_unique<AllocateBlob>(stream, blob, vm_.capture_memory_context(false)));
  return blob;
}

std::shared_ptr<BlobObject> InstructionsBuilder::allocate_blob(vm::Stream& stream,
                                                               const Dims& shape,
                                                               DType dtype) {
  check_own_stream(vm_, stream);
  // The constructor checks the shape (InvalidArgument on negative sizes and overflow).
  auto blob =
      std::allocate_shared<BlobObject>(pool::PoolAllocator<BlobObject>(), stream.device(), shape, dtype);
  check_allocation_size(vm_, stream.device(), blob->required_bytes());
  vm::set_producer_stream(*blob, stream.id());
  list_.push_back(std::make_unique<AllocateBlob>(stream, blob, vm_.capture_memory_context(false)));
  return blob;
}

void InstructionsBuilder::release(std::shared_ptr<BlobObject> blob) {
  check_not_null(blob, "released");
  vm::Stream* producer = vm_.find_stream(vm::producer_stream(*blob));
  if (producer == nullptr) {
    producer = &vm_.stream(blob->device());
  } else if (producer->device() != blob->device()) {
    throw InvalidArgument("Expected a blob produced by a stream of this VM on " +
                          blob->device().str() + ", but got one whose producer stream is " +
                          producer->name());
  }
  list_.push_back(std::make_unique<ReleaseTensor>(*producer, std::move(blob),
                                                  vm_.capture_memory_context(true)));
}

// ---------------------------------------------------------------------------------------------
// Copies

void InstructionsBuilder::copy_host_to_device(const void* src, std::shared_ptr<BlobObject> dst,
                                              size_t dst_offset, size_t bytes,
                                              vm::Stream* stream) {
  check_not_null(dst, "copy destination");
  if (src == nullptr && bytes > 0) {
    throw InvalidArgument("Expected a host source pointer, but got a null pointer");
  }
  check_blob_range(*dst, dst_offset, bytes, "copy destination");
  if (stream != nullptr) {
    check_own_stream(vm_, *stream);
    check_stream_device(*stream, dst->device(), "the destination's device");
  }
  vm::Stream& s = stream != nullptr ? *stream : vm_.stream(dst->device());
  list_.push_back(CopyBlob::host_to_device(s, src, std::move(dst), dst_offset, bytes));
}

void InstructionsBuilder::copy_device_to_host(std::shared_ptr<BlobObject> src, size_t src_offset,
                                              void* dst, size_t bytes, vm::Stream* stream) {
  check_not_null(src, "copy source");
  if (dst == nullptr && bytes > 0) {
    throw InvalidArgument("Expected a host destination pointer, but got a null pointer");
  }
  check_blob_range(*src, src_offset, bytes, "copy source");
  if (stream != nullptr) {
    check_own_stream(vm_, *stream);
    check_stream_device(*stream, src->device(), "the source's device");
  }
  vm::Stream& s = stream != nullptr ? *stream : vm_.stream(src->device());
  list_.push_back(CopyBlob::device_to_host(s, std::move(src), src_offset, dst, bytes));
}

void InstructionsBuilder::copy(std::shared_ptr<BlobObject> src, size_t src_offset,
                               std::shared_ptr<BlobObject> dst, size_t dst_offset, size_t bytes,
                               vm::Stream* stream) {
  check_not_null(src, "copy source");
  check_not_null(dst, "copy destination");
  check_blob_range(*src, src_offset, bytes, "copy source");
  check_blob_range(*dst, dst_offset, bytes, "copy destination");
  if (src == dst && bytes > 0 && src_offset < dst_offset + bytes &&
      dst_offset < src_offset + bytes) {
    throw InvalidArgument("Expected non-overlapping ranges for a copy within one blob, but got " +
                          range_text(src_offset, bytes) + " -> " + range_text(dst_offset, bytes) +
                          " of " + blob_label(*src));
  }
  // Across devices the copy runs on the destination's worker (it stages through the host).
  if (stream != nullptr) {
    check_own_stream(vm_, *stream);
    check_stream_device(*stream, dst->device(),
                        src->device() == dst->device() ? "the blobs' device"
                                                       : "the destination's device");
  }
  vm::Stream& s = stream != nullptr ? *stream : vm_.stream(dst->device());
  if (src->device() != dst->device()) vm_.stream(src->device());  // the source device must exist
  list_.push_back(
      CopyBlob::blob_to_blob(s, std::move(src), src_offset, std::move(dst), dst_offset, bytes));
}

// ---------------------------------------------------------------------------------------------
// Fill, sync, host access

void InstructionsBuilder::fill(std::shared_ptr<BlobObject> blob, size_t offset, size_t bytes,
                               uint64_t pattern, size_t pattern_size, vm::Stream* stream) {
  check_not_null(blob, "fill target");
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8) {
    throw InvalidArgument("Expected a fill pattern of 1, 2, 4 or 8 bytes, but got " +
                          std::to_string(pattern_size) + " bytes");
  }
  if (pattern_size < 8 && (pattern >> (8 * pattern_size)) != 0) {
    throw InvalidArgument("Expected a " + std::to_string(pattern_size) +
                          "-byte fill pattern, but got " + hex(pattern) + ", which is wider");
  }
  if (offset % pattern_size != 0 || bytes % pattern_size != 0) {
    throw InvalidArgument("Expected a fill offset and size that are multiples of the " +
                          std::to_string(pattern_size) + "-byte pattern, but got " +
                          range_text(offset, bytes));
  }
  check_blob_range(*blob, offset, bytes, "fill target");
  if (stream != nullptr) {
    check_own_stream(vm_, *stream);
    check_stream_device(*stream, blob->device(), "the blob's device");
  }
  vm::Stream& s = stream != nullptr ? *stream : vm_.stream(blob->device());
  list_.push_back(
      std::make_unique<FillBlob>(s, std::move(blob), offset, bytes, pattern, pattern_size));
}

void InstructionsBuilder::soft_sync(vm::Stream& from, vm::Stream& to) {
  check_own_stream(vm_, from);
  check_own_stream(vm_, to);
  if (from.device() != to.device()) {
    throw InvalidArgument(
        "Expected two streams of one device for a soft sync (the VM orders devices itself), but "
        "got " + from.name() + " and " + to.name());
  }
  if (&from == &to) {
    throw InvalidArgument("Expected two different streams for a soft sync, but got " +
                          from.name() + " twice");
  }
  list_.push_back(std::make_unique<SoftSyncStream>(from, to));
}

void InstructionsBuilder::barrier(vm::Stream& stream, std::function<void()> callback) {
  check_own_stream(vm_, stream);
  if (!callback) {
    throw InvalidArgument("Expected a barrier callback, but got an empty function");
  }
  list_.push_back(std::make_unique<Barrier>(stream, std::move(callback)));
}

void InstructionsBuilder::access(std::shared_ptr<BlobObject> blob, size_t offset, size_t bytes,
                                 HostAccess mode,
                                 std::function<void(void* host, size_t bytes)> callback,
                                 vm::Stream* stream) {
  check_not_null(blob, "mapped");
  if (!callback) {
    throw InvalidArgument("Expected an access callback, but got an empty function");
  }
  check_blob_range(*blob, offset, bytes, "mapped blob");
  if (stream != nullptr) {
    check_own_stream(vm_, *stream);
    check_stream_device(*stream, blob->device(), "the blob's device");
  }
  vm::Stream& s = stream != nullptr ? *stream : vm_.stream(blob->device());
  list_.push_back(std::make_unique<AccessBlobByCallback>(s, std::move(blob), offset, bytes, mode,
                                                         std::move(callback)));
}

std::shared_ptr<HostMapping> InstructionsBuilder::map(std::shared_ptr<BlobObject> blob,
                                                      size_t offset, size_t bytes,
                                                      HostAccess mode, vm::Stream* stream) {
  check_not_null(blob, "mapped");
  check_blob_range(*blob, offset, bytes, "mapped blob");
  if (stream != nullptr) {
    check_own_stream(vm_, *stream);
    check_stream_device(*stream, blob->device(), "the blob's device");
  }
  vm::Stream& s = stream != nullptr ? *stream : vm_.stream(blob->device());
  auto mapping = std::make_shared<HostMapping>(std::move(blob), offset, bytes, mode);
  list_.push_back(std::make_unique<MapBlob>(s, mapping));
  return mapping;
}

void InstructionsBuilder::unmap(std::shared_ptr<HostMapping> mapping, vm::Stream* stream) {
  if (mapping == nullptr) {
    throw InvalidArgument("Expected a mapping to unmap, but got a null pointer");
  }
  if (stream != nullptr) {
    check_own_stream(vm_, *stream);
    check_stream_device(*stream, mapping->blob()->device(), "the blob's device");
  }
  vm::Stream& s = stream != nullptr ? *stream : vm_.stream(mapping->blob()->device());
  list_.push_back(std::make_unique<UnmapBlob>(s, std::move(mapping)));
}

// ---------------------------------------------------------------------------------------------
// Allocator control

void InstructionsBuilder::empty_cache(Device device) {
  list_.push_back(std::make_unique<EmptyCache>(vm_.stream(device)));
}

void InstructionsBuilder::reset_stats(Device device, ResetKind kind) {
  list_.push_back(std::make_unique<ResetStats>(vm_.stream(device), kind));
}

void InstructionsBuilder::query_stats(Device device, DeviceStats* out, uint64_t* limit_out) {
  if (out == nullptr) {
    throw InvalidArgument("Expected a DeviceStats to write the statistics to, but got a null "
                          "pointer");
  }
  list_.push_back(std::make_unique<QueryStats>(vm_.stream(device), out, limit_out));
}

void InstructionsBuilder::set_memory_limit(Device device, uint64_t bytes) {
  list_.push_back(std::make_unique<SetMemoryLimit>(vm_.stream(device), bytes));
}

void InstructionsBuilder::configure_memory_history(Device device, const HistoryOptions& options) {
  if (options.max_entries == 0) {
    throw InvalidArgument("Expected max_entries of at least 1 for the memory history, but got 0");
  }
  list_.push_back(std::make_unique<ConfigureMemoryHistory>(vm_.stream(device), options));
}

void InstructionsBuilder::take_memory_snapshot(Device device, DeviceMemorySnapshot* out,
                                               bool with_events) {
  if (out == nullptr) {
    throw InvalidArgument("Expected a DeviceMemorySnapshot to write the snapshot to, but got a "
                          "null pointer");
  }
  list_.push_back(std::make_unique<TakeMemorySnapshot>(vm_.stream(device), out, with_events));
}

// ---------------------------------------------------------------------------------------------
// Events and stream uses

void InstructionsBuilder::record_event(vm::Stream& stream, std::shared_ptr<StreamEvent> event) {
  check_own_stream(vm_, stream);
  if (event == nullptr) throw InvalidArgument("Expected an event to record, but got a null one");
  list_.push_back(std::make_unique<RecordEvent>(stream, std::move(event)));
}

void InstructionsBuilder::wait_event(vm::Stream& stream, std::shared_ptr<StreamEvent> event) {
  check_own_stream(vm_, stream);
  if (event == nullptr) throw InvalidArgument("Expected an event to wait for, but got a null one");
  list_.push_back(std::make_unique<WaitEvent>(stream, std::move(event)));
}

void InstructionsBuilder::record_blob_use(vm::Stream& stream, std::shared_ptr<BlobObject> blob) {
  check_own_stream(vm_, stream);
  check_not_null(blob, "used");
  check_stream_device(stream, blob->device(), "the blob's device");
  list_.push_back(std::make_unique<RecordBlobUse>(stream, std::move(blob)));
}

namespace {

std::string param_text(const Kernel& kernel, size_t index) {
  const KernelParam& param = kernel.params()[index];
  std::string text = "parameter " + std::to_string(index);
  if (!param.name.empty()) text += " '" + param.name + "'";
  if (!kernel.params_known()) return text;
  const char* space = param.space == KernelParam::Space::kGlobal     ? "__global "
                      : param.space == KernelParam::Space::kConstant ? "__constant "
                      : param.space == KernelParam::Space::kLocal    ? "__local "
                                                                     : "";
  return text + " (" + space + param.type_name + ")";
}

const char* arg_kind_text(const LaunchArg& arg) {
  switch (arg.kind) {
    case LaunchArg::Kind::kBlob: return "a blob";
    case LaunchArg::Kind::kScalar: return scalar_type_name(arg.scalar);
    case LaunchArg::Kind::kLocal: return "a local-memory size";
  }
  return "?";
}

// Whether `arg` fits the parameters from `index` on (Note [Blob arguments]).
bool arg_fits(const Kernel& kernel, size_t index, const LaunchArg& arg) {
  const KernelParam& param = kernel.params()[index];
  switch (arg.kind) {
    case LaunchArg::Kind::kBlob: {
      const KernelParam& offset = kernel.params()[index + 1];
      return (param.space == KernelParam::Space::kGlobal ||
              param.space == KernelParam::Space::kConstant) &&
             offset.is_scalar && offset.scalar == ScalarType::kULong;
    }
    case LaunchArg::Kind::kScalar:
      return param.is_scalar && param.scalar == arg.scalar;
    case LaunchArg::Kind::kLocal:
      return param.space == KernelParam::Space::kLocal && arg.local_bytes > 0;
  }
  return false;
}

// Matches `args` to the kernel's parameters in order; throws InvalidArgument naming the first
// mismatch. The messages are made only on failure: launches are checked at instruction rate.
void check_kernel_args(const Kernel& kernel, const LaunchArg* args, size_t num_args) {
  const auto which = [&] { return "kernel '" + kernel.source().name + "'"; };
  const size_t count = kernel.params().size();
  size_t next = 0;
  for (size_t i = 0; i < num_args; ++i) {
    const LaunchArg& arg = args[i];
    const size_t needs = arg.kind == LaunchArg::Kind::kBlob ? 2 : 1;
    if (next + needs > count) {
      throw InvalidArgument("Expected at most " + std::to_string(count) + " parameters' worth of "
                            "arguments for " + which() + ", but argument " + std::to_string(i) +
                            " (" + arg_kind_text(arg) + ") has no parameter left" +
                            (needs == 2 ? " (a blob fills a pointer and a ulong offset)" : ""));
    }
    if (arg.kind == LaunchArg::Kind::kLocal && arg.local_bytes == 0) {
      throw InvalidArgument("Expected a local-memory size above 0 bytes for argument " +
                            std::to_string(i) + " of " + which() + ", but got 0");
    }
    if (kernel.params_known() && !arg_fits(kernel, next, arg)) {
      std::string wanted = param_text(kernel, next);
      if (arg.kind == LaunchArg::Kind::kBlob) {
        wanted = "a pointer and a ulong offset at " + wanted + " and " +
                 param_text(kernel, next + 1) + " (OCLVM_BLOB)";
      }
      throw InvalidArgument("Expected argument " + std::to_string(i) + " of " + which() +
                            " to fit " + wanted + ", but got " + arg_kind_text(arg));
    }
    next += needs;
  }
  if (next != count) {
    throw InvalidArgument("Expected arguments for all " + std::to_string(count) +
                          " parameters of " + which() + ", but got " +
                          std::to_string(num_args) + " arguments filling " +
                          std::to_string(next));
  }
}

void check_launch_range(const LaunchRange& range) {
  if (range.dims < 1 || range.dims > 3) {
    throw InvalidArgument("Expected 1 to 3 launch dimensions, but got " +
                          std::to_string(range.dims));
  }
  bool driver_chooses = true;
  for (uint32_t d = 0; d < range.dims; ++d) driver_chooses = driver_chooses && range.local[d] == 0;
  if (driver_chooses) return;
  for (uint32_t d = 0; d < range.dims; ++d) {
    if (range.local[d] == 0 || range.global[d] % range.local[d] != 0) {
      throw InvalidArgument("Expected a global size divisible by a nonzero local size in every "
                            "dimension, but got global " + std::to_string(range.global[d]) +
                            " and local " + std::to_string(range.local[d]) + " in dimension " +
                            std::to_string(d));
    }
  }
}

}  // namespace

std::shared_ptr<const Kernel> InstructionsBuilder::kernel(Device device,
                                                          const KernelSource& source) const {
  if (!vm_.devices().has(device)) vm_.devices().backend(device);  // throws, naming the devices
  if (source.name.empty()) {
    throw InvalidArgument("Expected the name of a kernel in the program, but got an empty name");
  }
  std::shared_ptr<const Kernel> kernel = vm_.devices().backend(device).kernel(source);
  vm_.after_kernel_build();  // Note [Exit after the driver's compiler ran]
  return kernel;
}

void InstructionsBuilder::launch(vm::Stream& stream, std::shared_ptr<const Kernel> kernel,
                                 const LaunchRange& range, const LaunchArg* args, size_t count) {
  check_own_stream(vm_, stream);
  if (kernel == nullptr) {
    throw InvalidArgument("Expected a kernel to launch, but got a null pointer");
  }
  if (kernel->device() != stream.device()) {
    throw InvalidArgument("Expected a kernel compiled for " + stream.device().str() +
                          " (the stream's device), but got one for " + kernel->device().str());
  }
  check_launch_range(range);
  check_kernel_args(*kernel, args, count);
  if (count > 255) {
    throw InvalidArgument("Expected at most 255 kernel arguments, but got " + std::to_string(count));
  }
  for (size_t i = 0; i < count; ++i) {
    const LaunchArg& arg = args[i];
    if (arg.kind != LaunchArg::Kind::kBlob) continue;
    check_not_null(arg.blob, "kernel argument");
    check_stream_device(stream, arg.blob->device(), "the kernel argument's device");
    check_blob_range(*arg.blob, arg.offset, 0, "kernel argument");
  }
  list_.push_back(std::make_unique<LaunchKernel>(stream, std::move(kernel), range, args, count));
}

void InstructionsBuilder::launch(vm::Stream& stream, const KernelSource& source,
                                 const LaunchRange& range, const std::vector<LaunchArg>& args) {
  check_own_stream(vm_, stream);
  launch(stream, kernel(stream.device(), source), range, args.data(), args.size());
}

void InstructionsBuilder::native(vm::Stream& stream, std::string label,
                                 const std::vector<NativeArg>& args, NativeBody body) {
  check_own_stream(vm_, stream);
  if (stream.device().type != DeviceType::kOpenCL) {
    throw InvalidArgument("Expected a stream of an OpenCL device for native commands, but got " +
                          stream.name());
  }
  if (!body) throw InvalidArgument("Expected a body for native call '" + label + "', but got none");
  if (args.size() > 255) {
    throw InvalidArgument("Expected at most 255 native call arguments, but got " +
                          std::to_string(args.size()));
  }
  for (const NativeArg& arg : args) {
    check_not_null(arg.blob, "native call argument");
    check_stream_device(stream, arg.blob->device(), "the native call argument's device");
    check_blob_range(*arg.blob, arg.offset, arg.bytes, "native call argument");
  }
  list_.push_back(std::make_unique<NativeCall>(stream, std::move(label), args, std::move(body)));
}

vm::InstructionList InstructionsBuilder::take() { return std::move(list_); }

// ---------------------------------------------------------------------------------------------
// Front-end ownership

void release_through(vm::VirtualMachine& vm, std::shared_ptr<BlobObject> blob) {
  InstructionsBuilder builder(vm);
  builder.release(std::move(blob));
  if (vm::DeviceWorker::holds_execution_right_on_this_thread()) {
    // The last owner died inside a dispatch (a callback held the tensor): waiting here could
    // wait for this very thread, so the release goes out detached (vm/virtual_machine.h).
    vm.submit_detached(builder.take());
    return;
  }
  // After shutdown the VM runs a ReleaseTensor on this thread (runs_after_shutdown).
  vm.run(builder.take());
}

void release_after_failure(vm::VirtualMachine& vm,
                           const std::shared_ptr<BlobObject>& blob) noexcept {
  // Usually the AllocateBlob itself failed and the blob has no storage.
  if (blob->storage() == nullptr) return;
  try {
    release_through(vm, blob);
  } catch (...) {
    // The caller reports the first error; the release gave the block back regardless.
  }
}

TensorStorage::Releaser make_vm_releaser(vm::VirtualMachine& vm) {
  return [&vm](std::shared_ptr<BlobObject> blob) { release_through(vm, std::move(blob)); };
}

std::shared_ptr<TensorStorage> make_tensor_storage(vm::VirtualMachine& vm, Device device,
                                                   const Dims& shape, DType dtype,
                                                   TensorStorage::Releaser releaser) {
  InstructionsBuilder builder(vm);
  std::shared_ptr<BlobObject> blob =
      builder.allocate_blob(builder.stream(device), shape, dtype);
  try {
    vm.run(builder.take());
    if (!releaser) releaser = make_vm_releaser(vm);
    return std::make_shared<TensorStorage>(blob, std::move(releaser));
  } catch (...) {
    release_after_failure(vm, blob);
    throw;
  }
}

}  // namespace oclvm
