// adapters/torch/host_view.cc — the staging host_view.h declares: device tensors' byte spans,
// their transfers to and from host memory, host views and aliases of device tensors for CPU
// kernels, and new device tensors made from host ones.
//
// Thread-safety: as the copies (the VM orders them); host aliases only inside their section.
#include "adapters/torch/host_view.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/InferenceMode.h>

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/native_launches.h"
#include "adapters/torch/registration.h"
#include "adapters/torch/streams.h"
#include "oclvm/storage/hot_thread_local.h"

namespace oclvm::torch_adapter {

// Elements from element 0 to the farthest element, inclusive (0 for an empty tensor). Strides are
// never negative in ATen.
int64_t span_elements(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  const c10::IntArrayRef sizes = t.sizes();
  const c10::IntArrayRef strides = t.strides();
  int64_t span = 1;
  for (size_t d = 0; d < sizes.size(); ++d) span += (sizes[d] - 1) * strides[d];
  return span;
}

// The blob of a device tensor and the byte offset of its element 0.
BlobRef element0(const at::Tensor& t) {
  return blob_of(t.storage(), static_cast<size_t>(t.storage_offset()) * item_bytes(t));
}

// This thread's current stream of a device tensor's device: where its operators run.
vm::Stream& stream_of(const at::Tensor& t) { return current_vm_stream(t.device().index()); }

namespace {

// Note [Large copies on host-unified devices]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PoCL carries out a read or write of a buffer as one single-threaded memcpy, about 60 % of what
// torch's own (multi-threaded) host copy reaches. On a zero-copy device (device.h) a copy of
// kParallelCopyBytes or more maps the device range instead (MapBlob: the buffer's own memory,
// ordered as the copy would be), lets torch's CPU copy_ move the bytes on every core, and
// unmaps: two VM lists instead of one, which only large copies repay. When the memory has a host
// address (Note [Host sections]) the copy runs in a host section instead, with no list at all.
constexpr size_t kParallelCopyBytes = size_t{1} << 20;

// Copies `bytes` between `host` and the device tensor's bytes from its element 0 with torch's
// parallel CPU copy: in a host section when the memory has a host address, else through a
// mapping. False (nothing done) when the device or the size does not call for it.
bool copy_on_host(const at::Tensor& device, void* host, size_t bytes, bool to_device) {
  if (bytes < kParallelCopyBytes || !zero_copy(device.device().index())) return false;
  const auto as_bytes = [bytes](void* address) {
    return at::from_blob(address, {static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte));
  };
  const auto copy = [&](void* device_bytes) {
    at::Tensor on_device = as_bytes(device_bytes);
    at::Tensor other = as_bytes(host);
    if (to_device) {
      on_device.copy_(other);
    } else {
      other.copy_(on_device);
    }
  };
  if (void* address = host_address(device)) {
    if (std::optional<vm::HostSection> section = host_section(device.device().index())) {
      copy(address);
      return true;
    }
  }
  const BlobRef range = element0(device);
  std::vector<std::shared_ptr<HostMapping>> mappings;
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    mappings.push_back(builder.map(range.blob, range.offset, bytes,
                                   to_device ? HostAccess::kWrite : HostAccess::kRead,
                                   &stream_of(device)));
    runtime().run(builder.take());
  });
  try {
    copy(mappings[0]->host());
  } catch (...) {
    finish_on_host(mappings, {});
    throw;
  }
  finish_on_host(mappings, {});
  return true;
}

}  // namespace

void device_to_host(const at::Tensor& src, void* host, size_t bytes) {
  if (bytes == 0) return;
  wait_native_launches(src.device().index());  // Note [Launches that do not wait]
  if (copy_on_host(src, host, bytes, /*to_device=*/false)) return;
  const BlobRef from = element0(src);
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    builder.copy_device_to_host(from.blob, from.offset, host, bytes, &stream_of(src));
    runtime().run(builder.take());
  });
}

