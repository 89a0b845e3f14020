// storage/device_manager.cc — building the backends of every device once.
#include "oclvm/storage/device_manager.h"

#include "oclvm/storage/errors.h"
#include "oclvm/storage/host/host_backend.h"
#include "oclvm/storage/opencl/opencl_devices.h"

namespace oclvm {

DeviceManager& DeviceManager::instance() {
  // Never destroyed: memory released during process exit must still find its backend.
  static DeviceManager* const manager = new DeviceManager(Options::from_environment());
  return *manager;
}

DeviceManager::DeviceManager(const Options& options) : options_(options) {
  opencl::DiscoveredPlatform platform = opencl::discover(options_);
  platform_name_ = std::move(platform.name);
  why_no_device_ = std::move(platform.why_none);
  opencl_ = std::move(platform.backends);
  host_ = std::make_unique<HostBackend>();
  for (const auto& backend : opencl_) backend->set_kernel_cache_dir(options_.kernel_cache_dir);
  if (options_.faults.any()) {
    for (const auto& backend : opencl_) backend->faults().configure(options_.faults);
    host_->faults().configure(options_.faults);
  }
}

DeviceManager::~DeviceManager() = default;

std::vector<Device> DeviceManager::devices() const {
  std::vector<Device> result;
  for (const auto& backend : opencl_) result.push_back(backend->device());
  result.push_back(host_->device());
  return result;
}

bool DeviceManager::has(Device device) const {
  if (device.type == DeviceType::kCpu) return device.index == 0;
  return device.index >= 0 && static_cast<size_t>(device.index) < opencl_.size();
}

bool DeviceManager::native_kernels(Device device) const {
  const DeviceProperties& properties = backend(device).properties();
  if (device.type != DeviceType::kOpenCL) return false;
  switch (options_.kernels) {
    case KernelPath::kNative:
      return true;
    case KernelPath::kHost:
      return false;
    case KernelPath::kAuto:
      break;
  }
  return !properties.cpu_device;
}

MemoryBackend& DeviceManager::backend(Device device) const {
  if (!has(device)) {
    std::string known;
    for (Device d : devices()) known += (known.empty() ? "" : ", ") + d.str();
    throw InvalidArgument("Expected one of the devices " + known + ", but got " + device.str());
  }
  if (device.type == DeviceType::kCpu) return *host_;
  return *opencl_[static_cast<size_t>(device.index)];
}

}  // namespace oclvm
