// adapters/torch/allocator.h — the PyTorch side of oclvm memory: CLDeviceAllocator and the helpers
// the operators use to find the oclvm blob behind a torch storage.
//
// Types:
//   CLDeviceAllocator  c10::DeviceAllocator registered for PrivateUse1 ("opencl"). Every
//                      allocate(n > 0) runs an AllocateBlob of n bytes through the adapter's
//                      Runtime (device.h) on this thread's current stream of the current device
//                      (streams.h; the block's producer stream, where its release runs); the
//                      DataPtr's data is the blob's device address (never dereferenceable on the
//                      host; Runtime::find names its device), its context a Block (the
//                      TensorStorage made with make_vm_releaser(), linked in the registry), and
//                      its deleter deletes that Block, which runs ReleaseTensor synchronously.
//
// Promises:
//   - allocate(0) gives an empty DataPtr on the current device and runs nothing.
//   - Out of memory is a c10::OutOfMemoryError carrying oclvm's message; nothing is held after it.
//     A request over the device's largest single allocation is one too (as on CUDA), raised
//     before anything reaches the allocator, so no statistic changes.
//   - Statistics, limits, resets and emptyCache are the Runtime's (each a QueryStats,
//     SetMemoryLimit, ResetStats or EmptyCache instruction), one to one.
//   - copy_data and blob lookups by address use a registry of the live blocks this allocator
//     handed out, ordered by device address (Note [Block registry] in allocator.cc).
//
// Thread-safety: thread-safe (the Runtime is; the registry has its own mutex).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <boost/intrusive/set.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include <c10/core/Stream.h>

#include "adapters/torch/device.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/storage/backend.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/small_object_pool.h"
#include "oclvm/storage/thread_annotations.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/vm/host_section.h"

namespace oclvm::torch_adapter {

// c10's DeviceStats field by field, under PyTorch's memory_stats names, which storage/stats.h's
// kStatArrayFields and kStatCounterFields use too: getDeviceStats copies each oclvm statistic into
// the c10 field of its name (and fails to compile while one has none), and the tests compare
// snapshots through these rows.
using C10DeviceStats = c10::CachingDeviceAllocator::DeviceStats;
template <typename Member>
struct C10StatField {
  const char* name;
  Member C10DeviceStats::*member;
};
inline constexpr C10StatField<c10::CachingAllocator::StatArray> kC10StatArrayFields[] = {
    {"allocation", &C10DeviceStats::allocation},
    {"segment", &C10DeviceStats::segment},
    {"active", &C10DeviceStats::active},
    {"inactive_split", &C10DeviceStats::inactive_split},
    {"allocated_bytes", &C10DeviceStats::allocated_bytes},
    {"reserved_bytes", &C10DeviceStats::reserved_bytes},
    {"active_bytes", &C10DeviceStats::active_bytes},
    {"inactive_split_bytes", &C10DeviceStats::inactive_split_bytes},
    {"requested_bytes", &C10DeviceStats::requested_bytes},
};
// One Stat per device in c10, not per pool: oclvm's aggregate goes there.
inline constexpr C10StatField<c10::CachingAllocator::Stat> kC10StatFields[] = {
    {"oversize_allocations", &C10DeviceStats::oversize_allocations},
    {"oversize_segments", &C10DeviceStats::oversize_segments},
};
// num_oom_rejections has no oclvm counterpart (nothing rejects a request before it is tried): 0.
inline constexpr C10StatField<int64_t> kC10CounterFields[] = {
    {"num_alloc_retries", &C10DeviceStats::num_alloc_retries},
    {"num_ooms", &C10DeviceStats::num_ooms},
    {"num_sync_all_streams", &C10DeviceStats::num_sync_all_streams},
    {"num_device_alloc", &C10DeviceStats::num_device_alloc},
    {"num_device_free", &C10DeviceStats::num_device_free},
    {"num_oom_rejections", &C10DeviceStats::num_oom_rejections},
    {"max_split_size", &C10DeviceStats::max_split_size},
};

// The device allocator's limit on reserved bytes (0: none), read and set through the Runtime
// (Allocator::set_memory_limit says what lowering it does); both check the index.
uint64_t memory_limit(c10::DeviceIndex index);
void set_memory_limit(c10::DeviceIndex index, uint64_t bytes);

// A blob and the byte offset of an address in it.
struct BlobRef {
  std::shared_ptr<BlobObject> blob;
  size_t offset = 0;
};

class CLDeviceAllocator final : public c10::DeviceAllocator {
 public:
  // A block this allocator handed out: its TensorStorage and its link in the registry (Note
  // [Block registry]). Only new_storage makes one; every DataPtr context of this allocator and
  // every pointer the functions below take is one, so the deleter can free it as a Block. Made
  // and freed through the per-thread pools: the registry allocates no node, and a tensor's
  // allocation calls no malloc here.
  struct Block final : TensorStorage {
    Block(std::shared_ptr<BlobObject> blob, Releaser releaser, uintptr_t address, void* host)
        : TensorStorage(std::move(blob), std::move(releaser)), address(address), host(host) {}
    static void* operator new(size_t bytes) { return pool::allocate(bytes); }
    static void operator delete(void* block, size_t bytes) noexcept {
      pool::deallocate(block, bytes);
    }

