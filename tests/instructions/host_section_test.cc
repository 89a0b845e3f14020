// tests/instructions/host_section_test.cc — vm::HostSection (Note [Host sections]) on a real VM,
// on PoCL (fine-grained SVM segments) and on the host device: host-addressable segments, the
// ordering against device instructions before and after a section, other threads' lists held
// back while it lasts, enter waiting for a busy worker, the refusals (busy worker for
// try_enter, shut-down VM, waiting inside a section or an instruction callback), and lists run
// inside a section (HostSection::run): ahead of the lists held back, and refused, changing
// nothing, when they would have to overtake one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/vm/host_section.h"
#include "oclvm/vm/virtual_machine.h"
#include "tests/instructions/vm_fixture.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using testing::kCpu;
using testing::kOpenCL0;
using testing::pattern_bytes;
using testing::VmTest;

constexpr size_t kBytes = 1 << 20;

class HostSectionTest : public VmTest, public ::testing::WithParamInterface<Device> {
 protected:
  void TearDown() override {
    if (!vm_->is_shut_down()) {
      InstructionsBuilder builder(*vm_);
      builder.empty_cache(device());
      vm_->run(builder.take());
    }
    vm_->check_invariants();  // every section ended, every list it held back ran
    VmTest::TearDown();
  }

  Device device() const { return GetParam(); }

  std::shared_ptr<BlobObject> allocate(size_t bytes) { return VmTest::allocate(device(), bytes); }
  std::vector<uint8_t> read(const std::shared_ptr<BlobObject>& blob, size_t n) {
    return VmTest::read(blob, 0, n);
  }
  // Where the host reaches the blob's byte 0.
  static uint8_t* host_of(const BlobObject& blob) {
    return static_cast<uint8_t*>(blob.storage()->host_address());
  }
  // Keeps the worker busy in an instruction until `leave` is set; returns once it runs.
  vm::Ticket hold_worker(const std::atomic<bool>& leave) {
    std::atomic<bool> inside{false};
    InstructionsBuilder builder(*vm_);
    builder.barrier(builder.stream(device()), [&inside, &leave] {
      inside = true;
      while (!leave) std::this_thread::yield();
    });
    vm::Ticket ticket = vm_->submit(builder.take());
    while (!inside) std::this_thread::yield();
    return ticket;
  }
  // Submits, from another thread (the section's thread must not), a copy of `data` into `blob`;
  // returns its ticket without waiting.
  vm::Ticket submit_copy_from_another_thread(const std::vector<uint8_t>& data,
                                             const std::shared_ptr<BlobObject>& blob) {
    vm::Ticket ticket;
    std::thread other([&] {
      InstructionsBuilder builder(*vm_);
      builder.copy_host_to_device(data.data(), blob, 0, data.size());
      ticket = vm_->submit(builder.take());
    });
    other.join();
    return ticket;
  }
  // Enters a section, retrying while the worker finishes what was submitted before.
  std::optional<vm::HostSection> enter() {
    for (;;) {
      std::optional<vm::HostSection> section = vm::HostSection::try_enter(*vm_, device());
      if (section) return section;
      std::this_thread::yield();
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Devices, HostSectionTest, ::testing::Values(kOpenCL0, kCpu),
                         [](const auto& info) {
                           return info.param.type == DeviceType::kCpu ? std::string("cpu")
                                                                      : std::string("opencl0");
                         });

TEST_P(HostSectionTest, SegmentsOfPoclAndTheHostHaveHostAddresses) {
  const DeviceProperties& properties = DeviceManager::instance().backend(device()).properties();
  ASSERT_TRUE(properties.host_addressable)
      << "PoCL's CPU devices have fine-grained buffer SVM and unified memory";
  auto blob = allocate(4096);
  ASSERT_NE(blob->storage()->allocation().segment->host, nullptr);
  release(blob);
}

TEST_P(HostSectionTest, SeesEarlierDeviceWritesAndLaterInstructionsSeeTheHosts) {
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 5);
  InstructionsBuilder builder(*vm_);
  auto blob = builder.allocate_blob(builder.stream(device()), kBytes);
  builder.copy_host_to_device(data.data(), blob, 0, kBytes);
  vm::Ticket upload = vm_->submit(builder.take());  // not waited for: the section orders it
  {
    std::optional<vm::HostSection> section = enter();
    uint8_t* host = host_of(*blob);
    EXPECT_EQ(std::memcmp(host, data.data(), kBytes), 0) << "the section began after the upload";
    for (size_t i = 0; i < 4096; ++i) host[i] = static_cast<uint8_t>(i % 253);
  }
  upload.wait();
  std::vector<uint8_t> expected = data;
  for (size_t i = 0; i < 4096; ++i) expected[i] = static_cast<uint8_t>(i % 253);
  EXPECT_EQ(read(blob, kBytes), expected) << "a list after the section sees the host's writes";
  release(blob);
}

TEST_P(HostSectionTest, HoldsBackOtherThreadsListsUntilItEnds) {
  auto blob = allocate(kBytes);
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 9);
  std::optional<vm::HostSection> section = enter();
  std::memset(host_of(*blob), 0, kBytes);
  std::atomic<bool> submitted{false};
  vm::Ticket ticket;
  std::thread other([&] {
    EXPECT_FALSE(vm::HostSection::try_enter(*vm_, device()).has_value())
        << "one section at a time";
    InstructionsBuilder builder(*vm_);
    builder.copy_host_to_device(data.data(), blob, 0, kBytes);
    ticket = vm_->submit(builder.take());
    submitted = true;
  });
  other.join();
  ASSERT_TRUE(submitted);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // time the worker would need
  EXPECT_EQ(host_of(*blob)[kBytes - 1], 0) << "no instruction of the device ran in the section";
  InstructionsBuilder builder(*vm_);
  builder.release(blob);
  EXPECT_THROW(vm_->run(builder.take()), Error) << "waiting inside a section is refused";
  section.reset();  // dispatches the held list
  ticket.wait();
  EXPECT_EQ(read(blob, kBytes), data);
  release(blob);
}

