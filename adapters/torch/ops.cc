// adapters/torch/ops.cc — the PrivateUse1 ("opencl") operators the device implements itself and
// the routes that send composite operators to the CPU fallback.
//
// Implemented here: empty.memory_format, empty_strided, as_strided, view, _reshape_alias,
// resize_, _copy_from, _copy_from_and_resize, _local_scalar_dense, the set_ overloads,
// fill_.Scalar, zero_, record_stream, and the view operators that have per-backend kernels
// (unfold, view_as_real, view_as_complex; every other view operator is composite over these and
// as_strided, so all views alias). Every other operator runs its CPU kernel through the boxed
// fallback (fallback.cc): on a device whose memory has host addresses, on the device's own bytes
// in a host section, with no copy; elsewhere on host copies of its operands, its results and
// mutated arguments written back. convolution / convolution_backward run natively where the
// native path takes them (Note [Native convolutions] in native_conv.cc) and take the fallback
// explicitly otherwise, and give their results the device's layout (Note [Convolution layouts on
// the device]); operators with both a CPU and a composite kernel are routed to it too (Note
// [Composite kernels the CPU does not use]).
//
// On a native-path device a copy between two of its tensors with one dtype and strides (or a
// broadcast) is one kernel (Note [Strided copies on the native path]); otherwise:
// on a device whose memory has host addresses, copies, fills and item() run ATen's CPU kernels on
// the device's bytes in a host section (Note [Storage operators in a host section]). Elsewhere
// data moves as whole byte ranges through the VM (InstructionsBuilder copy_host_to_device /
// copy_device_to_host / copy / fill, each list run synchronously; large copies through a mapping,
// Note [Large copies on host-unified devices] in host_view.cc):
//   - a tensor's "span" is the bytes from its element 0 to its farthest element; strides and
//     dtype conversion are applied on the host, on a CPU tensor laid out over that span;
//   - contiguous same-dtype transfers move exactly the tensor's bytes, with no staging;
//   - a gapless permuted destination (transpose, channels-last) is staged with its own strides;
//   - a destination with gaps is written read-modify-write: read its span, copy into the
//     strided view on the host, write the span back (the gaps keep their old bytes);
//   - fill_ / zero_ of a contiguous tensor is one FillBlob with the element's bit pattern; other
//     layouts (and 16-byte elements) go read-modify-write.
// Each list runs on this thread's current stream of the device written (read, for device->host),
// so torch's stream contexts choose the VM stream; the VM orders accesses to a blob across streams.
// non_blocking is accepted and ignored: every transfer has returned when the operator returns.
//
// Thread-safety: the operators are as thread-safe as ATen's (the VM is thread-safe).
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/InferenceMode.h>
#include <torch/library.h>

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/fallback.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/native_kernels.h"
#include "adapters/torch/registration.h"
#include "adapters/torch/streams.h"
#include "oclvm/storage/hot_thread_local.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter {
namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.is_conj() == b.is_conj() && a.is_neg() == b.is_neg();
}

// Note [Storage operators in a host section]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a device whose memory has host addresses (host_view.h), copies, fills and item() need no
// command either: in a host section, each device tensor is a CPU tensor over its own bytes
// (host_aliases: its sizes, strides and bits) and ATen's CPU kernel does the work — any layout,
// dtype conversion and bits, on every core for large tensors, exactly as a CPU copy_ does. Runs
// `fn` on the aliases of `devices` (all of one device) and returns true; false, having done
// nothing, when a tensor has no host address or no section can be had (the caller then takes its
// lists).
// The device tensors are borrowed, not copied (BorrowedTensors: no GIL for item() of a tensor
// Python holds).
template <typename Fn>
bool on_host(std::initializer_list<std::reference_wrapper<const at::Tensor>> devices, Fn&& fn) {
  BorrowedTensors tensors;
  for (const at::Tensor& tensor : devices) tensors.add(tensor);
  const c10::DeviceIndex index = tensors.all()[0].device().index();
  if (!host_addressable(index)) return false;
  std::optional<vm::HostSection> section = host_section(index);
  if (!section) return false;
  std::vector<at::Tensor> hosts = host_aliases(*section, tensors.all());
  if (hosts.empty()) return false;
  fn(hosts);
  return true;
}

// A device tensor's span read into host memory: `span` is the 1-D CPU tensor holding it, `view`
// the CPU tensor with the device tensor's sizes and strides over it (the stored elements: no
// conjugate or negative bit; see values()).
struct HostSpan {
  at::Tensor span;
  at::Tensor view;
};