void host_to_device(const void* host, const at::Tensor& dst, size_t bytes) {
  if (bytes == 0) return;
  if (copy_on_host(dst, const_cast<void*>(host), bytes, /*to_device=*/true)) return;
  const BlobRef to = element0(dst);
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    builder.copy_host_to_device(host, to.blob, to.offset, bytes, &stream_of(dst));
    runtime().run(builder.take());
  });
}

// Note [Conjugate and negative bits in copies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A lazily conjugated (x.conj() of a complex tensor) or negated tensor stores its elements
// unchanged and carries a bit saying how to read them. The Conjugate and Negative fallbacks
// materialise such a tensor with clone -> copy_ -> this device's _copy_from, with the bit still
// set on the source or the destination; ignoring it there sent the fallback back into the same
// clone until the stack overflowed. So the copies move stored bytes, and every host-side view of
// device bytes carries the device tensor's bits (with_bits_of): ATen's CPU copy_ then converts
// between the two representations, and a plain byte copy is used only when both sides read their
// bytes the same way (same_bits).
at::Tensor with_bits_of(const at::Tensor& like, at::Tensor host) {
  if (like.is_conj()) host = at::_conj(host);
  if (like.is_neg()) host = at::_neg_view(host);
  return host;
}

HostOperands stage_on_host(c10::ArrayRef<at::Tensor> devices, c10::ArrayRef<Staging> how) {
  TORCH_INTERNAL_ASSERT(how.empty() || how.size() == devices.size());
  // Note [Launches that do not wait]: once per device (the operands are usually of one).
  c10::DeviceIndex waited = -1;
  for (const at::Tensor& device : devices) {
    if (device.device().index() == waited) continue;
    waited = device.device().index();
    wait_native_launches(waited);
  }
  HostOperands operands;
  operands.hosts.reserve(devices.size());
  InstructionsBuilder builder = runtime().builder();
  for (size_t i = 0; i < devices.size(); ++i) {
    const at::Tensor& device = devices[i];
    const int64_t elements = span_elements(device);
    const size_t bytes = static_cast<size_t>(elements) * item_bytes(device);
    const Staging staging = how.empty() || elements == 0 ? Staging::kCopy : how[i];
    const BlobRef from = elements > 0 ? element0(device) : BlobRef{};
    if (staging == Staging::kCopy) {
      at::Tensor span = at::empty({elements}, device.options().device(at::kCPU));
      if (elements > 0) {
        builder.copy_device_to_host(from.blob, from.offset, span.data_ptr(), bytes,
                                    &stream_of(device));
      }
      operands.hosts.push_back(
          with_bits_of(device, span.as_strided(device.sizes(), device.strides(), 0)));
      continue;
    }
    const HostAccess access =
        staging == Staging::kMapWrite ? HostAccess::kWrite : HostAccess::kRead;
    operands.mappings.push_back(
        builder.map(from.blob, from.offset, bytes, access, &stream_of(device)));
    operands.hosts.emplace_back();  // made below, once the map has run
  }
  if (builder.size() > 0) {
    try {
      translate_errors([&] { runtime().run(builder.take()); });
    } catch (...) {
      finish_on_host(operands.mappings, {});  // what did map is unmapped again
      throw;
    }
  }
  size_t next = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (operands.hosts[i].defined()) continue;
    const at::Tensor& device = devices[i];
    const std::shared_ptr<HostMapping>& mapping = operands.mappings[next++];
    operands.hosts[i] = with_bits_of(
        device, at::from_blob(mapping->host(), device.sizes(), device.strides(),
                              device.options().device(at::kCPU)));
  }
  return operands;
}

std::vector<at::Tensor> host_views(c10::ArrayRef<at::Tensor> devices) {
  return stage_on_host(devices, {}).hosts;
}

void finish_on_host(std::vector<std::shared_ptr<HostMapping>>& mappings,
                    c10::ArrayRef<std::pair<at::Tensor, at::Tensor>> written) {
  InstructionsBuilder builder = runtime().builder();
  for (std::shared_ptr<HostMapping>& mapping : mappings) {
    const auto index = static_cast<c10::DeviceIndex>(mapping->blob()->device().index);
    builder.unmap(std::move(mapping), &current_vm_stream(index));
  }
  mappings.clear();
  for (const auto& [device, host] : written) {
    const int64_t elements = span_elements(device);
    if (elements == 0) continue;
    const BlobRef to = element0(device);
    builder.copy_host_to_device(host.storage().data(), to.blob, to.offset,
                                static_cast<size_t>(elements) * item_bytes(device),
                                &stream_of(device));
  }
  if (builder.size() > 0) translate_errors([&] { runtime().run(builder.take()); });
}

