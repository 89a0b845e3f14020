// storage/storage_objects.h — the split ownership of tensor memory: TensorStorage, BlobObject,
// BlobStorage, and the releaser that connects the front end to the side that frees.
//
//   TensorStorage   front end. Shared (shared_ptr) by a tensor and all of its views. Holds the one
//                   front-end reference to the BlobObject and a Releaser. Its destructor hands that
//                   reference to the Releaser, exactly once.
//   BlobObject      VM side. What instructions name as operands: layout (shape, stride, dtype,
//                   storage offset), the BlobStorage, and an ExtensionSlot where the layer that
//                   orders accesses keeps its records of the blob (storage/extension_slot.h).
//   BlobStorage     the memory: one Allocation, the Allocator that made it, its device and size.
//                   Freed only by release(), on the one thread that owns the allocator.
//   Releaser        std::function<void(std::shared_ptr<BlobObject>)>: what happens when the last
//                   front-end owner dies. make_direct_releaser() frees on the calling thread; the
//                   instructions layer's make_vm_releaser() builds and runs a ReleaseTensor
//                   instruction.
//
// Note [Split ownership]
// ~~~~~~~~~~~~~~~~~~~~~~
// Ownership points one way only:
//
//   TensorStorage ──blob_──> BlobObject ──storage_──> BlobStorage ──> Allocation (device memory)
//
// Nothing on the VM side (BlobObject, BlobStorage, instructions in flight) points back to a
// TensorStorage, so no reference cycle can keep any of them alive. When the last shared_ptr to a
// TensorStorage dies, its destructor MOVES its shared_ptr<BlobObject> into the Releaser. A hook
// that captured shared_ptr<BlobObject> by value would own the same; passing it by value at the
// moment of release is the same ownership, with two advantages: one Releaser (a policy: "free
// directly", "run a ReleaseTensor on this VM") serves every tensor of a device instead of one
// closure per tensor, and the front end can still read the BlobObject through blob() while the
// tensor lives. After the destructor, the Releaser (and whatever instruction it builds) holds the
// only front-end-originated reference; when the release has run and the instruction is gone, the
// BlobObject and BlobStorage die as well. Views share the TensorStorage, so they create no
// BlobObject and the release runs once, when the last view dies.
//
// Note [Release errors in destructors]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// ~TensorStorage is noexcept: a destructor must not throw (it may run during stack unwinding, where
// a second exception terminates the process, and nothing oclvm does may terminate the process).
// If the Releaser throws, the error is printed on stderr, counted in
// TensorStorage::failed_releases(), and swallowed. No memory leaks by that: the BlobObject
// reference the Releaser was given dies with it, and a BlobStorage that dies unreleased frees itself
// (see Note [Unreleased BlobStorage]). With the VM, release errors are recorded by the ReleaseTensor
// instruction and surface as an exception at the caller's next sync point instead.
//
// Note [Unreleased BlobStorage]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Memory is freed by release() only. A BlobStorage destroyed while still live (an error path
// dropped the last reference, or a Releaser threw before releasing) must neither leak nor fail
// silently: its destructor deallocates through its allocator on the destroying thread, prints one
// line on stderr, and counts the event in BlobStorage::destructor_releases(). That count is 0 in a
// correct run; tests assert it. A blob of 0 bytes holds no memory, so its destructor does nothing
// and counts nothing, released or not. The fallback assumes the allocator outlives its blobs (it
// does: allocators are owned per device and outlive every tensor) and that the destroying thread
// may touch the allocator, which is exactly what the counter exists to flag when it does not hold.
// Exception, Note [Blobs alive at exit]: once exit() has begun, a live BlobStorage destroyed with a
// static object is left to the operating system, silently (its device's worker may still be
// running and own the allocator).
#pragma once

#include <boost/container/small_vector.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "oclvm/storage/allocator.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/extension_slot.h"

namespace oclvm {

// ---------------------------------------------------------------------------------------------
// Element types.

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI8, kU8, kI16, kI32, kI64, kBool };

// Bytes per element: f32 4, f16 2, bf16 2, f64 8, i8 1, u8 1, i16 2, i32 4, i64 8, bool 1.
size_t dtype_size(DType dtype);
// "f32", "f16", "bf16", "f64", "i8", "u8", "i16", "i32", "i64", "bool".
const char* dtype_name(DType dtype);

// Sizes or strides of a blob. Up to four dimensions live inline, so making a blob of the usual
// ranks allocates nothing for them.
using Dims = boost::container::small_vector<int64_t, 4>;
inline std::span<const int64_t> dims_view(const Dims& dims) { return {dims.data(), dims.size()}; }

// Row-major strides of a contiguous tensor of `shape`, in elements ({2,3,4} -> {12,4,1}).
Dims contiguous_strides(const Dims& shape);

