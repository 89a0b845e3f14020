// storage/backend.h — the device-agnostic door to a device's memory: MemoryBackend and Segment.
//
// A `MemoryBackend` is one device's driver as the allocators see it. It creates and releases
// `Segment`s (one driver allocation each: a cl::Buffer for OpenCL, host memory for `cpu`) and
// moves bytes in and out of them. Allocators above it are device-agnostic: they carve segments into
// blocks by offset and never see a driver type.
//
// Every segment owns a unique device address range [address, address + size), reserved from the
// process-wide AddressSpace (storage/address_space.h), so a device address names one byte of one
// live segment on one device and resolves to (segment, offset) in O(1).
//
// Promises of create_segment: the memory is allocated for real when it returns (lazy drivers are
// forced), so running out of memory is reported here and not at a later enqueue; it touches no
// statistic (statistics belong to allocators).
//
// Kernels (storage/kernel.h): kernel() compiles a kernel for the device, or finds it in the
// device's kernel cache (memory first, then the binaries kept on disk); a device that runs no
// kernels (the host) refuses it.
//
// Thread-safety: thread-compatible; a backend is used by the one thread that owns its device's
// allocator (storage/allocator.h). live_segments() may be read from any thread, and the kernel
// cache's calls (kernel, kernel_cache_stats, set_kernel_cache_dir) made from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "oclvm/storage/device.h"
#include "oclvm/storage/faults.h"
#include "oclvm/storage/kernel.h"
#include "oclvm/storage/memory_history.h"

namespace oclvm {

struct DeviceProperties {
  std::string name;                 // driver's device name
  std::string platform;             // OpenCL platform name, "host" for cpu
  std::string version;              // driver / OpenCL version string
  uint64_t global_mem_bytes = 0;    // CL_DEVICE_GLOBAL_MEM_SIZE (host: physical memory)
  uint64_t max_alloc_bytes = 0;     // CL_DEVICE_MAX_MEM_ALLOC_SIZE: largest single segment
  size_t base_addr_align_bytes = 0; // CL_DEVICE_MEM_BASE_ADDR_ALIGN converted from bits to bytes
  bool host_unified_memory = false; // CL_DEVICE_HOST_UNIFIED_MEMORY: the host reaches the
                                    // device's memory directly, so a map costs no copy (host: true)
  bool host_addressable = false;    // every segment has a host address (Segment::host): fine-
                                    // grained buffer SVM on a host-unified device (host: true)
  bool cpu_device = false;          // CL_DEVICE_TYPE includes CL_DEVICE_TYPE_CPU (host: true):
                                    // a processor the host's own kernels run as fast on
};

class MemoryBackend;
class DeviceQueue;

// One driver allocation. Created and destroyed only by its backend.
struct Segment {
  uintptr_t address = 0;            // device address of byte 0; unique among live segments
  size_t size = 0;                  // bytes obtained from the driver (> 0)
  uint64_t id = 0;                  // process-wide unique, increasing
  MemoryBackend* backend = nullptr; // the backend that created it
  void* native = nullptr;           // the backend's record (CLAllocation* / host pointer)
  // Where the host reads and writes byte 0 directly, or nullptr. Non-null only on a backend whose
  // properties().host_addressable is set: its memory stays coherent with the host without a map
  // (fine-grained SVM), provided no device command on the bytes is in flight meanwhile — the
  // caller's ordering to keep (vm::HostSection does).
  void* host = nullptr;
  void* owner = nullptr;            // free for the allocator that holds the segment
};

class MemoryBackend {
 public:
  explicit MemoryBackend(Device device, DeviceProperties properties)
      : device_(device), properties_(std::move(properties)) {}
  virtual ~MemoryBackend() = default;
  MemoryBackend(const MemoryBackend&) = delete;
  MemoryBackend& operator=(const MemoryBackend&) = delete;

  Device device() const { return device_; }
  const DeviceProperties& properties() const { return properties_; }

  // Creates a segment of exactly `bytes` bytes, allocated for real. Throws InvalidArgument for 0 or
  // more than properties().max_alloc_bytes, OutOfMemoryError when the driver (or the host address
  // space) refuses, BackendError for any other driver failure. On failure nothing is held.
  Segment* create_segment(size_t bytes);
  // Gives the segment back to the driver and frees its address range. Never throws: a driver
  // failure here is reported on stderr (there is nobody to give it to) and counted.
  void release_segment(Segment* segment) noexcept;

