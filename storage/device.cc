// storage/device.cc — printing and parsing device names.
#include "oclvm/storage/device.h"

#include <charconv>

#include "oclvm/storage/errors.h"

namespace oclvm {

std::string Device::str() const {
  // The one host device is "cpu"; a hand-made cpu:N (which does not exist) keeps its index, so
  // that an error about it does not name the device that does.
  if (type == DeviceType::kCpu) return index == 0 ? "cpu" : "cpu:" + std::to_string(index);
  return "opencl:" + std::to_string(index);
}

Device parse_device(std::string_view text) {
  auto fail = [&]() -> Device {
    throw InvalidArgument("Expected a device of the form opencl, opencl:N or cpu, but got '" +
                          std::string(text) + "'");
  };
  std::string_view kind = text;
  std::string_view index_text;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    kind = text.substr(0, colon);
    index_text = text.substr(colon + 1);
    if (index_text.empty()) return fail();
  }
  Device device;
  if (kind == "opencl") {
    device.type = DeviceType::kOpenCL;
  } else if (kind == "cpu") {
    device.type = DeviceType::kCpu;
  } else {
    return fail();
  }
  if (!index_text.empty()) {
    // Digits only: no sign ("-0"), no leading zeros ("007"), no trailing text.
    if (index_text[0] < '0' || index_text[0] > '9') return fail();
    if (index_text.size() > 1 && index_text[0] == '0') return fail();
    DeviceIndex index = 0;
    auto [end, ec] = std::from_chars(index_text.data(), index_text.data() + index_text.size(), index);
    if (ec != std::errc() || end != index_text.data() + index_text.size() || index < 0) return fail();
    if (device.type == DeviceType::kCpu && index != 0) return fail();
    device.index = index;
  }
  return device;
}

}  // namespace oclvm
