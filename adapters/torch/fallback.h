// adapters/torch/fallback.h — the boxed CPU fallback of the "opencl" device: every operator
// without a native kernel runs its CPU kernel on CPU copies of its device arguments.
//
// On top of at::native::cpu_fallback (which copies device tensors to the CPU, runs the CPU kernel
// and copies results and schema-marked mutated arguments back), this fallback
//   - gives random operators the device's generator: a `Generator?` argument that is None becomes
//     the host generator of the device's default generator, an opencl generator becomes its host
//     generator (Note [Random operators on the device] in fallback.cc);
//   - writes back the arguments that a CPU kernel mutates although the operator's schema does
//     not mark them (BatchNorm's running statistics: Note [Mutations the schema does not mark] in
//     operator_facts.cc);
//   - hands CPU kernels their read-only inputs laid out as on the device (strides, conjugate and
//     negative bits), as the CPU run would (Note [Inputs of CPU kernels laid out as on the CPU]).
// What it learns from an operator's schema is computed once per operator and thread
// (operator_facts.h).
//
// Thread-safety: as ATen's operators (the per-operator facts are cached per thread).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <string_view>
#include <vector>

namespace oclvm::torch_adapter {

// Whether the schema marks `argument` written (Tensor(a!), Tensor(a!)[]).
bool writes(const c10::Argument& argument);

// The fallback registered for every PrivateUse1 operator without a native kernel, and used by
// native kernels that only need to route an operator to the CPU.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The fallbacks of the sparse keys (Note [Sparse tensors on the device] in sparse.cc): as
// cpu_fallback, running the CPU's sparse kernel (SparseCPU, SparseCsrCPU) on the arguments moved
// to the CPU member by member.
void sparse_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void sparse_compressed_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// cpu_fallback after the check the operators' composite kernels made on this device (structured
// operators' meta functions): every tensor argument on one device, a CPU 0-dim tensor aside.
// For the operators routed from their composites to the fallback (ops.cc, Note [Composite
// kernels the CPU does not use]); a mismatch raises "Expected all tensors to be on the same
// device, ..." as on CUDA and changes nothing.
void cpu_fallback_on_one_device(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The same for the sparse keys.
void sparse_cpu_fallback_on_one_device(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void sparse_compressed_cpu_fallback_on_one_device(const c10::OperatorHandle& op,
                                                  torch::jit::Stack* stack);

// The name torch::Library::impl takes for an aten operator: "aten::add" with overload "Tensor" is
// "add.Tensor", without an overload just "add". `qualified` must start with "aten::".
std::string aten_impl_name(std::string_view qualified, std::string_view overload);

// The aten operators (names as aten_impl_name gives them, e.g. "add.Tensor") that have a kernel for
// `cpu_key` and an explicit composite kernel but no kernel for `device_key` yet: on the device
// they would run the composite, not the CPU's kernel (ops.cc, Note [Composite kernels the CPU
// does not use]). Read from the dispatcher, so it follows the torch it runs with.
std::vector<std::string> cpu_kernels_under_composites(c10::DispatchKey cpu_key,
                                                      c10::DispatchKey device_key);

}  // namespace oclvm::torch_adapter