namespace {

// Where the host reaches the first byte of a storage's DataPtr (one this allocator made: the
// block's start, since blocks are never moved); nullptr when its segment has no host address or
// the DataPtr is not this allocator's (Note [Storages torch makes around device memory] in
// allocator.cc).
char* host_start(const c10::DataPtr& data) {
  const CLDeviceAllocator::Block* block = CLDeviceAllocator::made_by_us(data);
  if (block == nullptr || block->host == nullptr) return nullptr;
  return static_cast<char*>(block->host) +
         (reinterpret_cast<uintptr_t>(data.get()) - block->address);
}

}  // namespace

void* host_address(const at::Tensor& device) {
  if (device.numel() == 0 || !host_addressable(device.device().index())) return nullptr;
  char* start = host_start(device.storage().data_ptr());
  if (start == nullptr) return nullptr;
  return start + static_cast<size_t>(device.storage_offset()) * item_bytes(device);
}

namespace {

// Note [Host aliases kept with their block]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every operator on the host path hands its CPU kernel a CPU tensor per device tensor, and making
// one (a TensorImpl, its sizes and strides, its contiguity flags; a StorageImpl per storage) is
// work repeated for operands seen before. Most operands are operands
// again in the next operator or the next step (parameters, optimizer state, the activations the
// backward pass reads, each seen as itself and as its transpose). So each block keeps its CPU
// storage and the last kTensors CPU tensors made over it (CLDeviceAllocator::Block::kept_aliases),
// and an operand takes a kept one when it is exactly what would be made: the same storage, dtype,
// sizes, strides and offset, no bits, and held by nothing but the block (its requires_grad is
// then set as the operand's). A kernel that changed a kept tensor's layout or grew its storage
// (an out= argument) makes it differ, so it is made again; one held elsewhere (the same device
// tensor twice in one call, an alias the fallback still holds after its section) is left to its
// holder. All this runs in a host section, which excludes every other thread from the device's
// blocks, so the blocks need no lock; a kept tensor's reference count is atomic, so a holder on
// another thread may drop it at any time. A block keeps at most kTensors + 1 small host objects,
// freed with it. What it saves is in design/performance.md, "Measured choices in the code".
using Block = CLDeviceAllocator::Block;

// A plain CPU tensor over `storage` laid out as `device`, which reads that storage's bytes.
at::Tensor new_host_alias(const at::Tensor& device, c10::intrusive_ptr<c10::StorageImpl> storage) {
  at::Tensor host = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(std::move(storage)), c10::DispatchKeySet(c10::DispatchKey::CPU),
      device.dtype());
  host.unsafeGetTensorImpl()->set_sizes_and_strides(device.sizes(), device.strides(),
                                                     device.storage_offset());
  return host;
}

// Whether `host` has a Python object (a Python kernel, or a dispatch mode, saw it). Dropping the
// last reference to such a tensor takes the GIL, which a thread in a host section must never wait
// for (a thread holding the GIL may be waiting for the device): a block drops such a kept tensor
// only when it is freed itself, and never reuses it.
bool has_python_object(const at::Tensor& host) {
  return const_cast<c10::TensorImpl*>(host.unsafeGetTensorImpl())->pyobj_slot()->load_pyobj() !=
         nullptr;
}

