// adapters/torch/allocator.cc — CLDeviceAllocator: torch's PrivateUse1 allocator on oclvm's VM.
//
// Note [Block registry]
// ~~~~~~~~~~~~~~~~~~~~~
// c10::Allocator::copy_data receives bare addresses, and ATen hands operators storages whose
// DataPtr context we made. For the first, the allocator keeps an ordered map from each live
// block's start address to its TensorStorage (one mutex; insert at allocate, erase in the
// deleter), so an interior address finds its block with one upper_bound. The alternative,
// AddressSpace::resolve to (segment, offset), names a segment, not a BlobObject, and instructions
// take blobs; a caching allocator puts many blocks in one segment, so the registry is what maps an
// address to the blob. Operators use the DataPtr context directly (blob_of) and never the map.
#include "adapters/torch/allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "oclvm/storage/device_manager.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter {
namespace {

thread_local c10::DeviceIndex t_current_device = 0;

using C10Stats = c10::CachingDeviceAllocator::DeviceStats;
using C10StatArray = c10::CachingAllocator::StatArray;

void copy_stat(const Stat& from, c10::CachingAllocator::Stat& to) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

void copy_array(const StatArray& from, C10StatArray& to) {
  for (size_t i = 0; i < kNumStatTypes; ++i) copy_stat(from[i], to[i]);
}

DeviceStats query_stats(c10::DeviceIndex index, uint64_t* limit = nullptr) {
  check_device_index(index);
  return translate_errors([&] {
    DeviceStats stats;
    InstructionsBuilder builder(adapter_vm());
    builder.query_stats(to_oclvm(index), &stats, limit);
    vm::Run(builder.take());
    return stats;
  });
}

c10::DeviceIndex resolve_index(c10::DeviceIndex index) {
  return index < 0 ? current_device() : index;
}

}  // namespace

c10::DeviceIndex current_device() { return t_current_device; }

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

namespace {

// Why there is no device, when finding devices failed (a malformed OCLVM_* variable, no OpenCL
// platform, a driver error); empty otherwise. Written once, with the count.
std::string& discovery_error() {
  static std::string error;
  return error;
}

}  // namespace

c10::DeviceIndex device_count() noexcept {
  // torch asks for the count where it may not throw: a failure means no devices, and its reason
  // is kept for the error of the first use of a device.
  static const c10::DeviceIndex count = [] {
    try {
      return static_cast<c10::DeviceIndex>(DeviceManager::instance().opencl_device_count());
    } catch (const std::exception& e) {
      discovery_error() = e.what();
      return c10::DeviceIndex{0};
    }
  }();
  return count;
}

void check_device_index(c10::DeviceIndex index) {
  const c10::DeviceIndex count = device_count();
  TORCH_CHECK_INDEX(index >= 0 && index < count, "Expected an opencl device index in [0, ",
                    static_cast<int>(count), "), but got ", static_cast<int>(index),
                    discovery_error().empty() ? "" : " (no opencl device: ", discovery_error(),
                    discovery_error().empty() ? "" : ")");
}

vm::VirtualMachine& adapter_vm() { return vm::VirtualMachine::instance(); }

CLDeviceAllocator& CLDeviceAllocator::instance() {
  static CLDeviceAllocator* allocator = new CLDeviceAllocator();  // never destroyed
  return *allocator;
}

c10::DataPtr CLDeviceAllocator::allocate(size_t bytes) {
  return allocate_on(current_device(), bytes, nullptr);
}

c10::DataPtr CLDeviceAllocator::allocate_on(c10::DeviceIndex index, size_t bytes,
                                            const void* contents) {
  if (bytes == 0) {
    return c10::DataPtr(nullptr, nullptr, &delete_handle,
                        c10::Device(c10::DeviceType::PrivateUse1, index));
  }
  return device_data(new_storage(index, bytes, contents, nullptr), index);
}

TensorStorage* CLDeviceAllocator::allocate_in_section(vm::HostSection& section,
                                                      c10::DeviceIndex index, size_t bytes) {
  return new_storage(index, bytes, nullptr, &section);
}

