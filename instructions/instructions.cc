// instructions/instructions.cc — execute() and describe() of the closed instruction set, but for
// the two that run device code (LaunchKernel and NativeCall: kernel_instructions.cc).
//
// Every instruction that touches a blob's memory resolves its byte range through
// resolve_range(), which checks, at execution time, that the storage exists, is live and holds
// the range; the builder has already checked the range against required_bytes().
#include "oclvm/instructions/instructions.h"

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "oclvm/instructions/blob_ranges.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/hex.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm {
namespace {

std::string range_text(size_t offset, size_t bytes) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
         std::to_string(bytes) + ")";
}

// resolve_range's checks: `blob` has live storage and the `bytes` from `offset` lie within what
// it may address. Returns the storage and where `offset` lies in it, in bytes.
std::pair<const BlobStorage*, size_t> checked_range(const BlobObject& blob, size_t offset,
                                                    size_t bytes, const char* role) {
  const std::shared_ptr<BlobStorage>& storage = blob.storage();
  if (storage == nullptr) {
    throw InvalidArgument(std::string("Expected a ") + role + " with storage, but got " +
                          blob_label(blob) +
                          " that has none (its AllocateBlob failed or has not run)");
  }
  if (storage->released()) {
    throw InvalidArgument(std::string("Expected a live ") + role + ", but got " +
                          blob_label(blob) + " whose storage (allocation " +
                          std::to_string(storage->allocation().id) + ") is already released");
  }
  const size_t base = blob_base_bytes(blob);
  const size_t capacity = storage->size() > base ? storage->size() - base : 0;
  size_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > capacity) {
    throw InvalidArgument(std::string("Expected a ") + role + " range within the " +
                          std::to_string(capacity) + " bytes of " + blob_label(blob) +
                          ", but got " + range_text(offset, bytes));
  }
  return {storage.get(), base + offset};
}

}  // namespace

size_t blob_base_bytes(const BlobObject& blob) {
  size_t base = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(blob.storage_offset()), dtype_size(blob.dtype()),
                             &base)) {
    throw InvalidArgument("Expected a storage offset whose byte offset fits in 64 bits, but got " +
                          std::to_string(blob.storage_offset()) + " elements of " +
                          dtype_name(blob.dtype()));
  }
  return base;
}

size_t blob_capacity_bytes(const BlobObject& blob) {
  const size_t base = blob_base_bytes(blob);
  return blob.required_bytes() > base ? blob.required_bytes() - base : 0;
}

std::string blob_label(const BlobObject& blob) {
  std::string text = dtype_name(blob.dtype());
  text += "[";
  for (size_t i = 0; i < blob.shape().size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(blob.shape()[i]);
  }
  return text + "] on " + blob.device().str();
}

std::string blob_text(const BlobObject& blob) {
  std::string text = blob_label(blob);
  const std::shared_ptr<BlobStorage>& storage = blob.storage();
  if (storage == nullptr) return text + " (pending)";
  if (storage->released()) return text + " (released)";
  return text + " at " + hex(storage->device_address());
}

DeviceRange resolve_range(const BlobObject& blob, size_t offset, size_t bytes, const char* role) {
  const auto [storage, start] = checked_range(blob, offset, bytes, role);
  if (bytes == 0) return DeviceRange{};
  const Allocation& allocation = storage->allocation();
  OCLVM_DCHECK(allocation.segment != nullptr);
  return DeviceRange{allocation.segment, allocation.offset + start};
}

DeviceRange resolve_start(const BlobObject& blob, size_t offset) {
  const auto [storage, start] = checked_range(blob, offset, 0, "kernel argument");
  const Allocation& allocation = storage->allocation();
  return DeviceRange{allocation.segment, allocation.offset + start};
}

// ---------------------------------------------------------------------------------------------
// AllocateBlob

AllocateBlob::AllocateBlob(vm::Stream& stream, std::shared_ptr<BlobObject> blob,
                           std::shared_ptr<const MemoryContext> memory_context)
    : vm::Instruction(stream), memory_context_(std::move(memory_context)) {
  OCLVM_DCHECK(blob != nullptr && blob->device() == stream.device());
  add_operand(std::move(blob), vm::Access::kWrite);
}

