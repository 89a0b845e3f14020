// storage/queue.cc — argument checks shared by every DeviceQueue.
#include "oclvm/storage/queue.h"

#include <string>

#include "oclvm/storage/errors.h"

namespace oclvm {

void DeviceQueue::enqueue_write(const Segment& dst, size_t offset, const void* src, size_t n,
                                bool blocking) {
  backend_.check_range(dst, offset, n, "a write");
  if (n == 0) return;
  backend_.maybe_inject(FaultPoint::kCopy, "enqueueing a write");
  do_write(dst.native, offset, src, n, blocking);
  count_command();
}

void DeviceQueue::enqueue_read(const Segment& src, size_t offset, void* dst, size_t n,
                               bool blocking) {
  backend_.check_range(src, offset, n, "a read");
  if (n == 0) return;
  backend_.maybe_inject(FaultPoint::kCopy, "enqueueing a read");
  do_read(src.native, offset, dst, n, blocking);
  count_command();
}

void DeviceQueue::enqueue_fill(const Segment& dst, size_t offset, const void* pattern,
                               size_t pattern_size, size_t n) {
  backend_.check_range(dst, offset, n, "a fill");
  if (pattern_size == 0 || pattern_size > 128 || (pattern_size & (pattern_size - 1)) != 0) {
    throw InvalidArgument("Expected a fill pattern of 1, 2, 4, ..., 128 bytes, but got " +
                          std::to_string(pattern_size));
  }
  if (n % pattern_size != 0 || offset % pattern_size != 0) {
    throw InvalidArgument("Expected a fill offset and size that are multiples of the " +
                          std::to_string(pattern_size) + "-byte pattern, but got offset " +
                          std::to_string(offset) + " and " + std::to_string(n) + " bytes");
  }
  if (n == 0) return;
  backend_.maybe_inject(FaultPoint::kFill, "enqueueing a fill");
  do_fill(dst.native, offset, pattern, pattern_size, n);
  count_command();
}

void DeviceQueue::enqueue_copy(const Segment& src, size_t src_offset, const Segment& dst,
                               size_t dst_offset, size_t n) {
  backend_.check_range(src, src_offset, n, "a copy source");
  backend_.check_range(dst, dst_offset, n, "a copy destination");
  if (&src == &dst && src_offset < dst_offset + n && dst_offset < src_offset + n) {
    throw InvalidArgument("Expected non-overlapping copy ranges in one segment, but got " +
                          std::to_string(n) + " bytes from offset " + std::to_string(src_offset) +
                          " to offset " + std::to_string(dst_offset));
  }
  if (n == 0) return;
  backend_.maybe_inject(FaultPoint::kCopy, "enqueueing a copy");
  do_copy(src.native, src_offset, dst.native, dst_offset, n);
  count_command();
}

void* DeviceQueue::map(const Segment& segment, size_t offset, size_t n, bool for_write) {
  backend_.check_range(segment, offset, n, "a map");
  if (n == 0) return nullptr;
  backend_.maybe_inject(FaultPoint::kMap, "mapping for the host");
  void* host = do_map(segment.native, offset, n, for_write);
  count_command();
  return host;
}

void DeviceQueue::unmap(const Segment& segment, void* host) {
  if (host == nullptr) return;
  do_unmap(segment.native, host);
  count_command();
}

void DeviceQueue::enqueue_kernel(const Kernel& kernel, const KernelArg* args, size_t num_args,
                                 const size_t* global, const size_t* local, uint32_t dims) {
  if (kernel.device() != device()) {
    throw InvalidArgument("Expected a kernel compiled for " + device().str() + ", but got one for " +
                          kernel.device().str());
  }
  if (dims < 1 || dims > 3) {
    throw InvalidArgument("Expected 1 to 3 dimensions for a launch, but got " +
                          std::to_string(dims));
  }
  for (uint32_t d = 0; d < dims; ++d) {
    if (global[d] == 0) return;
  }
  backend_.maybe_inject(FaultPoint::kLaunch, "enqueueing a kernel");
  do_launch(kernel, args, num_args, global, local, dims);
  count_command();
}

void DeviceQueue::do_launch(const Kernel&, const KernelArg*, size_t, const size_t*, const size_t*,
                            uint32_t) {
  throw InvalidArgument("Expected a device that runs OpenCL kernels, but got " + device().str());
}

void DeviceQueue::enqueue_native(const std::function<void(void* native_queue)>& commands) {
  void* const queue = native_queue();
  if (queue == nullptr) {
    throw InvalidArgument("Expected a device with a native command queue, but got " +
                          device().str());
  }
  backend_.maybe_inject(FaultPoint::kLaunch, "enqueueing native commands");
  try {
    commands(queue);
  } catch (...) {
    count_command();  // it may have enqueued some before it failed: a finish must cover them
    throw;
  }
  count_command();
}

void DeviceQueue::finish() {
  const uint64_t target = enqueued_.load(std::memory_order_acquire);
  if (finished_.load(std::memory_order_acquire) >= target) return;
  do_finish();
  // An injected finish failure comes after the driver's finish: it models a driver that reports
  // an error there, without leaving commands running that a caller would then race with.
  backend_.maybe_inject(FaultPoint::kFinish, "finishing a queue");
  // Raise finished_ to target (never lower it: another thread may have covered more).
  uint64_t seen = finished_.load(std::memory_order_relaxed);
  while (seen < target &&
         !finished_.compare_exchange_weak(seen, target, std::memory_order_release)) {
  }
}

}  // namespace oclvm
