// storage/queue.h — DeviceQueue: an in-order command queue of one device, device-agnostic.
//
// The VM gives every stream a DeviceQueue (an in-order cl::CommandQueue for OpenCL; immediate
// execution for the host device). Commands are enqueued in order and complete in order.
//
//   DeviceQueue   enqueue_write / enqueue_read / enqueue_fill / enqueue_copy on (segment, offset)
//                 ranges, map/unmap for host access, markers and finish.
//                 enqueue_native lends the driver's queue to a library (Note [Native commands]).
//   QueueMarker   a point in a queue: complete once every command enqueued before it has
//                 completed. A marker may be waited on by the host, or by another queue of the
//                 same device (a soft sync: record on one queue, wait on the other).
//
// Ranges are checked against their segments (InvalidArgument, nothing enqueued); every driver
// failure throws (BackendError / OutOfMemoryError naming the call and the device). n == 0 is a
// no-op that touches no driver.
//
// Host memory lifetime: a non-blocking write or read uses `src` / `dst` until the command
// completes; the caller keeps it alive until a marker after it, or finish(), has been waited on.
//
// Thread-safety: confined to one thread at a time — the holder of its device's execution right
// (vm/device_worker.h). The OpenCL API allows calls on one queue from several threads, but PoCL's
// drivers have deadlocked when a marker was recorded on a queue while another thread enqueued on
// it, so oclvm never does that. QueueMarker::wait() and complete() may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "oclvm/storage/backend.h"

namespace oclvm {

class QueueMarker {
 public:
  explicit QueueMarker(Device device) : device_(device) {}
  virtual ~QueueMarker() = default;
  // The device of the queue the marker was recorded on.
  Device device() const { return device_; }
  // Blocks the calling thread until the marker is complete. Throws BackendError if the driver
  // reports that a command before it failed.
  virtual void wait() = 0;
  // True once the marker is complete; never blocks. Throws BackendError as wait() does.
  virtual bool complete() = 0;

 private:
  const Device device_;
};

// Note [Native commands]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A library that speaks the driver's API (CLBlast's GEMM, a vendor's FFT) cannot be written as
// oclvm kernels, yet its commands must take their place in stream order among the VM's. So a
// queue lends the driver's own queue object to a body, for the length of one call, on the thread
// that holds the device's execution right (the only one that enqueues on the queue), and counts
// what the body enqueued as one command, so finish(), markers and the release ordering cover it.
// The VM's NativeCall instruction (instructions/instructions.h) gives the body the blob ranges it
// declared, as the driver's buffer objects (MemoryBackend::native_memory) with byte offsets, and
// orders the call by those ranges' accesses like a kernel. What the body may do: enqueue commands
// on that queue touching only those ranges, create and cache its own programs and scratch
// buffers, and return without waiting. What it must not: use the VM, keep the queue or buffers
// after it returns, or wait on commands another queue has yet to run.
class DeviceQueue {
 public:
  explicit DeviceQueue(MemoryBackend& backend) : backend_(backend) {}
  virtual ~DeviceQueue() = default;
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  MemoryBackend& backend() const { return backend_; }
  Device device() const { return backend_.device(); }