void AllocateBlob::execute(vm::ExecutionContext& context) {
  BlobObject& target = *blob();
  if (target.storage() != nullptr) {
    throw InvalidArgument("Expected a pending blob, but got " + blob_text(target) +
                          " that already has storage");
  }
  MemoryHistory& history = context.allocator.backend().history();
  if (history.on()) history.set_stream(stream().id());
  // Note [Stream-ordered release]: a block another stream released may still be in use there.
  context.worker.assert_execution_right();  // execute() runs inside dispatch()
  context.worker.order_allocation(context.stream.queue());
  std::shared_ptr<BlobStorage> storage;
  try {
    storage = BlobStorage::allocate(context.allocator, target.required_bytes());
  } catch (const OutOfMemoryError&) {
    if (history.on()) {
      history.record_oom(target.required_bytes(), stream().id(),
                         device_free_bytes(context.allocator), memory_context_);
    }
    throw;
  }
  try {
    target.attach_storage(storage);
  } catch (...) {
    storage->release();  // nothing may be held after a throw
    throw;
  }
  const Allocation& allocation = storage->allocation();
  if (history.on() && allocation) {
    history.record(MemoryAction::kAlloc, reinterpret_cast<uintptr_t>(allocation.ptr),
                   context.allocator.allocated_size(allocation), stream().id(), memory_context_);
  }
}

std::string AllocateBlob::describe() const {
  return blob_text(*blob()) + ", " + std::to_string(blob()->required_bytes()) + " B";
}

// ---------------------------------------------------------------------------------------------
// ReleaseTensor

ReleaseTensor::ReleaseTensor(vm::Stream& stream, std::shared_ptr<BlobObject> blob,
                             std::shared_ptr<const MemoryContext> memory_context)
    : vm::Instruction(stream), memory_context_(std::move(memory_context)) {
  OCLVM_DCHECK(blob != nullptr);
  add_operand(std::move(blob), vm::Access::kWrite);
}

void ReleaseTensor::execute(vm::ExecutionContext& context) {
  const std::shared_ptr<BlobStorage>& storage = blob()->storage();
  if (storage == nullptr) return;  // Note [Releasing a blob without storage]
  if (storage->released()) {
    throw InvalidArgument("Expected a live blob to release, but got " + blob_label(*blob()) +
                          " whose storage (allocation " +
                          std::to_string(storage->allocation().id) + ") is already released");
  }
  if (&storage->allocator() != &context.allocator) {
    throw InvalidArgument("Expected a blob allocated by this VM's allocator of " +
                          context.stream.device().str() + ", but got " + blob_label(*blob()) +
                          " from another allocator (a blob of another VM?)");
  }
  // How the block's next users are ordered after its last: Note [Stream-ordered release] below.
  // Note [A release whose ordering fails]: the block is given back all the same and the error
  // is the instruction's. A queue that cannot record a marker or finish has failed (no later
  // command of it can use the memory), and keeping the block would leak it for the life of the
  // process. The history sees the free requested, then completed just before the block goes back
  // (and before any segment_free that brings): from then on the allocator may hand it out,
  // ordered as Note [Stream-ordered release] says.
  MemoryHistory& history = context.allocator.backend().history();
  const Allocation& allocation = storage->allocation();
  const bool recorded = history.on() && allocation;
  const auto address = reinterpret_cast<uintptr_t>(allocation.ptr);
  const size_t bytes = recorded ? context.allocator.allocated_size(allocation) : 0;
  if (recorded) {
    history.set_stream(stream().id());
    history.record(MemoryAction::kFreeRequested, address, bytes, stream().id(), memory_context_);
  }
  const auto give_back = [&] {
    if (recorded) history.record(MemoryAction::kFreeCompleted, address, bytes, stream().id());
    storage->release();
  };
  try {
    context.worker.assert_execution_right();  // execute() runs inside dispatch()
    context.worker.order_release(context.stream.queue());
  } catch (...) {
    give_back();
    throw;
  }
  give_back();
}

