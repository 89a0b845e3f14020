// bench/vm_bench.cc — what the instruction VM costs over the allocator it drives.
//
//   BM_DirectAllocatorPair   CachingAllocator allocate + deallocate called directly (the baseline)
//   BM_RunRoundTrip          vm::Run(AllocateBlob) then vm::Run(ReleaseTensor) on an idle device:
//                            the synchronous round trip a PyTorch allocate/free pair costs
//   BM_RunRoundTripOneList   AllocateBlob + ReleaseTensor in one vm::Run
//   BM_Batched               lists of 1000 instructions (500 allocate/release pairs) per vm::Run
//   BM_Producers/threads:N   N producer threads, thread t on device t % 2 (two devices when
//                            POCL_DEVICES gives two; one otherwise), each running round trips
//   BM_StorageOnVm           make_tensor_storage on the process-wide VM, then drop it (its
//                            releaser runs a ReleaseTensor): a tensor's whole memory life
//   BM_StorageOnRuntime      the same through an embedder's Runtime (create_storage), whose
//                            releaser also holds the Runtime's core: what the facade costs
//   BM_SyncCommand           one vm::Run of a 4-byte upload: one blocking OpenCL command and a
//                            finish, what a synchronous command costs on the driver
//                            (POCL_DEVICES=pthread for the pthread driver)
//   BM_HostSectionWrite      the same 4 bytes written in a host section (Note [Host sections]):
//                            no command at all
//   BM_SectionAllocate       a host section that allocates a block with HostSection::run (Note
//                            [Lists run in a host section]), then a vm::Run of its release: what
//                            an operator's result written in device memory costs the VM, against
//                            BM_RunRoundTrip
//
// After the run, the ratios the targets are stated in are printed from the medians measured in
// this same run (machines here are shared and noisy; absolute times drift).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <map>
#include <string>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/runtime.h"
#include "oclvm/storage/caching_allocator.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/vm/host_section.h"
#include "oclvm/vm/virtual_machine.h"