c10::DataPtr CLDeviceAllocator::device_data(TensorStorage* storage, c10::DeviceIndex index) {
  return c10::DataPtr(storage->blob()->storage()->allocation().ptr, storage, &delete_handle,
                      c10::Device(c10::DeviceType::PrivateUse1, index));
}

namespace {

// Set while free_detached() deletes a block on this thread.
thread_local bool t_release_detached = false;

TensorStorage::Releaser detachable_releaser(vm::VirtualMachine& vm) {
  return [&vm](std::shared_ptr<BlobObject> blob) {
    if (!t_release_detached) {
      release_through(vm, std::move(blob));
      return;
    }
    InstructionsBuilder builder(vm);
    builder.release(std::move(blob));
    vm.submit_detached(builder.take());
  };
}

}  // namespace

void CLDeviceAllocator::free_detached(TensorStorage* storage) {
  t_release_detached = true;
  delete_handle(storage);
  t_release_detached = false;
}

TensorStorage* CLDeviceAllocator::new_storage(c10::DeviceIndex index, size_t bytes,
                                              const void* contents, vm::HostSection* section) {
  check_device_index(index);
  // More than one allocation may hold is out of memory to torch users (as on CUDA), not a bad
  // argument; nothing reaches the allocator, so no statistic changes (num_ooms included).
  const uint64_t max_alloc = max_allocation_bytes(index);
  TORCH_CHECK_WITH(OutOfMemoryError, bytes <= max_alloc, "Out of memory on opencl:",
                   static_cast<int>(index), ": tried to allocate ", bytes,
                   " bytes, more than the device's largest single allocation (", max_alloc,
                   " bytes)");
  TensorStorage* storage = translate_errors([&] {
    vm::VirtualMachine& vm = adapter_vm();
    InstructionsBuilder builder(vm);
    vm::Stream& stream = current_vm_stream(index);
    std::shared_ptr<BlobObject> blob = builder.allocate_blob(stream, bytes);
    // The block's first contents in the same list: one sync point for allocation and upload.
    if (contents != nullptr) builder.copy_host_to_device(contents, blob, 0, bytes, &stream);
    try {
      if (section != nullptr) {
        section->run(builder.take());
      } else {
        vm.run(builder.take());
      }
    } catch (...) {
      // Usually the AllocateBlob failed and the blob has no storage. But it may have succeeded
      // and the stream's finish failed: then the block goes back through the VM (as in
      // make_tensor_storage), not through the blob's destructor ("destroyed without being
      // released", seen under injected finish faults). In a section the release runs detached,
      // when the section ends.
      if (blob->storage() != nullptr) {
        try {
          release_through(vm, blob);
        } catch (...) {
          // The first error is the one to report; the release gave the block back regardless.
        }
      }
      throw;
    }
    try {
      // Owns the release from here on. A block made in a section is released detached while
      // free_detached() frees it (Note [Results written in device memory]).
      return new TensorStorage(blob, section != nullptr ? detachable_releaser(vm)
                                                        : make_vm_releaser(vm));
    } catch (...) {
      // Only std::bad_alloc gets here: give the block back through the VM before rethrowing.
      release_through(vm, std::move(blob));
      throw;
    }
  });
  MutexLock lock(mutex_);
  blocks_[storage->blob()->storage()->device_address()] = storage;
  return storage;
}

void CLDeviceAllocator::delete_handle(void* context) {
  if (context == nullptr) return;  // an empty DataPtr
  auto* storage = static_cast<TensorStorage*>(context);
  const uintptr_t address = storage->blob()->storage()->device_address();
  {
    CLDeviceAllocator& self = instance();
    MutexLock lock(self.mutex_);
    self.blocks_.erase(address);
  }
  delete storage;  // ~TensorStorage runs ReleaseTensor synchronously (make_vm_releaser)
}

