// adapters/torch/guard.h — GuardImpl, torch's c10::impl::DeviceGuardImplInterface for the opencl
// device: the current device (device.h), streams and events (streams.h) and the device's
// capability, as torch's DeviceGuard, StreamGuard, torch.Stream and torch.Event reach them.
// registration.cc registers it for PrivateUse1.
//
// Thread-safety: thread-safe (stateless; the current device and stream are per thread).
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace oclvm::torch_adapter {

class GuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }

  // ---- Device (device.h) ----
  c10::Device exchangeDevice(c10::Device device) const override;
  c10::Device getDevice() const override;
  // A negative index is device 0; throws for an index that names no device.
  void setDevice(c10::Device device) const override;
  void uncheckedSetDevice(c10::Device device) const noexcept override;
  c10::DeviceIndex deviceCount() const noexcept override;
  // torch.accelerator.get_device_capability: the dtypes a device tensor can have and convert
  // from and to (the CPU's kernels compute them).
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override;

  // ---- Streams (streams.h) ----
  c10::Stream getStream(c10::Device device) const override;
  c10::Stream getDefaultStream(c10::Device device) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const override;
  c10::Stream getNewStream(c10::Device device, int priority) const override;
  c10::Stream exchangeStream(c10::Stream stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeDevice(c10::DeviceIndex index) const override;
  // CLDeviceAllocator::recordStream.
  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override;

  // ---- Events (streams.h) ----
  void record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
              c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* start, void* end, c10::DeviceIndex device_index) const override;
  void destroyEvent(void* event, c10::DeviceIndex device_index) const noexcept override;
};

}  // namespace oclvm::torch_adapter
