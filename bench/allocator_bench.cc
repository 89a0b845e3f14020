// bench/allocator_bench.cc — what an allocate + deallocate pair costs, against the host's floor.
//
// Benchmarks (Google Benchmark), all on opencl:0 (PoCL) and at 512 B, 4 KiB, 64 KiB and 1 MiB:
//   BM_CachingHit   CachingAllocator, steady state: the block comes from the cache every time
//                   (the run fails if a pair ever reaches the driver).
//   BM_Malloc       glibc malloc + free of the same size: the host floor.
//   BM_System       SystemAllocator: a real driver allocation and release every time.
//   BM_CachingMix   CachingAllocator under a random mix of allocations and frees over 256 slots,
//                   sizes log-uniform in [512 B, 4 MiB] (both pools, splits and merges).
// Each comparison benchmark runs 5 repetitions and reports aggregates; after the run, the program
// prints, from the medians measured in that same run, caching / malloc and system / caching.
//
// Default run: about 10 s. Flags are Google Benchmark's (--benchmark_filter=..., ...).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "oclvm/storage/caching_allocator.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/system_allocator.h"

namespace oclvm {
namespace {

constexpr int kRepetitions = 5;
constexpr double kMinTimeSeconds = 0.05;
const int64_t kSizes[] = {512, 4 << 10, 64 << 10, 1 << 20};

MemoryBackend& opencl0() { return DeviceManager::instance().backend(Device{DeviceType::kOpenCL, 0}); }

void BM_CachingHit(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  try {
    CachingAllocator allocator(opencl0());
    allocator.deallocate(allocator.allocate(bytes));  // the segment is now cached
    const int64_t device_allocs = allocator.stats().num_device_alloc;
    for (auto _ : state) {
      Allocation allocation = allocator.allocate(bytes);
      benchmark::DoNotOptimize(allocation.ptr);
      allocator.deallocate(allocation);
    }
    if (allocator.stats().num_device_alloc != device_allocs) {
      state.SkipWithError("a pair missed the cache and reached the driver");
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Malloc(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(bytes);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_System(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  try {
    SystemAllocator allocator(opencl0());
    for (auto _ : state) {
      Allocation allocation = allocator.allocate(bytes);
      benchmark::DoNotOptimize(allocation.ptr);
      allocator.deallocate(allocation);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.SetItemsProcessed(state.iterations());
}

// A fixed pseudo-random program of (slot, size) steps: a step frees the slot when it is live and
// allocates `size` into it otherwise, so about half the slots are live in the steady state.
struct MixProgram {
  static constexpr size_t kSlots = 256;
  static constexpr size_t kSteps = 1 << 16;
  std::vector<uint32_t> slot;
  std::vector<uint32_t> bytes;

  MixProgram() : slot(kSteps), bytes(kSteps) {
    std::mt19937_64 random(20240601);
    std::uniform_int_distribution<uint32_t> pick_slot(0, kSlots - 1);
    std::uniform_real_distribution<double> log2_size(9.0, 22.0);  // 512 B .. 4 MiB
    for (size_t i = 0; i < kSteps; ++i) {
      slot[i] = pick_slot(random);
      bytes[i] = static_cast<uint32_t>(std::exp2(log2_size(random)));
    }
  }
};

void BM_CachingMix(benchmark::State& state) {
  static const MixProgram program;
  try {
    CachingAllocator allocator(opencl0());
    std::vector<Allocation> live(MixProgram::kSlots);
    size_t step = 0;
    for (auto _ : state) {
      Allocation& slot = live[program.slot[step]];
      if (slot) {
        allocator.deallocate(slot);
        slot = Allocation{};
      } else {
        slot = allocator.allocate(program.bytes[step]);
      }
      step = (step + 1) % MixProgram::kSteps;
    }
    for (Allocation& allocation : live) {
      if (allocation) allocator.deallocate(allocation);
    }
    allocator.check_invariants();
    const DeviceStats stats = allocator.stats();
    state.counters["segments_created"] = static_cast<double>(stats.num_device_alloc);
    state.counters["reserved_peak_MiB"] =
        static_cast<double>(stats.reserved_bytes.aggregate().peak) /
        (1 << 20);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.SetItemsProcessed(state.iterations());
}

void sizes_and_repetitions(benchmark::internal::Benchmark* b) {
  for (int64_t size : kSizes) b->Arg(size);
  b->ArgName("bytes")->Repetitions(kRepetitions)->ReportAggregatesOnly(true)->MinTime(kMinTimeSeconds);
}

BENCHMARK(BM_CachingHit)->Apply(sizes_and_repetitions);
BENCHMARK(BM_Malloc)->Apply(sizes_and_repetitions);
BENCHMARK(BM_System)->Apply(sizes_and_repetitions);
BENCHMARK(BM_CachingMix)->Repetitions(kRepetitions)->ReportAggregatesOnly(true)->MinTime(0.2);

// Median times of one benchmark, in ns; negative when it did not run.
struct Medians {
  double real_ns = -1;
  double cpu_ns = -1;
};

// The console reporter, also keeping the median real and CPU time of every benchmark it prints
// (or the single run's times when a benchmark has no repetitions), keyed "function/args".
class MedianCapturingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (!median && run.run_type != Run::RT_Iteration) continue;
      const std::string key = run.run_name.function_name + "/" + run.run_name.args;
      if (median || !medians_.count(key)) {
        medians_[key] = Medians{run.GetAdjustedRealTime(), run.GetAdjustedCPUTime()};
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  Medians medians(const std::string& function, int64_t bytes) const {
    auto it = medians_.find(function + "/bytes:" + std::to_string(bytes));
    return it == medians_.end() ? Medians{} : it->second;
  }

 private:
  std::map<std::string, Medians> medians_;
};

std::string ratio_text(double numerator, double denominator) {
  if (numerator < 0 || denominator <= 0) return "n/a";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2fx", numerator / denominator);
  return buffer;
}

std::string time_text(double ns) {
  if (ns < 0) return "n/a";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f ns", ns);
  return buffer;
}

// Every figure is time per allocate + deallocate pair, the benchmark all ran on one thread (PoCL's
// basic driver does its work on the caller's thread, so CPU time includes the driver's). Real time
// is what a caller waits; CPU time is steadier on a shared machine.
void print_ratios(const MedianCapturingReporter& reporter) {
  for (bool cpu : {false, true}) {
    std::printf("\nMedian %s time per allocate + deallocate pair, measured in this run:\n",
                cpu ? "CPU" : "real");
    std::printf("%-8s %12s %12s %12s %16s %16s\n", "bytes", "caching", "malloc", "system",
                "caching/malloc", "system/caching");
    for (int64_t bytes : kSizes) {
      auto pick = [&](const char* function) {
        const Medians m = reporter.medians(function, bytes);
        return cpu ? m.cpu_ns : m.real_ns;
      };
      const double caching = pick("BM_CachingHit");
      const double malloc_ns = pick("BM_Malloc");
      const double system = pick("BM_System");
      std::printf("%-8lld %12s %12s %12s %16s %16s\n", static_cast<long long>(bytes),
                  time_text(caching).c_str(), time_text(malloc_ns).c_str(), time_text(system).c_str(),
                  ratio_text(caching, malloc_ns).c_str(), ratio_text(system, caching).c_str());
    }
  }
}

}  // namespace
}  // namespace oclvm

int main(int argc, char** argv) {
  try {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    oclvm::MedianCapturingReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    oclvm::print_ratios(reporter);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allocator_bench: error: %s\n", e.what());
    return 1;
  }
}
