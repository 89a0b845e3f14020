// adapters/torch/hooks.cc — Hooks (hooks.h): torch's PrivateUse1 hooks, forwarding to the
// device, generator, host allocator and allocator files.
#include "adapters/torch/hooks.h"

#include <c10/core/Storage.h>

#include <optional>

#include "adapters/torch/allocator.h"
#include "adapters/torch/device.h"
#include "adapters/torch/generator.h"
#include "adapters/torch/host_allocator.h"

namespace oclvm::torch_adapter {

bool Hooks::isAvailable() const { return device_count() > 0; }

const at::Generator& Hooks::getDefaultGenerator(c10::DeviceIndex index) const {
  return default_generator(index);
}

at::Generator Hooks::getNewGenerator(c10::DeviceIndex index) const {
  return at::make_generator<DeviceGenerator>(checked_index(index));
}

at::Device Hooks::getDeviceFromPtr(void* data) const {
  const std::optional<FoundAddress> where =
      device_count() > 0 ? runtime().find(data) : std::nullopt;
  TORCH_CHECK(where.has_value() && where->device.type == DeviceType::kOpenCL,
              "Expected an address of opencl memory, but got ", data);
  return at::Device(c10::DeviceType::PrivateUse1, where->device.index);
}

bool Hooks::isPinnedPtr(const void* data) const { return HostAllocator::instance().owns(data); }

at::Allocator* Hooks::getPinnedMemoryAllocator() const { return &HostAllocator::instance(); }

bool Hooks::hasPrimaryContext(c10::DeviceIndex index) const {
  return index >= 0 && index < device_count();
}

c10::DeviceIndex Hooks::deviceCount() const { return device_count(); }

c10::DeviceIndex Hooks::getCurrentDevice() const { return current_device(); }

void Hooks::setCurrentDevice(c10::DeviceIndex index) const { set_current_device(index); }

c10::DeviceIndex Hooks::exchangeDevice(c10::DeviceIndex index) const {
  const c10::DeviceIndex old = current_device();
  set_current_device(index);
  return old;
}

c10::DeviceIndex Hooks::maybeExchangeDevice(c10::DeviceIndex index) const {
  return exchangeDevice(index);
}

void Hooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const {
  resize_storage_bytes(storage, bytes);
}

}  // namespace oclvm::torch_adapter