// Note [Stream-ordered release]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A release runs on its blob's producer stream and writes the blob, so every command that may
// still use the memory is on this stream's queue or ordered before its end: other streams of the
// device by a soft sync the VM inserted, other devices by a signal set after their queue finished.
// The block goes back to the allocator at once, and the host does not wait for the device:
//   - the worker records a marker on the queue after the release (DeviceWorker::order_release;
//     none when the queue is idle or its last release marker already follows every command);
//   - a later allocation on the same stream may take the block with no wait: the queue is in
//     order, so its commands run after every command that used the old contents;
//   - an allocation on another stream of the device first makes its queue wait, on the device,
//     for each other stream's latest release marker (DeviceWorker::order_allocation);
//   - the marker joins the worker's in-flight markers, so a host section (which finishes them on
//     entry), the worker's exit and the in-flight bound all wait for it;
//   - a segment goes back to the driver (empty_cache, a memory limit, the out-of-memory ladder,
//     the system allocator's every free) only after the in-flight markers completed: the
//     allocator's segment-release guard finishes them first.
// What the caller sees stays synchronous: when the release returns, the block is the allocator's,
// and no later allocation sees its bytes change under it. With OCLVM_RELEASE=finish
// (ReleaseMode::kFinish) the release finishes its queue first instead: the block is idle when it
// goes back. Either way a list of allocations and releases alone needs no finish at its end
// (Instruction::needs_finish).

std::string ReleaseTensor::describe() const {
  return blob_text(*blob()) + ", " + std::to_string(blob()->required_bytes()) + " B";
}

// ---------------------------------------------------------------------------------------------
// CopyBlob

CopyBlob::CopyBlob(vm::Stream& stream, Kind kind, std::shared_ptr<BlobObject> src,
                   size_t src_offset, const void* host_src, std::shared_ptr<BlobObject> dst,
                   size_t dst_offset, void* host_dst, size_t bytes)
    : vm::Instruction(stream),
      kind_(kind),
      src_blob_(std::move(src)),
      src_offset_(src_offset),
      host_src_(host_src),
      dst_blob_(std::move(dst)),
      dst_offset_(dst_offset),
      host_dst_(host_dst),
      bytes_(bytes) {
  OCLVM_DCHECK((src_blob_ != nullptr) != (kind_ == Kind::kHostToDevice));
  OCLVM_DCHECK((dst_blob_ != nullptr) != (kind_ == Kind::kDeviceToHost));
  if (src_blob_ != nullptr) add_operand(src_blob_, vm::Access::kRead);
  if (dst_blob_ != nullptr) add_operand(dst_blob_, vm::Access::kWrite);
}

std::unique_ptr<CopyBlob> CopyBlob::host_to_device(vm::Stream& stream, const void* src,
                                                   std::shared_ptr<BlobObject> dst,
                                                   size_t dst_offset, size_t bytes) {
  OCLVM_DCHECK(dst != nullptr && dst->device() == stream.device());
  return std::unique_ptr<CopyBlob>(new CopyBlob(stream, Kind::kHostToDevice, nullptr, 0, src,
                                                std::move(dst), dst_offset, nullptr, bytes));
}

std::unique_ptr<CopyBlob> CopyBlob::device_to_host(vm::Stream& stream,
                                                   std::shared_ptr<BlobObject> src,
                                                   size_t src_offset, void* dst, size_t bytes) {
  OCLVM_DCHECK(src != nullptr && src->device() == stream.device());
  return std::unique_ptr<CopyBlob>(new CopyBlob(stream, Kind::kDeviceToHost, std::move(src),
                                                src_offset, nullptr, nullptr, 0, dst, bytes));
}

