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
//   BM_KernelChainRaw/D      10,000 small kernels (256 work-items, each reading one buffer and
//                            writing another, ping-pong) enqueued by a plain OpenCL loop on
//                            opencl:D, then clFinish: the driver's own cost (the baseline)
//   BM_KernelChainVm/D       the same 10,000 LaunchKernels built and run as one vm::Run
//   BM_KernelChainLists/D    the same as ten vm::Runs of 1,000 (Note [Lists of a thousand])
//   BM_KernelChainSubmits/D  the same, one vm::Submit per kernel, waiting for the last ticket
//   BM_KernelChainSubmitsHere/D  the same with vm::SubmitHere (Note [Submitted here]): each
//                            kernel dispatched on this thread while the device is idle, as an
//                            eager runtime's operators launch
//   BM_AllocKernelRelease/D/F  100 operators on opencl:D as an eager runtime runs them (Note
//                            [Allocate, launch, release]); F=0 stream-ordered releases, F=1
//                            OCLVM_RELEASE=finish. `ratio alloc_kernel_release_finish_vs_stream_*`
//                            is finish over stream-ordered (above 1: stream-ordered is faster)
//   BM_KernelBuild/0         a program's first use with no binary on disk: the compiler runs
//   BM_KernelBuildCached/0   the same with the binary kept on disk by an earlier use, which is
//                            what a second process's first launch does (the in-memory cache is
//                            dropped before each iteration; process start-up is not counted)
//
// After the benchmarks, the chain is also measured in pairs (Note [Paired chains]): raw and VM
// runs alternate, and the median of the pairs' ratios is the `ratio kernel_chain_paired_*` line.
//
// After the benchmarks, vm_bench runs itself three times as `vm_bench --first-launch` (a process
// that compiles or loads the chain kernel, launches it once and prints how long that took):
// with empty kernel caches (oclvm's and PoCL's own, in fresh directories), again with both
// caches as the first left them, and with PoCL's cache alone (OCLVM_KERNEL_CACHE=0): a second
// process's first launch, with and without oclvm's binaries on disk.
//
// The kernel benchmarks name their driver after POCL_DEVICES' word for the device (`make bench`
// runs them with POCL_DEVICES="basic pthread"), and lines beginning `ratio` give each target's
// ratio on a line of its own.
//
// After the run, the ratios the targets are stated in are printed from the medians measured in
// this same run (machines here are shared and noisy; absolute times drift).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/raw_kernel_chain.h"
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

// ---------------------------------------------------------------------------------------------
// Kernels.

constexpr int kChainLaunches = 10000;
constexpr size_t kChainItems = 256;

const KernelSource& chain_source() {
  static const KernelSource source{
      "__kernel void chain_step(OCLVM_BLOB(float, dst), OCLVM_BLOB(const float, src)) {\n"
      "  size_t i = get_global_id(0);\n"
      "  OCLVM_PTR(float, dst)[i] = OCLVM_PTR(const float, src)[i] * 0.5f + 1.0f;\n"
      "}\n",
      "chain_step", ""};
  return source;
}

// POCL_DEVICES' word for opencl:`index` ("basic", "pthread") on PoCL; on another platform its
// first word in lower case ("nvidia"); "opencl<index>" for a device there is not.
std::string driver_name(int index) {
  if (static_cast<size_t>(index) < DeviceManager::instance().opencl_device_count()) {
    const Device device{DeviceType::kOpenCL, static_cast<DeviceIndex>(index)};
    const std::string& platform = DeviceManager::instance().backend(device).properties().platform;
    if (platform.find("Portable Computing Language") == std::string::npos) {
      std::string word = platform.substr(0, platform.find(' '));
      for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return word;
    }
  }
  const char* devices = std::getenv("POCL_DEVICES");
  std::istringstream words(devices != nullptr ? devices : "basic");
  std::string word;
  for (int i = 0; words >> word; ++i) {
    if (i == index) return word;
  }
  return "opencl" + std::to_string(index);
}