HostSpan read_span(const at::Tensor& src) {
  const int64_t elements = span_elements(src);
  at::Tensor span = at::empty({elements}, src.options().device(at::kCPU));
  device_to_host(src, span.data_ptr(), static_cast<size_t>(elements) * item_bytes(src));
  return HostSpan{span, span.as_strided(src.sizes(), src.strides(), 0)};
}

// A CPU tensor reading as the device tensor `src` reads (its bits applied to the stored bytes).
at::Tensor host_values(const at::Tensor& src) { return with_bits_of(src, read_span(src).view); }

void write_span(const at::Tensor& dst, const HostSpan& host) {
  host_to_device(host.span.data_ptr(), dst, static_cast<size_t>(host.span.numel()) * item_bytes(dst));
}

// dst (device) := src (CPU, any layout, dtype and conjugate/negative bits, broadcastable to dst).
// Staging tensors carry dst's bits, so what lands on the device is dst's stored representation.
void write_from_host(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous()) {
    at::Tensor staged = src;
    if (!(src.is_contiguous() && src.scalar_type() == dst.scalar_type() &&
          src.sizes().equals(dst.sizes()) && same_bits(src, dst))) {
      staged = at::empty(dst.sizes(), dst.options().device(at::kCPU));
      with_bits_of(dst, staged).copy_(src);
    }
    host_to_device(staged.data_ptr(), dst, dst.nbytes());
    return;
  }
  if (dst.is_non_overlapping_and_dense()) {
    // Permuted but gapless (a transpose, channels-last): its span is exactly its elements, so a
    // host tensor with the same strides is the whole span and nothing needs reading first.
    at::Tensor staged = at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(at::kCPU));
    with_bits_of(dst, staged).copy_(src);
    host_to_device(staged.data_ptr(), dst, dst.nbytes());
    return;
  }
  HostSpan host = read_span(dst);  // read-modify-write: gaps of dst keep their bytes
  with_bits_of(dst, host.view).copy_(src);
  write_span(dst, host);
}

// Note [Uninitialized memory under deterministic algorithms]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Under torch.use_deterministic_algorithms(True), with torch.utils.deterministic.
// fill_uninitialized_memory on (its default), the CPU and CUDA fill what empty and resize_ hand
// out: NaN for floating and complex types, the largest value for integers and bool. The device
// does the same, with its own fill_, so that a program reads the same bytes on every device.
bool deterministic_fill() {
  const at::Context& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

void fill_if_deterministic(at::Tensor& result) {
  if (C10_UNLIKELY(deterministic_fill()) && result.numel() != 0) {
    at::native::fill_empty_deterministic_(result);
  }
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device where = c10::device_or_default(device);
  TORCH_CHECK(where.type() == c10::DeviceType::PrivateUse1, "Expected an opencl device, but got ",
              where);
  // Checked before anything is allocated (empty_generic would allocate, then refuse).
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "unsupported memory format Preserve for empty on opencl");
    TORCH_CHECK(*memory_format != c10::MemoryFormat::ChannelsLast || size.size() == 4,
                "required rank 4 tensor to use channels_last format");
    TORCH_CHECK(*memory_format != c10::MemoryFormat::ChannelsLast3d || size.size() == 5,
                "required rank 5 tensor to use channels_last_3d format");
  }
  c10::DeviceGuard guard(where);
  at::Tensor result = at::detail::empty_generic(size, &CLDeviceAllocator::instance(), kKeys,
                                                c10::dtype_or_default(dtype), memory_format);
  fill_if_deterministic(result);
  return result;
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::Device where = c10::device_or_default(device);
  TORCH_CHECK(where.type() == c10::DeviceType::PrivateUse1, "Expected an opencl device, but got ",
              where);
  c10::DeviceGuard guard(where);
  at::Tensor result = at::detail::empty_strided_generic(
      size, stride, &CLDeviceAllocator::instance(), kKeys, c10::dtype_or_default(dtype));
  fill_if_deterministic(result);
  return result;
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> storage_offset) {
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      storage_offset ? std::optional<int64_t>(storage_offset->expect_int()) : std::nullopt);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