std::unique_ptr<CopyBlob> CopyBlob::blob_to_blob(vm::Stream& stream,
                                                 std::shared_ptr<BlobObject> src,
                                                 size_t src_offset,
                                                 std::shared_ptr<BlobObject> dst,
                                                 size_t dst_offset, size_t bytes) {
  OCLVM_DCHECK(src != nullptr && dst != nullptr && dst->device() == stream.device());
  const Kind kind = src->device() == dst->device() ? Kind::kDeviceToDevice : Kind::kCrossDevice;
  return std::unique_ptr<CopyBlob>(new CopyBlob(stream, kind, std::move(src), src_offset, nullptr,
                                                std::move(dst), dst_offset, nullptr, bytes));
}

void CopyBlob::execute(vm::ExecutionContext& context) {
  DeviceQueue& queue = context.stream.queue();
  switch (kind_) {
    case Kind::kHostToDevice: {
      const DeviceRange dst = resolve_range(*dst_blob_, dst_offset_, bytes_, "copy destination");
      if (bytes_ == 0) return;
      queue.enqueue_write(*dst.segment, dst.offset, host_src_, bytes_, /*blocking=*/false);
      return;
    }
    case Kind::kDeviceToHost: {
      const DeviceRange src = resolve_range(*src_blob_, src_offset_, bytes_, "copy source");
      if (bytes_ == 0) return;
      queue.enqueue_read(*src.segment, src.offset, host_dst_, bytes_, /*blocking=*/false);
      return;
    }
    case Kind::kDeviceToDevice: {
      const DeviceRange src = resolve_range(*src_blob_, src_offset_, bytes_, "copy source");
      const DeviceRange dst = resolve_range(*dst_blob_, dst_offset_, bytes_, "copy destination");
      if (bytes_ == 0) return;
      queue.enqueue_copy(*src.segment, src.offset, *dst.segment, dst.offset, bytes_);
      return;
    }
    case Kind::kCrossDevice:
      copy_across_devices(context);
      return;
  }
}

void CopyBlob::copy_across_devices(vm::ExecutionContext& context) {
  const DeviceRange src = resolve_range(*src_blob_, src_offset_, bytes_, "copy source");
  const DeviceRange dst = resolve_range(*dst_blob_, dst_offset_, bytes_, "copy destination");
  if (bytes_ == 0) return;
  // The VM has made this instruction wait until the source's producing commands completed on
  // its device; the source is read through this worker's own queue of that device, so no other
  // thread's queue is touched. Both transfers block, so the staging buffer may die here.
  DeviceQueue& source_queue = context.queue_on(src_blob_->device());
  DeviceQueue& target_queue = context.stream.queue();
  std::vector<uint8_t> staging(std::min(bytes_, kStagingChunkBytes));
  for (size_t done = 0; done < bytes_; done += staging.size()) {
    const size_t n = std::min(staging.size(), bytes_ - done);
    source_queue.enqueue_read(*src.segment, src.offset + done, staging.data(), n,
                              /*blocking=*/true);
    target_queue.enqueue_write(*dst.segment, dst.offset + done, staging.data(), n,
                               /*blocking=*/true);
  }
}

std::string CopyBlob::describe() const {
  auto side = [](const std::shared_ptr<BlobObject>& blob, const void* host, size_t offset,
                 size_t bytes) {
    if (blob == nullptr) return "host " + hex(reinterpret_cast<uintptr_t>(host));
    return blob_text(*blob) + " " + range_text(offset, bytes);
  };
  static constexpr const char* kKindNames[] = {"host to device", "device to host",
                                               "device to device", "across devices"};
  return std::string(kKindNames[static_cast<int>(kind_)]) + ": " +
         side(src_blob_, host_src_, src_offset_, bytes_) + " -> " +
         side(dst_blob_, host_dst_, dst_offset_, bytes_) + ", " + std::to_string(bytes_) + " B";
}

// ---------------------------------------------------------------------------------------------
// FillBlob