// Whether the kept `host` can stand for `device` in this call (Note [Host aliases kept with
// their block]): nothing else holds it, and it is what new_host_alias would make over `storage`
// now (`inference`: whether inference mode is on).
bool reusable(const at::Tensor& host, const at::Tensor& device, const c10::StorageImpl* storage,
              bool inference) {
  if (!host.defined() || host.use_count() != 1 || host.weak_use_count() != 1) return false;
  // What the last holder, maybe on another thread after its section, did to it happens before.
  std::atomic_thread_fence(std::memory_order_acquire);
  const c10::TensorImpl& impl = *host.unsafeGetTensorImpl();
  // Made in inference mode, a tensor is an inference tensor (no autograd keys, no version
  // counter), and out of it one that may not be; one made now would be as the mode is now.
  return impl.storage().unsafeGetStorageImpl() == storage && impl.dtype() == device.dtype() &&
         impl.storage_offset() == device.storage_offset() &&
         impl.sizes().equals(device.sizes()) && impl.strides().equals(device.strides()) &&
         !impl.is_conj() && !impl.is_neg() && host.is_inference() == inference &&
         !has_python_object(host);
}

// The kept CPU storage over `block`'s bytes from `start`, made (and the kept tensors dropped)
// when there is none or a kernel changed it.
const c10::intrusive_ptr<c10::StorageImpl>& host_storage(const Block& block, char* start,
                                                          size_t bytes) {
  Block::KeptAliases& kept = block.kept_aliases;
  c10::StorageImpl* storage = kept.storage.get();
  if (storage == nullptr || storage->data() != start || storage->nbytes() != bytes) {
    for (at::Tensor& tensor : kept.tensors) {
      if (tensor.defined() && !has_python_object(tensor)) tensor.reset();
    }
    kept.storage = c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), bytes, c10::DataPtr(start, c10::Device(c10::kCPU)),
        c10::GetCPUAllocator(), /*resizable=*/true);
  }
  return kept.storage;
}

// `device` as a plain CPU tensor over `storage`, the kept CPU storage of `block`, requiring grad
// as `device` does (`requires_grad`): a kept tensor when one is reusable, else a new one, kept in
// place of the oldest.
at::Tensor host_alias(const Block& block, const at::Tensor& device,
                      const c10::intrusive_ptr<c10::StorageImpl>& storage, bool requires_grad,
                      bool inference) {
  Block::KeptAliases& kept = block.kept_aliases;
  at::Tensor* host = nullptr;
  for (at::Tensor& tensor : kept.tensors) {
    if (reusable(tensor, device, storage.get(), inference)) {
      host = &tensor;
      break;
    }
  }
  for (size_t tried = 0; host == nullptr && tried < Block::KeptAliases::kTensors; ++tried) {
    at::Tensor& slot = kept.tensors[kept.next];
    kept.next = static_cast<uint8_t>((kept.next + 1) % Block::KeptAliases::kTensors);
    if (slot.defined() && has_python_object(slot)) continue;  // kept until the block is freed
    slot = new_host_alias(device, storage);
    host = &slot;
  }
  at::Tensor unkept;
  if (host == nullptr) {  // every slot holds a tensor Python saw: this one is not kept
    unkept = new_host_alias(device, storage);
    host = &unkept;
  }
  // Note [Kernels that ask whether an input requires grad] in fallback.cc. Only the block (or
  // this call) holds the tensor, so changing the flag is seen by no one else.
  if (host->requires_grad() != requires_grad) host->set_requires_grad(requires_grad);
  if (host == &unkept) return unkept;  // moved, not copied
  return *host;
}

}  // namespace

