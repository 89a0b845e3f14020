// adapters/torch/host_view.h — staging between device and host (host_view.cc): a device tensor's
// byte span and its transfers, device tensors handed to CPU kernels laid out as they are on the
// device (copies of their spans, their own memory mapped, or aliases of it in a host section),
// and CPU results uploaded into new device tensors. BorrowedTensors: how the operators pass
// device tensors along without touching their reference counts.
//
// Thread-safety: as the copies (the VM orders them).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "adapters/torch/allocator.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/vm/host_section.h"

namespace oclvm::torch_adapter {

// Tensors that alias others without owning a reference: no reference count changes while they
// live (MaybeOwned's borrows), and so no Python object is touched. Copying a tensor Python holds
// takes its count from 1 to 2, which in torch 2.13 also increfs its Python object and so takes
// the GIL the binding released (Note [Unboxed host kernels] in host_kernels.cc). Destroyed
// without a decrement; the tensors they alias must outlive them.
class BorrowedTensors {
 public:
  BorrowedTensors() = default;
  BorrowedTensors(const BorrowedTensors&) = delete;
  BorrowedTensors& operator=(const BorrowedTensors&) = delete;
  ~BorrowedTensors() {
    for (at::Tensor& tensor : tensors_) c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(tensor);
  }
  void add(const at::Tensor& tensor) {
    tensors_.push_back(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(tensor));
  }
  c10::ArrayRef<at::Tensor> all() const { return tensors_; }

 private:
  c10::SmallVector<at::Tensor, 4> tensors_;
};

// Bytes of one element of `t`.
inline size_t item_bytes(const at::Tensor& t) { return t.dtype().itemsize(); }
// Elements from a tensor's element 0 to its farthest element, inclusive (0 for an empty tensor):
// its span.
int64_t span_elements(const at::Tensor& t);
// The blob of a device tensor and the byte offset of its element 0.
BlobRef element0(const at::Tensor& t);
// This thread's current stream of a device tensor's device: where its operators run.
vm::Stream& stream_of(const at::Tensor& t);
// Copies `bytes` from the device tensor's element 0 on into `host`, or from `host` into it; one
// synchronous VM list, or a host-side copy on a zero-copy device (Note [Large copies on
// host-unified devices] in host_view.cc).
void device_to_host(const at::Tensor& src, void* host, size_t bytes);
void host_to_device(const void* host, const at::Tensor& dst, size_t bytes);
// `host` carrying `like`'s conjugate and negative bits (Note [Conjugate and negative bits in
// copies] in host_view.cc).
at::Tensor with_bits_of(const at::Tensor& like, at::Tensor host);

// How stage_on_host hands a device tensor to a CPU kernel: a host copy of its span, or the
// device's own memory mapped (Note [Zero-copy operands] in fallback.cc) for reading, or for
// reading and writing.
enum class Staging : uint8_t { kCopy, kMapRead, kMapWrite };

struct HostOperands {
  std::vector<at::Tensor> hosts;  // per device tensor: a CPU tensor laid out as on the device
  std::vector<std::shared_ptr<HostMapping>> mappings;  // to end with finish_on_host
};

// Each of `devices` as a CPU tensor with its sizes, strides and bits, staged as `how` says (empty:
// every one copied), all in one VM list (one sync point). Mapped operands stay valid until
// finish_on_host; when the list fails, nothing stays mapped.
HostOperands stage_on_host(c10::ArrayRef<at::Tensor> devices, c10::ArrayRef<Staging> how);

// host_view of each of `devices`, read in one VM list (stage_on_host with copies only).
std::vector<at::Tensor> host_views(c10::ArrayRef<at::Tensor> devices);

// One VM list: ends `mappings` (cleared) and uploads each (device tensor, host copy of it from
// stage_on_host) pair's span back into the device tensor. The host copies must still have the
// device tensors' sizes and strides.
void finish_on_host(std::vector<std::shared_ptr<HostMapping>>& mappings,
                    c10::ArrayRef<std::pair<at::Tensor, at::Tensor>> written);

// Note [Host sections] (vm/host_section.h) in the adapter: on a zero-copy device whose segments
// have a host address, an operator's device tensors are handed to the CPU kernel as CPU tensors
// over their own bytes, inside a host section: no map, no copy, no VM list.
//
// The host address of a device tensor's element 0, or nullptr: its device is not zero-copy, its
// segment has no host address, or it has no elements.
void* host_address(const at::Tensor& device);
// Each of `devices` as a CPU tensor over its own bytes, with its sizes, strides, storage offset,
// bits and requires_grad (Note [Kernels that ask whether an input requires grad] in fallback.cc);
// empty when one of them has no host address or they are not all on one device. Tensors of one
// device storage get one CPU storage, so ATen's overlap checks see their aliasing
// as they would on the CPU (x[1:].copy_(x[:-1]) is refused, not silently smeared). Called in
// `section`, a host section on the tensors' device (the blocks keep what it makes for the next
// call: Note [Host aliases kept with their block] in host_view.cc). Valid while the device tensors
// live; read or written only inside that section. A kernel that grows one (an out= argument of
// the wrong size) moves it to host memory of the CPU allocator, which the caller then copies back
// (its storage's data is no longer the device's).
std::vector<at::Tensor> host_aliases(const vm::HostSection& section,
                                     c10::ArrayRef<at::Tensor> devices);
// A host section on the opencl device `index`, once its worker is idle (Runtime::host_section);
// nullopt when the VM is shut down or this thread may not wait (an instruction callback).
std::optional<vm::HostSection> host_section(c10::DeviceIndex index);
// The memory-history context of the code that last opened a host section on this thread,
// captured just before it opened (Note [Python stacks in the history], memory_history.cc): a
// thread that holds a device must not wait for the GIL. Null while the history wants none.
std::shared_ptr<const MemoryContext> section_memory_context();

// A new device tensor on `device` with `host`'s sizes, strides and values. For a dense, gapless
// host tensor the allocation and the upload are one VM list; anything else goes through to().
at::Tensor device_copy(const at::Tensor& host, const c10::Device& device);

// Whether `t`'s span is at most twice its elements (plus a little): copying the span of a view
// with large gaps (a column of a big matrix) would move far more than the view holds.
bool span_is_compact(const at::Tensor& t);

}  // namespace oclvm::torch_adapter