namespace {

using namespace oclvm;

constexpr size_t kBytes = 4096;

vm::VirtualMachine& the_vm() { return vm::VirtualMachine::instance(); }

Device device_for(int index) {
  const size_t count = DeviceManager::instance().opencl_device_count();
  return Device{DeviceType::kOpenCL, static_cast<DeviceIndex>(static_cast<size_t>(index) % count)};
}

void BM_DirectAllocatorPair(benchmark::State& state) {
  CachingAllocator allocator(DeviceManager::instance().backend(device_for(0)));
  allocator.deallocate(allocator.allocate(kBytes));  // warm: one segment cached
  for (auto _ : state) {
    Allocation a = allocator.allocate(kBytes);
    benchmark::DoNotOptimize(a.ptr);
    allocator.deallocate(a);
  }
  allocator.empty_cache();
}

void round_trip(vm::VirtualMachine& vm, vm::Stream& stream) {
  InstructionsBuilder builder(vm);
  std::shared_ptr<BlobObject> blob = builder.allocate_blob(stream, kBytes);
  vm.run(builder.take());
  builder.release(std::move(blob));
  vm.run(builder.take());
}

void BM_RunRoundTrip(benchmark::State& state) {
  vm::VirtualMachine& vm = the_vm();
  vm::Stream& stream = vm.stream(device_for(0));
  round_trip(vm, stream);  // warm the cache
  for (auto _ : state) round_trip(vm, stream);
}

void BM_RunRoundTripOneList(benchmark::State& state) {
  vm::VirtualMachine& vm = the_vm();
  vm::Stream& stream = vm.stream(device_for(0));
  for (auto _ : state) {
    InstructionsBuilder builder(vm);
    builder.release(builder.allocate_blob(stream, kBytes));
    vm.run(builder.take());
  }
}

void BM_Batched(benchmark::State& state) {
  vm::VirtualMachine& vm = the_vm();
  vm::Stream& stream = vm.stream(device_for(0));
  constexpr int kPairs = 500;
  for (auto _ : state) {
    InstructionsBuilder builder(vm);
    for (int i = 0; i < kPairs; ++i) builder.release(builder.allocate_blob(stream, kBytes));
    vm.run(builder.take());
  }
  state.SetItemsProcessed(state.iterations() * 2 * kPairs);
}

void BM_Producers(benchmark::State& state) {
  vm::VirtualMachine& vm = the_vm();
  vm::Stream& stream = vm.stream(device_for(state.thread_index()));
  constexpr int kPairs = 50;
  for (auto _ : state) {
    InstructionsBuilder builder(vm);
    for (int i = 0; i < kPairs; ++i) builder.release(builder.allocate_blob(stream, kBytes));
    vm.run(builder.take());
  }
  state.SetItemsProcessed(state.iterations() * 2 * kPairs);
}

void BM_StorageOnVm(benchmark::State& state) {
  vm::VirtualMachine& vm = the_vm();
  const Device device = device_for(0);
  make_tensor_storage(vm, device, {kBytes}, DType::kU8).reset();  // warm the cache
  for (auto _ : state) {
    std::shared_ptr<TensorStorage> storage = make_tensor_storage(vm, device, {kBytes}, DType::kU8);
    benchmark::DoNotOptimize(storage.get());
  }
}

void BM_StorageOnRuntime(benchmark::State& state) {
  Runtime runtime{Options{}};
  const Device device = device_for(0);
  runtime.create_storage(device, kBytes).reset();  // warm the cache
  for (auto _ : state) {
    std::shared_ptr<TensorStorage> storage = runtime.create_storage(device, kBytes);
    benchmark::DoNotOptimize(storage.get());
  }
}

void BM_SyncCommand(benchmark::State& state) {
  vm::VirtualMachine& vm = the_vm();
  vm::Stream& stream = vm.stream(device_for(0));
  InstructionsBuilder builder(vm);
  std::shared_ptr<BlobObject> blob = builder.allocate_blob(stream, kBytes);
  vm.run(builder.take());
  const uint32_t value = 7;
  for (auto _ : state) {
    builder.copy_host_to_device(&value, blob, 0, sizeof value, &stream);
    vm.run(builder.take());
  }
  builder.release(std::move(blob));
  vm.run(builder.take());
}

void BM_HostSectionWrite(benchmark::State& state) {
  vm::VirtualMachine& vm = the_vm();
  const Device device = device_for(0);
  InstructionsBuilder builder(vm);
  std::shared_ptr<BlobObject> blob = builder.allocate_blob(vm.stream(device), kBytes);
  vm.run(builder.take());
  auto* host = static_cast<char*>(blob->storage()->host_address());
  if (host == nullptr) {
    state.SkipWithError("the device's segments have no host address");
  } else {
    uint32_t value = 7;
    for (auto _ : state) {
      std::optional<vm::HostSection> section = vm::HostSection::try_enter(vm, device);
      if (!section) continue;  // never here: nothing else runs
      std::memcpy(host, &value, sizeof value);
      benchmark::ClobberMemory();
    }
  }
  builder.release(std::move(blob));
  vm.run(builder.take());
}

void BM_SectionAllocate(benchmark::State& state) {
  vm::VirtualMachine& vm = the_vm();
  const Device device = device_for(0);
  vm::Stream& stream = vm.stream(device);
  round_trip(vm, stream);  // warm the cache
  for (auto _ : state) {
    std::shared_ptr<BlobObject> blob;
    {
      std::optional<vm::HostSection> section = vm::HostSection::try_enter(vm, device);
      if (!section) continue;  // never here: nothing else runs
      InstructionsBuilder builder(vm);
      blob = builder.allocate_blob(stream, kBytes);
      section->run(builder.take());
    }
    InstructionsBuilder builder(vm);
    builder.release(std::move(blob));
    vm.run(builder.take());
  }
}

BENCHMARK(BM_DirectAllocatorPair)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_RunRoundTrip)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_RunRoundTripOneList)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_Batched)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_Producers)->Threads(1)->Threads(4)->UseRealTime()->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_StorageOnVm)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_StorageOnRuntime)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_SyncCommand)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HostSectionWrite)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_SectionAllocate)->Repetitions(5)->ReportAggregatesOnly(true);

