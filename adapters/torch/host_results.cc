// adapters/torch/host_results.cc — CPU kernels' results allocated in device memory.
#include "adapters/torch/host_results.h"

#include <c10/core/CPUAllocator.h>

#include <boost/intrusive/set.hpp>

#include <atomic>
#include <typeinfo>

#include "adapters/torch/allocator.h"
#include "oclvm/storage/hot_thread_local.h"

namespace oclvm::torch_adapter {

// Note [Results written in device memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A functional operator's CPU kernel allocates its results itself, through the CPU allocator.
// On the host-section path (Note [Operators in a host section] in fallback.cc) those results
// would land in host memory and be copied into new device blocks: a second allocation, a copy
// and a second section per result. Instead, oclvm's CPU allocator stands in front of the one
// torch had. On every thread, at every other time, it forwards to that allocator. While a
// ResultsOnDevice scope lives on a thread — only around a CPU kernel that the fallback, or an
// unboxed kernel (host_kernels.cc), runs in a host section — each allocation that thread makes
// is a block of the section's device, allocated by an AllocateBlob run in the section
// (HostSection::run), and handed to the kernel as CPU memory at the block's host address. The
// kernel writes its result there; adopt_result then makes the device tensor over the same
// block, and the CPU storage gives the block up. No copy, no host memory, and the allocation is
// counted in the device's statistics as every other.
//
// Temporaries the kernel allocates on that thread are device blocks too; the ones it frees
// release when the section ends (a block in host form is always released detached, and the
// section's end dispatches what its thread submitted meanwhile on that thread). Detached, because
// the freeing thread may be an intra-op worker the section's thread waits for, and a release that
// waited for the device's worker would wait for that section: a deadlock. A result that is not
// adopted (it shares its storage) is copied, and its block, freed after the operator, comes back
// as soon as the worker runs the release. A CPU allocation that outlives the operator by some other
// path than its results (a kernel that kept a buffer) keeps its block until it is freed, as
// any tensor does. Allocations on other threads (the intra-op pool's) are host memory as always.
//
// The host-side DataPtr of such a block is a simple one (its context is its data, as the default
// CPU allocator's), since some kernels take raw memory (Allocator::raw_allocate, which asserts
// that, and raw_deallocate, which frees through raw_deleter()): convolution's did. So the blocks
// are found by host address in a registry, and this allocator's raw deleter gives back either
// such a block or, for anything else, hands the pointer to the allocator it stands in front of.
namespace {

OCLVM_HOT_TLS thread_local ResultsOnDevice* t_scope = nullptr;
std::atomic<uint64_t> g_adopted{0};

using Block = CLDeviceAllocator::Block;

// The blocks in host form, by host address: every block handed out and not yet freed or adopted.
// Linked through the block itself (Block::host_hook), so adding and taking allocate nothing.
// Thread-safe.
class HostBlocks {
 public:
  void add(Block* storage) {
    MutexLock lock(mutex_);
    const bool inserted = blocks_.insert(*storage).second;
    OCLVM_DCHECK(inserted);  // live blocks never share a host address
    (void)inserted;
  }
  // Removes and returns the block at `host`; nullptr when none.
  Block* take(void* host) {
    MutexLock lock(mutex_);
    auto it = blocks_.find(host);
    if (it == blocks_.end()) return nullptr;
    Block& storage = *it;
    blocks_.erase(it);
    return &storage;
  }

 private:
  struct HostAddressOf {
    using type = const void*;
    const void* operator()(const Block& block) const { return block.host; }
  };

  Mutex mutex_;
  boost::intrusive::set<
      Block, boost::intrusive::member_hook<Block, decltype(Block::host_hook), &Block::host_hook>,
      boost::intrusive::key_of_value<HostAddressOf>>
      blocks_ OCLVM_GUARDED_BY(mutex_);
};

HostBlocks& host_blocks() {
  static HostBlocks* const blocks = new HostBlocks();  // never destroyed: freed until exit
  return *blocks;
}

// A block in host form is released detached: the thread freeing it may be one the section's
// thread waits for (an intra-op worker dropping a temporary inside the kernel), so it must not
// wait for the device's worker, which that section holds.
void release(Block* block) { CLDeviceAllocator::free_detached(block); }

// The deleter of the host-side DataPtrs.
void delete_host_block(void* host) {
  if (Block* storage = host_blocks().take(host)) release(storage);
}

// The raw deleter of the allocator oclvm's stands in front of; set once, by
// install_results_allocator, before any raw memory is handed out.
c10::DeleterFnPtr g_replaced_raw_delete = nullptr;

// The raw deleter: a block goes back to the device, anything else to the replaced allocator.
void raw_delete(void* pointer) {
  if (Block* storage = host_blocks().take(pointer)) {
    release(storage);
  } else if (pointer != nullptr) {
    g_replaced_raw_delete(pointer);
  }
}

}  // namespace

class ResultsAllocator final : public c10::Allocator {
 public:
  explicit ResultsAllocator(c10::Allocator* next) : next_(next) {}

