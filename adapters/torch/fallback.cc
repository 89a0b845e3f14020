// adapters/torch/fallback.cc — the boxed CPU fallback with the device's generators and the
// mutations schemas do not mark (fallback.h).
#include "adapters/torch/fallback.h"

#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/generator.h"
#include "adapters/torch/host_results.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/operator_facts.h"

namespace oclvm::torch_adapter {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// The opencl device of an operator's first opencl tensor argument, else of its device argument;
// none when no argument is on an opencl device.
std::optional<c10::DeviceIndex> first_device_argument(const torch::jit::Stack& stack,
                                                      size_t begin) {
  for (size_t i = begin; i < stack.size(); ++i) {
    const c10::IValue& value = stack[i];
    if (value.isTensor()) {
      const at::Tensor& tensor = value.toTensor();
      if (tensor.defined() && tensor.device().type() == kType) return tensor.device().index();
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList().vec()) {
        if (tensor.defined() && tensor.device().type() == kType) return tensor.device().index();
      }
    } else if (value.isDevice() && value.toDevice().type() == kType) {
      return value.toDevice().index();
    }
  }
  return std::nullopt;
}

// The opencl device an operator works on: its first device argument's, else the current device.
c10::DeviceIndex device_of_arguments(const torch::jit::Stack& stack, size_t begin) {
  return first_device_argument(stack, begin).value_or(current_device());
}

// Note [Random operators on the device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CPU kernel accepts only a CPU generator, and one given no generator draws from the CPU's
// default generator. So a random operator of a device tensor gets, in place of its generator
// argument, the host generator behind the opencl generator the caller passed, or behind the
// device's default generator when the caller passed none: the device has a random stream of its
// own (seeded by torch.opencl.manual_seed and torch.manual_seed, saved by get_rng_state), and
// since that stream is the CPU's algorithm, equal seeds give the device the CPU's numbers.
// A generator of the other kind is refused as CUDA and the CPU refuse it, with their message: an
// opencl generator given to an operator on CPU tensors (its dispatch key brings the operator
// here), and a CPU generator given to an operator on device tensors.
void substitute_generators(const OperatorFacts& facts, size_t begin, torch::jit::Stack* stack) {
  for (const size_t index : facts.generators) {
    c10::IValue& value = (*stack)[begin + index];
    if (value.isNone()) {
      value = host_generator(default_generator(device_of_arguments(*stack, begin)));
    } else if (value.isGenerator()) {
      const at::Generator generator = value.toGenerator();
      const bool on_device = first_device_argument(*stack, begin).has_value();
      const c10::DeviceType expected = on_device ? kType : c10::DeviceType::CPU;
      TORCH_CHECK(generator.device().type() == expected, "Expected a '", expected,
                  "' device type for generator but found '", generator.device().type(), "'");
      value = host_generator(generator);
    }
  }
}

// Note [Inputs of CPU kernels laid out as on the CPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// ATen's fallback copies each device argument to the CPU compact and resolved: a strided view
// becomes contiguous, a lazily conjugated or negated tensor (matrix products reach the device
// with the bits set: BLAS takes a conjugate-transpose flag) becomes materialised. The CPU kernel
// then saw other operands than in the CPU run and could take another route — a vectorised loop
// instead of a strided one, a materialised conjugate instead of the flag — and round
// differently: complex gradients of householder_product differed by 7e-6 relative. So each
// read-only tensor argument is handed to the CPU kernel as a host view laid out as on the device
// (same strides and bits, over a copy of its span: host_view.h), when its span is compact;
// a view with large gaps keeps ATen's compact copy (copying its span would cost more than the
// parity is worth). On ATen's path, written arguments keep ATen's compact copies; the direct
// path (below) hands them over laid out as on the device too, which made the last difference
// go: householder_product's complex gradients, whose backward writes into strided views.
//
// Note [Kernels that ask whether an input requires grad]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A few CPU kernels do more when an input requires grad: sparse.mm's amax/amin reductions record
// the argmax their backward reads, and without it the backward read an empty tensor (SIGSEGV,
// found by OpInfo's sparse.mm.reduce). ATen's fallback copies lose the flag, so an input that
// requires grad is always handed over as a host operand that requires grad too (below autograd,
// the flag records no graph).
// Returns whether it replaced any argument.
bool inputs_to_host(const c10::FunctionSchema& schema, size_t begin, torch::jit::Stack* stack) {
  const std::vector<c10::Argument>& arguments = schema.arguments();
  std::vector<size_t> viewed;  // stack slots of the arguments read as host views
  std::vector<at::Tensor> tensors;
  bool replaced = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& value = (*stack)[begin + i];
    if (!value.isTensor()) continue;
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined() || tensor.device().type() != kType) continue;
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    if (tensor.layout() == at::kStrided && span_is_compact(tensor)) {
      viewed.push_back(begin + i);
      tensors.push_back(tensor);
    } else if (tensor.requires_grad()) {
      // Note [Kernels that ask whether an input requires grad]; sparse arguments move member
      // by member (sparse.cc).
      at::Tensor host = tensor.cpu();
      host.set_requires_grad(true);
      value = std::move(host);
      replaced = true;
    }  // else ATen's fallback copies it
  }
  if (tensors.empty()) return replaced;
  std::vector<at::Tensor> hosts = host_views(tensors);  // one VM list for all of them
  for (size_t k = 0; k < viewed.size(); ++k) {
    // Note [Kernels that ask whether an input requires grad]
    if (tensors[k].requires_grad()) hosts[k].set_requires_grad(true);
    (*stack)[viewed[k]] = std::move(hosts[k]);
  }
  return true;
}