BlobRef CLDeviceAllocator::find(const void* address) const {
  const auto key = reinterpret_cast<uintptr_t>(address);
  MutexLock lock(mutex_);
  auto it = blocks_.upper_bound(key);
  TORCH_CHECK(it != blocks_.begin(), "Expected an address inside a live opencl block, but got ",
              address);
  --it;
  const std::shared_ptr<BlobObject>& blob = it->second->blob();
  const size_t offset = key - it->first;
  TORCH_CHECK(offset < blob->storage()->size(),
              "Expected an address inside a live opencl block, but got ", address);
  return BlobRef{blob, offset};
}

size_t CLDeviceAllocator::live_blocks() const {
  MutexLock lock(mutex_);
  return blocks_.size();
}

void CLDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
  const BlobRef to = find(dest);
  const BlobRef from = find(src);
  translate_errors([&] {
    InstructionsBuilder builder(adapter_vm());
    vm::Stream& stream = current_vm_stream(static_cast<c10::DeviceIndex>(to.blob->device().index));
    builder.copy(from.blob, from.offset, to.blob, to.offset, count, &stream);
    vm::Run(builder.take());
  });
}

void CLDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr) return;
  const BlobRef block = blob_of_data(ptr);
  vm::Stream& user = vm_stream(stream);
  if (user.id() == vm::producer_stream(*block.blob)) return;
  translate_errors([&] {
    InstructionsBuilder builder(adapter_vm());
    builder.record_blob_use(user, block.blob);
    vm::Run(builder.take());
  });
}

void CLDeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id: no private pools*/) {
  translate_errors([&] {
    InstructionsBuilder builder(adapter_vm());
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) builder.empty_cache(to_oclvm(i));
    vm::Run(builder.take());
  });
}

C10Stats CLDeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  const DeviceStats stats = query_stats(resolve_index(device));
  C10Stats out;
  copy_array(stats.allocation, out.allocation);
  copy_array(stats.segment, out.segment);
  copy_array(stats.active, out.active);
  copy_array(stats.inactive_split, out.inactive_split);
  copy_array(stats.allocated_bytes, out.allocated_bytes);
  copy_array(stats.reserved_bytes, out.reserved_bytes);
  copy_array(stats.active_bytes, out.active_bytes);
  copy_array(stats.inactive_split_bytes, out.inactive_split_bytes);
  copy_array(stats.requested_bytes, out.requested_bytes);
  out.num_alloc_retries = stats.num_alloc_retries;
  out.num_ooms = stats.num_ooms;
  out.num_sync_all_streams = stats.num_sync_all_streams;
  out.num_device_alloc = stats.num_device_alloc;
  out.num_device_free = stats.num_device_free;
  copy_stat(stats.oversize_allocations[0], out.oversize_allocations);
  copy_stat(stats.oversize_segments[0], out.oversize_segments);
  out.max_split_size = stats.max_split_size;
  return out;  // no private pools: reserved_bytes_by_private_pools stays empty
}

void CLDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  const c10::DeviceIndex index = resolve_index(device);
  check_device_index(index);
  translate_errors([&] {
    InstructionsBuilder builder(adapter_vm());
    builder.reset_stats(to_oclvm(index), ResetKind::kAccumulated);
    vm::Run(builder.take());
  });
}

void CLDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  const c10::DeviceIndex index = resolve_index(device);
  check_device_index(index);
  translate_errors([&] {
    InstructionsBuilder builder(adapter_vm());
    builder.reset_stats(to_oclvm(index), ResetKind::kPeak);
    vm::Run(builder.take());
  });
}

uint64_t memory_limit(c10::DeviceIndex index) {
  uint64_t limit = 0;
  query_stats(index, &limit);
  return limit;
}

void set_memory_limit(c10::DeviceIndex index, uint64_t bytes) {
  check_device_index(index);
  translate_errors([&] {
    InstructionsBuilder builder(adapter_vm());
    builder.set_memory_limit(to_oclvm(index), bytes);
    vm::Run(builder.take());
  });
}