// Two blobs of kChainItems floats on `device`, zero-filled; released by the destructor.
struct ChainBlobs {
  ChainBlobs(vm::VirtualMachine& vm, Device device) : vm(vm) {
    InstructionsBuilder builder(vm);
    for (auto* blob : {&a, &b}) {
      *blob = builder.allocate_blob(vm.stream(device), {int64_t{kChainItems}}, DType::kF32);
      builder.fill(*blob, 0, kChainItems * sizeof(float), 0);
    }
    vm.run(builder.take());
  }
  ~ChainBlobs() {
    InstructionsBuilder builder(vm);
    builder.release(std::move(a));
    builder.release(std::move(b));
    vm.run(builder.take());
  }
  vm::VirtualMachine& vm;
  std::shared_ptr<BlobObject> a, b;
};

bool skip_without_device(benchmark::State& state, int index) {
  if (static_cast<size_t>(index) < DeviceManager::instance().opencl_device_count()) return false;
  state.SkipWithError("no such OpenCL device");
  return true;
}

void BM_KernelChainRaw(benchmark::State& state) {
  const int index = static_cast<int>(state.range(0));
  if (skip_without_device(state, index)) return;
  const Device device{DeviceType::kOpenCL, static_cast<DeviceIndex>(index)};
  vm::VirtualMachine& vm = the_vm();
  ChainBlobs blobs(vm, device);
  MemoryBackend& backend = DeviceManager::instance().backend(device);
  std::shared_ptr<const Kernel> kernel = backend.kernel(chain_source());
  bench::RawKernelChain raw(backend);
  const Allocation& a = blobs.a->storage()->allocation();
  const Allocation& b = blobs.b->storage()->allocation();
  for (auto _ : state) {
    raw.run(*kernel, *a.segment, a.offset, *b.segment, b.offset, kChainItems, kChainLaunches);
  }
  state.SetLabel(driver_name(index));
  state.SetItemsProcessed(state.iterations() * kChainLaunches);
}

// Adds the chain's launches to `builder`, on `stream`.
void build_chain(InstructionsBuilder& builder, vm::Stream& stream,
                 const std::shared_ptr<const Kernel>& kernel, const ChainBlobs& blobs, int first,
                 int count) {
  LaunchRange range;
  range.global[0] = kChainItems;
  for (int i = first; i < first + count; ++i) {
    const auto& dst = i % 2 == 0 ? blobs.a : blobs.b;
    const auto& src = i % 2 == 0 ? blobs.b : blobs.a;
    builder.launch(stream, kernel, range,
                   {LaunchArg::of_blob(dst, 0, KernelAccess::kWrite),
                    LaunchArg::of_blob(src, 0, KernelAccess::kRead)});
  }
}

// The VM's side of the chain on opencl:state.range(0): `chain(builder, stream, kernel, blobs)`
// runs the 10,000 launches once per iteration.
template <typename Chain>
void chain_on_vm(benchmark::State& state, Chain&& chain) {
  const int index = static_cast<int>(state.range(0));
  if (skip_without_device(state, index)) return;
  const Device device{DeviceType::kOpenCL, static_cast<DeviceIndex>(index)};
  vm::VirtualMachine& vm = the_vm();
  ChainBlobs blobs(vm, device);
  InstructionsBuilder builder(vm);
  std::shared_ptr<const Kernel> kernel = builder.kernel(device, chain_source());
  vm::Stream& stream = vm.stream(device);
  for (auto _ : state) chain(builder, stream, kernel, blobs);
  state.SetLabel(driver_name(index));
  state.SetItemsProcessed(state.iterations() * kChainLaunches);
}

void BM_KernelChainVm(benchmark::State& state) {
  chain_on_vm(state, [](InstructionsBuilder& builder, vm::Stream& stream,
                        const std::shared_ptr<const Kernel>& kernel, const ChainBlobs& blobs) {
    build_chain(builder, stream, kernel, blobs, 0, kChainLaunches);
    builder.vm().run(builder.take());
  });
}