// PyTorch's resize_ semantics with device storage: the same sizes and no memory format change
// nothing (a strided view keeps its strides: the CPU fallback writes results back through
// _copy_from_and_resize, which must not restride the destination); other sizes make the tensor
// contiguous; a memory format restrides. The storage only grows, through resize_storage_bytes (a
// new block and a device-to-device copy), never by a memcpy of device addresses; shrinking keeps
// the storage and its block. A resize that fails (out of memory, a size whose bytes overflow)
// leaves the tensor's sizes and strides as they were.
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef sym_size,
                          std::optional<c10::MemoryFormat> memory_format) {
  const c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(sym_size);
  for (const int64_t extent : size) {
    TORCH_CHECK(extent >= 0, "Expected non-negative sizes for resize_, but got ", size);
  }
  TORCH_CHECK(!memory_format || *memory_format != c10::MemoryFormat::Preserve,
              "Expected a memory format other than preserve_format for resize_, but got it");
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  const std::vector<int64_t> old_sizes = impl->sizes().vec();
  const std::vector<int64_t> old_strides = impl->strides().vec();
  if (!impl->sizes().equals(size)) impl->set_sizes_contiguous(size);
  if (memory_format) impl->empty_tensor_restride(*memory_format);
  if (impl->numel() == 0) return self;
  try {
    const size_t needed = at::detail::computeStorageNbytes(
        impl->sizes(), impl->strides(), item_bytes(self), impl->storage_offset());
    const size_t old_bytes = self.storage().nbytes();
    if (needed > old_bytes) {
      resize_storage_bytes(self.storage(), needed);
      if (C10_UNLIKELY(deterministic_fill())) {
        at::native::fill_resize_deterministic_(self, static_cast<int64_t>(old_bytes));
      }
    }
  } catch (...) {
    impl->set_sizes_and_strides(old_sizes, old_strides);
    throw;
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  // copy_ calls _copy_from for this device before it checks any shape: a source that does not
  // broadcast to dst gets the CPU's error here, from the same copy on meta tensors (an empty
  // source or destination would otherwise return having copied nothing).
  if (!at::is_expandable_to(self.sizes(), dst.sizes())) {
    at::empty(dst.sizes(), dst.options().device(at::kMeta))
        .copy_(at::empty(self.sizes(), self.options().device(at::kMeta)));
    TORCH_CHECK(false, "Expected a source that broadcasts to the destination's shape ",
                dst.sizes(), ", but got ", self.sizes());
  }
  if (self.numel() == 0) return dst;
  // Bytes move unconverted only between tensors that read them alike (Note [Conjugate and
  // negative bits in copies] in host_view.cc).
  const bool same_layout = self.scalar_type() == dst.scalar_type() && self.is_contiguous() &&
                           dst.is_contiguous() && self.sizes().equals(dst.sizes()) &&
                           same_bits(self, dst);
  // Note [Strided copies on the native path]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Between two tensors of one native-path device (a transpose made contiguous, a write into a
  // slice, a broadcast, a dtype conversion), a copy is a kernel on the device (native_copy),
  // ahead of the host section: the device's queue orders it with the kernels around it, and no
  // byte crosses to the host. A contiguous one of one dtype stays one VM copy; a complex
  // conversion or other conjugate bits take the host, as below.
  if (!same_layout && !self.is_cpu() && !dst.is_cpu() && native_copy(self, dst)) return dst;
  // Note [Storage operators in a host section]
  // Each way to the host below waits for the device's native launches (host_section,
  // device_to_host: Note [Launches that do not wait]).
  if (dst.is_cpu()) {
    if (on_host({self}, [&](auto& host) { dst.copy_(host[0]); })) return dst;
  } else if (self.is_cpu()) {
    if (on_host({dst}, [&](auto& host) { host[0].copy_(self); })) return dst;
  } else if (on_host({self, dst}, [&](auto& host) { host[1].copy_(host[0]); })) {
    return dst;
  }
  if (dst.is_cpu()) {  // device -> host
    if (same_layout) {
      device_to_host(self, dst.data_ptr(), dst.nbytes());
    } else {
      dst.copy_(host_values(self));
    }
  } else if (self.is_cpu()) {  // host -> device
    write_from_host(dst, self);
  } else if (same_layout) {  // device -> device, one VM copy (across devices: staged by the VM)
    const BlobRef from = element0(self);
    const BlobRef to = element0(dst);
    translate_errors([&] {
      InstructionsBuilder builder = runtime().builder();
      builder.copy(from.blob, from.offset, to.blob, to.offset, dst.nbytes(), &stream_of(dst));
      runtime().run(builder.take());
    });
  } else {  // device -> device with strides, dtype conversion or other bits: through the host
    write_from_host(dst, host_values(self));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sym_sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "Expected a tensor with one element, but got ", self.numel());
  at::Scalar value;
  // on_host and device_to_host wait for the native launches (Note [Launches that do not wait]).
  // Note [Storage operators in a host section]
  if (on_host({self}, [&](auto& host) { value = host[0].item(); })) return value;
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  device_to_host(self, host.data_ptr(), item_bytes(self));
  return with_bits_of(self, host).item();
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / item_bytes(self));
  return at::native::set_storage_cpu_(self, source, 0, {elements}, {});
}