// Moves the tensor results the fallback left on the CPU to `device` (device_copy: allocation and
// upload in one VM list each).
void results_to(const c10::Device& device, size_t begin, torch::jit::Stack* stack) {
  for (size_t i = begin; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      const at::Tensor& tensor = value.toTensor();
      if (tensor.defined() && tensor.is_cpu()) value = device_copy(tensor, device);
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> moved = value.toTensorList().vec();
      for (at::Tensor& tensor : moved) {
        if (tensor.defined() && tensor.is_cpu()) tensor = device_copy(tensor, device);
      }
      value = c10::List<at::Tensor>(moved);
    }
  }
}

// Note [Zero-copy operands]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// On a device whose memory the host reaches directly (zero_copy(): CL_DEVICE_HOST_UNIFIED_MEMORY,
// as on every PoCL CPU device, unless OCLVM_ZERO_COPY=0), copying a large operand to the host and
// back moves bytes for nothing: the direct path maps it instead (MapBlob, Note [Host mappings] in
// instructions.h) and the CPU kernel reads, or in place writes, the device's own memory; the maps
// share the operator's first VM list with the copies, and the unmaps its last with the
// write-backs, so the number of lists does not grow. A map is a command of its own plus an unmap,
// so small operands (under kMapMinBytes) stay copies; an out= argument stays a copy because the
// kernel may resize it, which a mapping cannot. A kernel that throws leaves nothing mapped.
// Memory accounting does not change: a mapping allocates nothing.
constexpr int64_t kMapMinBytes = 64 << 10;

// Where run_direct found a device tensor: its argument, and its index in a tensor list (-1: none).
struct Place {
  size_t argument;
  int64_t item;
};

// Puts each of `hosts` where its device tensor was on the stack (`places`, in the same order).
void put_on_stack(const std::vector<Place>& places, std::vector<at::Tensor>& hosts, size_t begin,
                  size_t argument_count, torch::jit::Stack* stack) {
  bool any_list = false;
  for (size_t k = 0; k < places.size(); ++k) {
    if (places[k].item < 0) {
      (*stack)[begin + places[k].argument] = std::move(hosts[k]);
    } else {
      any_list = true;
    }
  }
  if (!any_list) return;
  std::vector<std::vector<at::Tensor>> lists(argument_count);
  for (size_t i = 0; i < argument_count; ++i) {
    if ((*stack)[begin + i].isTensorList()) lists[i] = (*stack)[begin + i].toTensorList().vec();
  }
  for (size_t k = 0; k < places.size(); ++k) {
    if (places[k].item >= 0) {
      lists[places[k].argument][static_cast<size_t>(places[k].item)] = std::move(hosts[k]);
    }
  }
  for (size_t i = 0; i < argument_count; ++i) {
    if ((*stack)[begin + i].isTensorList()) {
      (*stack)[begin + i] = c10::List<at::Tensor>(std::move(lists[i]));
    }
  }
}