// Keeps the medians so the ratios can be printed after the run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.aggregate_name != "median") continue;
      const double seconds_per_iteration = run.GetAdjustedRealTime() * 1e-9;  // default unit ns
      medians_[run.run_name.str()] = seconds_per_iteration;
      auto it = run.counters.find("items_per_second");
      if (it != run.counters.end()) items_per_second_[run.run_name.str()] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void print_ratios() const {
    // The first run whose name starts with `prefix` and contains `part`.
    auto find = [&](const std::string& prefix, const std::string& part,
                    const std::map<std::string, double>& m) {
      for (const auto& [name, value] : m) {
        if (name.rfind(prefix, 0) == 0 && name.find(part) != std::string::npos) return value;
      }
      return 0.0;
    };
    const double direct = find("BM_DirectAllocatorPair", "", medians_);
    const double trip = find("BM_RunRoundTrip/", "", medians_);
    const double one_list = find("BM_RunRoundTripOneList", "", medians_);
    const double batched = find("BM_Batched", "", items_per_second_);
    const double one = find("BM_Producers", "threads:1", items_per_second_);
    const double four = find("BM_Producers", "threads:4", items_per_second_);
    std::printf("\nMeasured in this run (medians):\n");
    std::printf("  allocator pair, direct:                 %8.1f ns\n", direct * 1e9);
    std::printf("  vm::Run(alloc) + vm::Run(release):      %8.1f ns  (%.1f x direct; target <= 2000 ns, <= 10 x)\n",
                trip * 1e9, direct > 0 ? trip / direct : 0.0);
    std::printf("  one vm::Run of alloc + release:         %8.1f ns  (%.1f x direct)\n",
                one_list * 1e9, direct > 0 ? one_list / direct : 0.0);
    std::printf("  batched lists of 1000:                  %8.2f M instructions/s (target >= 5)\n",
                batched / 1e6);
    std::printf("  producers: 1 thread %.2f M/s, 4 threads on %zu device(s) %.2f M/s: %.2f x (target >= 1.5)\n",
                one / 1e6, DeviceManager::instance().opencl_device_count(), four / 1e6,
                one > 0 ? four / one : 0.0);
    const double on_vm = find("BM_StorageOnVm", "", medians_);
    const double on_runtime = find("BM_StorageOnRuntime", "", medians_);
    std::printf("  storage made and dropped, VM:           %8.1f ns\n", on_vm * 1e9);
    std::printf("  the same through a Runtime:             %8.1f ns  (%.2f x the VM's)\n",
                on_runtime * 1e9, on_vm > 0 ? on_runtime / on_vm : 0.0);
    const double command = find("BM_SyncCommand", "", medians_);
    const double section = find("BM_HostSectionWrite", "", medians_);
    std::printf("  synchronous 4-byte upload (a command):  %8.1f ns\n", command * 1e9);
    std::printf("  the same write in a host section:       %8.1f ns  (%.3f x the command's)\n",
                section * 1e9, command > 0 ? section / command : 0.0);
    const double section_allocate = find("BM_SectionAllocate", "", medians_);
    std::printf("  section + alloc in it + vm::Run(release): %6.1f ns  (%.2f x the round trip)\n",
                section_allocate * 1e9, trip > 0 ? section_allocate / trip : 0.0);
  }

 private:
  std::map<std::string, double> medians_;
  std::map<std::string, double> items_per_second_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
