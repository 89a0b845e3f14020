// storage/storage_objects.cc — BlobStorage release, BlobObject layout checks, TensorStorage's
// releasing destructor. See the Notes in storage/storage_objects.h.
#include "oclvm/storage/storage_objects.h"

#include "oclvm/storage/small_object_pool.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"

namespace oclvm {
namespace {

std::atomic<uint64_t> destructor_release_count{0};

// Note [Blobs alive at exit]: set by an atexit handler that the first BlobStorage registers, so it
// runs before the destructors of every static object that already existed then (C++ calls atexit
// functions and static destructors in reverse order of registration and construction).
std::atomic<bool> process_exiting{false};

void note_exit_watch() {
  static const bool registered = [] {
    std::atexit([] { process_exiting.store(true, std::memory_order_relaxed); });
    return true;
  }();
  (void)registered;
}
std::atomic<uint64_t> failed_release_count{0};

// Prints "opencl:N" / "cpu" without allocating: used on paths that must not throw.
// A device's name formatted without allocating (the messages below come from destructors and
// failure paths).
struct DeviceLabel {
  explicit DeviceLabel(Device device) {
    if (device.type == DeviceType::kCpu) {
      std::snprintf(text, sizeof text, "cpu");
    } else {
      std::snprintf(text, sizeof text, "opencl:%d", static_cast<int>(device.index));
    }
  }
  char text[24];
};

std::string describe(const BlobStorage& storage) {
  return "allocation " + std::to_string(storage.allocation().id) + " of " +
         std::to_string(storage.size()) + " bytes on " + storage.device().str();
}

std::string shape_string(std::span<const int64_t> values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(values[i]);
  }
  return text + "]";
}

// Product of `shape`; throws InvalidArgument on a negative dimension or int64_t overflow.
int64_t checked_numel(std::span<const int64_t> shape) {
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      throw InvalidArgument("Expected a shape of non-negative sizes, but got " +
                            shape_string(shape));
    }
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      throw InvalidArgument("Expected a shape whose element count fits in 64 bits, but got " +
                            shape_string(shape));
    }
  }
  return numel;
}

int64_t checked_nbytes(int64_t numel, DType dtype, std::span<const int64_t> shape) {
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(dtype)), &nbytes)) {
    throw InvalidArgument("Expected a tensor whose byte count fits in 64 bits, but got shape " +
                          shape_string(shape) + " of " + dtype_name(dtype));
  }
  return nbytes;
}

// Reports a releaser that threw from ~TensorStorage. Must not throw: no allocation.
void report_failed_release(uint64_t id, size_t bytes, Device device, const char* what) noexcept {
  failed_release_count.fetch_add(1, std::memory_order_relaxed);
  log_message(LogLevel::kError, "releasing a tensor (allocation %llu of %zu bytes on %s) failed: %s",
              static_cast<unsigned long long>(id), bytes, DeviceLabel(device).text, what);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Element types and layouts.

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kI16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kBool: return 1;
  }
  OCLVM_DCHECK(false && "unknown DType");
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI16: return "i16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kBool: return "bool";
  }
  OCLVM_DCHECK(false && "unknown DType");
  return "?";
}

Dims contiguous_strides(const Dims& shape) {
  Dims stride(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride[i] = step;
    // Dimensions of size 0 or 1 do not scale later strides (PyTorch does the same). A shape whose
    // strides overflow has no valid element count either: the callers reject it right after, so
    // the strides only need to stay defined (regression: UBSan saw {2^40, 2^40} overflow here).
    if (shape[i] > 1 && __builtin_mul_overflow(step, shape[i], &step)) step = INT64_MAX;
  }
  return stride;
}

// ---------------------------------------------------------------------------------------------
// BlobStorage.

std::shared_ptr<BlobStorage> BlobStorage::allocate(Allocator& allocator, size_t bytes) {
  const Allocation allocation = allocator.allocate(bytes);
  try {
    return std::allocate_shared<BlobStorage>(pool::PoolAllocator<BlobStorage>(), allocator,
                                             allocation);
  } catch (...) {
    allocator.deallocate(allocation);
    throw;
  }
}

BlobStorage::BlobStorage(Allocator& allocator, const Allocation& allocation)
    : allocator_(&allocator), allocation_(allocation), device_(allocator.device()) {
  note_exit_watch();
  if (allocation_ && (allocation_.segment == nullptr ||
                      allocation_.segment->backend != &allocator.backend())) {
    throw InvalidArgument("Expected an allocation made by the " + allocator.name() +
                          " allocator of " + device_.str() +
                          ", but got one from another device or allocator");
  }
}

