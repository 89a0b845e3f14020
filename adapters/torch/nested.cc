// adapters/torch/nested.cc — nested tensors (torch.nested, the strided layout) on the device:
// their structure kernels and the boxed CPU fallback of NestedTensorPrivateUse1, registered by
// registration.cc.
//
// Note [Nested tensors on the device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A nested tensor (NestedTensorImpl) is a 1-D buffer, here an ordinary opencl storage held through
// the adapter's allocator, plus three CPU metadata tensors: each component's sizes, strides and
// offset into the buffer. ATen builds its key set from the buffer's, so one over device memory
// dispatches to NestedTensorPrivateUse1, for which torch had no kernel: nn.TransformerEncoder in
// eval mode with a padding mask takes torch's fast path, which builds nested tensors on the
// device, and raised "Could not run 'aten::_to_copy' with arguments from the 'NestedTensoropencl'
// backend" (issue 33). As for sparse tensors (Note [Sparse tensors on the device] in sparse.cc)
// the key needs two things:
//   - the structure kernels, which make, copy and view the structure and touch elements only
//     through the buffer's own dense operators: _to_copy, empty_like, copy_, the metadata
//     accessors and the views (unbind, select, narrow, view, transpose, squeeze, chunk, ...).
//     ATen writes them once for every device, so they are registered here as they are: views
//     stay views of the device buffer, and `.cpu()` / `.to("opencl")` copy the buffer once, as
//     on CUDA;
//   - everything else (arithmetic, to_padded_tensor, the Transformer's fused layer and attention,
//     and the operators whose composite kernel would run in place of their NestedTensorCPU kernel,
//     as Note [Composite kernels the CPU does not use] in ops.cc routes dense ones) goes through
//     the boxed fallback below: each device nested argument becomes a CPU nested
//     tensor over a host copy of its whole storage with the same metadata (so strided and offset
//     components keep their layout), each device dense argument a CPU copy; the NestedTensorCPU
//     kernel runs; written arguments are copied back into their device storage; results come back
//     to the device (nested ones buffer and metadata, as _to_copy does), a result that is a
//     written argument as that argument. Results live on the device, as on CUDA. A CPU nested
//     argument beside device ones is refused, as CUDA refuses it.
// Operators on dense device tensors that make nested results (_nested_tensor_from_mask,
// _nested_from_padded, _nested_view_from_buffer's copy) take the dense fallback, whose results
// move to the device through _to_copy, registered here.
//
// Thread-safety: the kernels are ATen's or stateless.
#include <ATen/ATen.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_nested_tensor_size_native.h>
#include <ATen/ops/_nested_tensor_storage_offsets_native.h>
#include <ATen/ops/_nested_tensor_strides_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/chunk_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/detach_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/narrow_native.h>
#include <ATen/ops/select_native.h>
#include <ATen/ops/split_with_sizes_native.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/transpose_native.h>
#include <ATen/ops/unbind_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adapters/torch/fallback.h"
#include "adapters/torch/registration.h"

namespace oclvm::torch_adapter {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

bool on_device(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kType;
}

// The whole storage of a nested tensor as a 1-D tensor: the buffer its metadata index into.
at::Tensor storage_of(const at::Tensor& nested) {
  return at::native::get_nested_tensor_impl(nested)->get_unsafe_storage_as_tensor();
}

// A nested tensor over `buffer` with `like`'s metadata (shared: kernels do not write metadata).
at::Tensor nested_over(const at::Tensor& buffer, const at::Tensor& like) {
  const at::native::NestedTensorImpl* impl = at::native::get_nested_tensor_impl(like);
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      buffer, impl->get_nested_sizes(), impl->get_nested_strides(), impl->get_storage_offsets());
}

// A device tensor's CPU stand-in for the fallback.
at::Tensor to_host(const at::Tensor& tensor) {
  if (!tensor.is_nested()) return tensor.cpu();
  return nested_over(storage_of(tensor).cpu(), tensor);
}

// A CPU result's device counterpart.
at::Tensor to_device(const at::Tensor& tensor, const c10::Device& device) {
  if (!tensor.is_nested()) return tensor.to(device);
  return nested_over(storage_of(tensor).to(device), tensor);
}

// Copies what the CPU kernel wrote into `host` back into the device tensor `target`.
void write_back(const at::Tensor& target, const at::Tensor& host) {
  if (!target.is_nested()) {
    at::Tensor(target).copy_(host);
    return;
  }
  TORCH_CHECK(host.is_nested(), "Expected the CPU kernel to leave a nested tensor, but got a ",
              host.layout(), " one");
  at::Tensor storage = storage_of(target);
  const at::Tensor written = storage_of(host);
  TORCH_CHECK(storage.numel() == written.numel(),
              "Expected the CPU kernel to keep the nested tensor's storage of ", storage.numel(),
              " elements, but got ", written.numel());
  storage.copy_(written);
}

