// tests/vm/dependence_test.cc — the dependence rules (a writer waits for every earlier access, a
// reader for the last writer; nothing on one stream) and that the soft syncs they produce order
// real device commands across streams and devices.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/system_allocator.h"
#include "oclvm/vm/dependence.h"
#include "oclvm/vm/virtual_machine.h"
#include "tests/vm/probe.h"

namespace oclvm::vm {
namespace {

using testing::Probe;
using testing::ProbeLog;

constexpr Device kOpenCL0{DeviceType::kOpenCL, 0};
constexpr Device kCpu{DeviceType::kCpu, 0};

// Blobs backed by memory this test owns (a SystemAllocator used only on the test thread).
class DependenceTest : public ::testing::Test {
 protected:
  std::shared_ptr<BlobObject> blob(Device device, size_t bytes) {
    Allocator& allocator = device == kCpu ? host_allocator_ : cl_allocator_;
    auto storage = BlobStorage::allocate(allocator, bytes);
    storages_.push_back(storage);
    return std::make_shared<BlobObject>(storage, Dims{static_cast<int64_t>(bytes)},
                                        DType::kU8);
  }
  void TearDown() override {
    vm_.check_invariants();
    for (auto& s : storages_) s->release();
  }

  VirtualMachine vm_{DeviceManager::instance(), Options{}};
  SystemAllocator cl_allocator_{DeviceManager::instance().backend(kOpenCL0)};
  SystemAllocator host_allocator_{DeviceManager::instance().backend(kCpu)};
  std::vector<std::shared_ptr<BlobStorage>> storages_;
};

std::unique_ptr<Probe> reader(Stream& s, ProbeLog& log, int id, std::shared_ptr<BlobObject> b) {
  auto p = std::make_unique<Probe>(s, &log, id);
  p->reads(std::move(b));
  return p;
}
std::unique_ptr<Probe> writer(Stream& s, ProbeLog& log, int id, std::shared_ptr<BlobObject> b) {
  auto p = std::make_unique<Probe>(s, &log, id);
  p->writes(std::move(b));
  return p;
}

TEST_F(DependenceTest, OneStreamNeedsNoWaits) {
  auto b = blob(kOpenCL0, 64);
  ProbeLog log;
  Stream& s = vm_.stream(kOpenCL0);
  InstructionList list;
  list.push_back(writer(s, log, 0, b));
  list.push_back(reader(s, log, 1, b));
  list.push_back(writer(s, log, 2, b));
  vm_.run(std::move(list));
  for (const auto& waits : log.waits) EXPECT_TRUE(waits.empty());
}

TEST_F(DependenceTest, ReaderWaitsForTheLastWriterOnAnotherStream) {
  auto b = blob(kOpenCL0, 64);
  ProbeLog log;
  Stream& s0 = vm_.stream(kOpenCL0, StreamRole::kUser, 0);
  Stream& s1 = vm_.stream(kOpenCL0, StreamRole::kUser, 1);
  InstructionList list;
  list.push_back(writer(s0, log, 0, b));
  list.push_back(reader(s1, log, 1, b));
  list.push_back(reader(s0, log, 2, b));  // same stream as the writer: no wait
  vm_.run(std::move(list));
  ASSERT_EQ(log.waits.size(), 3u);
  ASSERT_EQ(log.waits[1].size(), 1u);
  EXPECT_EQ(log.waits[1][0].stream, &s0);
  EXPECT_TRUE(log.waits[2].empty());
}

TEST_F(DependenceTest, WriterWaitsForEveryReaderAndTheLastWriter) {
  auto b = blob(kOpenCL0, 64);
  ProbeLog log;
  Stream& s0 = vm_.stream(kOpenCL0, StreamRole::kUser, 0);
  Stream& s1 = vm_.stream(kOpenCL0, StreamRole::kUser, 1);
  Stream& s2 = vm_.stream(kOpenCL0, StreamRole::kUser, 2);
  InstructionList list;
  list.push_back(writer(s0, log, 0, b));
  list.push_back(reader(s1, log, 1, b));
  list.push_back(reader(s2, log, 2, b));
  list.push_back(writer(s2, log, 3, b));  // waits for s0 (writer) and s1 (reader), not s2
  list.push_back(reader(s0, log, 4, b));  // waits only for the new writer on s2
  vm_.run(std::move(list));
  ASSERT_EQ(log.waits.size(), 5u);
  std::vector<Stream*> streams;
  for (const StreamWait& w : log.waits[3]) streams.push_back(w.stream);
  std::sort(streams.begin(), streams.end(), [](Stream* a, Stream* b) { return a->id() < b->id(); });
  EXPECT_EQ(streams, (std::vector<Stream*>{&s0, &s1}));
  ASSERT_EQ(log.waits[4].size(), 1u);
  EXPECT_EQ(log.waits[4][0].stream, &s2);
}

TEST_F(DependenceTest, IndependentBlobsDoNotWaitForEachOther) {
  auto a = blob(kOpenCL0, 64);
  auto c = blob(kOpenCL0, 64);
  ProbeLog log;
  InstructionList list;
  list.push_back(writer(vm_.stream(kOpenCL0, StreamRole::kUser, 0), log, 0, a));
  list.push_back(writer(vm_.stream(kOpenCL0, StreamRole::kUser, 1), log, 1, c));
  vm_.run(std::move(list));
  EXPECT_TRUE(log.waits[1].empty());
}

// The records the analysis keeps in the blob (vm/dependence.h): none before the first use, then
// this VM's, the last writer, the readers since (one per stream) and the last stream used.
TEST_F(DependenceTest, RecordsNameTheLastWriterAndTheReadersSince) {
  auto b = blob(kOpenCL0, 64);
  EXPECT_EQ(find_records(*b), nullptr);
  EXPECT_EQ(producer_stream(*b), kNoStream);
  ProbeLog log;
  Stream& s0 = vm_.stream(kOpenCL0);
  Stream& s1 = vm_.stream(kOpenCL0, StreamRole::kUser, 3);
  InstructionList list;
  list.push_back(writer(s0, log, 0, b));
  // Two reads on one stream: the later replaces the earlier's record.
  for (int id = 1; id <= 2; ++id) list.push_back(reader(s1, log, id, b));
  vm_.run(std::move(list));
  const BlobRecords* records = find_records(*b);
  ASSERT_NE(records, nullptr);
  EXPECT_EQ(records->owner, &vm_);
  EXPECT_EQ(records->producer, kNoStream) << "only the builder's allocations set a producer";
  EXPECT_EQ(records->last_write.stream, s0.id());
  ASSERT_EQ(records->reads.size(), 1u);
  EXPECT_EQ(records->reads[0].stream, s1.id());
  EXPECT_GT(records->reads[0].sequence, records->last_write.sequence);
  set_producer_stream(*b, s1.id());
  EXPECT_EQ(producer_stream(*b), s1.id());
  EXPECT_EQ(find_records(*b), records) << "the records stay where they were built";
}

// The soft sync orders real commands: a 32 MiB fill on one stream, then a read of the same memory
// on another stream must see the fill (on PoCL's pthread driver the two queues really run
// concurrently; ctest runs this suite on it too).
TEST_F(DependenceTest, SoftSyncOrdersDeviceCommandsAcrossStreams) {
  constexpr size_t kBytes = 32u << 20;
  auto b = blob(kOpenCL0, kBytes);
  std::vector<uint8_t> host(kBytes, 0);
  Stream& s0 = vm_.stream(kOpenCL0, StreamRole::kUser, 0);
  Stream& s1 = vm_.stream(kOpenCL0, StreamRole::kUser, 1);
  for (uint8_t round = 1; round <= 3; ++round) {
    InstructionList list;
    auto fill = std::make_unique<Probe>(s0, nullptr, 0, [b, round](ExecutionContext& c) {
      const Allocation& a = b->storage()->allocation();
      c.stream.queue().enqueue_fill(*a.segment, a.offset, &round, 1, kBytes);
    });
    fill->writes(b);
    auto read = std::make_unique<Probe>(s1, nullptr, 1, [b, &host](ExecutionContext& c) {
      const Allocation& a = b->storage()->allocation();
      c.stream.queue().enqueue_read(*a.segment, a.offset, host.data(), kBytes, false);
    });
    read->reads(b);
    list.push_back(std::move(fill));
    list.push_back(std::move(read));
    vm_.run(std::move(list));
    for (size_t i = 0; i < kBytes; i += 4093) ASSERT_EQ(host[i], round) << "byte " << i;
    ASSERT_EQ(host[kBytes - 1], round);
  }
}

// Across devices: a device write, then a read of it by an instruction on the host device, which
// must wait for the other worker's dispatch and the device's commands.
TEST_F(DependenceTest, CrossDeviceReaderWaitsForTheDeviceWriter) {
  constexpr size_t kBytes = 16u << 20;
  auto b = blob(kOpenCL0, kBytes);
  std::vector<uint8_t> host(kBytes, 0);
  ProbeLog log;
  InstructionList list;
  auto fill = std::make_unique<Probe>(vm_.stream(kOpenCL0), &log, 0, [b](ExecutionContext& c) {
    const Allocation& a = b->storage()->allocation();
    const uint8_t value = 0x7E;
    c.stream.queue().enqueue_fill(*a.segment, a.offset, &value, 1, kBytes);
  });
  fill->writes(b);
  auto read = std::make_unique<Probe>(vm_.stream(kCpu), &log, 1, [b, &host](ExecutionContext& c) {
    const Allocation& a = b->storage()->allocation();
    c.queue_on(kOpenCL0).enqueue_read(*a.segment, a.offset, host.data(), kBytes, true);
  });
  read->reads(b);
  list.push_back(std::move(fill));
  list.push_back(std::move(read));
  vm_.run(std::move(list));
  ASSERT_EQ(log.waits.size(), 2u);
  const auto& waits = log.ids[0] == 1 ? log.waits[0] : log.waits[1];
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].stream, &vm_.stream(kOpenCL0));
  for (size_t i = 0; i < kBytes; i += 4093) ASSERT_EQ(host[i], 0x7E) << "byte " << i;
}

}  // namespace
}  // namespace oclvm::vm