BlobStorage::~BlobStorage() {
  // An empty allocation (0 bytes) holds no memory: nothing to give back, and its allocator may be
  // gone already (a Runtime that found no live allocation freed its devices).
  if (released_ || !allocation_) return;
  // See Note [Unreleased BlobStorage].
  released_ = true;
  destructor_release_count.fetch_add(1, std::memory_order_relaxed);
  // A blob still held by a static object when the process exits: the operating system takes the
  // memory back, and its allocator may be in use by a worker still running, so leave it alone.
  if (process_exiting.load(std::memory_order_relaxed)) return;
  log_message(LogLevel::kWarning,
              "a blob (allocation %llu of %zu bytes on %s) was destroyed without being released; "
              "freeing it now",
              static_cast<unsigned long long>(allocation_.id), allocation_.size,
              DeviceLabel(device_).text);
  try {
    allocator_->deallocate(allocation_);
  } catch (const std::exception& e) {
    log_message(LogLevel::kError, "freeing that blob failed: %s", e.what());
  } catch (...) {
    log_message(LogLevel::kError, "freeing that blob failed with an unknown exception");
  }
}

void BlobStorage::release() {
  if (released_) {
    throw InvalidArgument("Expected a live blob, but got one already released (" +
                          describe(*this) + ")");
  }
  // Released from here on even if the allocator refuses the handle: see the header.
  released_ = true;
  allocator_->deallocate(allocation_);
}

void BlobStorage::check_invariants() const {
  OCLVM_DCHECK(allocator_ != nullptr);
  OCLVM_DCHECK(static_cast<bool>(allocation_) == (allocation_.size > 0));
  // After release the segment may be gone; only a live allocation can be looked at.
  if (released_ || !allocation_) return;
  OCLVM_DCHECK(allocation_.segment != nullptr);
  OCLVM_DCHECK(allocation_.segment->backend == &allocator_->backend());
  OCLVM_DCHECK(device_address() == allocation_.segment->address + allocation_.offset);
  OCLVM_DCHECK(allocation_.offset + allocation_.size <= allocation_.segment->size);
}

uint64_t BlobStorage::destructor_releases() {
  return destructor_release_count.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// BlobObject.

namespace {

// One past the farthest byte a layout with at least one element addresses:
// (storage_offset + sum (shape[i] - 1) * stride[i] + 1) * dtype_size. Sets *overflow when that does
// not fit in int64_t (such a layout fits no storage anyway).
int64_t layout_end_bytes(std::span<const int64_t> shape, std::span<const int64_t> stride,
                         DType dtype, int64_t storage_offset, bool* overflow) {
  int64_t last = storage_offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t span = 0;
    *overflow |= __builtin_mul_overflow(shape[i] - 1, stride[i], &span);
    *overflow |= __builtin_add_overflow(last, span, &last);
  }
  int64_t end_bytes = 0;
  *overflow |= __builtin_add_overflow(last, int64_t{1}, &last);
  *overflow |= __builtin_mul_overflow(last, static_cast<int64_t>(dtype_size(dtype)), &end_bytes);
  return end_bytes;
}

// Checks the layout contract of BlobObject (see the header) and returns numel.
int64_t check_layout(const BlobStorage* storage, std::span<const int64_t> shape,
                     std::span<const int64_t> stride, DType dtype, int64_t storage_offset) {
  if (storage == nullptr) {
    throw InvalidArgument("Expected a blob storage, but got a null pointer");
  }
  if (storage->released()) {
    throw InvalidArgument("Expected a live blob, but got one already released (" +
                          describe(*storage) + ")");
  }
  if (stride.size() != shape.size()) {
    throw InvalidArgument("Expected " + std::to_string(shape.size()) + " strides for shape " +
                          shape_string(shape) + ", but got " + shape_string(stride));
  }
  for (int64_t s : stride) {
    if (s < 0) {
      throw InvalidArgument("Expected non-negative strides, but got " + shape_string(stride));
    }
  }
  if (storage_offset < 0) {
    throw InvalidArgument("Expected a non-negative storage offset, but got " +
                          std::to_string(storage_offset));
  }
  const int64_t numel = checked_numel(shape);
  checked_nbytes(numel, dtype, shape);
  if (numel == 0) return numel;

  bool overflow = false;
  const int64_t end_bytes = layout_end_bytes(shape, stride, dtype, storage_offset, &overflow);
  if (overflow || static_cast<uint64_t>(end_bytes) > storage->size()) {
    throw InvalidArgument("Expected a layout within the " + std::to_string(storage->size()) +
                          "-byte storage, but got shape " + shape_string(shape) + ", stride " +
                          shape_string(stride) + ", offset " + std::to_string(storage_offset) +
                          " of " + dtype_name(dtype) + " (" +
                          (overflow ? std::string("overflows 64 bits")
                                    : std::to_string(end_bytes) + " bytes") +
                          ")");
  }
  return numel;
}

}  // namespace

BlobObject::BlobObject(std::shared_ptr<BlobStorage> storage, const Dims& shape, DType dtype,
                       const Dims& stride, int64_t storage_offset)
    : storage_(std::move(storage)),
      shape_(shape),
      stride_(stride.empty() && !shape.empty() ? contiguous_strides(shape) : stride),
      dtype_(dtype),
      storage_offset_(storage_offset),
      numel_(check_layout(storage_.get(), dims_view(shape_), dims_view(stride_), dtype_,
                          storage_offset_)) {
  device_ = storage_->device();
  required_bytes_ = storage_->size();
}

