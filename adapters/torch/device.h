// adapters/torch/device.h — the adapter's one oclvm Runtime, torch's opencl devices and the
// current device, and how oclvm errors become c10 errors.
//
// The adapter is an embedder like any other (design/embedding.md): it holds one oclvm::Runtime
// and reaches oclvm only through it. PrivateUse1 device index d is the Runtime's opencl:d.
//
// Promises:
//   - device_count() discovers the devices once, from Options::from_environment() (which, as
//     everywhere in oclvm, sets POCL_DEVICES to `basic` when it is unset), and starts no thread.
//     runtime() is made on its first use over those devices and starts the device workers then
//     (Note [Devices first, threads on first use] in device.cc). It is never destroyed: tensors
//     are freed after static destructors at interpreter exit, and find it. It is shut down at exit
//     (std::atexit): later releases run on the thread that drops the tensor.
//   - When finding devices fails (a malformed OCLVM_* variable, no OpenCL platform, a driver
//     error), there is no Runtime: device_count() is 0 and every use of a device raises a c10 error
//     carrying why (Note [No devices] in device.cc).
//   - The current device is per thread (as CUDA's is), 0 until set.
//
// Thread-safety: every function is thread-safe (the Runtime is); the current device is the
// calling thread's own.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "oclvm/instructions/runtime.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/errors.h"

namespace oclvm::torch_adapter {

// The Runtime that holds every tensor of the device. Every list the adapter builds, every stream
// and every host section it uses are of this Runtime. Throws a c10 error (naming the discovery
// error) when oclvm found no devices, and the Runtime's own error, translated, when it could not
// start (an allocator that does not exist: ValueError) — on every call.
Runtime& runtime();

// Number of OpenCL devices oclvm found (0 when there is no platform or discovery failed).
c10::DeviceIndex device_count() noexcept;
// Throws a c10::IndexError unless 0 <= index < device_count(); it names the discovery error when
// there are no devices.
void check_device_index(c10::DeviceIndex index);
inline Device to_oclvm(c10::DeviceIndex index) { return Device{DeviceType::kOpenCL, index}; }

// The per-thread current device index (PrivateUse1 index == oclvm opencl index).
c10::DeviceIndex current_device();
// Throws a c10::IndexError for an index that names no device, changing nothing.
void set_current_device(c10::DeviceIndex index);
// `index`, or the current device when it is negative (torch's "no index"), checked as above.
c10::DeviceIndex checked_index(c10::DeviceIndex index);

// What the driver says of the device (name, platform, version, memory sizes); checks the index.
const DeviceProperties& device_properties(c10::DeviceIndex index);
// The device's global memory, the "total" a memory fraction is of.
uint64_t global_memory_bytes(c10::DeviceIndex index);
// The device's largest single allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE); checks the index.
uint64_t max_allocation_bytes(c10::DeviceIndex index);
// Whether operators on device `index` hand CPU kernels the device's own memory (mapped) instead of
// copies (fallback.cc, Note [Zero-copy operands]): the device's memory is host-unified and
// OCLVM_ZERO_COPY is not "0". Decided once per device, on first use.
bool zero_copy(c10::DeviceIndex index);
// zero_copy, and every segment of the device has a host address (DeviceProperties::
// host_addressable) and OCLVM_ZERO_COPY is not "map": operators use its memory in host sections
// (Note [Host sections] in host_view.h), with no map at all.
bool host_addressable(c10::DeviceIndex index);

// Whether operators on device `index` compute with OpenCL kernels on the device (the native path,
// native_kernels.h) rather than CPU kernels on its memory (the host path): Runtime::
// native_kernels, read once per device. Checks the index.
bool native_kernels(c10::DeviceIndex index);

// Throws the c10 error matching an oclvm one (OutOfMemoryError -> c10::OutOfMemoryError,
// InvalidArgument -> c10::ValueError, others -> c10::Error) with its message; an out-of-memory
// message is worded as torch users' libraries expect (out_of_memory_text).
[[noreturn]] void throw_c10_error(const ErrorInfo& error);

// The text of a torch.OutOfMemoryError: CUDA's opening words, then oclvm's `details` (Note
// [Out-of-memory messages] in device.cc).
std::string out_of_memory_text(std::string_view details);

// Runs `fn`, turning oclvm exceptions into the matching c10 errors (throw_c10_error); any other
// exception passes through unchanged.
template <typename Fn>
auto translate_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error&) {
    throw_c10_error(error_info(std::current_exception()));
  }
}

}  // namespace oclvm::torch_adapter
