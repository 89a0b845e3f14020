// adapters/torch/host_allocator.cc — HostAllocator (host_allocator.h): malloc'd "pinned" blocks,
// tracked for is_pinned and counted in torch's HostStats.
#include "adapters/torch/host_allocator.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>

namespace oclvm::torch_adapter {

HostAllocator& HostAllocator::instance() {
  static HostAllocator* allocator = new HostAllocator();  // never destroyed
  return *allocator;
}

c10::DataPtr HostAllocator::allocate(size_t bytes) {
  void* ptr = bytes != 0 ? std::malloc(bytes) : nullptr;
  TORCH_CHECK_WITH(OutOfMemoryError, bytes == 0 || ptr != nullptr,
                   "Out of host memory: could not pin ", bytes, " bytes");
  if (ptr != nullptr) {
    MutexLock lock(mutex_);
    live_[ptr] = bytes;
    for (c10::CachingAllocator::Stat* stat : {&stats_.active_requests, &stats_.allocations}) {
      stat->increase(1);
    }
    stats_.active_bytes.increase(bytes);
    stats_.allocated_bytes.increase(bytes);
    ++stats_.num_host_alloc;
  }
  return c10::DataPtr(ptr, ptr, &deleter, c10::Device(c10::DeviceType::CPU));
}

void HostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

at::HostStats HostAllocator::get_stats() {
  MutexLock lock(mutex_);
  return stats_;
}

void HostAllocator::reset_accumulated_stats() {
  MutexLock lock(mutex_);
  for (c10::CachingAllocator::Stat* stat : all_stats()) stat->reset_accumulated();
  stats_.num_host_alloc = 0;
  stats_.num_host_free = 0;
}

void HostAllocator::reset_peak_stats() {
  MutexLock lock(mutex_);
  for (c10::CachingAllocator::Stat* stat : all_stats()) stat->reset_peak();
}

bool HostAllocator::owns(const void* ptr) const {
  MutexLock lock(mutex_);
  return live_.count(const_cast<void*>(ptr)) != 0;
}

void HostAllocator::deleter(void* ptr) {
  if (ptr == nullptr) return;
  {
    HostAllocator& self = instance();
    MutexLock lock(self.mutex_);
    auto it = self.live_.find(ptr);
    if (it != self.live_.end()) {
      self.stats_.active_requests.decrease(1);
      self.stats_.allocations.decrease(1);
      self.stats_.active_bytes.decrease(it->second);
      self.stats_.allocated_bytes.decrease(it->second);
      ++self.stats_.num_host_free;
      self.live_.erase(it);
    }
  }
  std::free(ptr);
}

std::array<c10::CachingAllocator::Stat*, 4> HostAllocator::all_stats() {
  return {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
          &stats_.allocated_bytes};
}

}  // namespace oclvm::torch_adapter
