// tests/instructions/memory_test.cc — the memory:: facade (Alloc / Free / Used) on the process-wide
// VM. Every test starts and ends with nothing allocated on any device (Used == 0); TearDown also
// empties the caches of the process-wide VM so that LeakCheckedTest sees the backends' segments
// back where they started. Sizes are chosen so that every built-in allocator rounds them alike
// (1000 -> 1024; multiples of 4096 stay as they are).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/memory.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "tests/storage/test_util.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm {
namespace {

constexpr Device kOpenCL0{DeviceType::kOpenCL, 0};
constexpr Device kCpu{DeviceType::kCpu, 0};

class MemoryTest : public testing::LeakCheckedTest {
 protected:
  void SetUp() override {
    empty_caches();  // segments cached by earlier users of the process-wide VM are not ours
    LeakCheckedTest::SetUp();
    for (Device device : DeviceManager::instance().devices()) {
      ASSERT_EQ(memory::Used(device), 0u) << device.str() << " starts with memory in use";
    }
  }
  void TearDown() override {
    for (Device device : DeviceManager::instance().devices()) {
      EXPECT_EQ(memory::Used(device), 0u) << device.str();
    }
    empty_caches();
    LeakCheckedTest::TearDown();
  }

  static void empty_caches() {
    vm::VirtualMachine& vm = vm::VirtualMachine::instance();
    InstructionsBuilder builder(vm);
    for (Device device : DeviceManager::instance().devices()) builder.empty_cache(device);
    vm.run(builder.take());
  }
};

TEST_F(MemoryTest, AllocUsedFree) {
  for (Device place : {kOpenCL0, kCpu}) {
    SCOPED_TRACE(place.str());
    std::shared_ptr<BlobObject> a = memory::Alloc(place, 1000);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(a->storage(), nullptr);
    EXPECT_EQ(a->device(), place);
    EXPECT_EQ(a->storage()->size(), 1000u);
    EXPECT_EQ(memory::Used(place), 1024u);
    std::shared_ptr<BlobObject> b = memory::Alloc(place, 8192);
    EXPECT_EQ(memory::Used(place), 1024u + 8192u);
    memory::Free(place, a);
    EXPECT_TRUE(a->storage()->released());
    EXPECT_EQ(memory::Used(place), 8192u);
    memory::Free(place, b);
    EXPECT_EQ(memory::Used(place), 0u);
  }
}

TEST_F(MemoryTest, ZeroBytesGiveAnEmptyAllocation) {
  std::shared_ptr<BlobObject> empty = memory::Alloc(kOpenCL0, 0);
  ASSERT_NE(empty->storage(), nullptr);
  EXPECT_EQ(empty->storage()->size(), 0u);
  EXPECT_EQ(empty->storage()->device_address(), 0u);
  EXPECT_EQ(memory::Used(kOpenCL0), 0u);
  memory::Free(kOpenCL0, empty);
  EXPECT_EQ(memory::Used(kOpenCL0), 0u);
}

TEST_F(MemoryTest, BadArgumentsAreRejectedAndChangeNothing) {
  std::shared_ptr<BlobObject> blob = memory::Alloc(kOpenCL0, 4096);
  EXPECT_THROW(memory::Free(kCpu, blob), InvalidArgument);
  EXPECT_THROW(memory::Free(kOpenCL0, nullptr), InvalidArgument);
  EXPECT_THROW(memory::Alloc(Device{DeviceType::kOpenCL, 99}, 16), InvalidArgument);
  EXPECT_THROW(memory::Used(Device{DeviceType::kOpenCL, 99}), InvalidArgument);
  EXPECT_THROW(memory::Alloc(kOpenCL0, SIZE_MAX), InvalidArgument);
  try {
    memory::Free(kCpu, blob);
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "Expected a blob on cpu, but got one on opencl:0");
  }
  EXPECT_FALSE(blob->storage()->released());
  EXPECT_EQ(memory::Used(kOpenCL0), 4096u);
  memory::Free(kOpenCL0, blob);
}

TEST_F(MemoryTest, DoubleFreeFailsWithAClearMessage) {
  std::shared_ptr<BlobObject> blob = memory::Alloc(kCpu, 4096);
  memory::Free(kCpu, blob);
  try {
    memory::Free(kCpu, blob);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ReleaseTensor"), std::string::npos) << message;
    EXPECT_NE(message.find("already released"), std::string::npos) << message;
  }
  EXPECT_EQ(memory::Used(kCpu), 0u);
}

TEST_F(MemoryTest, CallsFromManyThreads) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      const Device place = t % 2 == 0 ? kOpenCL0 : kCpu;
      for (int i = 0; i < kRounds; ++i) {
        std::shared_ptr<BlobObject> blob = memory::Alloc(place, 4096 * (1 + i % 3));
        memory::Free(place, blob);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(memory::Used(kOpenCL0), 0u);
  EXPECT_EQ(memory::Used(kCpu), 0u);
}

}  // namespace
}  // namespace oclvm
