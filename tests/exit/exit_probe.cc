// tests/exit/exit_probe.cc — a program that ends while oclvm is busy, for exit_test.cc.
//
//   exit_probe MODE DELAY_US
//
// Every mode starts the same way: on every OpenCL device it allocates live blobs and TensorStorages
// (some never released), then keeps producer threads submitting lists (allocate, fill, copy,
// download, release) with vm::Submit and dropped tickets, so instructions are in flight. After
// DELAY_US microseconds the process ends by MODE (each list also launches a kernel, so kernels are
// in flight too):
//   return        main returns (static destructors run while the workers are busy)
//   exit_thread   a producer thread calls std::exit(0) (the main thread is still submitting)
//   exit_main     the main thread calls std::exit(0) mid-submission
// It must end with status 0 and print nothing on stderr: no crash, no hang, no error report.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/vm/virtual_machine.h"

namespace {

using namespace oclvm;

std::atomic<bool> g_stop{false};

// The producers' host buffers. Lists that read them are still in flight when a producer returns
// and when the process ends, so they are never freed (a host source must outlive its list; a
// buffer on the producer's stack was read after free, found by `make asan`). Reachable from here,
// so LeakSanitizer does not count them.
constexpr size_t kHostBytes = 64 << 10;
std::vector<uint8_t>* g_host_buffers = nullptr;  // one per producer

std::vector<Device> opencl_devices() {
  std::vector<Device> out;
  for (Device d : DeviceManager::instance().devices()) {
    if (d.type == DeviceType::kOpenCL) out.push_back(d);
  }
  return out;
}

// Submits small lists until told to stop; tickets are dropped at once, so lists stay in flight.
void produce(Device device, std::shared_ptr<const Kernel> kernel, int index, bool exits) {
  std::vector<uint8_t>& host = g_host_buffers[index];
  host.assign(kHostBytes, static_cast<uint8_t>(index));
  int rounds = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    InstructionsBuilder builder(vm::VirtualMachine::instance());
    vm::Stream& stream = builder.stream(device);
    auto a = builder.allocate_blob(stream, host.size());
    auto b = builder.allocate_blob(stream, host.size());
    builder.copy_host_to_device(host.data(), a, 0, host.size());
    builder.copy(a, 0, b, 0, host.size());
    LaunchRange range;
    range.global[0] = host.size() / sizeof(uint32_t);
    builder.launch(stream, kernel, range, {LaunchArg::of_blob(b, 0, KernelAccess::kReadWrite)});
    builder.release(a);
    builder.release(b);
    (void)vm::Submit(builder.take());  // dropped: the VM owns the batch until it completes
    if (exits && ++rounds == 20) std::exit(0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: exit_probe return|exit_thread|exit_main DELAY_US\n");
    return 2;
  }
  const std::string mode = argv[1];
  const long delay_us = std::strtol(argv[2], nullptr, 10);
  if (mode != "return" && mode != "exit_thread" && mode != "exit_main") {
    std::fprintf(stderr, "exit_probe: unknown mode %s\n", mode.c_str());
    return 2;
  }
  const std::vector<Device> devices = opencl_devices();
  // Live at exit: blobs with storage, and TensorStorages whose releaser would run ReleaseTensor.
  static std::vector<std::shared_ptr<BlobObject>> live_blobs;
  static std::vector<std::shared_ptr<TensorStorage>> live_tensors;
  for (Device d : devices) {
    InstructionsBuilder builder(vm::VirtualMachine::instance());
    for (int i = 0; i < 4; ++i) {
      live_blobs.push_back(builder.allocate_blob(builder.stream(d), size_t{1} << (12 + i)));
      builder.fill(live_blobs.back(), 0, live_blobs.back()->required_bytes(), 0x5A);
    }
    vm::Run(builder.take());
    live_tensors.push_back(
        make_tensor_storage(vm::VirtualMachine::instance(), d, {1024}, DType::kF32));
  }
  std::vector<std::shared_ptr<const Kernel>> kernels;
  for (Device d : devices) {
    kernels.push_back(InstructionsBuilder(vm::VirtualMachine::instance())
                          .kernel(d, KernelSource{"__kernel void bump(OCLVM_BLOB(uint, v)) {\n"
                                                  "  OCLVM_PTR(uint, v)[get_global_id(0)] += 1; }",
                                                  "bump", ""}));
  }
  g_host_buffers = new std::vector<uint8_t>[2 * devices.size()];
  std::vector<std::thread> producers;
  for (size_t i = 0; i < 2 * devices.size(); ++i) {
    const bool exits = mode == "exit_thread" && i == 0;
    producers.emplace_back(produce, devices[i % devices.size()], kernels[i % devices.size()],
                           static_cast<int>(i), exits);
  }
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  if (mode == "exit_main") std::exit(0);
  if (mode == "exit_thread") {
    for (std::thread& t : producers) t.join();  // the exiting producer ends the process first
    return 1;                                   // not reached
  }
  g_stop.store(true);
  for (std::thread& t : producers) t.join();
  return 0;  // the last lists may still be in flight; live blobs and tensors stay referenced
}