    const uintptr_t address;  // the device address of the blob's first byte
    // Where the host reaches that byte (BlobStorage::host_address), nullptr when its segment has
    // no host address. Kept here because operators read it on every call: from the DataPtr's
    // context it is one load, through the blob three dependent ones.
    void* const host;
    boost::intrusive::set_member_hook<
        boost::intrusive::link_mode<boost::intrusive::normal_link>>
        hook;  // in blocks_ while the block is live; under mutex_
    // In host_results.cc's registry of blocks in host form (handed to a CPU kernel as CPU
    // memory, not yet adopted or freed), under that registry's mutex.
    // safe_link: the deleter checks that a block it frees is not still there.
    boost::intrusive::set_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>>
        host_hook;
    // The block's bytes as CPU tensors, kept for the next operator (Note [Host aliases kept with
    // their block] in host_view.cc): a CPU storage over them and the last CPU tensors made over it.
    // Read and written only by host_aliases, which runs in a host section on the block's device:
    // the section excludes every other, so no lock. Destroyed with the block.
    struct KeptAliases {
      static constexpr size_t kTensors = 2;
      c10::intrusive_ptr<c10::StorageImpl> storage;
      at::Tensor tensors[kTensors];
      uint8_t next = 0;  // the slot the next new tensor replaces
    };
    mutable KeptAliases kept_aliases;
  };

  c10::DataPtr allocate(size_t bytes) override;
  // allocate() on device `index`; when `contents` is not null, the block starts with its first
  // `bytes` bytes, uploaded in the same VM list as the allocation (one sync point). `contents`
  // may be reused once this returns.
  c10::DataPtr allocate_on(c10::DeviceIndex index, size_t bytes, const void* contents);
  // A block of `bytes` > 0 on device `index`, allocated by an AllocateBlob run inside `section`
  // (HostSection::run), for a CPU kernel to write (Note [Results written in device memory] in
  // host_results.cc). The caller owns it: it frees it with raw_deleter(), or hands it to a
  // DataPtr with device_data().
  Block* allocate_in_section(vm::HostSection& section, c10::DeviceIndex index, size_t bytes);
  // Frees a block allocate_in_section made, with its release submitted detached: it never waits
  // for the device's worker (which a host section on another thread may hold).
  static void free_detached(Block* block);
  // The device DataPtr that owns `block`, a block of this allocator on device `index`.
  static c10::DataPtr device_data(Block* block, c10::DeviceIndex index);
  // The block behind a non-empty DataPtr this allocator made (no reference taken); throws
  // c10::Error for any other DataPtr.
  static const Block& owner(const c10::DataPtr& data);
  // The same, or nullptr for a DataPtr this allocator did not make (Note [Storages torch makes
  // around device memory] in allocator.cc).
  static const Block* made_by_us(const c10::DataPtr& data);
  c10::DeleterFnPtr raw_deleter() const override { return &delete_handle; }
  // Device-to-device copy of `count` bytes between two addresses of live blocks of this
  // allocator (used by storage resize and clone of storages).
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override { return device_count() > 0; }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  // Marks the block as used by `stream` (a RecordBlobUse instruction): its release, which runs on
  // the stream that allocated it, then waits for everything `stream` was given up to here. A
  // no-op for an empty DataPtr and for the allocating stream itself.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // The blob holding `address` (an address inside a live block of this allocator) and the offset
  // of `address` in it. Throws c10::Error when no live block holds it.
  BlobRef find(const void* address) const;
  // Where the host reaches `address` when a live block of this allocator holds it: that block's
  // device, and its host address plus the offset (nullptr when the block's segment has no host
  // address). found is false, and nothing else set, when no live block holds it.
  struct HostPlace {
    bool found = false;
    c10::DeviceIndex device = -1;
    void* host = nullptr;
  };
  HostPlace host_place(const void* address) const;
  // Live blocks handed out and not yet deleted.
  size_t live_blocks() const;

  static CLDeviceAllocator& instance();

 private:
  static void delete_handle(void* context);
  // Allocates a registered block of `bytes` > 0 on device `index` (through `section` when given;
  // `contents`, when given, uploaded in the same list).
  Block* new_storage(c10::DeviceIndex index, size_t bytes, const void* contents,
                     vm::HostSection* section);

  struct AddressOf {
    using type = uintptr_t;
    uintptr_t operator()(const Block& block) const { return block.address; }
  };

  mutable Mutex mutex_;
  // Note [Block registry]: the live blocks, by device address.
  boost::intrusive::set<
      Block, boost::intrusive::member_hook<Block, decltype(Block::hook), &Block::hook>,
      boost::intrusive::key_of_value<AddressOf>, boost::intrusive::constant_time_size<true>>
      blocks_ OCLVM_GUARDED_BY(mutex_);
};

// Grows or shrinks a storage made by CLDeviceAllocator to `bytes`: a new block, a device-to-device
// copy of the common prefix, then the storage takes the new block (the old one is released when
// its DataPtr dies). Used by resize_ and UntypedStorage.resize_ (through the hooks).
void resize_storage_bytes(const c10::Storage& storage, size_t bytes);

// The blob behind a PrivateUse1 tensor's storage, with the byte offset of the tensor's element 0.
// Throws c10::Error when the storage's memory is in no live block of CLDeviceAllocator. Null blob
// for an empty storage.
BlobRef blob_of(const c10::Storage& storage, size_t byte_offset);
// The blob behind a non-empty DataPtr and the offset of its data in it: the DataPtr's own block
// when CLDeviceAllocator made it, else the live block holding its address (Note [Storages torch
// makes around device memory] in allocator.cc); throws c10::Error when none holds it.
BlobRef blob_of_data(const c10::DataPtr& data);

}  // namespace oclvm::torch_adapter
