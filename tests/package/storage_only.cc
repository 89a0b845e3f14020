// tests/package/storage_only.cc — links oclvm::storage alone: the device layer and its OpenCL
// dependency come with the target.
#include <cstdio>

#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/options.h"

int main() {
  oclvm::DeviceManager devices{oclvm::Options{}};
  for (oclvm::Device device : devices.devices()) {
    const oclvm::DeviceProperties& properties = devices.backend(device).properties();
    std::printf("%s: %s\n", device.str().c_str(), properties.name.c_str());
  }
  return devices.opencl_device_count() > 0 ? 0 : 1;
}
