// storage/host/host_backend.cc — host memory segments.
#include "oclvm/storage/host/host_backend.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/queue.h"

namespace oclvm {
namespace {

constexpr size_t kHostAlignment = 4096;

DeviceProperties host_properties() {
  DeviceProperties p;
  p.name = "host memory";
  p.platform = "host";
  p.version = "oclvm host backend";
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  p.global_mem_bytes = pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * page_size : 0;
  p.max_alloc_bytes = p.global_mem_bytes;
  p.base_addr_align_bytes = 128;  // the same as PoCL, so allocators behave alike on both
  p.host_unified_memory = true;
  p.host_addressable = true;
  p.cpu_device = true;
  return p;
}

class HostMarker final : public QueueMarker {
 public:
  using QueueMarker::QueueMarker;
  void wait() override {}
  bool complete() override { return true; }
};

// Host commands complete before enqueue returns, so the queue keeps no state.
class HostQueue final : public DeviceQueue {
 public:
  using DeviceQueue::DeviceQueue;
  std::shared_ptr<QueueMarker> record_marker() override {
    return std::make_shared<HostMarker>(device());
  }
  void wait_marker(const std::shared_ptr<QueueMarker>& marker) override {
    if (marker->device() != device()) marker->wait();
  }

 protected:
  void do_write(void* native, size_t offset, const void* src, size_t n, bool) override {
    std::memcpy(static_cast<char*>(native) + offset, src, n);
  }
  void do_read(void* native, size_t offset, void* dst, size_t n, bool) override {
    std::memcpy(dst, static_cast<const char*>(native) + offset, n);
  }
  void do_fill(void* native, size_t offset, const void* pattern, size_t pattern_size,
               size_t n) override {
    char* out = static_cast<char*>(native) + offset;
    for (size_t i = 0; i < n; i += pattern_size) std::memcpy(out + i, pattern, pattern_size);
  }
  void do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) override {
    std::memmove(static_cast<char*>(dst) + dst_offset,
                 static_cast<const char*>(src) + src_offset, n);
  }
  void* do_map(void* native, size_t offset, size_t, bool) override {
    return static_cast<char*>(native) + offset;
  }
  void do_unmap(void*, void*) override {}
  void do_finish() override {}
};

}  // namespace

std::unique_ptr<DeviceQueue> HostBackend::create_queue() {
  return std::make_unique<HostQueue>(*this);
}

HostBackend::HostBackend() : MemoryBackend(Device{DeviceType::kCpu, 0}, host_properties()) {}

void* HostBackend::do_create(size_t bytes) {
  const size_t rounded = (bytes + kHostAlignment - 1) & ~(kHostAlignment - 1);
  void* memory = std::aligned_alloc(kHostAlignment, rounded);
  if (memory == nullptr) {
    throw OutOfMemoryError("Out of memory on cpu: the host refused " + format_bytes(bytes) + " (" +
                           std::to_string(bytes) + " bytes)");
  }
  return memory;
}

bool HostBackend::do_release(void* native, size_t) noexcept {
  std::free(native);
  return true;
}

void HostBackend::do_write(void* native, size_t offset, const void* src, size_t n) {
  std::memcpy(static_cast<char*>(native) + offset, src, n);
}

void HostBackend::do_read(void* native, size_t offset, void* dst, size_t n) {
  std::memcpy(dst, static_cast<const char*>(native) + offset, n);
}

void HostBackend::do_fill(void* native, size_t offset, uint8_t value, size_t n) {
  std::memset(static_cast<char*>(native) + offset, value, n);
}

void HostBackend::do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) {
  std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, n);
}

}  // namespace oclvm