// ---------------------------------------------------------------------------------------------
// BlobStorage: the memory of one blob.
//
// Invariants:
//   allocator_ is the allocator that made allocation_ (a non-empty allocation_ is live in it until
//   release()); released_ goes from false to true exactly once, in release() or in the destructor;
//   allocation_ is empty iff size() == 0; while live, device_address() ==
//   allocation_.segment->address + allocation_.offset and the segment belongs to
//   allocator_->backend().
//
// Thread-safety: thread-compatible. release() touches the allocator, so it must run on the one
// thread that owns that allocator (storage/allocator.h). The accessors
// read immutable fields and may be called from any thread; released() must not race with release().
class BlobStorage {
 public:
  // Allocates `bytes` from `allocator` and wraps the allocation: the AllocateBlob step. Forwards
  // the allocator's InvalidArgument / OutOfMemoryError; on a throw nothing is held. bytes == 0 gives
  // a live blob with an empty allocation (device_address() == 0), as the allocator contract says.
  static std::shared_ptr<BlobStorage> allocate(Allocator& allocator, size_t bytes);

  // Takes ownership of `allocation`, which must be live in `allocator` (from allocator.allocate).
  // Throws InvalidArgument, taking nothing, when a non-empty allocation's segment does not belong
  // to allocator.backend() (another device's or backend's memory).
  BlobStorage(Allocator& allocator, const Allocation& allocation);
  // A live blob frees itself here; see Note [Unreleased BlobStorage]. Never throws.
  ~BlobStorage();

  BlobStorage(const BlobStorage&) = delete;
  BlobStorage& operator=(const BlobStorage&) = delete;

  // Gives the memory back to the allocator, exactly once: what the ReleaseTensor instruction calls.
  // The blob counts as released even if the allocator refuses the handle (its error propagates;
  // trying again could not succeed). A second call throws InvalidArgument ("Expected a live blob,
  // but got one already released ...") and changes nothing.
  void release();
  bool released() const { return released_; }

  // The allocation record. After release() it still describes where the memory was, but that memory
  // belongs to the allocator again.
  const Allocation& allocation() const { return allocation_; }
  // Device address of byte 0 (allocation().ptr as an integer); 0 for an empty allocation. Never
  // dereference it on the host: see storage/address_space.h.
  uintptr_t device_address() const { return reinterpret_cast<uintptr_t>(allocation_.ptr); }
  // Where the host reaches byte 0 (the segment's host address, Segment::host, plus the offset);
  // nullptr for an empty allocation and on a segment without one. Read or write it only while
  // no device command uses the blob (a host section, vm/host_section.h).
  void* host_address() const {
    if (allocation_.segment == nullptr || allocation_.segment->host == nullptr) return nullptr;
    return static_cast<char*>(allocation_.segment->host) + allocation_.offset;
  }
  // Bytes requested from the allocator.
  size_t size() const { return allocation_.size; }
  Device device() const { return device_; }
  Allocator& allocator() const { return *allocator_; }

  // Checks the invariants above (and, while live, that the allocation lies in a segment of the
  // allocator's backend at the address it claims); aborts via OCLVM_DCHECK on violation.
  void check_invariants() const;

  // Process-wide count of BlobStorages freed by their destructor instead of release(); 0 in a
  // correct run. See Note [Unreleased BlobStorage].
  static uint64_t destructor_releases();

 private:
  // Immutable after construction.
  Allocator* const allocator_;
  const Allocation allocation_;
  const Device device_;
  // Mutable: false until release() (or the destructor fallback) has given the memory back.
  bool released_ = false;
};

// ---------------------------------------------------------------------------------------------
// BlobObject: the VM-side view of a blob.
//
// Layout contract (checked by the constructor, InvalidArgument otherwise):
//   shape.size() == stride.size(); every shape[i] >= 0, stride[i] >= 0, storage_offset >= 0;
//   numel() and nbytes() fit in int64_t; when numel() > 0 the farthest element addressed,
//   (storage_offset + sum (shape[i] - 1) * stride[i] + 1) * dtype_size(dtype), fits in
//   storage()->size(). The storage is live and non-null at construction.
//
// Thread-safety: shape, stride, dtype, storage offset and storage are immutable after
// construction and may be read from any thread. The extension slot's object is touched as the
// layer that keeps it there says (the VM: under its submission lock; vm/dependence.h).
class BlobObject {
 public:
  // An empty `stride` means contiguous (contiguous_strides(shape)).
  BlobObject(std::shared_ptr<BlobStorage> storage, const Dims& shape, DType dtype,
             const Dims& stride = {}, int64_t storage_offset = 0);
  // A contiguous blob on `device` whose storage does not exist yet: an AllocateBlob instruction
  // attaches it when it runs (attach_storage). Shape checks as above (InvalidArgument).
  BlobObject(Device device, const Dims& shape, DType dtype);
  // A pending byte blob: shape {bytes}, dtype u8.
  BlobObject(Device device, size_t bytes);

