// storage/device.h — naming a device: {type, index}.
//
// `opencl:N` is the N-th device of the chosen OpenCL platform (see storage/device_manager.h);
// `cpu` (index 0) is the host device, whose memory is ordinary host memory. Devices are values:
// cheap to copy, comparable, printable ("opencl:1", "cpu").
//
// Thread-safety: values; no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace oclvm {

using DeviceIndex = int16_t;

enum class DeviceType : uint8_t { kOpenCL, kCpu };

struct Device {
  DeviceType type = DeviceType::kOpenCL;
  DeviceIndex index = 0;

  friend bool operator==(const Device&, const Device&) = default;
  std::string str() const;
};

// Parses "opencl", "opencl:N", "cpu" or "cpu:0". Throws InvalidArgument with the accepted forms on
// anything else (including an index that overflows DeviceIndex). Whether the device exists is the
// DeviceManager's business, not the parser's.
Device parse_device(std::string_view text);

}  // namespace oclvm

template <>
struct std::hash<oclvm::Device> {
  size_t operator()(const oclvm::Device& d) const noexcept {
    return (static_cast<size_t>(d.type) << 16) ^ static_cast<uint16_t>(d.index);
  }
};
