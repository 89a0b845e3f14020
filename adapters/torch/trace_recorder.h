// adapters/torch/trace_recorder.h — recording the device's allocations as an `oclvm-trace v1`
// file (torch.opencl.memory.record_trace), so that a user replays their own model with
// `oclvm replay` under every allocator and memory limit.
//
// Types:
//   TraceRecorder  the process's one recorder. start(path, device) opens the file and writes the
//                  header; from then on every block CLDeviceAllocator hands out on that device is
//                  an `a ID BYTES` line and its release an `f ID` line; stop() closes the file and
//                  says how many events it wrote. Blocks that were live before start() are not
//                  in the trace, and their releases are not either (the trace stays one a replay
//                  accepts); blocks still live at stop() stay allocated in it (replay allows that).
//
// Promises:
//   - Off, it costs one relaxed atomic load per allocation and per release.
//   - A file that cannot be opened is an Error naming it, and nothing starts; a second start()
//     while recording is an Error too (one recording at a time).
//   - A write that fails (a full disk, or no memory for the ID table) stops writing and makes
//     stop() throw an Error saying so; the allocation it was recording goes on. Recording never
//     throws into an allocation or a release.
//   - IDs are 1, 2, ... in allocation order.
//
// Thread-safety: thread-safe. Allocations and releases of any thread are recorded in the order
// they take the recorder's mutex, which is the order the VM ran them in for one device (every
// allocation and release is a synchronous run on that device).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "oclvm/storage/thread_annotations.h"

namespace oclvm::torch_adapter {

class TraceRecorder {
 public:
  static TraceRecorder& instance();

  // Throws Error when the file cannot be opened or a recording is already running.
  void start(const std::string& path, int device);
  // Closes the file. Returns the events written. Throws Error when a write failed (the file is
  // closed anyway) or nothing is being recorded.
  uint64_t stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // `block` identifies the allocation until on_release(block) (the DataPtr's context).
  void on_allocate(const void* block, size_t bytes, int device) {
    if (active()) record_allocate(block, bytes, device);
  }
  void on_release(const void* block) {
    if (active()) record_release(block);
  }

 private:
  void record_allocate(const void* block, size_t bytes, int device);
  void record_release(const void* block);
  void write_line(const char* format, ...) OCLVM_REQUIRES(mutex_)
      __attribute__((format(printf, 2, 3)));

  std::atomic<bool> active_{false};
  Mutex mutex_;
  std::FILE* file_ OCLVM_GUARDED_BY(mutex_) = nullptr;
  std::string path_ OCLVM_GUARDED_BY(mutex_);
  int device_ OCLVM_GUARDED_BY(mutex_) = 0;
  uint64_t next_id_ OCLVM_GUARDED_BY(mutex_) = 1;
  uint64_t events_ OCLVM_GUARDED_BY(mutex_) = 0;
  bool write_failed_ OCLVM_GUARDED_BY(mutex_) = false;
  std::unordered_map<const void*, uint64_t> live_ OCLVM_GUARDED_BY(mutex_);  // block -> ID
};

}  // namespace oclvm::torch_adapter
