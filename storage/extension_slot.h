// storage/extension_slot.h — ExtensionSlot: room inside a storage object for one object that a
// layer above keeps there, built in place and destroyed with its holder.
//
// BlobObject has one (BlobObject::extension()): the VM keeps its per-blob access records in it
// (vm/dependence.h). Storage never looks inside and declares nothing of what is kept there.
//
// Note [Extension slot]
// ~~~~~~~~~~~~~~~~~~~~~
// The VM needs a few records per blob (who wrote it last, who read it since, which VM's stream
// ids they are), read and written for every operand of every instruction. Blobs are made and
// freed at instruction rate (BM_StorageOnVm in bench/vm_bench.cc), so the records must cost
// neither a heap allocation per blob (a unique_ptr to an opaque type would) nor a lookup per
// operand (a table in the VM keyed by blob would, and would need to learn when a blob dies).
// The slot is a fixed number of inline bytes that the layer above builds its own type in, on
// first use: finding the object is one load, and its memory comes with the blob's own. The type
// is checked at run time by the destroy function the slot keeps (get<T> of a slot that holds
// another type fails an OCLVM_DCHECK), and at compile time the type must fit (static_assert in
// emplace). A layer whose records outgrow kBytes makes the slot larger here; it is never
// silently moved to the heap.
//
// Promises: no heap allocation of its own; the object, once built, lives exactly as long as the
// slot and is destroyed exactly once, by ~ExtensionSlot. Nothing here throws except T's
// constructor (which leaves the slot empty).
//
// Thread-safety: the slot's holder decides who touches the object (for BlobObject: the VM,
// under its submission lock, or the thread that made the blob before sharing it). One
// allowance: emplace() publishes the object with a release store, so find() may run on another
// thread at the same time as the one emplace() and sees either no object or the whole of it.
#pragma once

#include <atomic>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "oclvm/storage/errors.h"

namespace oclvm {

class ExtensionSlot {
 public:
  // Room for the object, and its largest alignment (a pointer's, so that the slot does not raise
  // its holder's). Sized for the VM's records (vm/dependence.h asserts that they fit).
  static constexpr size_t kBytes = 88;
  static constexpr size_t kAlignment = alignof(void*);

  ExtensionSlot() = default;
  ~ExtensionSlot() {
    if (Destroy destroy = destroy_.load(std::memory_order_acquire)) destroy(bytes_);
  }
  ExtensionSlot(const ExtensionSlot&) = delete;
  ExtensionSlot& operator=(const ExtensionSlot&) = delete;

  // The object, or nullptr while none has been built. It must be a T.
  template <class T>
  T* find() {
    Destroy destroy = destroy_.load(std::memory_order_acquire);
    if (destroy == nullptr) return nullptr;
    OCLVM_DCHECK(destroy == &destroy_as<T>);
    return std::launder(reinterpret_cast<T*>(bytes_));
  }
  template <class T>
  const T* find() const {
    return const_cast<ExtensionSlot*>(this)->find<T>();
  }

  // The object, built from `args` first when the slot is empty. Without arguments T is
  // default-initialized: its own member initializers run, and a member without one is left
  // indeterminate (the VM's records initialize every member).
  template <class T, class... Args>
  T& get_or_emplace(Args&&... args) {
    static_assert(sizeof(T) <= kBytes, "the object does not fit the extension slot");
    static_assert(alignof(T) <= kAlignment, "the object is aligned more than the slot");
    if (T* object = find<T>()) return *object;
    // Without arguments, default-initialization: `T()` would zero every byte of the slot first,
    // on every blob's first use, before T's own initializers run (design/performance.md,
    // "Measured choices in the code").
    T* object = nullptr;
    if constexpr (sizeof...(Args) == 0) {
      object = ::new (static_cast<void*>(bytes_)) T;
    } else {
      object = ::new (static_cast<void*>(bytes_)) T(std::forward<Args>(args)...);
    }
    destroy_.store(&destroy_as<T>, std::memory_order_release);
    return *object;
  }

 private:
  using Destroy = void (*)(void*);
  template <class T>
  static void destroy_as(void* object) {
    static_cast<T*>(object)->~T();
  }

  alignas(kAlignment) std::byte bytes_[kBytes];
  std::atomic<Destroy> destroy_{nullptr};  // null: empty; else destroys the T built in bytes_
};

}  // namespace oclvm