  void enqueue_write(const Segment& dst, size_t offset, const void* src, size_t n, bool blocking);
  void enqueue_read(const Segment& src, size_t offset, void* dst, size_t n, bool blocking);
  // Fills n bytes with a repeated pattern of pattern_size bytes (1, 2, 4, 8, 16, 32, 64 or 128);
  // n and offset must be multiples of pattern_size.
  void enqueue_fill(const Segment& dst, size_t offset, const void* pattern, size_t pattern_size,
                    size_t n);
  // Same-device copy (segments of this queue's backend); the ranges must not overlap when
  // src and dst are the same segment.
  void enqueue_copy(const Segment& src, size_t src_offset, const Segment& dst, size_t dst_offset,
                    size_t n);
  // Maps [offset, offset + n) for host access after every earlier command; returns the host
  // pointer, valid until unmap. `for_write`: the host will write (contents may be read too).
  void* map(const Segment& segment, size_t offset, size_t n, bool for_write);
  void unmap(const Segment& segment, void* host);
  // Launches `kernel` (made by this queue's backend) over `global` work-items in groups of
  // `local` (dims entries each, 1 to 3; local all zero: the driver chooses). `args` fill the
  // kernel's parameters in order; a kBuffer argument fills two (Note [Blob arguments] in
  // storage/kernel.h). The caller has matched them to kernel.params(). A global size of 0 in any
  // dimension launches nothing.
  void enqueue_kernel(const Kernel& kernel, const KernelArg* args, size_t num_args,
                      const size_t* global, const size_t* local, uint32_t dims);

  // Note [Native commands]: calls `commands` with the driver's own queue object (OpenCL: the
  // cl_command_queue), for a library of the caller's (a BLAS) to enqueue on, and counts what it
  // enqueued as one command that finish() waits for. Throws InvalidArgument on a device that has
  // no such object (the host device), and what `commands` throws.
  void enqueue_native(const std::function<void(void* native_queue)>& commands);

  // A marker after every command enqueued so far. The queue is flushed with it: a marker ends
  // work the host does not wait for at once (an asynchronous batch, a release), and a driver may
  // otherwise hold those commands back until its next blocking call.
  virtual std::shared_ptr<QueueMarker> record_marker() = 0;
  // Makes later commands of this queue wait for `marker`: on the device when the marker was
  // recorded on a queue of the same device, otherwise by waiting for it on the calling thread.
  virtual void wait_marker(const std::shared_ptr<QueueMarker>& marker) = 0;
  // Blocks until every command enqueued before the call has completed. Returns at once, without
  // a driver call, when a finish that completed already covered all of them (Note [Cheap finish]).
  void finish();
  // Commands counted so far (markers included); unchanged means nothing was enqueued since.
  uint64_t commands() const { return enqueued_.load(std::memory_order_acquire); }
  // True when a completed finish covered every command counted so far: nothing enqueued on this
  // queue can still be running. Never calls the driver.
  bool idle() const {
    return finished_.load(std::memory_order_acquire) >= enqueued_.load(std::memory_order_acquire);
  }

 protected:
  virtual void do_write(void* native, size_t offset, const void* src, size_t n, bool blocking) = 0;
  virtual void do_read(void* native, size_t offset, void* dst, size_t n, bool blocking) = 0;
  virtual void do_fill(void* native, size_t offset, const void* pattern, size_t pattern_size,
                       size_t n) = 0;
  virtual void do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) = 0;
  virtual void* do_map(void* native, size_t offset, size_t n, bool for_write) = 0;
  virtual void do_unmap(void* native, void* host) = 0;
  // Only backends whose kernel() makes kernels get here.
  virtual void do_launch(const Kernel& kernel, const KernelArg* args, size_t num_args,
                         const size_t* global, const size_t* local, uint32_t dims);
  virtual void do_finish() = 0;
  // The driver's queue object for enqueue_native; nullptr: the device has none.
  virtual void* native_queue() { return nullptr; }
  // Counts a command that finish() must wait for; called after it was enqueued.
  void count_command() { enqueued_.fetch_add(1, std::memory_order_release); }

 private:
  MemoryBackend& backend_;
  // Note [Cheap finish]: commands counted so far, and the count a completed finish covered.
  // finish() reads enqueued_ first, so a skip is only taken when a finish that started after
  // every counted command has completed: a finish never skips past a command still running, and
  // idle() is true only when nothing enqueued can still run (a stream-ordered release then needs
  // no marker).
  std::atomic<uint64_t> enqueued_{0};
  std::atomic<uint64_t> finished_{0};
};

}  // namespace oclvm
