// bench/raw_kernel_chain.h — a plain OpenCL loop of kernel launches, vm_bench's baseline for the
// kernel chain (the VM's launches against the driver's own cost).
//
// Thread-safety: one thread at a time; it owns its queue, and the kernel it launches must not be
// launched by anyone else meanwhile (it sets the kernel's arguments).
#pragma once

#include <cstddef>
#include <memory>

#include "oclvm/storage/backend.h"
#include "oclvm/storage/kernel.h"

namespace oclvm::bench {

class RawKernelChain {
 public:
  // A queue of its own on the OpenCL device of `backend`.
  explicit RawKernelChain(MemoryBackend& backend);
  ~RawKernelChain();
  // `launches` launches of `kernel` (parameters: OCLVM_BLOB dst, OCLVM_BLOB src) over `global`
  // work-items, ping-ponging between (a, a_offset) and (b, b_offset); returns after clFinish.
  void run(const Kernel& kernel, const Segment& a, size_t a_offset, const Segment& b,
           size_t b_offset, size_t global, int launches);

 private:
  struct Queue;
  std::unique_ptr<Queue> queue_;
};

}  // namespace oclvm::bench