// Replaces the kernel's results on the stack: one that is the host stand-in of a written argument
// (`written`: device tensor, host stand-in) by that argument's device tensor, a new one by a device
// copy of it.
void results_to_device(const std::vector<std::pair<at::Tensor, at::Tensor>>& written,
                       const c10::Device& device, size_t return_count,
                       torch::jit::Stack* stack) {
  const auto to_device = [&](const at::Tensor& tensor) -> at::Tensor {
    if (!tensor.defined() || !tensor.is_cpu()) return tensor;
    auto same = std::find_if(written.begin(), written.end(),
                             [&](const auto& pair) { return pair.second.is_same(tensor); });
    return same != written.end() ? same->first : device_copy(tensor, device);
  };
  for (size_t i = stack->size() - return_count; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      value = to_device(value.toTensor());
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> moved = value.toTensorList().vec();
      for (at::Tensor& tensor : moved) tensor = to_device(tensor);
      value = c10::List<at::Tensor>(std::move(moved));
    }
  }
}

// Note [Out arguments keep the CPU kernel's layout]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CPU kernel that resizes an out= argument may also choose its strides: linalg_lstsq.out makes
// its solution the first rows of the column-major buffer LAPACK solved in (strides (1, m) for an
// n x k solution, n < m), as CUDA's kernel does. Resized contiguous on the device, the argument
// would change the route later kernels take (a matrix product reads an operand transposed or
// not), and the device's results would differ from the CPU's in the last bits wherever the BLAS
// rounds the two layouts differently (MKL on Intel CPUs: OpInfo's linalg.lstsq complex64
// gradients). So an argument the kernel left non-contiguous takes the kernel's sizes and strides
// on the device: its storage (the same StorageImpl, so views of it stay views) grows to what the
// strides span, then the values are copied in. A contiguous one is resized and copied as ATen
// does (_copy_from_and_resize).
void copy_back_resized(const at::Tensor& host, const at::Tensor& target) {
  if (host.is_contiguous() || host.numel() == 0 || host.is_conj() || host.is_neg()) {
    at::_copy_from_and_resize(host, target);
    return;
  }
  int64_t span = 1;  // elements from the first to the last the strides reach, inclusive
  for (int64_t d = 0; d < host.dim(); ++d) {
    if (host.stride(d) < 0) {
      at::_copy_from_and_resize(host, target);
      return;
    }
    span += (host.size(d) - 1) * host.stride(d);
  }
  const int64_t offset = target.storage_offset();
  target.resize_({span});
  target.as_strided_(host.sizes(), host.strides(), offset);
  target.copy_(host);
}

// Replaces each result written in a device block (Note [Results written in device memory]) by
// the device tensor over that block.
void adopt_results(const c10::Device& device, size_t return_count, torch::jit::Stack* stack) {
  for (size_t i = stack->size() - return_count; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      at::Tensor tensor = std::move(value).toTensor();
      adopt_result(tensor, device);
      value = std::move(tensor);
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> tensors = value.toTensorList().vec();
      value = c10::IValue();  // the list held its tensors' storages too
      for (at::Tensor& tensor : tensors) adopt_result(tensor, device);
      value = c10::List<at::Tensor>(std::move(tensors));
    }
  }
}

