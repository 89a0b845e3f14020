// adapters/torch/fallback_counts.h — how often each operator ran a CPU kernel instead of a native
// one (torch.opencl.fallback_counts()), and the warning the first such call on a native-kernel
// device gives.
//
// An operator counts each call that ran a CPU kernel for device tensors: the boxed fallback, the
// unboxed host kernels and the fused foreach loops. Calls a native kernel took, and the storage
// operators (copies, fills, views), do not count.
//
// Thread-safety: any thread. A counter is made once per operator under a mutex and never freed;
// counting is one relaxed atomic increment.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace oclvm::torch_adapter {

class FallbackCounter {
 public:
  explicit FallbackCounter(std::string name) : name_(std::move(name)) {}
  FallbackCounter(const FallbackCounter&) = delete;
  FallbackCounter& operator=(const FallbackCounter&) = delete;

  // One call on device `device` ran a CPU kernel. The first on a device that takes the native
  // path (native_kernels() in device.h) warns, once per operator and process, naming it.
  void count(c10::DeviceIndex device);

  const std::string& name() const { return name_; }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }
  void reset() { calls_.store(0, std::memory_order_relaxed); }

 private:
  const std::string name_;  // "aten::add.Tensor"
  std::atomic<uint64_t> calls_{0};
  std::atomic<bool> warned_{false};
};

// The counter of the operator named `name` (its schema's name and overload, "aten::add.Tensor"),
// made on first use; it lives until exit.
FallbackCounter& fallback_counter(const std::string& name);

// (operator, calls) for every operator counted since the process started or the last reset, in
// name order; operators with no calls are left out.
std::vector<std::pair<std::string, uint64_t>> fallback_counts();
// Sets every count to 0 (the warnings, once given, are not given again).
void reset_fallback_counts();

}  // namespace oclvm::torch_adapter