// As on the CPU, a view past the end of the storage grows the storage first — here through
// resize_storage_bytes (a new block and a device copy): set_storage_cpu_ would grow it with a host
// memcpy of device addresses.
at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt storage_offset,
                               c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  const int64_t offset = storage_offset.expect_int();
  const c10::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  const c10::IntArrayRef strides = C10_AS_INTARRAYREF_SLOW(stride);
  TORCH_CHECK(offset >= 0, "Expected a non-negative storage offset for set_, but got ", offset);
  for (const int64_t extent : sizes) {
    TORCH_CHECK(extent >= 0, "Expected non-negative sizes for set_, but got ", sizes);
  }
  if (!strides.empty()) {
    TORCH_CHECK(strides.size() == sizes.size(), "Expected as many strides as sizes for set_, but "
                "got ", strides.size(), " strides for ", sizes.size(), " sizes");
    for (const int64_t step : strides) {
      TORCH_CHECK(step >= 0, "Expected non-negative strides for set_, but got ", strides);
    }
    const size_t needed =
        at::detail::computeStorageNbytes(sizes, strides, item_bytes(self), offset);
    if (needed > source.nbytes()) resize_storage_bytes(source, needed);
  } else {
    const size_t needed =
        at::detail::computeStorageNbytesContiguous(sizes, item_bytes(self), offset);
    if (needed > source.nbytes()) resize_storage_bytes(source, needed);
  }
  return at::native::set_storage_cpu_(self, source, offset, sizes, strides);
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  auto storage = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), 0,
                                                       &CLDeviceAllocator::instance(), true);
  return at::native::set_storage_cpu_(self, c10::Storage(storage), 0, {0}, {});
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  // Note [Storage operators in a host section]
  if (on_host({self}, [&](auto& host) { host[0].fill_(value); })) return self;
  const size_t width = item_bytes(self);
  if (self.is_contiguous() && (width == 1 || width == 2 || width == 4 || width == 8)) {
    // The element's bit pattern, converted by ATen's own scalar rules, as self stores it (Note
    // [Conjugate and negative bits in copies]).
    at::Tensor element = at::scalar_tensor(value, self.options().device(at::kCPU));
    if (!same_bits(element, self)) {
      const at::Tensor stored = at::empty_like(element);
      with_bits_of(self, stored).copy_(element);
      element = stored;
    }
    uint64_t pattern = 0;
    std::memcpy(&pattern, element.data_ptr(), width);
    const BlobRef to = element0(self);
    translate_errors([&] {
      InstructionsBuilder builder = runtime().builder();
      builder.fill(to.blob, to.offset, self.nbytes(), pattern, width, &stream_of(self));
      runtime().run(builder.take());
    });
    return self;
  }
  HostSpan host = read_span(self);
  with_bits_of(self, host.view).fill_(value);
  write_span(self, host);
  return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

// Tensor.record_stream: the allocator's recordStream on the tensor's block.
void record_stream(at::Tensor& self, c10::Stream stream) {
  CLDeviceAllocator::instance().recordStream(self.storage().data_ptr(), stream);
}

// View operators whose ATen kernels are registered per backend (not composite): their native
// implementations only compute sizes, strides and offsets over the same storage, so they serve
// this device unchanged. Without them the CPU fallback would return copies instead of views.
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }

at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