// Note [Allocate, launch, release]
// An operator's life as an eager runtime drives the VM: a vm::Run allocates its output, a
// vm::Submit launches the kernel that writes it, and a vm::Run releases it, 100 times per
// iteration, then the last ticket is waited for. With OCLVM_RELEASE=finish each release finishes
// the queue, so the host waits for every kernel; stream-ordered, the next allocation takes the
// block back at once and the host runs ahead (the worker's in-flight bound limits how far).
void BM_AllocKernelRelease(benchmark::State& state) {
  const int index = static_cast<int>(state.range(0));
  if (skip_without_device(state, index)) return;
  const bool finish = state.range(1) != 0;
  const Device device{DeviceType::kOpenCL, static_cast<DeviceIndex>(index)};
  Options options = Options::from_environment();
  options.release = finish ? ReleaseMode::kFinish : ReleaseMode::kStreamOrdered;
  vm::VirtualMachine vm(DeviceManager::instance(), options);
  {
    ChainBlobs blobs(vm, device);
    InstructionsBuilder builder(vm);
    std::shared_ptr<const Kernel> kernel = builder.kernel(device, chain_source());
    vm::Stream& stream = vm.stream(device);
    LaunchRange range;
    range.global[0] = kChainItems;
    constexpr int kOperators = 100;
    for (auto _ : state) {
      vm::Ticket last;
      for (int i = 0; i < kOperators; ++i) {
        auto out = builder.allocate_blob(stream, {int64_t{kChainItems}}, DType::kF32);
        vm.run(builder.take());
        builder.launch(stream, kernel, range,
                       {LaunchArg::of_blob(out, 0, KernelAccess::kWrite),
                        LaunchArg::of_blob(blobs.a, 0, KernelAccess::kRead)});
        last = vm.submit(builder.take());
        builder.release(std::move(out));
        vm.run(builder.take());
      }
      last.wait();
    }
    state.SetItemsProcessed(state.iterations() * kOperators);
  }
  state.SetLabel(driver_name(index) + (finish ? " finish" : " stream"));
}

// Note [Lists of a thousand]
// A list of 10,000 launches holds ~4 MB of instructions at once, past the small-object pool's
// per-thread cache (1,024 blocks a size class); the rest comes from malloc, and freeing it lets
// glibc trim its heap's top (128 KiB threshold), so the next list faults every page back in.
// Measured: building and dropping 10,000 launches takes 2.7 ms, 1.0 ms with the trim turned off
// (MALLOC_TRIM_THRESHOLD_). Lists of 1,000 stay within the cache.
void BM_KernelChainLists(benchmark::State& state) {
  chain_on_vm(state, [](InstructionsBuilder& builder, vm::Stream& stream,
                        const std::shared_ptr<const Kernel>& kernel, const ChainBlobs& blobs) {
    constexpr int kPerList = 1000;
    for (int first = 0; first < kChainLaunches; first += kPerList) {
      build_chain(builder, stream, kernel, blobs, first, kPerList);
      builder.vm().run(builder.take());
    }
  });
}

void BM_KernelChainSubmits(benchmark::State& state) {
  chain_on_vm(state, [](InstructionsBuilder& builder, vm::Stream& stream,
                        const std::shared_ptr<const Kernel>& kernel, const ChainBlobs& blobs) {
    std::optional<vm::Ticket> last;
    for (int i = 0; i < kChainLaunches; ++i) {
      build_chain(builder, stream, kernel, blobs, i, 1);
      last.emplace(builder.vm().submit(builder.take()));
    }
    last->wait();
  });
}

void BM_KernelChainSubmitsHere(benchmark::State& state) {
  chain_on_vm(state, [](InstructionsBuilder& builder, vm::Stream& stream,
                        const std::shared_ptr<const Kernel>& kernel, const ChainBlobs& blobs) {
    std::optional<vm::Ticket> last;
    for (int i = 0; i < kChainLaunches; ++i) {
      build_chain(builder, stream, kernel, blobs, i, 1);
      last.emplace(builder.vm().submit_here(builder.take()));
    }
    last->wait();
  });
}

// A first use of a program: the in-memory cache dropped, the disk cache in `dir` ("" : none).
void first_use(benchmark::State& state, const std::string& dir) {
  MemoryBackend& backend = DeviceManager::instance().backend(device_for(0));
  backend.set_kernel_cache_dir(dir);
  if (!dir.empty()) backend.kernel(chain_source());  // keeps the binary on disk
  for (auto _ : state) {
    state.PauseTiming();
    backend.forget_programs();
    state.ResumeTiming();
    benchmark::DoNotOptimize(backend.kernel(chain_source()).get());
  }
  backend.forget_programs();
  backend.set_kernel_cache_dir("");
}

void BM_KernelBuild(benchmark::State& state) { first_use(state, ""); }

