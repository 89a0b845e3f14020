// adapters/torch/allocator.cc — CLDeviceAllocator: torch's PrivateUse1 allocator on the adapter's
// Runtime (registered in registration.cc).
//
// Note [Block registry]
// ~~~~~~~~~~~~~~~~~~~~~
// c10::Allocator::copy_data receives bare addresses, and ATen hands operators storages whose
// DataPtr context we made. For the first, the allocator keeps its live blocks in an intrusive
// tree ordered by start address (one mutex; linked at allocate, unlinked in the deleter; the
// link lives in the block, so the registry allocates nothing), and an interior address finds its
// block with one upper_bound. The alternative,
// Runtime::find to (device, segment, offset), names a segment, not a BlobObject, and instructions
// take blobs; a caching allocator puts many blocks in one segment, so the registry is what maps an
// address to the blob. Operators use the DataPtr context directly (blob_of) and never the tree.
#include "adapters/torch/allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <iterator>
#include <string_view>
#include <utility>

#include "adapters/torch/streams.h"
#include "adapters/torch/trace_recorder.h"
#include "oclvm/storage/hot_thread_local.h"
#include "oclvm/storage/stats.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter {
namespace {

// The row of `table` named `name`; nullptr when it has none.
template <typename Row, size_t N>
constexpr const Row* find_field(const Row (&table)[N], std::string_view name) {
  for (const Row& row : table) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

constexpr bool every_statistic_has_a_c10_field() {
  for (const StatArrayField& field : kStatArrayFields) {
    if (!find_field(kC10StatArrayFields, field.name) && !find_field(kC10StatFields, field.name)) {
      return false;
    }
  }
  for (const StatCounterField& field : kStatCounterFields) {
    if (!find_field(kC10CounterFields, field.name)) return false;
  }
  return true;
}
static_assert(every_statistic_has_a_c10_field(),
              "a statistic of storage/stats.h has no row in allocator.h's kC10*Fields: add it");

void copy_stat(const Stat& from, c10::CachingAllocator::Stat& to) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

// Into the c10 field named `name`: every pool, or the aggregate where c10 keeps one Stat.
void copy_array(const StatArray& from, std::string_view name, C10DeviceStats& to) {
  if (const auto* field = find_field(kC10StatArrayFields, name)) {
    for (size_t i = 0; i < kNumStatTypes; ++i) copy_stat(from[i], (to.*field->member)[i]);
  } else {
    copy_stat(from.aggregate(), to.*find_field(kC10StatFields, name)->member);
  }
}

}  // namespace

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

CLDeviceAllocator::Block* CLDeviceAllocator::allocate_in_section(vm::HostSection& section,
                                                                 c10::DeviceIndex index,
                                                                 size_t bytes) {
  return new_storage(index, bytes, nullptr, &section);
}

c10::DataPtr CLDeviceAllocator::device_data(Block* block, c10::DeviceIndex index) {
  return c10::DataPtr(block->blob()->storage()->allocation().ptr, block, &delete_handle,
                      c10::Device(c10::DeviceType::PrivateUse1, index));
}

namespace {

// Set while free_detached() deletes a block on this thread.
OCLVM_HOT_TLS thread_local bool t_release_detached = false;

// torch.profiler's memory events (profile_memory=True): every block handed out (+bytes) and
// given back (-bytes), with the device's totals after it. Inside a host section the device's
// worker is held, so the totals, which take a statistics instruction, read 0 there.
void report_to_profiler(void* ptr, int64_t bytes, c10::DeviceIndex index, bool totals) {
  if (!c10::memoryProfilingEnabled()) return;
  DeviceStats stats;
  if (totals) {
    try {
      stats = runtime().stats(to_oclvm(index));
    } catch (const std::exception&) {
      // The block is made or gone regardless: the profiler gets 0 totals rather than an
      // allocation that fails after the fact (or a deleter that throws).
    }
  }
  c10::reportMemoryUsageToProfiler(
      ptr, bytes, static_cast<size_t>(stats.allocated_bytes.aggregate().current),
      static_cast<size_t>(stats.reserved_bytes.aggregate().current),
      c10::Device(c10::DeviceType::PrivateUse1, index));
}

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

void CLDeviceAllocator::free_detached(Block* block) {
  t_release_detached = true;
  delete_handle(block);
  t_release_detached = false;
}

CLDeviceAllocator::Block* CLDeviceAllocator::new_storage(c10::DeviceIndex index, size_t bytes,
                                                         const void* contents,
                                                         vm::HostSection* section) {
  // More than one allocation may hold is out of memory to torch users (as on CUDA), not a bad
  // argument; nothing reaches the allocator, so no statistic changes (num_ooms included).
  const uint64_t max_alloc = max_allocation_bytes(index);  // checks the index first
  TORCH_CHECK_WITH(OutOfMemoryError, bytes <= max_alloc,
                   out_of_memory_text("opencl:" + std::to_string(index) + ": tried to allocate " +
                                      std::to_string(bytes) +
                                      " bytes, more than the device's largest single "
                                      "allocation (" +
                                      std::to_string(max_alloc) + " bytes)"));
  Block* storage = translate_errors([&] {
    vm::VirtualMachine& vm = runtime().vm();
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
      // Owns the release from here on. A block made in a section is released detached while
      // free_detached() frees it (Note [Results written in device memory]).
      const BlobStorage& memory = *blob->storage();
      const uintptr_t address = memory.device_address();
      void* const host = memory.host_address();
      return new Block(blob, section != nullptr ? detachable_releaser(vm) : make_vm_releaser(vm),
                       address, host);
    } catch (...) {
      // The AllocateBlob, the upload, the stream's finish or the Block failed. In a section the
      // release runs detached, when the section ends.
      release_after_failure(vm, blob);
      throw;
    }
  });
  {
    MutexLock lock(mutex_);
    // Live blocks never share an address (segments are disjoint, blocks tile them).
    const bool inserted = blocks_.insert(*storage).second;
    OCLVM_DCHECK(inserted);
    (void)inserted;
  }
  TraceRecorder::instance().on_allocate(storage, bytes, index);
  report_to_profiler(storage->blob()->storage()->allocation().ptr, static_cast<int64_t>(bytes),
                     index, section == nullptr);
  return storage;
}

void CLDeviceAllocator::delete_handle(void* context) {
  if (context == nullptr) return;  // an empty DataPtr
  // Every non-empty DataPtr with this deleter holds a Block (device_data, free_detached).
  auto* storage = static_cast<Block*>(context);
  OCLVM_DCHECK(!storage->host_hook.is_linked());  // blocks in host form are freed after take()
  {
    CLDeviceAllocator& self = instance();
    MutexLock lock(self.mutex_);
    self.blocks_.erase(self.blocks_.iterator_to(*storage));
  }
  TraceRecorder::instance().on_release(storage);
  const BlobStorage& blob = *storage->blob()->storage();
  void* const ptr = blob.allocation().ptr;
  const auto bytes = static_cast<int64_t>(blob.allocation().size);
  const c10::DeviceIndex index = storage->blob()->device().index;
  delete storage;  // ~TensorStorage runs ReleaseTensor synchronously (make_vm_releaser)
  report_to_profiler(ptr, -bytes, index, !t_release_detached);
}

BlobRef CLDeviceAllocator::find(const void* address) const {
  const auto key = reinterpret_cast<uintptr_t>(address);
  MutexLock lock(mutex_);
  auto it = blocks_.upper_bound(key);
  TORCH_CHECK(it != blocks_.begin(), "Expected an address inside a live opencl block, but got ",
              address);
  --it;
  const std::shared_ptr<BlobObject>& blob = it->blob();
  const size_t offset = key - it->address;
  TORCH_CHECK(offset < blob->storage()->size(),
              "Expected an address inside a live opencl block, but got ", address);
  return BlobRef{blob, offset};
}

CLDeviceAllocator::HostPlace CLDeviceAllocator::host_place(const void* address) const {
  const auto key = reinterpret_cast<uintptr_t>(address);
  MutexLock lock(mutex_);
  auto it = blocks_.upper_bound(key);
  if (it == blocks_.begin()) return {};
  --it;
  const size_t offset = key - it->address;
  if (offset >= it->blob()->storage()->size()) return {};
  HostPlace place;
  place.found = true;
  place.device = static_cast<c10::DeviceIndex>(it->blob()->device().index);
  if (it->host != nullptr) place.host = static_cast<char*>(it->host) + offset;
  return place;
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
    InstructionsBuilder builder = runtime().builder();
    vm::Stream& stream = current_vm_stream(static_cast<c10::DeviceIndex>(to.blob->device().index));
    builder.copy(from.blob, from.offset, to.blob, to.offset, count, &stream);
    runtime().run(builder.take());
  });
}

void CLDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr) return;
  const BlobRef block = blob_of_data(ptr);
  vm::Stream& user = vm_stream(stream);
  if (user.id() == vm::producer_stream(*block.blob)) return;
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    builder.record_blob_use(user, block.blob);
    runtime().run(builder.take());
  });
}

void CLDeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id: no private pools*/) {
  translate_errors([&] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) runtime().empty_cache(to_oclvm(i));
  });
}

C10DeviceStats CLDeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  const c10::DeviceIndex index = checked_index(device);
  const DeviceStats stats = translate_errors([&] { return runtime().stats(to_oclvm(index)); });
  C10DeviceStats out;
  for (const StatArrayField& field : kStatArrayFields) {
    copy_array(stats.*field.member, field.name, out);
  }
  for (const StatCounterField& field : kStatCounterFields) {
    out.*find_field(kC10CounterFields, field.name)->member = stats.*field.member;
  }
  return out;  // no private pools: reserved_bytes_by_private_pools stays empty
}

void CLDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  const c10::DeviceIndex index = checked_index(device);
  translate_errors([&] { runtime().reset_accumulated_stats(to_oclvm(index)); });
}

void CLDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  const c10::DeviceIndex index = checked_index(device);
  translate_errors([&] { runtime().reset_peak_stats(to_oclvm(index)); });
}

