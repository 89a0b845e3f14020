// adapters/torch/host_kernels.h — unboxed kernels for the hottest functional operators and the
// optimizers' _foreach_ operators: the CPU kernel run on the device tensors' own bytes in a host
// section, a result written in device memory, without boxing the arguments (Note [Unboxed host
// kernels] and Note [Foreach operators without boxing] in host_kernels.cc).
//
// Promise: the same values, errors and statistics as the boxed fallback (fallback.h), which every
// call that the fast path cannot take goes to. An operator with a native kernel (native_kernels.h)
// tries that first, on a device that takes the native path. Thread-safety: as the fallback (any thread; the VM
// orders the device work).
#pragma once

#include <torch/library.h>

#include <cstdint>
#include <string>
#include <unordered_set>

namespace oclvm::torch_adapter {

// Registers the unboxed kernels with the PrivateUse1 library `m` of namespace aten. Returns the
// names (as aten_impl_name gives them) of the _foreach_ operators among them, which the boxed
// registration of the other _foreach_ operators leaves alone.
std::unordered_set<std::string> register_host_kernels(torch::Library& m);

// How many calls took the unboxed fast path, in this process (tests read it).
uint64_t host_kernel_calls();

// Note [Versions of lists written in place] in host_kernels.cc: before an in-place _foreach_
// operator writes `written`, throws torch's own error for an inference tensor outside inference
// mode (nothing written yet); after it, bumps each tensor's version, as the CPU's per-tensor
// operators do.
void refuse_inference_writes(at::TensorList written);
void bump_versions(at::TensorList written);

}  // namespace oclvm::torch_adapter