// Note [Operators in a host section]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a device whose memory the host addresses directly (host_addressable: fine-grained SVM on a
// host-unified device, every PoCL CPU device), the direct path needs neither copies nor maps:
// the operator enters a host section (Note [Host sections] in vm/host_section.h; it waits for the
// device's worker to be idle), hands the CPU kernel each device tensor as a CPU tensor over its
// own bytes (host_aliases), in-place arguments included, and leaves; no VM list, no command. A
// functional operator's results are written in device blocks allocated inside the section (Note
// [Results written in device memory] in host_results.cc); a result that is not such a block
// alone is copied to the device (device_copy) after the section. While the section lasts no
// instruction and no other section of the device runs, so two operators that both take this
// path run wholly one before the other, as two kernels on one stream. Operators that take the
// lists below (a Tensor?[] argument, sparse or scattered tensors, operands on two devices or with
// no elements, unmarked writes) read and write back in separate steps: as on the copy path,
// concurrent writers of one tensor need the caller's synchronisation there. A thread inside an
// instruction callback (which may not wait) or a shut-down VM also takes the lists, which then
// refuse as they always did. An out= argument is written in place too: one the kernel resized
// within its bytes takes the alias's sizes and strides; one it grew (host_aliases: moved to host
// memory) is resized and copied on the device afterwards, as on the copy path. A kernel that
// throws leaves nothing behind but what it wrote, as on the CPU: the blocks it allocated are
// released when the section ends.
bool run_in_host_section(c10::DispatchKey cpu_key, OperatorFacts& facts,
                         const c10::OperatorHandle& op, size_t begin, const c10::Device& device,
                         const std::vector<Place>& places, const std::vector<at::Tensor>& tensors,
                         torch::jit::Stack* stack) {
  if (!host_addressable(device.index()) || tensors[0].device() != device) return false;
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  std::optional<vm::HostSection> section = host_section(device.index());
  if (!section) return false;
  std::vector<at::Tensor> hosts = host_aliases(*section, tensors);
  if (hosts.empty()) return false;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (device tensor, host alias)
  std::vector<const void*> spans;                           // each written alias's data
  for (size_t k = 0; k < tensors.size(); ++k) {
    // host_aliases carried requires_grad over (Note [Kernels that ask whether an input
    // requires grad]).
    if (writes(arguments[places[k].argument])) {
      written.emplace_back(tensors[k], hosts[k]);
      spans.push_back(hosts[k].storage().data());
    }
  }
  put_on_stack(places, hosts, begin, arguments.size(), stack);
  if (facts.functional) {
    // Note [Results written in device memory]: the results are written in device blocks and
    // become device tensors here; results_to_device copies any other.
    {
      ResultsOnDevice on_device(*section, device.index());
      op.redispatchBoxed(c10::DispatchKeySet(cpu_key), stack);
    }
    adopt_results(device, op.schema().returns().size(), stack);
  } else {
    op.redispatchBoxed(c10::DispatchKeySet(cpu_key), stack);
  }
  // Which written aliases the kernel grew, seen in the section: after it, another thread's
  // section may grow the CPU storage a block keeps (Note [Host aliases kept with their block] in
  // host_view.cc), which an alias the kernel did not grow still shares.
  std::vector<bool> grown(written.size());
  for (size_t k = 0; k < written.size(); ++k) {
    grown[k] = written[k].second.storage().data() != spans[k];
  }
  section.reset();  // what follows runs VM lists
  for (size_t k = 0; k < written.size(); ++k) {
    const auto& [target, host] = written[k];
    if (grown[k]) {
      copy_back_resized(host, target);  // the kernel grew an out= argument: host memory
    } else if (!host.sizes().equals(target.sizes()) || !host.strides().equals(target.strides()) ||
               host.storage_offset() != target.storage_offset()) {
      // Resized or restrided within its bytes: the values are already where the alias says, so
      // the device tensor takes the alias's layout (a copy between two layouts of the same bytes
      // would scramble them).
      target.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                          host.storage_offset());
    }
  }
  results_to_device(written, device, op.schema().returns().size(), stack);
  return true;
}

