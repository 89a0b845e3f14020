// adapters/torch/fallback.h — the boxed CPU fallback of the "opencl" device: every operator
// without a native kernel runs its CPU kernel on CPU copies of its device arguments.
//
// On top of at::native::cpu_fallback (which copies device tensors to the CPU, runs the CPU kernel
// and copies results and schema-marked mutated arguments back), this fallback
//   - gives random operators the device's generator: a `Generator?` argument that is None becomes
//     the host generator of the device's default generator, an opencl generator becomes its host
//     generator (Note [Random operators on the device] in fallback.cc);
//   - writes back the arguments that a CPU kernel mutates although the operator's schema does
//     not mark them (BatchNorm's running statistics: Note [Mutations the schema does not mark]);
//   - hands CPU kernels their read-only inputs laid out as on the device (strides, conjugate and
//     negative bits), as the CPU run would (Note [Inputs of CPU kernels laid out as on the CPU]).
// What it learns from an operator's schema is computed once per operator and thread.
//
// Thread-safety: as ATen's operators (the per-operator facts are cached per thread).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace oclvm::torch_adapter {

// The fallback registered for every PrivateUse1 operator without a native kernel, and used by
// native kernels that only need to route an operator to the CPU.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// cpu_fallback after the check the operators' composite kernels made on this device (structured
// operators' meta functions): every tensor argument on one device, a CPU 0-dim tensor aside.
// For the operators routed from their composites to the fallback (ops.cc, Note [Composite
// kernels the CPU does not use]); a mismatch raises "Expected all tensors to be on the same
// device, ..." as on CUDA and changes nothing.
void cpu_fallback_on_one_device(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace oclvm::torch_adapter
