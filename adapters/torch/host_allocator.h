// adapters/torch/host_allocator.h — HostAllocator, the at::HostAllocator of the opencl device
// (pin_memory(), torch.Tensor.is_pinned). registration.cc registers it for PrivateUse1; the hooks
// (hooks.h) answer isPinnedPtr and getPinnedMemoryAllocator with it.
//
// "Pinned" memory is plain host memory (malloc): PoCL shares the host's memory, and no transfer
// needs page-locked staging (each returns after its sync point). It tracks its blocks for
// is_pinned and keeps torch's HostStats (no cache: active == allocated; the time stats stay 0,
// malloc is not timed).
//
// Thread-safety: thread-safe (one mutex).
#pragma once

#include <ATen/core/CachingHostAllocator.h>

#include <array>
#include <cstddef>
#include <unordered_map>

#include "oclvm/storage/thread_annotations.h"

namespace oclvm::torch_adapter {

class HostAllocator final : public at::HostAllocator {
 public:
  static HostAllocator& instance();  // never destroyed

  // Out of host memory is a c10::OutOfMemoryError. allocate(0) gives an empty DataPtr.
  c10::DataPtr allocate(size_t bytes) override;
  c10::DeleterFnPtr raw_deleter() const override { return &deleter; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  // Blocks are plain host memory that no device command reads after its operator returned.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}  // no cache: freed blocks go straight back to malloc
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;
  // Whether `ptr` is the start of a live block of this allocator.
  bool owns(const void* ptr) const;

 private:
  HostAllocator() = default;
  static void deleter(void* ptr);
  std::array<c10::CachingAllocator::Stat*, 4> all_stats() OCLVM_REQUIRES(mutex_);

  mutable Mutex mutex_;
  std::unordered_map<void*, size_t> live_ OCLVM_GUARDED_BY(mutex_);
  at::HostStats stats_ OCLVM_GUARDED_BY(mutex_);
};

}  // namespace oclvm::torch_adapter