std::vector<at::Tensor> host_aliases(const vm::HostSection& /*section: held*/,
                                     c10::ArrayRef<at::Tensor> devices) {
  std::vector<at::Tensor> hosts;
  if (devices.empty()) return hosts;
  const c10::Device device = devices[0].device();
  if (!host_addressable(device.index())) return hosts;
  // Device storage -> the block's kept CPU storage. Searched linearly while there are few (an
  // operator's arguments); a _foreach_ operator's lists can hold thousands (an optimizer over
  // every parameter of a large model), so past kLinear a hash index takes over.
  struct Known {
    const c10::StorageImpl* device;
    const Block* block;
    const c10::intrusive_ptr<c10::StorageImpl>* host;
  };
  constexpr size_t kLinear = 16;
  boost::container::small_vector<Known, 4> storages;
  std::unordered_map<const c10::StorageImpl*, size_t> index;  // empty while linear
  const auto find = [&](const c10::StorageImpl* key) {
    if (index.empty()) {
      return std::find_if(storages.begin(), storages.end(),
                          [&](const Known& known) { return known.device == key; });
    }
    const auto it = index.find(key);
    return it == index.end() ? storages.end() : storages.begin() + it->second;
  };
  const bool inference = c10::InferenceMode::is_enabled();
  hosts.reserve(devices.size());
  for (const at::Tensor& tensor : devices) {
    if (tensor.device() != device || tensor.numel() == 0) return {};
    const c10::StorageImpl* key = tensor.storage().unsafeGetStorageImpl();
    auto known = find(key);
    if (known == storages.end()) {
      const c10::DataPtr& data = tensor.storage().data_ptr();
      char* start = host_start(data);
      if (start == nullptr) return {};
      const Block& block = CLDeviceAllocator::owner(data);
      storages.push_back(Known{key, &block, &host_storage(block, start, key->nbytes())});
      if (!index.empty()) {
        index.emplace(key, storages.size() - 1);
      } else if (storages.size() > kLinear) {
        for (size_t i = 0; i < storages.size(); ++i) index.emplace(storages[i].device, i);
      }
      known = storages.end() - 1;
    }
    const bool requires_grad = tensor.requires_grad();
    at::Tensor host = host_alias(*known->block, tensor, *known->host, requires_grad, inference);
    if (tensor.is_conj() || tensor.is_neg()) {
      host = with_bits_of(tensor, std::move(host));
      if (requires_grad) host.set_requires_grad(true);  // a view, made without it
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

namespace {
OCLVM_HOT_TLS thread_local std::shared_ptr<const MemoryContext> t_section_context;
}  // namespace

std::optional<vm::HostSection> host_section(c10::DeviceIndex index) {
  wait_native_launches(index);  // Note [Launches that do not wait]
  return translate_errors([&] {
    t_section_context = runtime().vm().capture_memory_context(false);
    return runtime().host_section(to_oclvm(index));
  });
}

std::shared_ptr<const MemoryContext> section_memory_context() { return t_section_context; }

at::Tensor device_copy(const at::Tensor& host, const c10::Device& device) {
  // A dense, gapless layout (contiguous or permuted) stores its elements in numel() consecutive
  // slots starting at element 0: one upload of exactly those bytes, in the allocation's list.
  // Anything but a plain dense tensor (quantized: its quantizer; sparse; views with bits) takes
  // to(), which refuses what the device cannot hold.
  if (host.layout() != at::kStrided || host.is_quantized() || host.is_nested() ||
      host.numel() == 0 || !host.is_non_overlapping_and_dense() || host.is_conj() ||
      host.is_neg()) {
    return host.to(device);
  }
  const size_t bytes = host.nbytes();
  // On a zero-copy device the bytes move on the host: in a host section when the new memory has
  // a host address (no command at all), else, when large, on every core (Note [Large copies on
  // host-unified devices]).
  const bool on_host = zero_copy(device.index()) &&
                       (bytes >= kParallelCopyBytes || host_addressable(device.index()));
  CLDeviceAllocator& allocator = CLDeviceAllocator::instance();
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), bytes,
      allocator.allocate_on(device.index(), bytes, on_host ? nullptr : host.data_ptr()),
      &allocator, /*resizable=*/true);
  at::Tensor result =
      at::detail::make_tensor<c10::TensorImpl>(
          std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), host.dtype());
  result.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides());
  if (!on_host) return result;
  if (bytes < kParallelCopyBytes) {
    if (void* address = host_address(result)) {
      if (std::optional<vm::HostSection> section = host_section(device.index())) {
        std::memcpy(address, host.data_ptr(), bytes);
        return result;
      }
    }
  }
  host_to_device(host.data_ptr(), result, bytes);
  return result;
}

bool span_is_compact(const at::Tensor& t) {
  if (t.is_contiguous()) return true;  // its span is its elements (on every operand: the quick way)
  constexpr int64_t kSlack = 64;  // elements: small tensors are always worth one transfer
  return span_elements(t) <= 2 * t.numel() + kSlack;
}

}  // namespace oclvm::torch_adapter