// Note [Shallow copies between the CPU and the device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `param.data = tensor` (and so nn.Module.to / _apply, which keeps Parameter objects, optimizer
// references and tied weights by assigning .data) is allowed only between tensors whose TensorImpl
// types are compatible. c10's own rule counts the CPU and the GPU backends as one dense family
// but not PrivateUse1, so on the device Module.to made new Parameters: tied embeddings came
// apart, an optimizer made before .to() held dead tensors, and `cpu_param.data = device_tensor`
// raised. The rule is the dispatched operator _has_compatible_shallow_copy_type (composite for
// every other backend; the Python side and VariableHooks::set_data call it), so a kernel for this
// device extends the dense family to opencl tensors: any two strided, dense tensors of the CPU or
// an opencl device are compatible, as two CUDA or CPU tensors are. Everything else keeps c10's
// answer. The impl is a plain TensorImpl on both sides, so shallow_copy_from is well defined.
bool is_dense_here(const at::Tensor& t) {
  return t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested() &&
         (t.is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (is_dense_here(self) && is_dense_here(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// Note [Composite kernels the CPU does not use]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An operator with both a CPU kernel and an explicit composite kernel (CompositeExplicitAutograd,
// or CompositeExplicitAutogradNonFunctional: the functional and in-place forms of structured
// operators) runs the composite on this device: the boxed fallback is reached only by operators
// with no kernel for PrivateUse1 at all. The composite computes the same values by another route
// than the CPU's kernel: LayerNorm and GroupNorm through batch norm differed from the CPU in the
// last bits, which AdamW amplified into parameter differences of 1e-6 (GPT-2, ViT); a functional
// operator allocated its result on the device, then ran its out= form through the fallback,
// which copied the uninitialised result to the host and back, and warned when the structured
// meta's shape differed from the kernel's (mse_loss). So every such operator takes the boxed CPU
// fallback whole and computes exactly what the CPU computes, with one copy each way, after the
// one check their composites made here: all tensors on one device (cpu_fallback_on_one_device:
// `opencl + cpu` raised there and must go on raising); autograd
// stays above (their backward operators land here too). The set is read from the dispatcher when
// the library loads, so it follows the torch it runs with (tests/torch/test_fallback_routes.py
// checks it); operators with a native kernel here (registered before) keep it. Of the three
// CompositeImplicitAutograd operators that also have CPU kernels, mish_backward and silu_backward
// are routed too (float16 gradients differed; silu_backward by its unboxed kernel in
// host_kernels.cc, whose boxed route is the same fallback): autograd calls them only when no
// graph is being built — with create_graph it uses their infinitely differentiable forms — so no
// decomposition is lost. native_channel_shuffle stays composite: a backend kernel would take
// autograd's decomposition away from it. On host-addressable devices the fallback writes these
// operators' results straight into device blocks (Note [Results written in device memory] in
// host_results.cc), so taking the CPU kernel costs no copy of the result.
void route_cpu_kernels_over_composites(torch::Library& m) {
  m.impl("mish_backward", torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  for (const std::string& name :
       cpu_kernels_under_composites(c10::DispatchKey::CPU, c10::DispatchKey::PrivateUse1)) {
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback_on_one_device>());
  }
}

}  // namespace

namespace {

// Runs the convolution (or its backward) whose `count` arguments start at `args` on the native
// path, replacing them on the stack with its results (Note [Native convolutions] in
// native_conv.cc); false, the stack unchanged, when the native path does not take it.
bool native_convolution_boxed(bool backward, const c10::IValue* args, size_t count,
                              torch::jit::Stack* stack) {
  const size_t first = backward ? 1 : 0;
  const std::vector<c10::SymInt> strides = args[first + 3].toSymIntVector();
  const std::vector<c10::SymInt> paddings = args[first + 4].toSymIntVector();
  const std::vector<c10::SymInt> dilations = args[first + 5].toSymIntVector();
  // nullopt where a value is symbolic (torch.compile's tracing): the CPU kernel's route then.
  const std::optional<at::IntArrayRef> stride = c10::asIntArrayRefSlowOpt(strides);
  const std::optional<at::IntArrayRef> padding = c10::asIntArrayRefSlowOpt(paddings);
  const std::optional<at::IntArrayRef> dilation = c10::asIntArrayRefSlowOpt(dilations);
  const std::optional<int64_t> groups = args[first + 8].toSymInt().maybe_as_int();
  if (!stride || !padding || !dilation || !groups) return false;
  const at::Tensor& input = args[first].toTensor();
  const at::Tensor& weight = args[first + 1].toTensor();
  const bool transposed = args[first + 6].toBool();
  std::vector<c10::IValue> results;
  if (backward) {
    const std::vector<bool> mask = args[first + 9].toBoolList().vec();
    if (mask.size() != 3) return false;
    auto grads = native_convolution_backward(args[0].toTensor(), input, weight, *stride,
                                             *padding, *dilation, transposed, *groups,
                                             {mask[0], mask[1], mask[2]});
    if (!grads) return false;
    results = {std::get<0>(*grads), std::get<1>(*grads), std::get<2>(*grads)};
  } else {
    std::optional<at::Tensor> bias;
    if (args[2].isTensor()) bias = args[2].toTensor();
    std::optional<at::Tensor> out = native_convolution(input, weight, bias, *stride, *padding,
                                                       *dilation, transposed, *groups);
    if (!out) return false;
    results = {std::move(*out)};
  }
  torch::jit::drop(*stack, count);
  for (c10::IValue& result : results) stack->push_back(std::move(result));
  count_native_call();
  return true;
}

// Note [Convolution layouts on the device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch decides the layout of a convolution's results from the backend it would pick for the
// tensors' device: _determine_backend_memory_format(input, weight, select_conv_backend(...)). For
// this device that backend is Overrideable, whose results are contiguous, and FakeTensor's
// convolution (what torch.compile and torch.export trace with) predicts exactly that. The CPU
// kernel the device runs picks the CPU's backend instead, mkldnn, channels-last whenever the input
// or the weight is, and Inductor's compiled code then failed its stride check on the result. So
// the device gives the results (the output; grad_input and grad_weight) the layout torch's rule
// names for it, converting what the CPU kernel made otherwise; grad_bias is a vector either way.
void convolution_in_device_layout(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const bool backward = op.schema().name() == "aten::convolution_backward";
  // convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding,
  // groups); convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding,
  // dilation, transposed, output_padding, groups, output_mask).
  const size_t count = op.schema().arguments().size();
  const c10::IValue* args = &*(stack->end() - static_cast<std::ptrdiff_t>(count));
  const size_t first = backward ? 1 : 0;
  const at::Tensor& input = args[first].toTensor();
  const at::Tensor& weight = args[first + 1].toTensor();
  std::optional<at::Tensor> bias;
  std::optional<std::vector<c10::SymInt>> bias_sizes;
  if (!backward && args[2].isTensor()) bias = args[2].toTensor();
  if (backward && !args[3].isNone()) bias_sizes = args[3].toSymIntVector();
  const std::vector<c10::SymInt> stride = args[first + 3].toSymIntVector();
  const std::vector<c10::SymInt> padding = args[first + 4].toSymIntVector();
  const std::vector<c10::SymInt> dilation = args[first + 5].toSymIntVector();
  const std::vector<c10::SymInt> output_padding = args[first + 7].toSymIntVector();
  const at::MemoryFormat layout = at::native::_determine_backend_memory_format(
      input, weight,
      at::native::select_conv_backend(input, weight, bias, stride, padding, dilation,
                                      args[first + 6].toBool(), output_padding,
                                      args[first + 8].toSymInt(),
                                      bias_sizes ? at::OptionalSymIntArrayRef(*bias_sizes)
                                                 : at::OptionalSymIntArrayRef()));
  if (!native_convolution_boxed(backward, args, count, stack)) cpu_fallback(op, stack);
  const size_t results = backward ? 2 : 1;  // grad_bias is not converted
  const size_t outputs = op.schema().returns().size();
  for (size_t i = 0; i < results; ++i) {
    c10::IValue& result = (*stack)[stack->size() - outputs + i];
    if (!result.isTensor()) continue;
    const at::Tensor& tensor = result.toTensor();
    if (tensor.defined() && tensor.dim() >= 4 && !tensor.is_contiguous(layout)) {
      result = tensor.contiguous(layout);
    }
  }
}

}  // namespace

void register_native_kernels(torch::Library& m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("set_", set_empty);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("zero_", zero_);
  m.impl("record_stream", record_stream);
  m.impl("unfold", unfold);
  m.impl("view_as_real", view_as_real);
  m.impl("view_as_complex", view_as_complex);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  // convolution and convolution_backward are composite: for this device they would route to
  // convolution_overrideable, whose default kernel only throws. Registered here, they run
  // natively or take the boxed CPU fallback whole (autograd stays above: ConvolutionBackward0 calls
  // convolution_backward, which lands here too), with the device's layout (Note [Convolution
  // layouts on the device]).
  m.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&convolution_in_device_layout>());
  m.impl("convolution_backward",
         torch::CppFunction::makeFromBoxedFunction<&convolution_in_device_layout>());
  route_cpu_kernels_over_composites(m);
}

}  // namespace oclvm::torch_adapter
