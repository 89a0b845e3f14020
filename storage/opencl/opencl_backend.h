// storage/opencl/opencl_backend.h — one OpenCL device as a MemoryBackend.
//
//   CLAllocation     one system allocation: {cl::Buffer buffer; DeviceIndex device; size_t size;
//                    void* svm;} It is the `native` record of every Segment an OpenCLBackend
//                    creates.
//   OpenCLBackend    owns the device's context (one per device, so devices are isolated: a buffer
//                    of one device is never used on another's queue) and its in-order command
//                    queue. Segments are cl::Buffers that are allocated for real at creation:
//                    clEnqueueMigrateMemObjects(CONTENT_UNDEFINED) + clFinish right after
//                    clCreateBuffer, because PoCL and GPU drivers otherwise allocate on first use
//                    and would report out-of-memory at some later enqueue.
//
// Note [Host-addressable segments]
// On a device with unified host memory and fine-grained buffer SVM (every PoCL CPU device), a
// segment's memory comes from clSVMAlloc(CL_MEM_SVM_FINE_GRAIN_BUFFER) and its cl::Buffer is
// created over it (CL_MEM_USE_HOST_PTR), so every command works on the buffer as before and the
// host reads and writes the same bytes at Segment::host without a map: fine-grained SVM is
// coherent at the synchronisation points (a finished queue), which the VM orders. The SVM memory
// is freed by the buffer's destructor callback, which the driver calls once the last command
// using the buffer has completed — not before, as with a plain buffer's deferred release.
// Elsewhere (GPUs with their own memory, OpenCL 1.2 drivers) segments are plain buffers and
// Segment::host stays nullptr.
//
// Note [The kernel cache]
// kernel() keeps every program it built, keyed by (options, source), and every kernel made from
// them, keyed by (options, source, name), for the backend's life. A program being built is a
// shared future in the map, so concurrent callers of one source wait for one build and the lock is
// not held while compiling. A program is built from the binary kept on disk when the disk cache
// (storage/kernel_cache.h) has one for this platform, device and driver, else from source, and its
// binary is then stored. A build that fails leaves the map, so the next call builds again.
//
// Note [A queue's own kernel objects]
// A cl_kernel holds its arguments, and setting them is not thread-safe: two threads launching
// one cl_kernel (two VMs on one device, each with its worker) could each launch with the other's
// arguments. So the backend's kernel object is never launched; each OpenCLQueue makes its own
// from the program (clCreateKernel) on its first launch of a kernel, and only the queue's
// confined user (storage/queue.h) sets its arguments and launches it.
//
// Every OpenCL call is checked (cl_check.h); errors name the call, the error and the device.
// Thread-safety: thread-compatible, like every MemoryBackend (storage/backend.h); the kernel
// cache's state is guarded by kernel_mutex_.
#pragma once

#include <CL/opencl.hpp>

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "oclvm/storage/backend.h"
#include "oclvm/storage/kernel_cache.h"
#include "oclvm/storage/queue.h"
#include "oclvm/storage/thread_annotations.h"

namespace oclvm::opencl {

struct CLAllocation {
  cl::Buffer buffer;    // the driver's buffer; released when the record is destroyed
  DeviceIndex device;   // opencl:device that owns it
  size_t size;          // bytes
  void* svm = nullptr;  // fine-grained SVM memory under the buffer (Note [Host-addressable
                        // segments]); nullptr for a plain buffer
};

class OpenCLBackend final : public MemoryBackend {
 public:
  OpenCLBackend(Device device, DeviceProperties properties, cl::Device cl_device,
                cl::Context context, cl::CommandQueue queue);

  const cl::Device& cl_device() const { return cl_device_; }
  const cl::Context& context() const { return context_; }
  cl::CommandQueue& queue() { return queue_; }

  // A new in-order queue on this device's context.
  std::unique_ptr<DeviceQueue> create_queue() override;

  // Note [The kernel cache].
  std::shared_ptr<const Kernel> kernel(const KernelSource& source) override;
  KernelCacheStats kernel_cache_stats() const override;
  void set_kernel_cache_dir(const std::string& dir) override;
  void forget_programs() override;
  void* native_memory(const Segment& segment) const override;

