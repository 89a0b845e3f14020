// storage/host/host_backend.h — the host device `cpu` as a MemoryBackend.
//
// Segments are page-aligned host memory from std::aligned_alloc; transfers are memcpy/memset. It
// lets every allocator and the VM run against a device without a driver, and serves as the host
// side of staged copies.
//
// Thread-safety: thread-compatible, like every MemoryBackend.
#pragma once

#include "oclvm/storage/backend.h"

namespace oclvm {

class HostBackend final : public MemoryBackend {
 public:
  HostBackend();

  // A queue that runs every command at once on the calling thread (markers are always complete).
  std::unique_ptr<DeviceQueue> create_queue() override;

  // The host pointer behind a segment of this backend.
  static void* host_pointer(const Segment& segment) { return segment.native; }

 protected:
  void* do_create(size_t bytes) override;
  void* do_host_address(void* native) const override { return native; }
  bool do_release(void* native, size_t bytes) noexcept override;
  void do_write(void* native, size_t offset, const void* src, size_t n) override;
  void do_read(void* native, size_t offset, void* dst, size_t n) override;
  void do_fill(void* native, size_t offset, uint8_t value, size_t n) override;
  void do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) override;
};

}  // namespace oclvm
