// storage/faults.h — fault injection in the device layer: make segment allocations and queue
// commands fail on purpose, to prove that every failure reaches its caller typed, that the VM keeps
// serving and that nothing leaks (design/reliability.md).
//
// Off unless configured: through Options::faults, which Options::from_environment() reads from
// OCLVM_FAULTS, or at run time through MemoryBackend::faults().configure() (tests).
//
//   OCLVM_FAULTS = RULE[,RULE...][,seed=N]
//   RULE         = POINT:nth=N      the Nth call at POINT fails (once)
//                | POINT:every=N    every Nth call fails (N, 2N, 3N, ...)
//                | POINT:p=X        each call fails with probability X in [0, 1], drawn from a
//                                   generator seeded by `seed` (default 0), so a run replays
//   POINT        = segment          MemoryBackend::create_segment: the driver refuses the memory
//                                   (OutOfMemoryError, as a real refusal; the allocators' out-of-
//                                   memory ladder runs)
//                | copy             host->device writes, device->host reads and device copies, on
//                                   queues and on the backend (BackendError)
//                | fill             fills (BackendError)
//                | finish           DeviceQueue::finish when it would call the driver (BackendError)
//                | map              DeviceQueue::map: the driver refuses a host mapping (BackendError)
//                | build            MemoryBackend::kernel, when it would build a program (from
//                                   source or from a cached binary) (BackendError)
//                | launch           DeviceQueue::enqueue_kernel (BackendError)
//
// Counting is per backend (so per device) and per point; an injected failure says "injected
// fault" in its message, names the point and the device, and touches nothing (the command is not
// enqueued, the segment not created).
//
// Thread-safety: FaultInjector is thread-safe (configure and the checks take one mutex; the check
// is one relaxed atomic load when no rule is set). FaultOptions is a value type.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "oclvm/storage/thread_annotations.h"

namespace oclvm {

enum class FaultPoint : uint8_t { kSegment, kCopy, kFill, kFinish, kMap, kBuild, kLaunch };
inline constexpr size_t kNumFaultPoints = 7;

// "segment", "copy", "fill", "finish", "map", "build", "launch".
const char* fault_point_name(FaultPoint point);

struct FaultRule {
  enum class Mode : uint8_t { kNever, kNth, kEvery, kProbability };
  Mode mode = Mode::kNever;
  uint64_t n = 0;            // kNth, kEvery: >= 1
  double probability = 0.0;  // kProbability: in [0, 1]
};

struct FaultOptions {
  std::array<FaultRule, kNumFaultPoints> rules{};
  uint64_t seed = 0;

  bool any() const;
  FaultRule& rule(FaultPoint point) { return rules[static_cast<size_t>(point)]; }
  const FaultRule& rule(FaultPoint point) const { return rules[static_cast<size_t>(point)]; }
  // The OCLVM_FAULTS text for these options ("" when none).
  std::string str() const;
  // Parses the syntax above. Throws InvalidArgument naming `what` (e.g. "OCLVM_FAULTS"), the
  // offending rule and what was expected; "" gives no faults.
  static FaultOptions parse(std::string_view text, std::string_view what);
};

class FaultInjector {
 public:
  FaultInjector() = default;
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Replaces the rules and restarts every count from 0.
  void configure(const FaultOptions& options);
  FaultOptions options() const;

  // Counts one call at `point` and says whether it must fail.
  bool should_fail(FaultPoint point);
  // Calls seen and failures injected at `point` since the last configure().
  uint64_t calls(FaultPoint point) const;
  uint64_t injected(FaultPoint point) const;
  // Failures injected at every point.
  uint64_t injected_total() const;

 private:
  mutable Mutex mutex_;
  std::atomic<bool> enabled_{false};
  FaultOptions options_ OCLVM_GUARDED_BY(mutex_);
  std::array<uint64_t, kNumFaultPoints> calls_ OCLVM_GUARDED_BY(mutex_){};
  std::array<uint64_t, kNumFaultPoints> injected_ OCLVM_GUARDED_BY(mutex_){};
};

}  // namespace oclvm