FillBlob::FillBlob(vm::Stream& stream, std::shared_ptr<BlobObject> blob, size_t offset,
                   size_t bytes, uint64_t pattern, size_t pattern_size)
    : vm::Instruction(stream),
      offset_(offset),
      bytes_(bytes),
      pattern_(pattern),
      pattern_size_(pattern_size) {
  OCLVM_DCHECK(blob != nullptr && blob->device() == stream.device());
  OCLVM_DCHECK(pattern_size == 1 || pattern_size == 2 || pattern_size == 4 || pattern_size == 8);
  for (size_t i = 0; i < pattern_bytes_.size(); ++i) {
    pattern_bytes_[i] = static_cast<uint8_t>(pattern >> (8 * i));
  }
  add_operand(std::move(blob), vm::Access::kWrite);
}

void FillBlob::execute(vm::ExecutionContext& context) {
  const DeviceRange dst = resolve_range(*operands()[0].blob, offset_, bytes_, "fill target");
  if (bytes_ == 0) return;
  context.stream.queue().enqueue_fill(*dst.segment, dst.offset, pattern_bytes_.data(),
                                      pattern_size_, bytes_);
}

std::string FillBlob::describe() const {
  return blob_text(*operands()[0].blob) + " " + range_text(offset_, bytes_) + " with " +
         std::to_string(pattern_size_) + "-byte pattern " + hex(pattern_);
}

// ---------------------------------------------------------------------------------------------
// SoftSyncStream

SoftSyncStream::SoftSyncStream(vm::Stream& from, vm::Stream& to)
    : vm::Instruction(to), from_(from) {
  OCLVM_DCHECK(from.device() == to.device());
}

void SoftSyncStream::execute(vm::ExecutionContext& context) {
  context.stream.queue().wait_marker(from_.queue().record_marker());
}

std::string SoftSyncStream::describe() const {
  return from_.name() + " -> " + stream().name();
}

// ---------------------------------------------------------------------------------------------
// Barrier

Barrier::Barrier(vm::Stream& stream, std::function<void()> callback)
    : vm::Instruction(stream), callback_(std::move(callback)) {
  OCLVM_DCHECK(static_cast<bool>(callback_));
}

void Barrier::execute(vm::ExecutionContext& context) {
  context.stream.queue().finish();
  callback_();
}

std::string Barrier::describe() const { return "after " + stream().name(); }

// ---------------------------------------------------------------------------------------------
// AccessBlobByCallback

AccessBlobByCallback::AccessBlobByCallback(vm::Stream& stream, std::shared_ptr<BlobObject> blob,
                                           size_t offset, size_t bytes, HostAccess mode,
                                           Callback callback)
    : vm::Instruction(stream),
      offset_(offset),
      bytes_(bytes),
      mode_(mode),
      callback_(std::move(callback)) {
  OCLVM_DCHECK(blob != nullptr && blob->device() == stream.device());
  OCLVM_DCHECK(static_cast<bool>(callback_));
  add_operand(std::move(blob),
              mode == HostAccess::kWrite ? vm::Access::kWrite : vm::Access::kRead);
}

void AccessBlobByCallback::execute(vm::ExecutionContext& context) {
  const DeviceRange range = resolve_range(*operands()[0].blob, offset_, bytes_, "mapped blob");
  if (bytes_ == 0) {
    callback_(nullptr, 0);
    return;
  }
  DeviceQueue& queue = context.stream.queue();
  void* host = queue.map(*range.segment, range.offset, bytes_, mode_ == HostAccess::kWrite);
  try {
    callback_(host, bytes_);
  } catch (...) {
    queue.unmap(*range.segment, host);
    throw;
  }
  queue.unmap(*range.segment, host);
}

std::string AccessBlobByCallback::describe() const {
  return std::string(mode_ == HostAccess::kWrite ? "write " : "read ") +
         blob_text(*operands()[0].blob) + " " + range_text(offset_, bytes_);
}

HostMapping::HostMapping(std::shared_ptr<BlobObject> blob, size_t offset, size_t bytes,
                         HostAccess mode)
    : blob_(std::move(blob)), offset_(offset), bytes_(bytes), mode_(mode) {
  OCLVM_DCHECK(blob_ != nullptr);
}

