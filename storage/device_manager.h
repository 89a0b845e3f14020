// storage/device_manager.h — discovering devices and owning their backends.
//
// The DeviceManager picks an OpenCL platform (Options::platform, a substring of the platform name,
// or the first platform that has devices), creates one MemoryBackend per device of that platform
// (each with its own in-order command queue) and one for the host device `cpu`. A machine without
// any OpenCL platform still has `cpu`. Options::faults configures every backend's fault injector.
//
// Thread-safety: thread-safe after construction (the set of backends never changes); the backends
// themselves are thread-compatible (storage/backend.h).
// Lifetime: instance() is created on first use and never destroyed, so memory released during
// process exit still finds its backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "oclvm/storage/backend.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/options.h"

namespace oclvm {

class DeviceManager {
 public:
  // The process-wide manager, built from Options::from_environment() on first use.
  static DeviceManager& instance();

  // Discovers devices now. Throws BackendError when OpenCL calls fail, InvalidArgument when
  // options.platform names no platform (the message lists the platforms that exist).
  explicit DeviceManager(const Options& options);
  ~DeviceManager();

  const Options& options() const { return options_; }
  // Name of the chosen OpenCL platform; empty when there is none.
  const std::string& platform_name() const { return platform_name_; }
  // When there is no OpenCL device: what discovery found, the environment that chose it, and
  // what to change (for the error of the first use of a device). Empty when there are devices.
  const std::string& why_no_device() const { return why_no_device_; }
  // opencl:0 .. opencl:N-1, then cpu.
  std::vector<Device> devices() const;
  size_t opencl_device_count() const { return opencl_.size(); }
  bool has(Device device) const;

  // The backend of `device`. Throws InvalidArgument naming the devices that exist when it is
  // unknown or out of range.
  MemoryBackend& backend(Device device) const;
  // Whether a tensor library's operators compute on `device` with its own kernels rather than the
  // host's (Options::kernels; on its own, every device but a CPU one). The host device `cpu`
  // never. Throws as backend() does.
  bool native_kernels(Device device) const;

 private:
  Options options_;
  std::string platform_name_;
  std::string why_no_device_;
  std::vector<std::unique_ptr<MemoryBackend>> opencl_;
  std::unique_ptr<MemoryBackend> host_;
};

}  // namespace oclvm