  c10::DataPtr allocate(size_t bytes) override {
    const ResultsOnDevice* scope = t_scope;
    if (scope == nullptr || bytes == 0) return next_->allocate(bytes);
    Block* storage = CLDeviceAllocator::instance().allocate_in_section(
        *scope->section_, scope->index_, bytes);
    void* host = storage->host;
    if (host == nullptr) {
      release(storage);  // when the section ends
      return next_->allocate(bytes);
    }
    host_blocks().add(storage);
    return c10::DataPtr(host, host, &delete_host_block, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    next_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* const next_;
};

void install_results_allocator() {
  static ResultsAllocator* const allocator = [] {
    c10::Allocator* replaced = c10::GetCPUAllocator();
    g_replaced_raw_delete = replaced->raw_deleter();
    return new ResultsAllocator(replaced);
  }();
  // At the default allocator's priority: an allocator a user installs with a higher one takes
  // precedence, and results are then copied as before.
  c10::SetCPUAllocator(allocator, /*priority=*/0);
}

ResultsOnDevice::ResultsOnDevice(vm::HostSection& section, c10::DeviceIndex index)
    : section_(&section), index_(index), outer_(t_scope) {
  t_scope = this;
}

ResultsOnDevice::~ResultsOnDevice() { t_scope = outer_; }

namespace {

// Whether `result`'s TensorImpl can become the device tensor itself: a plain TensorImpl that only
// `result` holds, with nothing a new one would not have (autograd meta: a composite kernel that
// recorded a CPU graph; the wrapped-number flag).
bool adoptable_in_place(const at::Tensor& result) {
  const c10::TensorImpl* impl = result.unsafeGetTensorImpl();
  return result.use_count() == 1 && result.weak_use_count() == 1 &&
         typeid(*impl) == typeid(c10::TensorImpl) && impl->autograd_meta() == nullptr &&
         !impl->is_wrapped_number() && impl->allow_tensor_metadata_change();
}

}  // namespace

// Note [Adopting a result in place]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A result the CPU kernel made is, nearly always, a TensorImpl and a StorageImpl that nothing
// else holds. Making a second pair for the device tensor (and dropping the first) would cost
// every result an allocation and a free of each (design/performance.md, "Measured choices in the
// code"). So such a result becomes
// the device tensor itself: its storage takes the block's device DataPtr and the
// device allocator (so a later resize_ allocates on the device), the tensor takes that storage's
// device and swaps its backend keys from CPU to PrivateUse1 (TensorImpl's
// _change_backend_component_keys: the autograd and autocast keys follow the backend, as a new
// device TensorImpl would have them). Anything a new TensorImpl would not carry over (autograd
// meta, another holder) keeps the old way: a new device tensor over the block.
bool adopt_result(at::Tensor& result, const c10::Device& device) {
  if (!result.defined() || !result.is_cpu() || result.layout() != at::kStrided ||
      result.is_quantized() || result.is_nested() || result.is_conj() || result.is_neg()) {
    return false;
  }
  const c10::Storage& storage = result.storage();
  if (!storage || storage.data_ptr().get_deleter() != &delete_host_block ||
      storage.use_count() != 1) {
    return false;
  }
  c10::StorageImpl* host = storage.unsafeGetStorageImpl();
  Block* block = host_blocks().take(host->mutable_data());
  if (block == nullptr) return false;
  // The host DataPtr no longer owns the block: dropping it frees nothing (and searches no
  // registry for a block that is already out).
  const bool disowned = host->mutable_data_ptr().compare_exchange_deleter(
      &delete_host_block, &c10::detail::deleteNothing);
  OCLVM_DCHECK(disowned);  // its deleter was checked above
  (void)disowned;
  c10::DataPtr on_device = CLDeviceAllocator::device_data(block, device.index());
  if (adoptable_in_place(result)) {
    host->set_data_ptr_noswap(std::move(on_device));
    host->set_allocator(&CLDeviceAllocator::instance());
    c10::TensorImpl* impl = result.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(storage);  // the storage's device is now the tensor's
    impl->_change_backend_component_keys(device);
  } else {
    // The host storage keeps the block's address, without owning it: another holder of this
    // TensorImpl (a kernel that returned one tensor twice) is then copied from the block, which
    // the adopted tensor keeps alive through the copy.
    const size_t bytes = host->nbytes();
    c10::Storage device_storage(c10::Storage::use_byte_size_t(), bytes, std::move(on_device),
                                &CLDeviceAllocator::instance(), /*resizable=*/true);
    at::Tensor adopted = at::detail::make_tensor<c10::TensorImpl>(
        std::move(device_storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        result.dtype());
    adopted.unsafeGetTensorImpl()->set_sizes_and_strides(result.sizes(), result.strides(),
                                                          result.storage_offset());
    result = std::move(adopted);
  }
  g_adopted.fetch_add(1, std::memory_order_relaxed);
  return true;
}

uint64_t adopted_results() { return g_adopted.load(std::memory_order_relaxed); }

}  // namespace oclvm::torch_adapter
