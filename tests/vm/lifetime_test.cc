// tests/vm/lifetime_test.cc — regressions from the VM review: batch lifetime without a ticket,
// releases triggered while a thread holds an execution right, releases during shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "oclvm/instructions/builder.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::vm {
namespace {

using namespace std::chrono_literals;
constexpr Device kCpu{DeviceType::kCpu, 0};
constexpr Device kOpenCL0{DeviceType::kOpenCL, 0};

uint64_t allocated_bytes(VirtualMachine& vm, Device device) {
  DeviceStats stats;
  InstructionsBuilder b(vm);
  b.query_stats(device, &stats);
  vm.run(b.take());
  return static_cast<uint64_t>(stats.allocated_bytes.aggregate().current);
}

// Regression: a ticket dropped before wait() freed its batch while the worker still counted into
// it; the pool then handed the same memory to the next batch, whose wait returned too early.
TEST(LifetimeTest, DroppedTicketDoesNotDisturbTheNextBatch) {
  VirtualMachine vm(DeviceManager::instance(), Options{});
  {
    InstructionsBuilder b(vm);
    b.barrier(vm.stream(kCpu), [] { std::this_thread::sleep_for(100ms); });
    (void)vm.submit(b.take());  // dropped
  }
  std::atomic<bool> ran{false};
  InstructionsBuilder b(vm);
  b.barrier(vm.stream(kCpu), [&] {
    std::this_thread::sleep_for(20ms);
    ran = true;
  });
  Ticket ticket = vm.submit(b.take());
  ticket.wait();
  EXPECT_TRUE(ran.load()) << "the ticket returned before its own instruction ran";
}

// Regression: an instruction whose callback held the last reference to a tensor released it when
// the instruction was deleted, on the thread holding the execution right; the release waited for
// that very thread. Now it goes out detached, and the memory comes back.
TEST(LifetimeTest, TensorDroppedByAnInstructionIsReleasedWithoutDeadlock) {
  for (bool inline_run : {true, false}) {
    VirtualMachine vm(DeviceManager::instance(), Options{});
    auto tensor = make_tensor_storage(vm, kOpenCL0, Dims{1024}, DType::kF32);
    EXPECT_EQ(allocated_bytes(vm, kOpenCL0), 4096u);
    InstructionsBuilder b(vm);
    b.barrier(vm.stream(kOpenCL0), [held = tensor] { (void)held; });
    tensor.reset();
    if (inline_run) {
      vm.run(b.take());
    } else {
      vm.submit(b.take()).wait();
    }
    // The detached release was queued behind the barrier on the same worker, so this query
    // (submitted later) sees it done.
    EXPECT_EQ(allocated_bytes(vm, kOpenCL0), 0u) << (inline_run ? "run" : "submit");
    EXPECT_EQ(TensorStorage::failed_releases(), 0u);
  }
}

// Regression: a release arriving while shutdown() was still draining ran at once on the caller,
// ahead of (and concurrently with) pending work that still used the blob.
TEST(LifetimeTest, ReleaseDuringShutdownWaitsForPendingWork) {
  VirtualMachine vm(DeviceManager::instance(), Options{});
  auto tensor = make_tensor_storage(vm, kCpu, Dims{4096}, DType::kU8);
  std::vector<uint8_t> host(4096);
  InstructionsBuilder b(vm);
  b.barrier(vm.stream(kCpu), [] { std::this_thread::sleep_for(200ms); });
  b.copy_device_to_host(tensor->blob(), 0, host.data(), host.size());
  Ticket ticket = vm.submit(b.take());
  std::thread stopper([&] { vm.shutdown(); });
  std::this_thread::sleep_for(30ms);
  tensor.reset();  // ReleaseTensor while the workers drain
  EXPECT_NO_THROW(ticket.wait()) << "the copy ran after its blob was released";
  stopper.join();
}

TEST(LifetimeTest, WaitingFromInsideACallbackIsRefused) {
  VirtualMachine vm(DeviceManager::instance(), Options{});
  InstructionsBuilder outer(vm);
  std::string message;
  outer.barrier(vm.stream(kCpu), [&] {
    InstructionsBuilder inner(vm);
    inner.barrier(vm.stream(kCpu), [] {});
    try {
      vm.run(inner.take());
    } catch (const Error& e) {
      message = e.what();
    }
  });
  vm.run(outer.take());
  EXPECT_NE(message.find("outside instruction callbacks"), std::string::npos) << message;
}

}  // namespace
}  // namespace oclvm::vm
