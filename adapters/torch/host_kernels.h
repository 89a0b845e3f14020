// adapters/torch/host_kernels.h — unboxed kernels for the hottest functional operators: the CPU
// kernel run on the device tensors' own bytes in a host section, its result written in device
// memory, without boxing the arguments (Note [Unboxed host kernels] in host_kernels.cc).
//
// Promise: the same values, errors and statistics as the boxed fallback (fallback.h), which every
// call that the fast path cannot take goes to. Thread-safety: as the fallback (any thread; the VM
// orders the device work).
#pragma once

#include <torch/library.h>

#include <cstdint>

namespace oclvm::torch_adapter {

// Registers the unboxed kernels with the PrivateUse1 library `m` of namespace aten.
void register_host_kernels(torch::Library& m);

// How many calls took the unboxed fast path, in this process (tests read it).
uint64_t host_kernel_calls();

}  // namespace oclvm::torch_adapter