  BlobObject(const BlobObject&) = delete;
  BlobObject& operator=(const BlobObject&) = delete;

  const Dims& shape() const { return shape_; }
  const Dims& stride() const { return stride_; }
  DType dtype() const { return dtype_; }
  // Offset of element 0, in elements of dtype() from the start of the storage.
  int64_t storage_offset() const { return storage_offset_; }
  // The memory; nullptr while a blob made by the pending constructor awaits its AllocateBlob.
  const std::shared_ptr<BlobStorage>& storage() const { return storage_; }
  Device device() const { return device_; }
  // Bytes the storage must have for this layout (what AllocateBlob allocates for a pending blob).
  size_t required_bytes() const { return required_bytes_; }
  // Gives a pending blob its storage, once. Throws InvalidArgument when the blob already has one,
  // or the storage is of another device or smaller than required_bytes().
  void attach_storage(std::shared_ptr<BlobStorage> storage);

  // Product of shape() (1 for a scalar, 0 if any dimension is 0).
  int64_t numel() const { return numel_; }
  // numel() * dtype_size(dtype()): the bytes of the logical tensor, not of the storage.
  int64_t nbytes() const { return numel_ * static_cast<int64_t>(dtype_size(dtype_)); }
  // True when the elements are laid out row-major without gaps. Dimensions of size 1 may have any
  // stride; a tensor with no elements is contiguous.
  bool is_contiguous() const;

  // Checks the layout contract above against the current storage (the fit only while the storage
  // is live); aborts via OCLVM_DCHECK on violation.
  void check_invariants() const;

  // Where the layer that orders the blob's accesses keeps its records of it: the VM's producer
  // stream and access records (vm/dependence.h). Empty until that layer first uses the blob.
  // See Note [Extension slot] in storage/extension_slot.h.
  ExtensionSlot& extension() { return extension_; }
  const ExtensionSlot& extension() const { return extension_; }

 private:
  // Immutable after construction, except storage_, which a pending blob gets once (before any
  // other instruction can use it: they are ordered after its AllocateBlob).
  std::shared_ptr<BlobStorage> storage_;
  Device device_;
  size_t required_bytes_ = 0;
  const Dims shape_;
  const Dims stride_;
  const DType dtype_;
  const int64_t storage_offset_;
  const int64_t numel_;
  // Mutable: what the layer above keeps per blob.
  ExtensionSlot extension_;
};

// ---------------------------------------------------------------------------------------------
// TensorStorage: the front end. See Note [Split ownership].
//
// Invariant: blob_ is non-null and releaser_ non-empty from construction until the destructor
// hands blob_ to releaser_, which it does exactly once.
//
// Thread-safety: immutable after construction; blob() may be called from any thread. The
// destructor runs on whichever thread drops the last shared_ptr, so a Releaser must be callable
// from any thread that may drop a tensor (make_direct_releaser() is not: it is for a single thread
// that owns the allocator; make_vm_releaser() in instructions/builder.h is).
class TensorStorage {
 public:
  // Receives the TensorStorage's reference to the blob when the last front-end owner dies. It may
  // throw; see Note [Release errors in destructors].
  using Releaser = std::function<void(std::shared_ptr<BlobObject>)>;

  // Throws InvalidArgument for a null blob or an empty releaser.
  TensorStorage(std::shared_ptr<BlobObject> blob, Releaser releaser);
  // Runs the releaser once. noexcept: see Note [Release errors in destructors].
  ~TensorStorage();

  TensorStorage(const TensorStorage&) = delete;
  TensorStorage& operator=(const TensorStorage&) = delete;

  const std::shared_ptr<BlobObject>& blob() const { return blob_; }

  // Process-wide count of releasers that threw from ~TensorStorage (printed and swallowed).
  static uint64_t failed_releases();

 private:
  std::shared_ptr<BlobObject> blob_;  // moved into releaser_ by the destructor
  const Releaser releaser_;
};

// The releaser of a single-threaded user of storage alone: calls blob->storage()->release() on the
// calling thread, which must be the one thread that owns the blob's allocator. Errors of release()
// propagate (and are then reported by ~TensorStorage).
TensorStorage::Releaser make_direct_releaser();

// The whole allocation path for a contiguous tensor: checks the layout, allocates
// numel * dtype_size bytes from `allocator` (BlobStorage::allocate) and wraps them in a BlobObject
// and a TensorStorage with `releaser`. On a throw (bad shape, out of memory) nothing is held and no
// releaser has run.
std::shared_ptr<TensorStorage> allocate_tensor_storage(Allocator& allocator,
                                                       const Dims& shape, DType dtype,
                                                       TensorStorage::Releaser releaser);

}  // namespace oclvm