// Note [Nested tensors on the device]: the fallback of NestedTensorPrivateUse1.
void nested_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t count = schema.arguments().size();
  const size_t begin = stack->size() - count;
  std::optional<c10::Device> device;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (device tensor, CPU stand-in)
  std::optional<c10::Device> host_nested;  // a CPU nested argument, refused as CUDA refuses it
  auto move = [&](const at::Tensor& tensor, bool writes) -> std::optional<at::Tensor> {
    if (tensor.defined() && tensor.is_nested() && !on_device(tensor)) host_nested = tensor.device();
    if (!on_device(tensor)) return std::nullopt;
    if (!device) device = tensor.device();
    at::Tensor host = to_host(tensor);
    if (writes) written.emplace_back(tensor, host);
    return host;
  };
  for (size_t i = 0; i < count; ++i) {
    c10::IValue& value = (*stack)[begin + i];
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    const bool writes = alias != nullptr && alias->isWrite();
    if (value.isTensor()) {
      if (std::optional<at::Tensor> host = move(value.toTensor(), writes)) value = *host;
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> tensors = value.toTensorList().vec();
      for (at::Tensor& tensor : tensors) {
        if (std::optional<at::Tensor> host = move(tensor, writes)) tensor = *host;
      }
      value = c10::List<at::Tensor>(tensors);
    } else if (value.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> tensors = value.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> hosts;
      for (const std::optional<at::Tensor>& tensor : tensors) {
        std::optional<at::Tensor> host = tensor ? move(*tensor, writes) : std::nullopt;
        hosts.push_back(host ? host : tensor);
      }
      value = hosts;
    }
  }
  TORCH_CHECK(device.has_value(), "Expected a tensor on the ", c10::get_privateuse1_backend(),
              " device among the arguments of ", schema.name(), ", but got none");
  TORCH_CHECK(!host_nested.has_value(), "Expected all tensors to be on the same device, but "
              "found at least two devices, ", *device, " and ", *host_nested, "!");
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::NestedTensorCPU), stack);
  for (auto& [target, host] : written) write_back(target, host);
  auto result = [&](const at::Tensor& tensor) -> at::Tensor {
    if (!tensor.defined() || !tensor.is_cpu()) return tensor;
    for (const auto& [target, host] : written) {
      if (host.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) return target;
    }
    return to_device(tensor, *device);
  };
  for (size_t i = stack->size() - schema.returns().size(); i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      value = result(value.toTensor());
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> tensors = value.toTensorList().vec();
      for (at::Tensor& tensor : tensors) tensor = result(tensor);
      value = c10::List<at::Tensor>(tensors);
    }
  }
}

// Note [Nested tensors on the device]: the aten operators (names as torch::Library::impl takes
// them) with a NestedTensorCPU kernel and a composite kernel but no NestedTensorPrivateUse1
// kernel yet. On the device the composite would run instead of the CPU's kernel: `matmul`'s
// CompositeImplicitAutograd asked a nested tensor for its sizes and raised "NestedTensorImpl
// doesn't support sizes". Read from the dispatcher, so it follows the torch it runs with.
std::vector<std::string> nested_cpu_kernels_under_composites() {
  constexpr c10::DispatchKey kComposites[] = {
      c10::DispatchKey::CompositeImplicitAutograd,
      c10::DispatchKey::CompositeExplicitAutograd,
      c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
  };
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  std::vector<std::string> names;
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorCPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorPrivateUse1)) {
      continue;
    }
    for (const c10::DispatchKey composite : kComposites) {
      if (op->hasKernelForDispatchKey(composite)) {
        names.push_back(aten_impl_name(name.name, name.overload_name));
        break;
      }
    }
  }
  return names;
}

}  // namespace

void register_nested_kernels(torch::Library& m) {
  m.impl("_to_copy", TORCH_FN(at::native::_to_copy_nested));
  m.impl("empty_like", TORCH_FN(at::native::empty_like_nested));
  m.impl("copy_", TORCH_FN(at::native::copy_nested_));
  m.impl("_nested_tensor_size", TORCH_FN(at::native::_nested_tensor_size));
  m.impl("_nested_tensor_strides", TORCH_FN(at::native::_nested_tensor_strides));
  m.impl("_nested_tensor_storage_offsets", TORCH_FN(at::native::_nested_tensor_storage_offsets));
  m.impl("detach", TORCH_FN(at::native::detach));
  m.impl("alias", TORCH_FN(at::native::alias_nested));
  m.impl("values", TORCH_FN(at::native::values_nested));
  m.impl("unbind.int", TORCH_FN(at::native::NestedTensor_unbind));
  m.impl("transpose.int", TORCH_FN(at::native::transpose_nested));
  m.impl("unsqueeze", TORCH_FN(at::native::unsqueeze_nested));
  m.impl("select.int", TORCH_FN(at::native::select_nested));
  m.impl("narrow", TORCH_FN(at::native::narrow_nested_symint));
  m.impl("view", TORCH_FN(at::native::view_nested));
  m.impl("squeeze", TORCH_FN(at::native::squeeze_nested));
  m.impl("squeeze.dim", TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(
                            &at::native::squeeze_dim_nested)));
  m.impl("squeeze.dims", TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&, at::IntArrayRef)>(
                             &at::native::squeeze_dim_nested)));
  m.impl("split_with_sizes", TORCH_FN(at::native::split_with_sizes_nested));
  m.impl("chunk", TORCH_FN(at::native::chunk_nested_tensor));
  // After the kernels above, which the list skips.
  for (const std::string& name : nested_cpu_kernels_under_composites()) {
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&nested_cpu_fallback>());
  }
}

void register_nested_fallback(torch::Library& m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nested_cpu_fallback>());
}

}  // namespace oclvm::torch_adapter