BlobObject::BlobObject(Device device, size_t bytes)
    : device_(device),
      shape_{static_cast<int64_t>(bytes)},
      stride_{1},
      dtype_(DType::kU8),
      storage_offset_(0),
      numel_(checked_numel(dims_view(shape_))) {
  required_bytes_ = bytes;
}

BlobObject::BlobObject(Device device, const Dims& shape, DType dtype)
    : device_(device),
      shape_(shape),
      stride_(contiguous_strides(shape)),
      dtype_(dtype),
      storage_offset_(0),
      numel_(checked_numel(dims_view(shape_))) {
  required_bytes_ = static_cast<size_t>(checked_nbytes(numel_, dtype_, dims_view(shape_)));
}

void BlobObject::attach_storage(std::shared_ptr<BlobStorage> storage) {
  if (storage_ != nullptr) {
    throw InvalidArgument("Expected a blob without storage, but got one that already has " +
                          describe(*storage_));
  }
  if (storage == nullptr || storage->device() != device_ || storage->size() < required_bytes_) {
    throw InvalidArgument("Expected a storage of at least " + std::to_string(required_bytes_) +
                          " bytes on " + device_.str() + ", but got " +
                          (storage == nullptr ? std::string("none") : describe(*storage)));
  }
  storage_ = std::move(storage);
}

void BlobObject::check_invariants() const {
  if (storage_ == nullptr) return;  // pending: nothing to check against yet
  OCLVM_DCHECK(stride_.size() == shape_.size());
  OCLVM_DCHECK(storage_offset_ >= 0);
  int64_t numel = 1;
  for (size_t i = 0; i < shape_.size(); ++i) {
    OCLVM_DCHECK(shape_[i] >= 0 && stride_[i] >= 0);
    numel *= shape_[i];  // cannot overflow: the constructor checked it
  }
  OCLVM_DCHECK(numel == numel_);
  if (numel_ == 0 || storage_->released()) return;
  bool overflow = false;
  const int64_t end_bytes =
      layout_end_bytes(dims_view(shape_), dims_view(stride_), dtype_, storage_offset_, &overflow);
  OCLVM_DCHECK(!overflow && static_cast<uint64_t>(end_bytes) <= storage_->size());
  storage_->check_invariants();
}

bool BlobObject::is_contiguous() const {
  if (numel_ == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (stride_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// TensorStorage.

TensorStorage::TensorStorage(std::shared_ptr<BlobObject> blob, Releaser releaser)
    : blob_(std::move(blob)), releaser_(std::move(releaser)) {
  if (blob_ == nullptr) {
    throw InvalidArgument("Expected a blob for the tensor storage, but got a null pointer");
  }
  if (!releaser_) {
    throw InvalidArgument("Expected a releaser for the tensor storage, but got an empty one");
  }
}

TensorStorage::~TensorStorage() {
  OCLVM_DCHECK(blob_ != nullptr);
  // Recorded before the blob is handed over, for the report below; nothing here allocates.
  const BlobStorage* storage = blob_->storage().get();
  const uint64_t id = storage != nullptr ? storage->allocation().id : 0;
  const size_t bytes = blob_->required_bytes();
  const Device device = blob_->device();
  // See Note [Release errors in destructors].
  try {
    releaser_(std::move(blob_));
    return;
  } catch (const std::exception& e) {
    report_failed_release(id, bytes, device, e.what());
  } catch (...) {
    report_failed_release(id, bytes, device, "an unknown exception");
  }
}

uint64_t TensorStorage::failed_releases() {
  return failed_release_count.load(std::memory_order_relaxed);
}

TensorStorage::Releaser make_direct_releaser() {
  return [](std::shared_ptr<BlobObject> blob) { blob->storage()->release(); };
}

std::shared_ptr<TensorStorage> allocate_tensor_storage(Allocator& allocator,
                                                       const Dims& shape, DType dtype,
                                                       TensorStorage::Releaser releaser) {
  if (!releaser) {
    throw InvalidArgument("Expected a releaser for the tensor storage, but got an empty one");
  }
  // Shape checks come before the allocation so that bad input holds nothing.
  const int64_t nbytes = checked_nbytes(checked_numel(dims_view(shape)), dtype, dims_view(shape));
  std::shared_ptr<BlobStorage> storage =
      BlobStorage::allocate(allocator, static_cast<size_t>(nbytes));
  std::shared_ptr<BlobObject> blob;
  try {
    blob = std::make_shared<BlobObject>(storage, shape, dtype);
    return std::make_shared<TensorStorage>(std::move(blob), std::move(releaser));
  } catch (...) {
    // Only std::bad_alloc can get here; give the memory back by the normal path.
    storage->release();
    throw;
  }
}

}  // namespace oclvm
