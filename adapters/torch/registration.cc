// adapters/torch/registration.cc — every registration of the adapter with torch, in one place:
// what the other files define, this file hands to torch, once, when `oclvm._C` loads (static
// initialisation).
//
//   PrivateUse1 allocator          CLDeviceAllocator (allocator.h)
//   PrivateUse1 device guard       GuardImpl (guard.h): current device, streams, events
//   PrivateUse1 host allocator     HostAllocator (host_allocator.h): pin_memory()
//   PrivateUse1 hooks              Hooks (hooks.h): generators, getDeviceFromPtr, resize
//   results allocator              Note [Results written in device memory] (host_results.cc)
//   _fused_sdp_choice_stub         the CPU's attention kernel choice (attention.cc)
//
// and the operator libraries, by namespace / dispatch key:
//
//   aten   / PrivateUse1           native kernels (ops.cc), the fused RNN cells (rnn_cells.cc),
//                                  native_dropout (dropout.cc)
//   aten   / PrivateUse1           unboxed kernels of the hottest functional operators and of the
//                                  optimizers' _foreach_ operators (host_kernels.cc, Note
//                                  [Unboxed host kernels], Note [Foreach operators without boxing])
//   aten   / PrivateUse1           every other _foreach_ operator to the boxed CPU fallback, whole
//                                  (Note [Foreach operators in one host section])
//   _      / PrivateUse1           the boxed CPU fallback for every other operator (fallback.h)
//   aten   / SparsePrivateUse1,    the structure kernels of sparse tensors (sparse.cc)
//            SparseCsrPrivateUse1
//   _      / SparsePrivateUse1,    the boxed CPU fallback for their arithmetic
//            SparseCsrPrivateUse1
//   aten   / NestedTensor-        the structure kernels of nested tensors (nested.cc)
//            PrivateUse1
//   _      / NestedTensor-        the boxed CPU fallback for everything else on them (nested.cc)
//            PrivateUse1
//   aten   / AutocastPrivateUse1   the mixed-precision policy (autocast.cc)
//   _      / AutocastPrivateUse1   fall through for every other operator
//   aten   / Conjugate, Negative   _copy_from and _copy_from_and_resize fall through to this
//                                  device's kernels, which resolve the bits themselves
//
// Thread-safety: static initialisation only.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/fallback.h"
#include "adapters/torch/guard.h"
#include "adapters/torch/hooks.h"
#include "adapters/torch/host_allocator.h"
#include "adapters/torch/host_kernels.h"
#include "adapters/torch/host_results.h"
#include "adapters/torch/registration.h"

namespace oclvm::torch_adapter {

// ---------------------------------------------------------------------------------------------
// The c10 interfaces of the device. Each object is never destroyed (its instance() or the
// registry's `new`), so tensors freed during exit still find them.

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &CLDeviceAllocator::instance());
C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &HostAllocator::instance());

namespace {

[[maybe_unused]] const bool kHooksRegistered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}();

// ---------------------------------------------------------------------------------------------
// The operators

// Note [Registrations that outlive exit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// TORCH_LIBRARY_IMPL keeps its torch::Library in a static object, and ~Library deregisters the
// kernels. When C's exit() runs on one thread while another is dispatching an opencl operator
// (the GIL released), exit's static destructors deregistered the PrivateUse1 fallback under it:
// a null boxed kernel, SIGSEGV in about 1 run in 400 (tests/torch/test_exit.py,
// libc_exit_from_thread_mid_work). So the libraries are made with `new` and never destroyed: the
// kernels stay registered until the process is gone. The pointers live in statics, so the
// objects stay reachable (no leak report).

// An IMPL library of namespace `ns` for dispatch key `key`, filled by `init`, never destroyed.
torch::Library* lasting_library(const char* ns, c10::DispatchKey key,
                                void (*init)(torch::Library&), uint32_t line) {
  auto* library = new torch::Library(torch::Library::IMPL, ns, std::make_optional(key), __FILE__,
                                     line);
  init(*library);
  return library;
}

// The boxed fallback of an in-place _foreach_ operator: the lists it writes checked before and
// their versions bumped after (Note [Versions of lists written in place] in host_kernels.cc).
void foreach_in_place_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  std::vector<at::Tensor> written;
  const size_t first = stack->size() - arguments.size();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = (*stack)[first + i];
    if (!writes(arguments[i]) || !value.isTensorList()) continue;
    for (const at::Tensor& tensor : value.toTensorList()) written.push_back(tensor);
  }
  refuse_inference_writes(written);
  cpu_fallback(op, stack);
  bump_versions(written);
}

