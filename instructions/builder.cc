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
  } catch (...) {
    // Usually the AllocateBlob failed and the blob has no storage. But it may have succeeded and
    // a later step failed (the stream's finish): then the memory goes back through the VM, not
    // through the blob's destructor on this thread, which may not touch the allocator.
    if (blob->storage() != nullptr) {
      try {
        release_through(vm, blob);
      } catch (...) {
        // The first error is the one to report; the release gave the block back regardless.
      }
    }
    throw;
  }
  if (!releaser) releaser = make_vm_releaser(vm);
  try {
    return std::make_shared<TensorStorage>(blob, std::move(releaser));
  } catch (...) {
    // Only std::bad_alloc gets here; give the memory back through the VM.
    builder.release(std::move(blob));
    vm.run(builder.take());
    throw;
  }
}

}  // namespace oclvm
