// adapters/torch/ops.cc — the native PrivateUse1 ("opencl") operators and the boxed CPU fallback.
//
// Native here: empty.memory_format, empty_strided, as_strided, view, _reshape_alias, resize_,
// _copy_from, _copy_from_and_resize, _local_scalar_dense, the set_ overloads, fill_.Scalar, zero_,
// record_stream, and the view operators that have per-backend kernels (unfold, view_as_real, view_as_complex;
// every other view operator is composite over these and as_strided, so all views alias).
// Everything else runs on the host through at::native::cpu_fallback (inputs copied to the CPU,
// the CPU kernel, results copied back), which costs two transfers per call but is correct; it
// writes mutated arguments back with _copy_from_and_resize, which keeps a strided destination's
// layout (resize_ to the same sizes changes nothing) and writes it read-modify-write.
// convolution / convolution_backward take that fallback explicitly (their composite kernels
// would otherwise reach convolution_overrideable, which throws).
//
// Data movement is always whole byte ranges through the VM (InstructionsBuilder
// copy_host_to_device / copy_device_to_host / copy / fill, each list run synchronously):
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
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <cstring>
#include <utility>
#include <vector>

#include "adapters/torch/allocator.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter {
namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

size_t item_bytes(const at::Tensor& t) { return t.dtype().itemsize(); }

// Elements from element 0 to the farthest element, inclusive (0 for an empty tensor). Strides are
// never negative in ATen.
int64_t span_elements(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  return span;
}

// The blob of a device tensor and the byte offset of its element 0.
BlobRef element0(const at::Tensor& t) {
  return blob_of(t.storage(), static_cast<size_t>(t.storage_offset()) * item_bytes(t));
}

// This thread's current stream of a device tensor's device: where its operators run.
vm::Stream& stream_of(const at::Tensor& t) { return current_vm_stream(t.device().index()); }

void device_to_host(const at::Tensor& src, void* host, size_t bytes) {
  if (bytes == 0) return;
  const BlobRef from = element0(src);
  translate_errors([&] {
    InstructionsBuilder builder;
    builder.copy_device_to_host(from.blob, from.offset, host, bytes, &stream_of(src));
    vm::Run(builder.take());
  });
}

void host_to_device(const void* host, const at::Tensor& dst, size_t bytes) {
  if (bytes == 0) return;
  const BlobRef to = element0(dst);
  translate_errors([&] {
    InstructionsBuilder builder;
    builder.copy_host_to_device(host, to.blob, to.offset, bytes, &stream_of(dst));
    vm::Run(builder.take());
  });
}

// A device tensor's span read into host memory: `span` is the 1-D CPU tensor holding it, `view`
// the CPU tensor with the device tensor's sizes and strides over it.
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

void write_span(const at::Tensor& dst, const HostSpan& host) {
  host_to_device(host.span.data_ptr(), dst, static_cast<size_t>(host.span.numel()) * item_bytes(dst));
}