// Note [Foreach operators in one host section]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The _foreach_ operators (the optimizers' default on this device: torch counts PrivateUse1 among
// its foreach devices) have a CompositeExplicitAutograd kernel that loops over the list calling
// the single-tensor operator, and a composite kernel takes precedence over a backend fallback. So
// each element went through the fallback on its own: one host section, one set of aliases, one
// dispatch per tensor, and an SGD step over 4 parameters cost 12 fallback calls. Registered for
// this device, the whole operator goes through the fallback once: one section for the list, and
// the CPU's composite loop then runs on CPU aliases. Every _foreach_ operator torch defines is
// registered, read from the dispatcher when this library loads (ATen's operators are all
// registered by then). The ones the optimizers call most have unboxed kernels of their own
// (`unboxed`: Note [Foreach operators without boxing] in host_kernels.cc), which go to this
// boxed fallback when their fast path does not apply.
void register_foreach_operators(torch::Library& m,
                                const std::unordered_set<std::string>& unboxed) {
  constexpr std::string_view kPrefix = "aten::_foreach_";
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (std::string_view(name.name).substr(0, kPrefix.size()) != kPrefix) continue;
    const std::string impl_name = aten_impl_name(name.name, name.overload_name);
    if (unboxed.count(impl_name) != 0) continue;
    const auto& arguments = c10::Dispatcher::singleton().findOp(name)->schema().arguments();
    if (std::any_of(arguments.begin(), arguments.end(), writes)) {
      m.impl(impl_name.c_str(),
             torch::CppFunction::makeFromBoxedFunction<&foreach_in_place_fallback>());
    } else {
      m.impl(impl_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    }
  }
}

void register_device_kernels(torch::Library& m) {
  // First: the composite routing skips operators that have a kernel.
  const std::unordered_set<std::string> unboxed_lists = register_host_kernels(m);
  register_native_kernels(m);
  register_foreach_operators(m, unboxed_lists);
  register_rnn_cells(m);
  register_dropout(m);
}

void register_fallback(torch::Library& m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

void register_sparse_fallback(torch::Library& m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_cpu_fallback>());
}

void register_sparse_compressed_fallback(torch::Library& m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_compressed_cpu_fallback>());
}

// Note [Conjugate and negative bits in copies] (host_view.cc): the Conjugate and Negative fallbacks
// materialise a lazily conjugated or negated argument by clone, and clone of a device tensor copies
// through _copy_from; a fallback that intercepts _copy_from itself would clone again, forever (the
// stack overflowed). These two operators therefore reach the device's kernels with the bits set.
// Only backends outside the CPU and CUDA call them, so no other device is affected.
void pass_bits_through(torch::Library& m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

constexpr c10::DispatchKey kDevice = c10::DispatchKey::PrivateUse1;
constexpr c10::DispatchKey kAutocast = c10::DispatchKey::AutocastPrivateUse1;

[[maybe_unused]] torch::Library* const kDeviceKernels =
    lasting_library("aten", kDevice, &register_device_kernels, __LINE__);
[[maybe_unused]] torch::Library* const kDeviceFallback =
    lasting_library("_", kDevice, &register_fallback, __LINE__);
[[maybe_unused]] torch::Library* const kSparseKernels = lasting_library(
    "aten", c10::DispatchKey::SparsePrivateUse1, &register_sparse_kernels, __LINE__);
[[maybe_unused]] torch::Library* const kSparseFallback = lasting_library(
    "_", c10::DispatchKey::SparsePrivateUse1, &register_sparse_fallback, __LINE__);
[[maybe_unused]] torch::Library* const kSparseCompressedKernels =
    lasting_library("aten", c10::DispatchKey::SparseCsrPrivateUse1,
                    &register_sparse_compressed_kernels, __LINE__);
[[maybe_unused]] torch::Library* const kSparseCompressedFallback =
    lasting_library("_", c10::DispatchKey::SparseCsrPrivateUse1,
                    &register_sparse_compressed_fallback, __LINE__);
[[maybe_unused]] torch::Library* const kNestedKernels = lasting_library(
    "aten", c10::DispatchKey::NestedTensorPrivateUse1, &register_nested_kernels, __LINE__);
[[maybe_unused]] torch::Library* const kNestedFallback = lasting_library(
    "_", c10::DispatchKey::NestedTensorPrivateUse1, &register_nested_fallback, __LINE__);
[[maybe_unused]] torch::Library* const kAutocastKernels =
    lasting_library("aten", kAutocast, &register_autocast_kernels, __LINE__);
[[maybe_unused]] torch::Library* const kAutocastFallthrough =
    lasting_library("_", kAutocast, &register_autocast_fallthrough, __LINE__);
[[maybe_unused]] torch::Library* const kConjugateCopies =
    lasting_library("aten", c10::DispatchKey::Conjugate, &pass_bits_through, __LINE__);
[[maybe_unused]] torch::Library* const kNegativeCopies =
    lasting_library("aten", c10::DispatchKey::Negative, &pass_bits_through, __LINE__);

// Note [Results written in device memory] (host_results.cc).
[[maybe_unused]] const bool kResultsAllocator = (install_results_allocator(), true);

}  // namespace
}  // namespace oclvm::torch_adapter

namespace at::native {
// A DispatchStub registration sets a function pointer once; nothing is undone at exit.
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &oclvm::torch_adapter::fused_sdp_choice)
}  // namespace at::native
