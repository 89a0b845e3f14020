// storage/backend.cc — argument checks, ids and address reservation shared by every backend.
#include "oclvm/storage/backend.h"

#include <cstdio>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"

namespace oclvm {
namespace {

std::atomic<uint64_t> next_segment_id{1};

}  // namespace

Segment* MemoryBackend::create_segment(size_t bytes) {
  if (bytes == 0) {
    throw InvalidArgument("Expected a segment size of at least 1 byte on " + device_.str() +
                          ", but got 0");
  }
  if (bytes > properties_.max_alloc_bytes) {
    throw InvalidArgument("Expected a segment size of at most " +
                          std::to_string(properties_.max_alloc_bytes) +
                          " bytes (the device's largest single allocation) on " + device_.str() +
                          ", but got " + std::to_string(bytes));
  }
  if (faults_.should_fail(FaultPoint::kSegment)) {
    throw OutOfMemoryError("Out of memory on " + device_.str() + ": the driver refused a segment of " +
                           std::to_string(bytes) +
                           " bytes (injected fault: OCLVM_FAULTS segment rule)");
  }
  auto* segment = new Segment();
  segment->size = bytes;
  segment->backend = this;
  try {
    segment->address = AddressSpace::instance().reserve(segment);
  } catch (...) {
    delete segment;
    throw;
  }
  try {
    segment->native = do_create(bytes);
    segment->host = do_host_address(segment->native);
  } catch (...) {
    AddressSpace::instance().release(segment);
    delete segment;
    throw;
  }
  segment->id = next_segment_id.fetch_add(1, std::memory_order_relaxed);
  live_segments_.fetch_add(1, std::memory_order_relaxed);
  history_.record_segment(MemoryAction::kSegmentAlloc, segment->address, bytes);
  return segment;
}

void MemoryBackend::release_segment(Segment* segment) noexcept {
  if (segment == nullptr) return;
  OCLVM_DCHECK(segment->backend == this);
  history_.record_segment(MemoryAction::kSegmentFree, segment->address, segment->size);
  if (!do_release(segment->native, segment->size)) {
    release_failures_.fetch_add(1, std::memory_order_relaxed);
  }
  AddressSpace::instance().release(segment);
  delete segment;
  live_segments_.fetch_sub(1, std::memory_order_relaxed);
}

void MemoryBackend::maybe_inject(FaultPoint point, const char* command) const {
  if (!faults_.should_fail(point)) return;
  throw BackendError(std::string(command) + " failed on " + device_.str() +
                         " (injected fault: OCLVM_FAULTS " + fault_point_name(point) + " rule)",
                     /*code=*/-5);  // CL_OUT_OF_RESOURCES, what a real queue failure often is
}

void MemoryBackend::check_range(const Segment& segment, size_t offset, size_t n,
                                const char* what) const {
  if (segment.backend != this) {
    throw InvalidArgument(std::string("Expected a segment of ") + device_.str() + " for " + what +
                          ", but got one of another device");
  }
  if (offset > segment.size || n > segment.size - offset) {
    throw InvalidArgument(std::string("Expected ") + what + " within the " +
                          std::to_string(segment.size) + "-byte segment on " + device_.str() +
                          ", but got " + std::to_string(n) + " bytes at offset " +
                          std::to_string(offset));
  }
}

void MemoryBackend::write(const Segment& dst, size_t offset, const void* src, size_t n) {
  check_range(dst, offset, n, "a write");
  if (n == 0) return;
  maybe_inject(FaultPoint::kCopy, "a blocking write");
  do_write(dst.native, offset, src, n);
}

void MemoryBackend::read(const Segment& src, size_t offset, void* dst, size_t n) {
  check_range(src, offset, n, "a read");
  if (n == 0) return;
  maybe_inject(FaultPoint::kCopy, "a blocking read");
  do_read(src.native, offset, dst, n);
}

void MemoryBackend::fill(const Segment& dst, size_t offset, uint8_t value, size_t n) {
  check_range(dst, offset, n, "a fill");
  if (n == 0) return;
  maybe_inject(FaultPoint::kFill, "a blocking fill");
  do_fill(dst.native, offset, value, n);
}

void MemoryBackend::copy(const Segment& src, size_t src_offset, const Segment& dst,
                         size_t dst_offset, size_t n) {
  check_range(src, src_offset, n, "a copy source");
  check_range(dst, dst_offset, n, "a copy destination");
  if (n == 0) return;
  maybe_inject(FaultPoint::kCopy, "a blocking copy");
  do_copy(src.native, src_offset, dst.native, dst_offset, n);
}

std::shared_ptr<const Kernel> MemoryBackend::kernel(const KernelSource& /*source*/) {
  throw InvalidArgument("Expected a device that runs OpenCL kernels, but got " + device_.str());
}

}  // namespace oclvm