TEST_P(HostSectionTest, NoSectionWhileTheWorkerIsBusyOrAfterShutdown) {
  std::atomic<bool> leave{false};
  vm::Ticket busy = hold_worker(leave);
  EXPECT_FALSE(vm::HostSection::try_enter(*vm_, device()).has_value());
  leave = true;
  busy.wait();
  EXPECT_TRUE(enter().has_value());
  vm_->shutdown();
  EXPECT_FALSE(vm::HostSection::try_enter(*vm_, device()).has_value());
}

TEST_P(HostSectionTest, EnterWaitsForTheWorkerAndRefusesWhereItWouldWaitForItself) {
  std::atomic<bool> leave{false};
  std::atomic<bool> entered{false};
  vm::Ticket busy = hold_worker(leave);
  InstructionsBuilder builder(*vm_);
  std::thread waiter([&] {
    std::optional<vm::HostSection> section = vm::HostSection::enter(*vm_, device());
    EXPECT_TRUE(section.has_value());
    entered = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(entered) << "enter waits while an instruction runs";
  leave = true;
  waiter.join();
  busy.wait();
  EXPECT_TRUE(entered);
  // From inside an instruction callback the thread holds the execution right: no waiting.
  std::optional<bool> inner;
  builder.barrier(builder.stream(device()), [&] {
    inner = vm::HostSection::enter(*vm_, device()).has_value();
  });
  vm_->run(builder.take());
  ASSERT_TRUE(inner.has_value());
  EXPECT_FALSE(*inner);
  vm_->shutdown();
  EXPECT_FALSE(vm::HostSection::enter(*vm_, device()).has_value());
}


DeviceStats stats_of(vm::VirtualMachine& vm, Device device) {
  DeviceStats stats;
  InstructionsBuilder builder(vm);
  builder.query_stats(device, &stats);
  vm.run(builder.take());
  return stats;
}

int64_t allocated_bytes(const DeviceStats& stats) {
  return stats.allocated_bytes.aggregate().current;
}

TEST_P(HostSectionTest, RunsAnAllocationAtOnceAheadOfTheListsItHoldsBack) {
  auto first = allocate(kBytes);
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 3);
  std::optional<vm::HostSection> section = enter();
  vm::Ticket held = submit_copy_from_another_thread(data, first);
  InstructionsBuilder builder(*vm_);
  std::shared_ptr<BlobObject> made = builder.allocate_blob(builder.stream(device()), kBytes);
  section->run(builder.take());
  ASSERT_NE(made->storage(), nullptr) << "the allocation ran before run() returned";
  std::memset(host_of(*made), 0x5a, kBytes);  // the host writes the new block in the section
  std::memset(host_of(*first), 0, kBytes);
  EXPECT_EQ(host_of(*first)[7], 0) << "the held-back copy has not run";
  section.reset();
  held.wait();
  EXPECT_EQ(read(first, kBytes), data) << "the held-back copy ran after the section";
  EXPECT_EQ(read(made, kBytes), std::vector<uint8_t>(kBytes, 0x5a));
  release(made);
  release(first);
}

TEST_P(HostSectionTest, ARunThatWouldOvertakeAHeldListIsRefusedAndChangesNothing) {
  auto blob = allocate(kBytes);
  const std::vector<uint8_t> data = pattern_bytes(kBytes, 11);
  const int64_t before = allocated_bytes(stats_of(*vm_, device()));
  std::optional<vm::HostSection> section = enter();
  vm::Ticket held = submit_copy_from_another_thread(data, blob);
  // The release would have to wait for the held copy, which runs after the section.
  InstructionsBuilder builder(*vm_);
  builder.release(blob);
  EXPECT_THROW(section->run(builder.take()), InvalidArgument);
  section.reset();
  held.wait();
  EXPECT_EQ(allocated_bytes(stats_of(*vm_, device())), before) << "nothing was released";
  EXPECT_EQ(read(blob, kBytes), data);
  release(blob);
}

TEST_P(HostSectionTest, ARunForAnotherDeviceIsRefused) {
  const Device other = device() == kCpu ? kOpenCL0 : kCpu;
  std::optional<vm::HostSection> section = enter();
  InstructionsBuilder builder(*vm_);
  std::shared_ptr<BlobObject> blob = builder.allocate_blob(builder.stream(other), 4096);
  EXPECT_THROW(section->run(builder.take()), InvalidArgument);
  EXPECT_EQ(blob->storage(), nullptr);
}

TEST_P(HostSectionTest, ATensorDroppedInASectionIsReleasedWhenItEnds) {
  const int64_t before = allocated_bytes(stats_of(*vm_, device()));
  {
    std::optional<vm::HostSection> section = enter();
    InstructionsBuilder builder(*vm_);
    std::shared_ptr<BlobObject> blob = builder.allocate_blob(builder.stream(device()), kBytes);
    section->run(builder.take());
    auto storage = std::make_shared<TensorStorage>(blob, make_vm_releaser(*vm_));
    blob.reset();
    storage.reset();  // released detached: the section holds the worker
  }
  EXPECT_EQ(allocated_bytes(stats_of(*vm_, device())), before);
}

TEST_P(HostSectionTest, ARunAfterShutdownIsAnError) {
  std::optional<vm::HostSection> section = enter();
  std::thread stopper([&] { vm_->shutdown(); });
  // shutdown() marks the VM shut down, then waits for the worker, which waits for the section.
  while (!vm_->is_shut_down()) std::this_thread::yield();
  InstructionsBuilder builder(*vm_);
  std::shared_ptr<BlobObject> blob = builder.allocate_blob(builder.stream(device()), 4096);
  EXPECT_THROW(section->run(builder.take()), Error);
  EXPECT_EQ(blob->storage(), nullptr);
  section.reset();
  stopper.join();
}

}  // namespace
}  // namespace oclvm