namespace {

vm::Access access_of(HostAccess mode) {
  return mode == HostAccess::kWrite ? vm::Access::kWrite : vm::Access::kRead;
}

std::string mapping_text(const HostMapping& mapping, size_t offset) {
  return std::string(mapping.mode() == HostAccess::kWrite ? "write " : "read ") +
         blob_text(*mapping.blob()) + " " + range_text(offset, mapping.bytes());
}

}  // namespace

MapBlob::MapBlob(vm::Stream& stream, std::shared_ptr<HostMapping> mapping)
    : vm::Instruction(stream), mapping_(std::move(mapping)) {
  OCLVM_DCHECK(mapping_ != nullptr && mapping_->blob()->device() == stream.device());
  add_operand(mapping_->blob(), access_of(mapping_->mode()));
}

void MapBlob::execute(vm::ExecutionContext& context) {
  HostMapping& mapping = *mapping_;
  if (mapping.mapped_) {
    throw InvalidArgument("Expected a mapping that is not mapped, but got " +
                          mapping_text(mapping, mapping.offset_) + " already mapped");
  }
  const DeviceRange range =
      resolve_range(*mapping.blob_, mapping.offset_, mapping.bytes_, "mapped blob");
  void* host = nullptr;
  if (mapping.bytes_ > 0) {
    host = context.stream.queue().map(*range.segment, range.offset, mapping.bytes_,
                                      mapping.mode_ == HostAccess::kWrite);
  }
  mapping.segment_ = range.segment;
  mapping.host_ = host;
  mapping.mapped_ = true;
}

std::string MapBlob::describe() const { return mapping_text(*mapping_, mapping_->offset_); }

UnmapBlob::UnmapBlob(vm::Stream& stream, std::shared_ptr<HostMapping> mapping)
    : vm::Instruction(stream), mapping_(std::move(mapping)) {
  OCLVM_DCHECK(mapping_ != nullptr && mapping_->blob()->device() == stream.device());
  add_operand(mapping_->blob(), access_of(mapping_->mode()));
}

void UnmapBlob::execute(vm::ExecutionContext& context) {
  HostMapping& mapping = *mapping_;
  if (!mapping.mapped_) return;
  void* host = mapping.host_;
  const Segment* segment = mapping.segment_;
  mapping.host_ = nullptr;
  mapping.segment_ = nullptr;
  mapping.mapped_ = false;
  if (host != nullptr) context.stream.queue().unmap(*segment, host);
}

std::string UnmapBlob::describe() const { return mapping_text(*mapping_, mapping_->offset_); }

// ---------------------------------------------------------------------------------------------
// Allocator control

void EmptyCache::execute(vm::ExecutionContext& context) { context.allocator.empty_cache(); }

std::string EmptyCache::describe() const { return stream().device().str(); }

void ResetStats::execute(vm::ExecutionContext& context) {
  if (kind_ == ResetKind::kPeak) {
    context.allocator.reset_peak_stats();
  } else {
    context.allocator.reset_accumulated_stats();
  }
}

std::string ResetStats::describe() const {
  return std::string(kind_ == ResetKind::kPeak ? "peak" : "accumulated") + " on " +
         stream().device().str();
}

void QueryStats::execute(vm::ExecutionContext& context) {
  *out_ = context.allocator.stats();
  if (limit_out_ != nullptr) *limit_out_ = context.allocator.memory_limit();
}

std::string QueryStats::describe() const { return stream().device().str(); }

void ConfigureMemoryHistory::execute(vm::ExecutionContext& context) {
  context.allocator.backend().history().configure(options_);
}

std::string ConfigureMemoryHistory::describe() const {
  static constexpr const char* kModes[] = {"off", "state", "all"};
  return std::string(kModes[static_cast<int>(options_.mode)]) + " on " + stream().device().str();
}

