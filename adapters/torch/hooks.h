// adapters/torch/hooks.h — Hooks, torch's at::PrivateUse1HooksInterface for the opencl device:
// availability, the device count and current device (device.h), generators (generator.h: the
// device's random state is a CPU generator's, which the fallback hands CPU kernels), the device
// of an address (Runtime::find), pinned memory (host_allocator.h) and storage resize
// (allocator.h). registration.cc registers it.
//
// Thread-safety: thread-safe (stateless; the current device is per thread).
#pragma once

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace oclvm::torch_adapter {

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override;
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override;
  at::Generator getNewGenerator(c10::DeviceIndex index) const override;
  // The opencl device whose memory holds `data` (any byte of a live block); throws c10::Error for
  // any other address.
  at::Device getDeviceFromPtr(void* data) const override;
  bool isPinnedPtr(const void* data) const override;
  at::Allocator* getPinnedMemoryAllocator() const override;
  bool hasPrimaryContext(c10::DeviceIndex index) const override;
  c10::DeviceIndex deviceCount() const override;
  c10::DeviceIndex getCurrentDevice() const override;
  void setCurrentDevice(c10::DeviceIndex index) const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override;
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override;
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const override;
};

}  // namespace oclvm::torch_adapter