// Note [The direct path of the fallback]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// ATen's fallback copies each device argument to the host on its own, copies each written one
// back on its own and moves each result with to(): a VM list and several ATen calls each, which
// made a tiny operator cost several times the CPU's. For operators whose arguments and results
// are tensors, tensor lists (the optimizers' _foreach_ operators) and values
// (OperatorFacts::direct), and whose device tensors are all strided with a compact span, the
// fallback does the work itself: one VM list reads every device tensor into host views laid
// out as on the device (written arguments too), the CPU kernel runs on them (redispatched to
// `cpu_key`), one VM list uploads the spans of the written arguments back, and each new result
// is allocated and uploaded in one VM list (device_copy). A result that is a written argument is
// that argument's device tensor, as the caller expects of in-place and out= operators; an out=
// argument the kernel resized is resized and copied on the device (_copy_from_and_resize).
// Everything else (Tensor?[] lists, device arguments, views returned, sparse or scattered
// tensors) takes ATen's fallback. Two threads running operators on one tensor are ordered by the
// VM list by list, as before: an operator's read and write-back are two lists, so, as on any
// device, concurrent writers of one tensor need the caller's own synchronisation. Returns
// whether it ran `op`.
bool run_direct(c10::DispatchKey cpu_key, OperatorFacts& facts,
                const c10::OperatorHandle& op, size_t begin, const c10::Device& device,
                torch::jit::Stack* stack) {
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  std::vector<Place> places;
  std::vector<at::Tensor> tensors;
  const auto take = [&](const at::Tensor& tensor, size_t argument, int64_t item) {
    if (!tensor.defined() || tensor.device().type() != kType) return true;
    if (tensor.layout() != at::kStrided || !span_is_compact(tensor)) return false;
    places.push_back(Place{argument, item});
    tensors.push_back(tensor);
    return true;
  };
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = (*stack)[begin + i];
    if (value.isTensor()) {
      if (!take(value.toTensor(), i, -1)) return false;
    } else if (value.isTensorList()) {
      const c10::List<at::Tensor> list = value.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        if (!take(list.get(k), i, static_cast<int64_t>(k))) return false;
      }
    }
  }
  if (tensors.empty()) return false;
  if (run_in_host_section(cpu_key, facts, op, begin, device, places, tensors, stack)) return true;
  // Note [Zero-copy operands]
  const bool in_place = !op.schema().name().empty() && op.schema().name().back() == '_';
  std::vector<Staging> how(tensors.size(), Staging::kCopy);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const at::Tensor& tensor = tensors[k];
    if (!zero_copy(tensor.device().index()) ||
        tensor.numel() * static_cast<int64_t>(tensor.itemsize()) < kMapMinBytes) {
      continue;
    }
    if (!writes(arguments[places[k].argument])) {
      how[k] = Staging::kMapRead;
    } else if (in_place) {
      how[k] = Staging::kMapWrite;
    }
  }
  HostOperands operands = stage_on_host(tensors, how);  // one VM list for every argument
  std::vector<at::Tensor>& hosts = operands.hosts;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (device tensor, host copy)
  std::vector<const void*> spans;                           // each written host copy's span
  std::vector<std::pair<at::Tensor, at::Tensor>> mapped_written;  // written through a mapping
  for (size_t k = 0; k < places.size(); ++k) {
    // host_aliases carried requires_grad over (Note [Kernels that ask whether an input
    // requires grad]).
    if (writes(arguments[places[k].argument])) {
      if (how[k] == Staging::kMapWrite) {
        mapped_written.emplace_back(tensors[k], hosts[k]);
      } else {
        written.emplace_back(tensors[k], hosts[k]);
        spans.push_back(hosts[k].storage().data());
      }
    }
  }
  put_on_stack(places, hosts, begin, arguments.size(), stack);
  try {
    op.redispatchBoxed(c10::DispatchKeySet(cpu_key), stack);
  } catch (...) {
    finish_on_host(operands.mappings, {});  // nothing stays mapped; copies are dropped
    throw;
  }
  std::vector<std::pair<at::Tensor, at::Tensor>> unchanged;
  for (size_t k = 0; k < written.size(); ++k) {
    const auto& [target, host] = written[k];
    if (host.storage().data() == spans[k] && host.sizes().equals(target.sizes()) &&
        host.strides().equals(target.strides())) {
      unchanged.push_back(written[k]);
    } else {
      copy_back_resized(host, target);  // the kernel resized an out= argument
    }
  }
  // One VM list ends every mapping and uploads every written copy.
  finish_on_host(operands.mappings, unchanged);
  // A result that is a written argument is its device tensor; a new one is moved to the device.
  written.insert(written.end(), mapped_written.begin(), mapped_written.end());
  results_to_device(written, device, op.schema().returns().size(), stack);
  return true;
}

// Raises as the composites did when `op`'s tensor arguments are on more than one device (a CPU
// 0-dim tensor aside).
void check_one_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t count = op.schema().arguments().size();
  std::optional<c10::Device> device;
  for (size_t i = stack.size() - count; i < stack.size(); ++i) {
    const c10::IValue& value = stack[i];
    if (!value.isTensor()) continue;
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined() || (tensor.is_cpu() && tensor.dim() == 0)) continue;
    if (!device) {
      device = tensor.device();
      continue;
    }
    TORCH_CHECK(tensor.device() == *device, "Expected all tensors to be on the same device, but "
                "found at least two devices, ", *device, " and ", tensor.device(), "!");
  }
}

void fallback_to(c10::DispatchKey cpu_key, const c10::OperatorHandle& op, torch::jit::Stack* stack);
void run_on_host(c10::DispatchKey cpu_key, OperatorFacts& facts, const c10::OperatorHandle& op,
                 size_t begin, torch::jit::Stack* stack);