void BM_KernelBuildCached(benchmark::State& state) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("oclvm-bench-kernels-" + std::to_string(getpid()))).string();
  first_use(state, dir);
  std::filesystem::remove_all(dir);
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
BENCHMARK(BM_KernelChainRaw)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_KernelChainVm)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_KernelChainLists)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_KernelChainSubmits)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_KernelChainSubmitsHere)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_AllocKernelRelease)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_KernelBuild)->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_KernelBuildCached)->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);

// Keeps the medians so the ratios can be printed after the run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.aggregate_name != "median") continue;
      const double seconds_per_iteration =
          run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
      medians_[run.run_name.str()] = seconds_per_iteration;
      if (!run.report_label.empty()) labels_[run.run_name.str()] = run.report_label;
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

    // One line per target, each beginning `ratio` (the targets).
    std::printf("\n");
    if (direct > 0 && trip > 0) std::printf("ratio run_round_trip_vs_allocator %.2f\n", trip / direct);
    for (int device = 0; device < 2; ++device) {
      const std::string arg = "/" + std::to_string(device);
      const std::string raw_name = "BM_KernelChainRaw" + arg;
      const double raw = find(raw_name, "", medians_);
      const double on_vm = find("BM_KernelChainVm" + arg, "", medians_);
      const double lists = find("BM_KernelChainLists" + arg, "", medians_);
      const double submits = find("BM_KernelChainSubmits" + arg, "", medians_);
      const double here = find("BM_KernelChainSubmitsHere" + arg, "", medians_);
      if (raw <= 0) continue;
      const std::string driver = label_of(raw_name);
      std::printf("  %d kernels on opencl:%d (%s): raw %.2f ms, one vm::Run %.2f ms, "
                  "ten of 1000 %.2f ms, a submit each %.2f ms, a submit_here each %.2f ms\n",
                  kChainLaunches, device, driver.c_str(), raw * 1e3, on_vm * 1e3, lists * 1e3,
                  submits * 1e3, here * 1e3);
      if (lists > 0) std::printf("ratio kernel_chain_%s %.2f\n", driver.c_str(), lists / raw);
      if (on_vm > 0) std::printf("ratio kernel_chain_one_list_%s %.2f\n", driver.c_str(), on_vm / raw);
      if (submits > 0) {
        std::printf("ratio kernel_chain_submits_%s %.2f\n", driver.c_str(), submits / raw);
      }
      if (here > 0) {
        std::printf("ratio kernel_chain_submits_here_%s %.2f\n", driver.c_str(), here / raw);
      }
    }
    for (int device = 0; device < 2; ++device) {
      const std::string arg = "/" + std::to_string(device);
      const double stream = find("BM_AllocKernelRelease" + arg + "/0", "", medians_);
      const double finish = find("BM_AllocKernelRelease" + arg + "/1", "", medians_);
      if (stream <= 0 || finish <= 0) continue;
      std::printf("  100 x (allocate, launch, release) on opencl:%d: stream-ordered %.1f us, "
                  "finish %.1f us\n",
                  device, stream * 1e6, finish * 1e6);
      std::printf("ratio alloc_kernel_release_finish_vs_stream_%s %.2f\n",
                  driver_name(device).c_str(), finish / stream);
    }
    const double build = find("BM_KernelBuild/", "", medians_);
    const double cached = find("BM_KernelBuildCached", "", medians_);
    if (build > 0 && cached > 0) {
      std::printf("  a program's first use: compiled %.2f ms, from the disk cache %.3f ms\n",
                  build * 1e3, cached * 1e3);
      std::printf("ratio kernel_compile_vs_disk_cache %.1f\n", build / cached);
    }
  }

  std::string label_of(const std::string& prefix) const {
    for (const auto& [name, label] : labels_) {
      if (name.rfind(prefix, 0) == 0) return label;
    }
    return "opencl";
  }

 private:
  std::map<std::string, double> medians_;
  std::map<std::string, double> items_per_second_;
  std::map<std::string, std::string> labels_;
};

}  // namespace