  // Segments created and not yet released by this backend.
  size_t live_segments() const { return live_segments_.load(std::memory_order_relaxed); }
  // Driver failures swallowed by release_segment (0 in a healthy run).
  size_t release_failures() const { return release_failures_.load(std::memory_order_relaxed); }

  // Blocking data movement within one segment of this backend; each returns when the bytes have
  // landed. Offsets and sizes are checked against the segment (InvalidArgument); n == 0 is a no-op.
  void write(const Segment& dst, size_t offset, const void* src, size_t n);
  void read(const Segment& src, size_t offset, void* dst, size_t n);
  void fill(const Segment& dst, size_t offset, uint8_t value, size_t n);
  void copy(const Segment& src, size_t src_offset, const Segment& dst, size_t dst_offset, size_t n);

  // What the device's memory went through, while recording is on (storage/memory_history.h).
  // Segment events are recorded here; block events by whoever hands blocks out. Same thread rule
  // as the backend.
  MemoryHistory& history() { return history_; }
  const MemoryHistory& history() const { return history_; }

  // A new in-order command queue on this device (storage/queue.h); the VM makes one per stream.
  virtual std::unique_ptr<DeviceQueue> create_queue() = 0;

  // The kernel `source.name` of `source`, compiled for this device once per (source, options):
  // concurrent callers of one program wait for one build. Throws KernelBuildError when the
  // compiler refuses the source (with its log), InvalidArgument for a kernel name the program
  // lacks or a device that runs no kernels, BackendError for other driver failures (the `build`
  // fault point injects one). A failed build is not cached: the next call tries again.
  virtual std::shared_ptr<const Kernel> kernel(const KernelSource& source);
  virtual KernelCacheStats kernel_cache_stats() const { return {}; }
  // Where compiled binaries are kept across processes: a directory made on first store; "" keeps
  // none. Starts as Options::kernel_cache_dir. Programs already in memory stay there.
  virtual void set_kernel_cache_dir(const std::string& /*dir*/) {}
  // Drops the programs and kernels kept in memory (kernels already handed out stay valid; the
  // binaries on disk stay), so the next kernel() builds again: for measuring a first use.
  virtual void forget_programs() {}

  // The driver's buffer object that holds `segment` (OpenCL: its cl_mem), for native commands
  // (Note [Native commands] in storage/queue.h); nullptr on a device that has none.
  virtual void* native_memory(const Segment& /*segment*/) const { return nullptr; }

  // The device's fault injector (storage/faults.h): off unless configured. Segment creation, the
  // data movement above and every queue of this backend consult it.
  FaultInjector& faults() const { return faults_; }
  // Throws the injected failure for a `command` at `point` ("clEnqueueCopyBuffer") when the
  // injector says so: BackendError naming the command and the device (kSegment: use
  // create_segment, which throws OutOfMemoryError).
  void maybe_inject(FaultPoint point, const char* command) const;

  // Throws InvalidArgument unless `segment` belongs to this backend and [offset, offset + n) lies
  // inside it. `what` names the operation in the message ("a write").
  void check_range(const Segment& segment, size_t offset, size_t n, const char* what) const;

 protected:
  // Driver hooks. do_create returns the native record; arguments are already checked.
  virtual void* do_create(size_t bytes) = 0;
  // The host address of a native record's byte 0 (Segment::host); nullptr by default.
  virtual void* do_host_address(void* /*native*/) const { return nullptr; }
  // Returns false (after printing why) when the driver reported an error.
  virtual bool do_release(void* native, size_t bytes) noexcept = 0;
  virtual void do_write(void* native, size_t offset, const void* src, size_t n) = 0;
  virtual void do_read(void* native, size_t offset, void* dst, size_t n) = 0;
  virtual void do_fill(void* native, size_t offset, uint8_t value, size_t n) = 0;
  virtual void do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) = 0;

 private:
  const Device device_;
  const DeviceProperties properties_;
  std::atomic<size_t> live_segments_{0};
  std::atomic<size_t> release_failures_{0};
  mutable FaultInjector faults_;  // thread-safe; mutable: injection does not change the backend
  MemoryHistory history_;
};

}  // namespace oclvm