// Note [Dtypes the CPU kernels lack]: runs `op` with its device tensors of a dtype `widen` takes
// converted to the wider one, when it has any; returns whether it ran `op`. Called after the CPU
// kernel refused the arguments as they are (NotImplementedError: no kernel for the dtype).
bool run_widened(Widen widen, c10::DispatchKey cpu_key, const c10::OperatorHandle& op,
                 size_t begin, torch::jit::Stack* stack) {
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  std::optional<c10::ScalarType> narrow;
  for (size_t i = 0; i < arguments.size() && !narrow; ++i) {
    const c10::IValue& value = (*stack)[begin + i];
    if (!value.isTensor()) continue;
    const at::Tensor& tensor = value.toTensor();
    if (tensor.defined() && tensor.device().type() == kType &&
        widened(widen, tensor.scalar_type())) {
      narrow = tensor.scalar_type();
    }
  }
  if (!narrow) return false;
  const c10::ScalarType wide = *widened(widen, *narrow);
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (out= argument, wide stand-in)
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& value = (*stack)[begin + i];
    if (!value.isTensor()) continue;
    const at::Tensor tensor = value.toTensor();
    if (!tensor.defined() || tensor.scalar_type() != *narrow) continue;
    at::Tensor stand_in = tensor.to(wide);
    if (writes(arguments[i])) written.emplace_back(tensor, stand_in);
    value = std::move(stand_in);
  }
  fallback_to(cpu_key, op, stack);
  for (auto& [target, stand_in] : written) {
    at::native::resize_output(target, stand_in.sizes());
    target.copy_(stand_in);
  }
  const size_t results = op.schema().returns().size();
  for (size_t r = stack->size() - results; r < stack->size(); ++r) {
    c10::IValue& value = (*stack)[r];
    if (!value.isTensor()) continue;
    const at::Tensor result = value.toTensor();
    const auto out = std::find_if(written.begin(), written.end(), [&](const auto& pair) {
      return pair.second.is_same(result);
    });
    if (out != written.end()) {
      value = out->first;
    } else if (result.defined() && result.scalar_type() == wide) {
      value = result.to(*narrow);
    }
  }
  return true;
}

// Note [Dtypes the CPU kernels lack]: nansum (and nansum.out) of a complex device tensor as
// CUDA computes it; returns false for any other input.
bool run_complex_nansum(const c10::OperatorHandle& op, size_t begin, torch::jit::Stack* stack) {
  const at::Tensor self = (*stack)[begin].toTensor();
  if (!self.is_complex() || self.device().type() != kType) return false;
  const c10::IValue& dim_value = (*stack)[begin + 1];
  const std::vector<int64_t> dims = dim_value.isNone() ? std::vector<int64_t>{}
                                                       : dim_value.toIntVector();
  const at::OptionalIntArrayRef dim =
      dim_value.isNone() ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(dims);
  const bool keepdim = (*stack)[begin + 2].toBool();
  const std::optional<c10::ScalarType> dtype = (*stack)[begin + 3].toOptional<c10::ScalarType>();
  const at::Tensor cleaned = at::where(at::isnan(self), at::zeros({}, self.options()), self);
  const size_t count = op.schema().arguments().size();
  at::Tensor result;
  if (count == 5) {  // nansum.out
    at::Tensor out = (*stack)[begin + 4].toTensor();
    at::sum_out(out, cleaned, dim, keepdim, dtype);
    result = out;
  } else {
    result = at::sum(cleaned, dim, keepdim, dtype);
  }
  torch::jit::drop(*stack, count);
  stack->emplace_back(std::move(result));
  return true;
}