const DeviceProperties& device_properties(c10::DeviceIndex index) {
  check_device_index(index);
  return translate_errors([&]() -> const DeviceProperties& {
    return adapter_vm().devices().backend(to_oclvm(index)).properties();
  });
}

namespace {

// Per device: bit 0 zero_copy, bit 1 host_addressable. One decision per device, made on first use.
// For comparison, OCLVM_ZERO_COPY=0 keeps the copies and OCLVM_ZERO_COPY=map the maps (no host
// sections).
uint8_t host_access_of(c10::DeviceIndex index) {
  static const std::vector<uint8_t>* const decided = [] {
    const char* setting = std::getenv("OCLVM_ZERO_COPY");
    const std::string_view value = setting == nullptr ? "" : setting;
    const bool allowed = value != "0";
    const bool sections = allowed && value != "map";
    auto* each = new std::vector<uint8_t>();  // never destroyed: read by operators until exit
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      const DeviceProperties& properties = device_properties(i);
      const bool zero_copy = allowed && properties.host_unified_memory;
      const bool addressable = zero_copy && sections && properties.host_addressable;
      each->push_back(static_cast<uint8_t>(zero_copy) | static_cast<uint8_t>(addressable << 1));
    }
    return each;
  }();
  return index >= 0 && static_cast<size_t>(index) < decided->size() ? (*decided)[index] : 0;
}

}  // namespace

bool zero_copy(c10::DeviceIndex index) { return (host_access_of(index) & 1) != 0; }

bool host_addressable(c10::DeviceIndex index) { return (host_access_of(index) & 2) != 0; }

uint64_t global_memory_bytes(c10::DeviceIndex index) {
  return device_properties(index).global_mem_bytes;
}

uint64_t max_allocation_bytes(c10::DeviceIndex index) {
  check_device_index(index);
  // Device properties never change: read them once (allocate asks on every call).
  static const std::vector<uint64_t> per_device = [] {
    return translate_errors([] {
      std::vector<uint64_t> bytes;
      const DeviceManager& devices = adapter_vm().devices();
      for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
        bytes.push_back(devices.backend(to_oclvm(d)).properties().max_alloc_bytes);
      }
      return bytes;
    });
  }();
  return per_device[static_cast<size_t>(index)];
}

std::pair<size_t, size_t> CLDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  const c10::DeviceIndex index = resolve_index(device);
  uint64_t limit = 0;
  const DeviceStats stats = query_stats(index, &limit);
  const uint64_t total = limit != 0 ? limit : global_memory_bytes(index);
  const auto reserved = static_cast<uint64_t>(
      stats.reserved_bytes[static_cast<size_t>(StatType::kAggregate)].current);
  const uint64_t free = reserved < total ? total - reserved : 0;
  return {static_cast<size_t>(free), static_cast<size_t>(total)};
}

BlobRef blob_of(const c10::Storage& storage, size_t byte_offset) {
  const c10::DataPtr& data = storage.data_ptr();
  if (data.get() == nullptr) return BlobRef{nullptr, byte_offset};
  BlobRef ref = blob_of_data(data);
  ref.offset += byte_offset;
  return ref;
}

BlobRef blob_of_data(const c10::DataPtr& data) {
  const TensorStorage& owner = CLDeviceAllocator::owner(data);
  // The DataPtr may point past the block start only if someone moved it; blocks here never do.
  const size_t base = static_cast<size_t>(reinterpret_cast<uintptr_t>(data.get()) -
                                          owner.blob()->storage()->device_address());
  return BlobRef{owner.blob(), base};
}

const TensorStorage& CLDeviceAllocator::owner(const c10::DataPtr& data) {
  TORCH_CHECK(data.get_deleter() == &delete_handle && data.get_context() != nullptr,
              "Expected an opencl storage made by oclvm's allocator, but got one with another "
              "deleter");
  return *static_cast<const TensorStorage*>(data.get_context());
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &CLDeviceAllocator::instance());

}  // namespace oclvm::torch_adapter