  // The CLAllocation behind a segment of this backend (segment.native).
  static CLAllocation& allocation_of(const Segment& segment) {
    return *static_cast<CLAllocation*>(segment.native);
  }

 protected:
  void* do_create(size_t bytes) override;
  void* do_host_address(void* native) const override {
    return static_cast<CLAllocation*>(native)->svm;
  }
  bool do_release(void* native, size_t bytes) noexcept override;
  void do_write(void* native, size_t offset, const void* src, size_t n) override;
  void do_read(void* native, size_t offset, void* dst, size_t n) override;
  void do_fill(void* native, size_t offset, uint8_t value, size_t n) override;
  void do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) override;

 private:
  const cl::Device cl_device_;
  const cl::Context context_;
  const std::string where_;  // "opencl:N", for error messages
  cl::CommandQueue queue_;

  cl::Program build_program(const std::string& full_source, const std::string& options,
                            const KernelSource& source, const KernelDiskCache& disk);

  mutable Mutex kernel_mutex_;
  std::map<std::string, std::shared_future<cl::Program>> programs_ OCLVM_GUARDED_BY(kernel_mutex_);
  std::map<std::string, std::shared_ptr<const Kernel>> kernels_ OCLVM_GUARDED_BY(kernel_mutex_);
  KernelCacheStats kernel_stats_ OCLVM_GUARDED_BY(kernel_mutex_);
  std::string kernel_cache_dir_ OCLVM_GUARDED_BY(kernel_mutex_);
};

// A kernel of an OpenCLBackend. Its cl::Kernel's arguments are set only by the holder of the
// device's execution right (storage/kernel.h).
class OpenCLKernel final : public Kernel {
 public:
  OpenCLKernel(KernelSource source, Device device, std::vector<KernelParam> params,
               bool params_known, cl::Kernel kernel);
  // The kernel object the backend made. Launches do not use it: each queue sets arguments on a
  // kernel object of its own (Note [A queue's own kernel objects]).
  cl::Kernel& native() const { return kernel_; }
  // Unique among the process's OpenCLKernels, never reused (unlike an address).
  uint64_t id() const { return id_; }

 private:
  mutable cl::Kernel kernel_;
  const uint64_t id_;
};

// An in-order cl::CommandQueue as a DeviceQueue. Markers are cl::Events of
// clEnqueueMarkerWithWaitList; a same-device wait is clEnqueueBarrierWithWaitList.
class OpenCLQueue final : public DeviceQueue {
 public:
  OpenCLQueue(OpenCLBackend& backend, cl::CommandQueue queue);

  cl::CommandQueue& native() { return queue_; }

  std::shared_ptr<QueueMarker> record_marker() override;
  void wait_marker(const std::shared_ptr<QueueMarker>& marker) override;

 protected:
  void do_write(void* native, size_t offset, const void* src, size_t n, bool blocking) override;
  void do_read(void* native, size_t offset, void* dst, size_t n, bool blocking) override;
  void do_fill(void* native, size_t offset, const void* pattern, size_t pattern_size,
               size_t n) override;
  void do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) override;
  void* do_map(void* native, size_t offset, size_t n, bool for_write) override;
  void do_unmap(void* native, void* host) override;
  void do_launch(const Kernel& kernel, const KernelArg* args, size_t num_args, const size_t* global,
                 const size_t* local, uint32_t dims) override;
  void do_finish() override;
  void* native_queue() override { return queue_(); }

 private:
  // This queue's kernel object for `kernel` (Note [A queue's own kernel objects]), made on first
  // use.
  cl::Kernel& own_kernel(const OpenCLKernel& kernel);

  const std::string where_;
  cl::CommandQueue queue_;
  // Keyed by OpenCLKernel::id(); entries live as long as the queue. The last one used is kept
  // at hand, as launches of one kernel often follow each other.
  std::unordered_map<uint64_t, cl::Kernel> own_kernels_;
  uint64_t last_kernel_id_ = 0;
  cl::Kernel* last_kernel_ = nullptr;
};

}  // namespace oclvm::opencl