// Note [Paired chains]
// On a shared two-core machine the medians of separate benchmarks drift by tens of percent
// between runs (the basic chain's ratio read 0.79 to 1.48 over one afternoon). Timing the raw loop
// and the VM's lists of 1,000 one right after the other, 21 times, and taking the median of the
// 21 ratios compares them under the same conditions.
double paired_chain_ratio(int index) {
  const Device device{DeviceType::kOpenCL, static_cast<DeviceIndex>(index)};
  vm::VirtualMachine& vm = the_vm();
  ChainBlobs blobs(vm, device);
  MemoryBackend& backend = DeviceManager::instance().backend(device);
  InstructionsBuilder builder(vm);
  std::shared_ptr<const Kernel> kernel = builder.kernel(device, chain_source());
  vm::Stream& stream = vm.stream(device);
  bench::RawKernelChain raw(backend);
  const Allocation& a = blobs.a->storage()->allocation();
  const Allocation& b = blobs.b->storage()->allocation();
  const auto time = [](auto&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<double> ratios;
  for (int round = 0; round < 22; ++round) {
    const double raw_seconds = time([&] {
      raw.run(*kernel, *a.segment, a.offset, *b.segment, b.offset, kChainItems, kChainLaunches);
    });
    const double vm_seconds = time([&] {
      for (int first = 0; first < kChainLaunches; first += 1000) {
        build_chain(builder, stream, kernel, blobs, first, 1000);
        vm.run(builder.take());
      }
    });
    if (round > 0) ratios.push_back(vm_seconds / raw_seconds);  // round 0 warms both up
  }
  std::sort(ratios.begin(), ratios.end());
  return ratios[ratios.size() / 2];
}

void print_paired_chains() {
  for (int index = 0; index < 2; ++index) {
    if (static_cast<size_t>(index) >= DeviceManager::instance().opencl_device_count()) break;
    std::printf("ratio kernel_chain_paired_%s %.2f\n", driver_name(index).c_str(),
                paired_chain_ratio(index));
  }
}

// `vm_bench --first-launch`: the time from asking for the kernel to its first launch completed,
// in microseconds, on stdout.
int first_launch() {
  const Device device = device_for(0);
  vm::VirtualMachine& vm = the_vm();
  ChainBlobs blobs(vm, device);
  const auto start = std::chrono::steady_clock::now();
  InstructionsBuilder builder(vm);
  build_chain(builder, vm.stream(device), builder.kernel(device, chain_source()), blobs, 0, 1);
  vm.run(builder.take());
  const auto end = std::chrono::steady_clock::now();
  std::printf("%.1f\n", std::chrono::duration<double, std::micro>(end - start).count());
  return 0;
}

// Runs `self --first-launch` with these caches and returns its microseconds (-1 on failure).
double time_first_launch(const std::string& self, const std::string& oclvm_cache,
                         const std::string& pocl_cache) {
  const std::string command = "OCLVM_KERNEL_CACHE='" + oclvm_cache + "' POCL_CACHE_DIR='" +
                              pocl_cache + "' '" + self + "' --first-launch";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  double micros = -1;
  if (std::fscanf(pipe, "%lf", &micros) != 1) micros = -1;
  return pclose(pipe) == 0 ? micros : -1;
}

void print_first_launches(const std::string& self) {
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("oclvm-bench-first-launch-" + std::to_string(getpid()));
  const std::string oclvm_cache = (root / "oclvm").string();
  const std::string pocl_cache = (root / "pocl").string();
  std::filesystem::create_directories(pocl_cache);
  const double cold = time_first_launch(self, oclvm_cache, pocl_cache);
  const double warm = time_first_launch(self, oclvm_cache, pocl_cache);
  const double pocl_only = time_first_launch(self, "0", pocl_cache);
  std::filesystem::remove_all(root);
  if (cold <= 0 || warm <= 0 || pocl_only <= 0) {
    std::printf("  a process's first launch: could not be measured\n");
    return;
  }
  std::printf("  a process's first launch: empty caches %.2f ms, oclvm's and PoCL's caches %.2f ms, "
              "PoCL's cache alone %.2f ms\n", cold / 1e3, warm / 1e3, pocl_only / 1e3);
  std::printf("ratio kernel_first_launch_cold_vs_cached %.1f\n", cold / warm);
  std::printf("ratio kernel_first_launch_pocl_cache_vs_both %.1f\n", pocl_only / warm);
}

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--first-launch") == 0) {
    try {
      return first_launch();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vm_bench --first-launch: %s\n", e.what());
      return 1;
    }
  }
  const std::string self = argv[0];
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  print_paired_chains();
  print_first_launches(self);
  benchmark::Shutdown();
  return 0;
}
