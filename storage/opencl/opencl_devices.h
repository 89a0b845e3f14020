// storage/opencl/opencl_devices.h — the OpenCL side of device discovery, without OpenCL types.
//
// This header is included by storage/device_manager.cc, so it exposes no OpenCL header; the
// implementation (opencl_backend.cc) is the only place that talks to the OpenCL runtime.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "oclvm/storage/backend.h"
#include "oclvm/storage/options.h"

namespace oclvm::opencl {

struct DiscoveredPlatform {
  std::string name;                                       // empty when no platform has devices
  std::vector<std::unique_ptr<MemoryBackend>> backends;  // one per device, opencl:0..N-1
  // When `backends` is empty: what was found (each platform and its device count), the
  // environment that chose it, and what to change. Empty otherwise.
  std::string why_none;
};

// Chooses the platform (see DeviceManager) and builds one backend per device, each with an
// in-order command queue. Sets POCL_DEVICES to options.pocl_default_devices first when the
// environment has no value (storage/options.h).
DiscoveredPlatform discover(const Options& options);

}  // namespace oclvm::opencl