// dst (device) := src (CPU, any layout and dtype, broadcastable to dst).
void write_from_host(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous()) {
    at::Tensor staged = src;
    if (!(src.is_contiguous() && src.scalar_type() == dst.scalar_type() &&
          src.sizes().equals(dst.sizes()))) {
      staged = at::empty(dst.sizes(), dst.options().device(at::kCPU));
      staged.copy_(src);
    }
    host_to_device(staged.data_ptr(), dst, dst.nbytes());
    return;
  }
  if (dst.is_non_overlapping_and_dense()) {
    // Permuted but gapless (a transpose, channels-last): its span is exactly its elements, so a
    // host tensor with the same strides is the whole span and nothing needs reading first.
    at::Tensor staged = at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(at::kCPU));
    staged.copy_(src);
    host_to_device(staged.data_ptr(), dst, dst.nbytes());
    return;
  }
  HostSpan host = read_span(dst);  // read-modify-write: gaps of dst keep their bytes
  host.view.copy_(src);
  write_span(dst, host);
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
  return at::detail::empty_generic(size, &CLDeviceAllocator::instance(), kKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::Device where = c10::device_or_default(device);
  TORCH_CHECK(where.type() == c10::DeviceType::PrivateUse1, "Expected an opencl device, but got ",
              where);
  c10::DeviceGuard guard(where);
  return at::detail::empty_strided_generic(size, stride, &CLDeviceAllocator::instance(), kKeys,
                                           c10::dtype_or_default(dtype));
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
    if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  } catch (...) {
    impl->set_sizes_and_strides(old_sizes, old_strides);
    throw;
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.numel() == 0) return dst;
  const bool same_layout = self.scalar_type() == dst.scalar_type() && self.is_contiguous() &&
                           dst.is_contiguous() && self.sizes().equals(dst.sizes());
  if (dst.is_cpu()) {  // device -> host
    if (same_layout) {
      device_to_host(self, dst.data_ptr(), dst.nbytes());
    } else {
      dst.copy_(read_span(self).view);
    }
  } else if (self.is_cpu()) {  // host -> device
    write_from_host(dst, self);
  } else if (same_layout) {  // device -> device, one VM copy (across devices: staged by the VM)
    const BlobRef from = element0(self);
    const BlobRef to = element0(dst);
    translate_errors([&] {
      InstructionsBuilder builder;
      builder.copy(from.blob, from.offset, to.blob, to.offset, dst.nbytes(), &stream_of(dst));
      vm::Run(builder.take());
    });
  } else {  // device -> device with strides or dtype conversion: through the host
    write_from_host(dst, read_span(self).view);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sym_sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "Expected a tensor with one element, but got ", self.numel());
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  device_to_host(self, host.data_ptr(), item_bytes(self));
  return host.item();
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
  const size_t width = item_bytes(self);
  if (self.is_contiguous() && (width == 1 || width == 2 || width == 4 || width == 8)) {
    // The element's bit pattern, converted by ATen's own scalar rules.
    const at::Tensor element = at::scalar_tensor(value, self.options().device(at::kCPU));
    uint64_t pattern = 0;
    std::memcpy(&pattern, element.data_ptr(), width);
    const BlobRef to = element0(self);
    translate_errors([&] {
      InstructionsBuilder builder;
      builder.fill(to.blob, to.offset, self.nbytes(), pattern, width, &stream_of(self));
      vm::Run(builder.take());
    });
    return self;
  }
  HostSpan host = read_span(self);
  host.view.fill_(value);
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

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

// Note [Registrations that outlive exit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// TORCH_LIBRARY_IMPL keeps its torch::Library in a static object, and ~Library deregisters the
// kernels. When C's exit() runs on one thread while another is dispatching an opencl operator
// (the GIL released), exit's static destructors deregistered the PrivateUse1 fallback under it:
// a null boxed kernel, SIGSEGV in about 1 run in 400 (tests/torch/test_exit.py,
// libc_exit_from_thread_mid_work). So the three libraries are made with `new` and never
// destroyed: the kernels stay registered until the process is gone. The pointers live in
// statics, so the objects stay reachable (no leak report).

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
  // convolution and convolution_backward are composite: for this device they would route to
  // convolution_overrideable, whose default kernel only throws. Registered here, they take the
  // boxed CPU fallback whole (autograd stays above: ConvolutionBackward0 calls
  // convolution_backward, which lands here too).
  m.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  m.impl("convolution_backward", torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

void register_fallback(torch::Library& m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// A PrivateUse1 IMPL library of namespace `ns`, filled by `init`, never destroyed (Note
// [Registrations that outlive exit]).
torch::Library* lasting_library(const char* ns, void (*init)(torch::Library&), uint32_t line) {
  auto* library = new torch::Library(torch::Library::IMPL, ns,
                                     std::make_optional(c10::DispatchKey::PrivateUse1), __FILE__,
                                     line);
  init(*library);
  return library;
}

[[maybe_unused]] torch::Library* const kNativeKernels =
    lasting_library("aten", &register_native_kernels, __LINE__);
[[maybe_unused]] torch::Library* const kFallback =
    lasting_library("_", &register_fallback, __LINE__);

}  // namespace

}  // namespace oclvm::torch_adapter
