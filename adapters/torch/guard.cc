// adapters/torch/guard.cc — GuardImpl (guard.h): torch's device guard interface, forwarding to
// the current device (device.h), the streams and events (streams.h) and the allocator.
#include "adapters/torch/guard.h"

#include "adapters/torch/allocator.h"
#include "adapters/torch/device.h"
#include "adapters/torch/streams.h"

namespace oclvm::torch_adapter {

// ---------------------------------------------------------------------------------------------
// Device

c10::Device GuardImpl::exchangeDevice(c10::Device device) const {
  const c10::Device old = getDevice();
  if (device.index() != current_device()) setDevice(device);
  return old;
}

c10::Device GuardImpl::getDevice() const { return c10::Device(kType, current_device()); }

void GuardImpl::setDevice(c10::Device device) const {
  TORCH_CHECK(device.type() == kType, "Expected an opencl device, but got ", device);
  set_current_device(device.index() < 0 ? 0 : device.index());
}

void GuardImpl::uncheckedSetDevice(c10::Device device) const noexcept {
  if (device.index() >= 0 && device.index() < device_count()) set_current_device(device.index());
}

c10::DeviceIndex GuardImpl::deviceCount() const noexcept { return device_count(); }

c10::DeviceCapability GuardImpl::getDeviceCapability(c10::Device device) const {
  checked_index(device.index());
  // Left out, as the CPU cannot convert them either: the quantized types, the bit-packed
  // containers (bits*), the sub-byte integers and float4.
  c10::DeviceCapability capability;
  auto& types = capability.capability_data.supported_scalar_types;
  types.has_QInt8 = types.has_QUInt8 = types.has_QInt32 = false;
  types.has_QUInt4x2 = types.has_QUInt2x4 = false;
  types.has_Bits1x8 = types.has_Bits2x4 = types.has_Bits4x2 = false;
  types.has_Bits8 = types.has_Bits16 = false;
  types.has_Float4_e2m1fn_x2 = false;
  types.has_UInt1 = types.has_UInt2 = types.has_UInt3 = types.has_UInt4 = false;
  types.has_UInt5 = types.has_UInt6 = types.has_UInt7 = false;
  types.has_Int1 = types.has_Int2 = types.has_Int3 = types.has_Int4 = false;
  types.has_Int5 = types.has_Int6 = types.has_Int7 = false;
  return capability;
}

// ---------------------------------------------------------------------------------------------
// Streams

c10::Stream GuardImpl::getStream(c10::Device device) const {
  return current_stream(device.index());
}

c10::Stream GuardImpl::getDefaultStream(c10::Device device) const {
  return default_stream(device.index());
}

c10::Stream GuardImpl::getStreamFromGlobalPool(c10::Device device,
                                               bool /*isHighPriority: no priorities*/) const {
  return stream_from_pool(device.index());
}

c10::Stream GuardImpl::getNewStream(c10::Device device, int /*priority: none*/) const {
  return new_stream(device.index());
}

c10::Stream GuardImpl::exchangeStream(c10::Stream stream) const { return exchange_stream(stream); }

void GuardImpl::synchronizeStream(const c10::Stream& stream) const { synchronize_stream(stream); }

bool GuardImpl::queryStream(const c10::Stream& stream) const { return query_stream(stream); }

void GuardImpl::synchronizeDevice(c10::DeviceIndex index) const { synchronize_device(index); }

void GuardImpl::recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const {
  CLDeviceAllocator::instance().recordStream(data, stream);
}

// ---------------------------------------------------------------------------------------------
// Events

void GuardImpl::record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                       c10::EventFlag flag) const {
  record_event(event, stream, device_index, flag);
}

void GuardImpl::block(void* event, const c10::Stream& stream) const {
  block_on_event(event, stream);
}

bool GuardImpl::queryEvent(void* event) const { return query_event(event); }

void GuardImpl::synchronizeEvent(void* event) const { synchronize_event(event); }

double GuardImpl::elapsedTime(void* start, void* end, c10::DeviceIndex /*device_index*/) const {
  return elapsed_ms(start, end);
}

void GuardImpl::destroyEvent(void* event, c10::DeviceIndex /*device_index*/) const noexcept {
  destroy_event(event);
}

}  // namespace oclvm::torch_adapter
