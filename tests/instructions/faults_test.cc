// tests/instructions/faults_test.cc — the VM under injected device faults (storage/faults.h):
// every failure reaches the caller typed at its sync point, naming the instruction and the
// device; the rest of each list still runs; the VM keeps serving; the statistics stay exact (one
// live allocation per live blob); and once everything is released nothing is left, on the
// allocator or in the device layer.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/faults.h"
#include "tests/storage/test_util.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm {
namespace {


class FaultedVmTest : public testing::LeakCheckedTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    LeakCheckedTest::SetUp();
    vm_ = std::make_unique<vm::VirtualMachine>(DeviceManager::instance(), Options{});
  }
  void TearDown() override {
    backend().faults().configure(FaultOptions{});
    vm_.reset();
    LeakCheckedTest::TearDown();
  }
  static Device device() { return Device{DeviceType::kOpenCL, 0}; }
  static MemoryBackend& backend() { return DeviceManager::instance().backend(device()); }

  DeviceStats stats() {
    DeviceStats out;
    InstructionsBuilder builder(*vm_);
    builder.query_stats(device(), &out);
    vm_->run(builder.take());
    return out;
  }

  std::unique_ptr<vm::VirtualMachine> vm_;
};

// A seeded random workload of allocations, fills, uploads, device copies, downloads, releases and
// cache flushes, run list by list under the rules of GetParam(). (A refused segment is retried
// once by the allocator after emptying its cache, so a segment rule surfaces as out of memory only
// when both attempts fail: hence p=0.5 there.)
TEST_P(FaultedVmTest, FailuresAreTypedAtTheirSyncPointAndNothingLeaks) {
  const size_t segments_before = backend().live_segments();
  backend().faults().configure(FaultOptions::parse(GetParam(), "test"));
  std::mt19937_64 random(12345);
  std::vector<std::shared_ptr<BlobObject>> live;
  size_t failed_lists = 0;
  size_t checked = 0;
  for (int step = 0; step < 400; ++step) {
    InstructionsBuilder builder(*vm_);
    vm::Stream& stream = builder.stream(device());
    const size_t bytes = 512 * (1 + random() % 4096);  // 512 B .. 2 MiB
    auto blob = builder.allocate_blob(stream, bytes);
    const auto value = static_cast<uint8_t>(random());
    builder.fill(blob, 0, bytes, value);
    std::vector<uint8_t> upload(bytes / 2, static_cast<uint8_t>(value + 1));
    builder.copy_host_to_device(upload.data(), blob, 0, upload.size());
    std::vector<uint8_t> back(bytes, 0);
    builder.copy_device_to_host(blob, 0, back.data(), bytes);
    if (!live.empty()) {
      const auto& other = live[random() % live.size()];
      const size_t n = std::min(bytes, other->required_bytes()) / 2;
      builder.copy(other, 0, blob, bytes - n, n);
    }
    if (random() % 2 == 0) builder.empty_cache(device());  // new segments keep being needed
    const bool keep = random() % 3 == 0 && live.size() < 8;
    if (!keep) builder.release(blob);
    while (live.size() > 4 && random() % 2 == 0) {
      builder.release(live.back());
      live.pop_back();
    }
    try {
      vm_->run(builder.take());
      // Everything ran: the download saw the fill and then the upload.
      for (size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(back[i], i < upload.size() ? upload[0] : value) << "byte " << i;
      }
      ++checked;
    } catch (const OutOfMemoryError& e) {
      ++failed_lists;
      EXPECT_CONTAINS(e.what(), "AllocateBlob");
      EXPECT_CONTAINS(e.what(), "opencl:0");
    } catch (const BackendError& e) {
      ++failed_lists;
      EXPECT_CONTAINS(e.what(), "injected fault");
      EXPECT_CONTAINS(e.what(), "opencl:0");
    }
    if (keep && blob->storage() != nullptr) live.push_back(blob);
    // Exact statistics: one live allocation per live blob (the kept ones); none other survived
    // its list, failed or not.
    ASSERT_EQ(stats().allocation.aggregate().current, static_cast<int64_t>(live.size()))
        << "step " << step;
  }
  EXPECT_GT(failed_lists, 10u) << "the rules injected too little to test anything";
  EXPECT_GT(checked, 10u) << "too few lists ran through to check contents";
  EXPECT_GT(backend().faults().injected_total(), 0u);

  // The VM keeps serving: with the faults off, release what is left and give the cache back.
  backend().faults().configure(FaultOptions{});
  InstructionsBuilder builder(*vm_);
  for (auto& blob : live) builder.release(blob);
  builder.empty_cache(device());
  vm_->run(builder.take());
  const DeviceStats end = stats();
  EXPECT_EQ(end.allocated_bytes.aggregate().current, 0);
  EXPECT_EQ(end.reserved_bytes.aggregate().current, 0);
  EXPECT_EQ(backend().live_segments(), segments_before);
}

INSTANTIATE_TEST_SUITE_P(Rules, FaultedVmTest,
                         ::testing::Values("segment:p=0.5,seed=1", "copy:every=7", "fill:every=3",
                                           "finish:every=4",
                                           "segment:p=0.1,copy:p=0.05,fill:p=0.05,finish:p=0.05,"
                                           "seed=3"),
                         [](const auto& info) { return "rule" + std::to_string(info.index); });

}  // namespace
// A refused host mapping (OCLVM_FAULTS map rule) is a typed error at its sync point: nothing is
// mapped, the paired UnmapBlob is a no-op, the blob keeps its bytes and nothing leaks.
class FaultedMapTest : public testing::LeakCheckedTest {};

TEST_F(FaultedMapTest, ARefusedMapIsTypedAndLeavesNothingMapped) {
  const Device device{DeviceType::kOpenCL, 0};
  MemoryBackend& backend = DeviceManager::instance().backend(device);
  vm::VirtualMachine vm(DeviceManager::instance(), Options{});
  InstructionsBuilder builder(vm);
  auto blob = builder.allocate_blob(builder.stream(device), 4096);
  builder.fill(blob, 0, 4096, 0x5A);
  vm.run(builder.take());
  backend.faults().configure(FaultOptions::parse("map:nth=1", "test"));
  auto mapping = builder.map(blob, 0, 4096, HostAccess::kWrite);
  builder.unmap(mapping);
  std::string message;
  try {
    vm.run(builder.take());
  } catch (const BackendError& error) {
    message = error.what();
  }
  backend.faults().configure(FaultOptions{});
  EXPECT_NE(message.find("injected fault"), std::string::npos) << message;
  EXPECT_NE(message.find("MapBlob"), std::string::npos) << message;
  EXPECT_FALSE(mapping->mapped());
  std::vector<uint8_t> back(4096, 0);
  builder.copy_device_to_host(blob, 0, back.data(), 4096);
  builder.release(blob);
  vm.run(builder.take());
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 0x5A));
}

}  // namespace oclvm
