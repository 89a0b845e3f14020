// adapters/torch/fallback_counts.cc — the per-operator counts of CPU-kernel calls
// (fallback_counts.h).

#include "adapters/torch/fallback_counts.h"

#include <c10/util/Exception.h>

#include <map>
#include <memory>
#include <mutex>

#include "adapters/torch/device.h"

namespace oclvm::torch_adapter {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<FallbackCounter>> counters;  // guarded by mutex
};

Registry& registry() {
  static Registry* const r = new Registry();  // never destroyed: operators count until exit
  return *r;
}

}  // namespace

void FallbackCounter::count(c10::DeviceIndex device) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  if (!warned_.load(std::memory_order_relaxed) && device >= 0 && device < device_count() &&
      native_kernels(device) && !warned_.exchange(true)) {
    TORCH_WARN("oclvm: ", name_, " has no native OpenCL kernel for this call on opencl:",
               static_cast<int>(device),
               "; it runs a CPU kernel (torch.opencl.fallback_counts() counts such calls)");
  }
}

FallbackCounter& fallback_counter(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::unique_ptr<FallbackCounter>& counter = r.counters[name];
  if (counter == nullptr) counter = std::make_unique<FallbackCounter>(name);
  return *counter;
}

std::vector<std::pair<std::string, uint64_t>> fallback_counts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::pair<std::string, uint64_t>> counts;
  for (const auto& [name, counter] : r.counters) {
    const uint64_t calls = counter->calls();
    if (calls != 0) counts.emplace_back(name, calls);
  }
  return counts;
}

void reset_fallback_counts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& [name, counter] : r.counters) counter->reset();
}

}  // namespace oclvm::torch_adapter