// The fallback body: runs `op`'s kernel of `cpu_key` on the host (the functions below).
void fallback_to(c10::DispatchKey cpu_key, const c10::OperatorHandle& op,
                 torch::jit::Stack* stack) {
  OperatorFacts& facts = facts_of(op);
  const c10::FunctionSchema& schema = op.schema();
  const size_t begin = stack->size() - schema.arguments().size();
  if (facts.device_check == DeviceCheck::kExactSame) {
    check_exact_same_device(op, *stack, begin);
  } else if (facts.device_check == DeviceCheck::kTensorIterator) {
    check_one_device(op, *stack);
  }
  // Counted once the call is sure to run a CPU kernel: one refused for its devices runs none.
  facts.fallback->count(device_of_arguments(*stack, begin));
  if (facts.widen == Widen::kComplexNanSum) {
    if (run_complex_nansum(op, begin, stack)) return;
  } else if (facts.widen != Widen::kNone) {
    // Note [Dtypes the CPU kernels lack]: the CPU kernel first, so that every dtype it has keeps
    // its own numbers; only the dtype it refuses is widened.
    const std::vector<c10::IValue> arguments(stack->begin() + static_cast<ptrdiff_t>(begin),
                                             stack->end());
    try {
      run_on_host(cpu_key, facts, op, begin, stack);
      return;
    } catch (const c10::NotImplementedError&) {
      stack->erase(stack->begin() + static_cast<ptrdiff_t>(begin), stack->end());
      stack->insert(stack->end(), arguments.begin(), arguments.end());
      if (!run_widened(facts.widen, cpu_key, op, begin, stack)) throw;
      return;
    }
  }
  run_on_host(cpu_key, facts, op, begin, stack);
}

// Runs `op`'s kernel of `cpu_key` on the host with the device's arguments at `begin`.
void run_on_host(c10::DispatchKey cpu_key, OperatorFacts& facts, const c10::OperatorHandle& op,
                 size_t begin, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  if (!facts.generators.empty()) substitute_generators(facts, begin, stack);
  const c10::Device device(kType, device_of_arguments(*stack, begin));
  // Note [Mutations the schema does not mark]: the kernel updates CPU stand-ins, written back.
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (device tensor, CPU stand-in)
  for (const size_t index : facts.unmarked_writes) {
    c10::IValue& value = (*stack)[begin + index];
    if (!value.isTensor()) continue;  // an optional argument given as None
    const at::Tensor target = value.toTensor();
    if (!target.defined() || target.device().type() != kType) continue;
    at::Tensor host = target.cpu();
    value = host;
    written.emplace_back(target, std::move(host));
  }
  if (facts.direct && cpu_key == c10::DispatchKey::CPU &&
      run_direct(cpu_key, facts, op, begin, device, stack)) {
    for (auto& [target, host] : written) target.copy_(host);
    return;
  }
  const bool moved_inputs = inputs_to_host(schema, begin, stack);
  at::native::cpu_fallback(op, stack, /*error_on_views=*/false, cpu_key);
  // Note [Inputs of CPU kernels laid out as on the CPU]: ATen's fallback puts the results on the
  // device of the first tensor argument, which may now be a host view: results left on the CPU
  // are moved to the device.
  if (moved_inputs || !written.empty()) {
    results_to(device, stack->size() - schema.returns().size(), stack);
  }
  for (auto& [target, host] : written) target.copy_(host);
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::CPU, op, stack);
}

void sparse_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::SparseCPU, op, stack);
}

void sparse_compressed_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::SparseCsrCPU, op, stack);
}

void cpu_fallback_on_one_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_one_device(op, *stack);
  cpu_fallback(op, stack);
}

void sparse_cpu_fallback_on_one_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_one_device(op, *stack);
  sparse_cpu_fallback(op, stack);
}

void sparse_compressed_cpu_fallback_on_one_device(const c10::OperatorHandle& op,
                                                  torch::jit::Stack* stack) {
  check_one_device(op, *stack);
  sparse_compressed_cpu_fallback(op, stack);
}

std::string aten_impl_name(std::string_view qualified, std::string_view overload) {
  constexpr std::string_view kAten = "aten::";
  TORCH_INTERNAL_ASSERT(qualified.substr(0, kAten.size()) == kAten, "not an aten operator: ",
                        qualified);
  std::string name(qualified.substr(kAten.size()));
  if (!overload.empty()) name.append(".").append(overload);
  return name;
}

std::vector<std::string> cpu_kernels_under_composites(c10::DispatchKey cpu_key,
                                                      c10::DispatchKey device_key) {
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  std::vector<std::string> names;
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op || !op->hasKernelForDispatchKey(cpu_key) || op->hasKernelForDispatchKey(device_key)) {
      continue;
    }
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
      continue;
    }
    names.push_back(aten_impl_name(name.name, name.overload_name));
  }
  return names;
}

bool writes(const c10::Argument& argument) {
  const c10::AliasInfo* alias = argument.alias_info();
  return alias != nullptr && alias->isWrite();
}

}  // namespace oclvm::torch_adapter
