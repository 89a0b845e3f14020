// adapters/torch/foreach_loops.h — the device's own kernels for the in-place _foreach_ operators
// of SGD (and Adam's scalar add): one loop over each tensor's bytes in a host section, with the
// CPU's arithmetic, instead of a CPU kernel per tensor on host aliases (Note [Fused foreach
// loops] in foreach_loops.cc).
//
// Promise: each returns false, having changed and held nothing, when it does not take the call
// (then the caller runs the operator as before); when it returns true, every tensor of `self`
// holds, bit for bit, what the CPU's operator would have written. Thread-safety: any thread; the
// host section excludes every other user of the device for the loops' duration.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <cstdint>

namespace oclvm::torch_adapter {

// _foreach_add_.List: self[i] += alpha * other[i].
bool fused_foreach_add_(at::TensorList self, at::TensorList other, const at::Scalar& alpha);
// _foreach_add_.Scalar: self[i] += scalar.
bool fused_foreach_add_(at::TensorList self, const at::Scalar& scalar);
// _foreach_mul_.Scalar: self[i] *= scalar.
bool fused_foreach_mul_(at::TensorList self, const at::Scalar& scalar);

// How many calls the loops took, in this process (tests read it).
uint64_t fused_foreach_calls();

}  // namespace oclvm::torch_adapter
