// tests/vm/threads_test.cc — many producer threads at once: 8 threads x 10,000 random
// instructions (allocate, fill, copies within and across devices, reads back, releases, soft syncs,
// statistics queries) on every device, with contents checked and the final statistics at zero.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "oclvm/instructions/builder.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::vm {
namespace {

constexpr int kThreads = 8;
constexpr int kInstructionsPerThread = 10000;

struct Owned {
  std::shared_ptr<BlobObject> blob;
  size_t bytes;
  uint8_t value;  // every byte of the blob holds this value (after its fill)
};

std::vector<Device> all_devices() { return DeviceManager::instance().devices(); }

// One producer: random lists of 1-8 instructions over its own blobs; returns how many it built.
int produce(VirtualMachine& vm, unsigned seed, std::atomic<int>& content_errors) {
  std::mt19937 rng(seed);
  const std::vector<Device> devices = all_devices();
  std::vector<Owned> owned;
  int built = 0;
  std::vector<std::vector<uint8_t>> host_buffers;
  while (built < kInstructionsPerThread) {
    InstructionsBuilder b(vm);
    std::vector<std::pair<size_t, uint8_t>> checks;  // host buffer index, expected byte
    std::deque<DeviceStats> stats_sinks;  // one per query: queries of several devices run at once
    host_buffers.clear();
    const int length = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < length; ++k) {
      const unsigned pick = rng() % 100;
      if (owned.empty() || pick < 25) {
        const Device device = devices[rng() % devices.size()];
        const size_t bytes = 8 * (1 + rng() % 8192);  // 8 B .. 64 KiB, multiple of 8
        Owned o{b.allocate_blob(b.stream(device), bytes), bytes, static_cast<uint8_t>(rng())};
        b.fill(o.blob, 0, bytes, o.value, 1);
        owned.push_back(o);
        built += 2;
      } else if (pick < 45) {
        const size_t i = rng() % owned.size();
        b.release(owned[i].blob);
        owned.erase(owned.begin() + static_cast<std::ptrdiff_t>(i));
        built += 1;
      } else if (pick < 65) {
        // Copy one blob's prefix into another (same or other device); the target then holds the
        // source value in that prefix only, so refill the target to keep "every byte" true.
        Owned& src = owned[rng() % owned.size()];
        Owned& dst = owned[rng() % owned.size()];
        if (&src == &dst) continue;
        const size_t n = std::min(src.bytes, dst.bytes);
        b.copy(src.blob, 0, dst.blob, 0, n);
        b.fill(dst.blob, 0, dst.bytes, src.value, 1);
        dst.value = src.value;
        built += 2;
      } else if (pick < 85) {
        Owned& o = owned[rng() % owned.size()];
        host_buffers.emplace_back(o.bytes, 0);
        b.copy_device_to_host(o.blob, 0, host_buffers.back().data(), o.bytes);
        checks.emplace_back(host_buffers.size() - 1, o.value);
        built += 1;
      } else if (pick < 92) {
        Owned& o = owned[rng() % owned.size()];
        vm::Stream& user = vm.stream(o.blob->device(), StreamRole::kUser, static_cast<int>(rng() % 2));
        b.fill(o.blob, 0, o.bytes, static_cast<uint8_t>(o.value + 1), 1, &user);
        o.value = static_cast<uint8_t>(o.value + 1);
        built += 1;
      } else {
        b.query_stats(devices[rng() % devices.size()], &stats_sinks.emplace_back());
        built += 1;
      }
    }
    vm.run(b.take());
    for (auto [index, expected] : checks) {
      const auto& buffer = host_buffers[index];
      for (size_t i = 0; i < buffer.size(); i += 61) {
        if (buffer[i] != expected) {
          content_errors.fetch_add(1);
          break;
        }
      }
    }
  }
  InstructionsBuilder b(vm);
  for (Owned& o : owned) b.release(o.blob);
  vm.run(b.take());
  return built;
}

TEST(ThreadsTest, EightProducersTenThousandRandomInstructionsEach) {
  VirtualMachine vm(DeviceManager::instance(), Options{});
  std::atomic<int> content_errors{0};
  std::vector<std::thread> threads;
  std::atomic<int> total{0};
  const unsigned base_seed = 20261122;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      total.fetch_add(produce(vm, base_seed + static_cast<unsigned>(t), content_errors));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(total.load(), kThreads * kInstructionsPerThread);
  EXPECT_EQ(content_errors.load(), 0) << "seed " << base_seed;

  for (Device device : all_devices()) {
    DeviceStats stats;
    InstructionsBuilder b(vm);
    b.empty_cache(device);
    b.query_stats(device, &stats);
    vm.run(b.take());
    EXPECT_EQ(stats.allocated_bytes.aggregate().current, 0) << device.str();
    EXPECT_EQ(stats.allocation.aggregate().current, 0) << device.str();
    EXPECT_EQ(stats.reserved_bytes.aggregate().current, 0) << device.str();
    EXPECT_EQ(stats.num_ooms, 0) << device.str();
    EXPECT_GT(stats.allocation.aggregate().allocated, 0) << device.str() << " was never used";
  }
  vm.check_invariants();  // eight producers' batches, every instruction counted done exactly once
}

}  // namespace
}  // namespace oclvm::vm