std::pair<size_t, size_t> CLDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  const c10::DeviceIndex index = checked_index(device);
  const DeviceStats stats = translate_errors([&] { return runtime().stats(to_oclvm(index)); });
  const uint64_t limit = memory_limit(index);
  const uint64_t total = limit != 0 ? limit : global_memory_bytes(index);
  const auto reserved = static_cast<uint64_t>(
      stats.reserved_bytes.aggregate().current);
  const uint64_t free = reserved < total ? total - reserved : 0;
  return {static_cast<size_t>(free), static_cast<size_t>(total)};
}

uint64_t memory_limit(c10::DeviceIndex index) {
  check_device_index(index);
  return translate_errors([&] { return runtime().memory_limit(to_oclvm(index)); });
}

void set_memory_limit(c10::DeviceIndex index, uint64_t bytes) {
  check_device_index(index);
  translate_errors([&] { runtime().set_memory_limit(to_oclvm(index), bytes); });
}

void resize_storage_bytes(const c10::Storage& storage, size_t bytes) {
  TORCH_CHECK(storage.resizable(), "Expected a resizable storage, but got one that is not");
  const size_t old_bytes = storage.nbytes();
  if (bytes == old_bytes) return;
  c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = CLDeviceAllocator::instance().allocate(bytes);
  const size_t common = std::min(old_bytes, bytes);
  if (common != 0) CLDeviceAllocator::instance().copy_data(fresh.get(), storage.data(), common);
  auto& mutable_storage = const_cast<c10::Storage&>(storage);
  mutable_storage.set_data_ptr_noswap(std::move(fresh));
  mutable_storage.set_nbytes(bytes);
}

BlobRef blob_of(const c10::Storage& storage, size_t byte_offset) {
  const c10::DataPtr& data = storage.data_ptr();
  if (data.get() == nullptr) return BlobRef{nullptr, byte_offset};
  BlobRef ref = blob_of_data(data);
  ref.offset += byte_offset;
  return ref;
}

// Note [Storages torch makes around device memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Not every opencl storage comes from this allocator: torch wraps device memory it did not
// allocate in storages of its own, with their own deleter. Its legacy serialization (what
// pickle of a tensor uses, and torch.load of an old checkpoint with map_location) copies a
// storage's bytes through at::from_blob over the storage's data pointer; torch.from_dlpack wraps
// the address a DLPack capsule carries. Their memory is inside a live block of this allocator
// (the storage wrapped keeps it alive, as on CUDA), so an operator finds the block through the
// registry by address, as copy_data does. Such a storage never reaches the host paths that keep
// state per block (host aliases: Note [Host aliases kept with their block] in host_view.cc); its
// operands are copied. Memory in no live block (freed under the wrapper) is refused with the
// address.
BlobRef blob_of_data(const c10::DataPtr& data) {
  const CLDeviceAllocator::Block* owner = CLDeviceAllocator::made_by_us(data);
  if (owner == nullptr) [[unlikely]] return CLDeviceAllocator::instance().find(data.get());
  // The DataPtr may point past the block start only if someone moved it; blocks here never do.
  const size_t base = static_cast<size_t>(reinterpret_cast<uintptr_t>(data.get()) - owner->address);
  return BlobRef{owner->blob(), base};
}

const CLDeviceAllocator::Block* CLDeviceAllocator::made_by_us(const c10::DataPtr& data) {
  if (data.get_deleter() != &delete_handle || data.get_context() == nullptr) return nullptr;
  return static_cast<const Block*>(data.get_context());
}

const CLDeviceAllocator::Block& CLDeviceAllocator::owner(const c10::DataPtr& data) {
  const Block* block = made_by_us(data);
  TORCH_CHECK(block != nullptr,
              "Expected an opencl storage made by oclvm's allocator, but got one with another "
              "deleter");
  return *block;
}

}  // namespace oclvm::torch_adapter