void TakeMemorySnapshot::execute(vm::ExecutionContext& context) {
  MemoryHistory& history = context.allocator.backend().history();
  history.record(MemoryAction::kSnapshot, 0, 0, stream().id());
  DeviceMemorySnapshot snapshot;
  snapshot.device = stream().device();
  snapshot.segments = context.allocator.segments();
  for (SegmentSnapshot& segment : snapshot.segments) {
    for (BlockSnapshot& block : segment.blocks) {
      if (block.allocated) block.context = history.context_of(block.address);
    }
  }
  if (with_events_) snapshot.events = history.events();
  snapshot.dropped_events = history.dropped();
  *out_ = std::move(snapshot);
}

void SetMemoryLimit::execute(vm::ExecutionContext& context) {
  context.allocator.set_memory_limit(bytes_);
}

std::string SetMemoryLimit::describe() const {
  return (bytes_ == 0 ? std::string("none") : std::to_string(bytes_) + " B") + " on " +
         stream().device().str();
}

// ---------------------------------------------------------------------------------------------
// StreamEvent, RecordEvent, WaitEvent, RecordBlobUse

bool StreamEvent::recorded() const { return marker() != nullptr; }

bool StreamEvent::query() const {
  const std::shared_ptr<QueueMarker> point = marker();
  return point == nullptr || point->complete();
}

void StreamEvent::synchronize() const {
  if (const std::shared_ptr<QueueMarker> point = marker()) point->wait();
}

double StreamEvent::elapsed_ms_since(const StreamEvent& start) const {
  if (!timing_ || !start.timing_) {
    throw InvalidArgument("Expected two timing events, but got " +
                          std::string(start.timing_ ? "an end" : "a start") +
                          " event created without timing");
  }
  // Each event is read under its own lock, one after the other: no lock order to keep, and
  // `start` may be this very event.
  const auto [from_recorded, from] = start.completion();
  const auto [to_recorded, to] = completion();
  if (!from_recorded || !to_recorded) {
    throw InvalidArgument("Expected two recorded events, but got one never recorded");
  }
  return std::chrono::duration<double, std::milli>(to - from).count();
}

void StreamEvent::set(std::shared_ptr<QueueMarker> marker,
                      std::chrono::steady_clock::time_point completed) {
  MutexLock lock(mutex_);
  marker_ = std::move(marker);
  completed_at_ = completed;
}

std::pair<bool, std::chrono::steady_clock::time_point> StreamEvent::completion() const {
  MutexLock lock(mutex_);
  return {marker_ != nullptr, completed_at_};
}

std::shared_ptr<QueueMarker> StreamEvent::marker() const {
  MutexLock lock(mutex_);
  return marker_;
}

RecordEvent::RecordEvent(vm::Stream& stream, std::shared_ptr<StreamEvent> event)
    : vm::Instruction(stream), event_(std::move(event)) {
  OCLVM_DCHECK(event_ != nullptr);
}

void RecordEvent::execute(vm::ExecutionContext& context) {
  DeviceQueue& queue = context.stream.queue();
  std::chrono::steady_clock::time_point completed{};
  if (event_->timing()) {
    queue.finish();
    completed = std::chrono::steady_clock::now();
  }
  event_->set(queue.record_marker(), completed);
}

std::string RecordEvent::describe() const {
  return std::string(event_->timing() ? "timing " : "") + "event on " + stream().name();
}

WaitEvent::WaitEvent(vm::Stream& stream, std::shared_ptr<StreamEvent> event)
    : vm::Instruction(stream), event_(std::move(event)) {
  OCLVM_DCHECK(event_ != nullptr);
}

void WaitEvent::execute(vm::ExecutionContext& context) {
  if (const std::shared_ptr<QueueMarker> point = event_->marker()) {
    context.stream.queue().wait_marker(point);
  }
}

std::string WaitEvent::describe() const { return "event, on " + stream().name(); }

RecordBlobUse::RecordBlobUse(vm::Stream& stream, std::shared_ptr<BlobObject> blob)
    : vm::Instruction(stream) {
  OCLVM_DCHECK(blob != nullptr && blob->device() == stream.device());
  add_operand(std::move(blob), vm::Access::kRead);
}

std::string RecordBlobUse::describe() const {
  return blob_text(*operands()[0].blob) + " on " + stream().name();
}

}  // namespace oclvm
