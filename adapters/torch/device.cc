// adapters/torch/device.cc — the adapter's Runtime, the device count, the current device and
// what each device is (device.h).
#include "adapters/torch/device.h"

#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "oclvm/storage/hot_thread_local.h"

namespace oclvm::torch_adapter {
namespace {

// Note [No devices]
// ~~~~~~~~~~~~~~~~~
// torch asks for the device count where it may not throw (is_available, lazy initialisation,
// every DeviceGuard), so finding devices must not throw either: a failure means no devices, and
// its reason is kept for the error of the first use of a device. The attempt is made once; a
// process whose environment was wrong is fixed by restarting it (as with CUDA).
//
// Note [Devices first, threads on first use]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Counting the devices must start no thread: torch and its test suites ask for the count at
// import (op_db does), and programs fork after that (DataLoader workers, the OpInfo sweep's fork
// server, Note [The fork server] in tests/torch/conformance/opinfo_sweep.py). A forked child has
// none of its parent's threads, so a Runtime made before the fork would wait forever for workers
// that are not there. So device_count() only discovers the devices (a DeviceManager, which starts
// no thread of oclvm's), and the first use of a device hands them to the Runtime, which starts
// the device workers then (Runtime's two-step constructor) — when the process-wide VM used to.
struct Discovery {
  std::unique_ptr<DeviceManager> devices;  // until runtime() takes them; null when it failed
  c10::DeviceIndex count = 0;
  std::string error;  // why there are no devices; empty when there are some
};

// Thread-safety: made once (a function-local static); only runtime()'s own one-time
// initialisation changes it afterwards (it takes `devices`), and nothing else reads `devices`.
Discovery& discovery() noexcept {
  static Discovery* const found = [] {
    auto* result = new Discovery();  // never destroyed: read by device_count() until exit
    try {
      result->devices = std::make_unique<DeviceManager>(Options::from_environment());
      result->count = static_cast<c10::DeviceIndex>(result->devices->opencl_device_count());
      if (result->count == 0) result->error = result->devices->why_no_device();
    } catch (const std::exception& e) {
      result->devices.reset();
      result->error = e.what();
    }
    return result;
  }();
  return *found;
}

OCLVM_HOT_TLS thread_local c10::DeviceIndex t_current_device = 0;

}  // namespace

Runtime& runtime() {
  struct Started {
    Runtime* runtime = nullptr;  // never destroyed (device.h); null when there is none
    std::exception_ptr error;    // why not, when the devices were found but it did not start
  };
  static const Started started = [] {
    Started result;
    Discovery& found = discovery();
    if (found.devices == nullptr) return result;
    try {
      result.runtime = new Runtime(std::move(found.devices));
    } catch (...) {  // e.g. OCLVM_ALLOCATOR names no allocator: raised on every use
      result.error = std::current_exception();
      return result;
    }
    // Drain and join at exit; tensors destroyed later release on their own thread (the VM's
    // runs_after_shutdown), and still find it.
    std::atexit([] {
      try {
        runtime().shutdown();
      } catch (const std::exception&) {
        // exit() from inside an instruction callback: the workers are left to the process's end.
      }
    });
    return result;
  }();
  if (started.runtime == nullptr && started.error != nullptr) {
    translate_errors([&] { std::rethrow_exception(started.error); });
  }
  TORCH_CHECK(started.runtime != nullptr, "Expected an opencl device, but oclvm found none (",
              discovery().error, ")");
  return *started.runtime;
}

c10::DeviceIndex device_count() noexcept { return discovery().count; }

void check_device_index(c10::DeviceIndex index) {
  const c10::DeviceIndex count = device_count();
  if (index >= 0 && index < count) [[likely]] return;  // on every allocation: nothing else
  const std::string& error = discovery().error;
  TORCH_CHECK_INDEX(index >= 0 && index < count, "Expected an opencl device index in [0, ",
                    static_cast<int>(count), "), but got ", static_cast<int>(index),
                    error.empty() ? "" : " (no opencl device: ", error, error.empty() ? "" : ")");
}

c10::DeviceIndex checked_index(c10::DeviceIndex index) {
  const c10::DeviceIndex d = index < 0 ? current_device() : index;
  check_device_index(d);
  return d;
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

const DeviceProperties& device_properties(c10::DeviceIndex index) {
  check_device_index(index);
  return translate_errors(
      [&]() -> const DeviceProperties& { return runtime().properties(to_oclvm(index)); });
}

uint64_t global_memory_bytes(c10::DeviceIndex index) {
  return device_properties(index).global_mem_bytes;
}

uint64_t max_allocation_bytes(c10::DeviceIndex index) {
  check_device_index(index);
  // Device properties never change: read them once (allocate asks on every call).
  static const std::vector<uint64_t> per_device = [] {
    std::vector<uint64_t> bytes;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      bytes.push_back(device_properties(d).max_alloc_bytes);
    }
    return bytes;
  }();
  return per_device[static_cast<size_t>(index)];
}

// Note [Out-of-memory messages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Libraries tell an out-of-memory error from others by its words, not only its type: accelerate's
// find_executable_batch_size shrinks the batch when the message holds " out of memory." (CUDA's
// "CUDA out of memory. Tried to allocate ..."). So the message of every torch.OutOfMemoryError
// the adapter raises starts "OpenCL out of memory. ", and oclvm's own account follows: the
// device, the request, the limit and what the allocator holds. oclvm's account opens with
// "Out of memory on DEVICE: ", after the instruction that failed when the VM ran one
// ("AllocateBlob (...) on opencl:0/compute: "); the text keeps the device and puts the
// instruction last: "OpenCL out of memory. opencl:0: tried to allocate ...; while running
// AllocateBlob (...) on opencl:0/compute".
std::string out_of_memory_text(std::string_view details) {
  constexpr std::string_view kOclvmOpening = "Out of memory on ";
  const size_t opening = details.find(kOclvmOpening);
  if (opening == std::string_view::npos) return "OpenCL out of memory. " + std::string(details);
  std::string_view context = details.substr(0, opening);
  while (!context.empty() && (context.back() == ' ' || context.back() == ':')) {
    context.remove_suffix(1);
  }
  std::string text = "OpenCL out of memory. ";
  text += details.substr(opening + kOclvmOpening.size());
  if (!context.empty()) {
    text += "; while running ";
    text += context;
  }
  return text;
}

void throw_c10_error(const ErrorInfo& error) {
  switch (error.type) {
    case ErrorInfo::Type::kOutOfMemory:
      C10_THROW_ERROR(OutOfMemoryError, out_of_memory_text(error.message));
    case ErrorInfo::Type::kInvalidArgument:
      C10_THROW_ERROR(ValueError, error.message);
    default:
      C10_THROW_ERROR(Error, error.message);
  }
}

namespace {

// Per device: bit 0 zero_copy, bit 1 host_addressable. One decision per device, made on first use.
// For comparison, OCLVM_ZERO_COPY=0 keeps the copies and OCLVM_ZERO_COPY=map the maps (no host
// sections).
uint8_t host_access_of(c10::DeviceIndex index) {
  static const std::vector<uint8_t>* const decided = [] {
    const char* setting = std::getenv("OCLVM_ZERO_COPY");
    const std::string_view value = setting == nullptr ? "" : setting;
    const bool allowed = value != "0";
    const bool sections = allowed && value != "map";
    auto* each = new std::vector<uint8_t>();  // never destroyed: read by operators until exit
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      const DeviceProperties& properties = device_properties(i);
      const bool zero_copy = allowed && properties.host_unified_memory;
      const bool addressable = zero_copy && sections && properties.host_addressable;
      each->push_back(static_cast<uint8_t>(zero_copy) | static_cast<uint8_t>(addressable << 1));
    }
    return each;
  }();
  return index >= 0 && static_cast<size_t>(index) < decided->size() ? (*decided)[index] : 0;
}

}  // namespace

bool native_kernels(c10::DeviceIndex index) {
  check_device_index(index);
  // Asked by every operator that has a native kernel: read once.
  static const std::vector<bool>* const per_device = [] {
    auto* each = new std::vector<bool>();  // never destroyed: read by operators until exit
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      each->push_back(translate_errors([&] { return runtime().native_kernels(to_oclvm(d)); }));
    }
    return each;
  }();
  return (*per_device)[static_cast<size_t>(index)];
}

bool zero_copy(c10::DeviceIndex index) { return (host_access_of(index) & 1) != 0; }

bool host_addressable(c10::DeviceIndex index) { return (host_access_of(index) & 2) != 0; }

}  // namespace oclvm::torch_adapter
