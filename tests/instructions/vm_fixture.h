// tests/instructions/vm_fixture.h — the fixture of the instruction tests (instructions_test.cc,
// instructions_errors_test.cc, bad_input_test.cc, builder_test.cc, host_section_test.cc,
// kernel_test.cc, native_test.cc, release_test.cc): a fresh VirtualMachine per test (fresh
// allocators, so statistics start at zero and can be asserted exactly; Options{} selects the
// caching allocator: 512-byte quantum, 2 MiB small segments; vm_options() picks others), helpers
// that each run one synchronous list, and a TearDown that asserts through QueryStats that no
// bytes are allocated on any device, empties every cache, asserts nothing is reserved, and
// (LeakCheckedTest) that the backends hold no more segments than at the start; no BlobStorage may
// have been freed by its destructor fallback.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/device_manager.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/vm/virtual_machine.h"
#include "tests/storage/test_util.h"

namespace oclvm::testing {

constexpr Device kOpenCL0{DeviceType::kOpenCL, 0};
constexpr Device kOpenCL1{DeviceType::kOpenCL, 1};
constexpr Device kCpu{DeviceType::kCpu, 0};
constexpr int64_t kSmallSegment = 2 << 20;

inline std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 8));
  return bytes;
}

class VmTest : public LeakCheckedTest {
 protected:
  void SetUp() override {
    LeakCheckedTest::SetUp();
    destructor_releases_at_start_ = BlobStorage::destructor_releases();
    failed_releases_at_start_ = TensorStorage::failed_releases();
    vm_ = std::make_unique<vm::VirtualMachine>(DeviceManager::instance(), vm_options());
  }

  void TearDown() override {
    if (!vm_->is_shut_down()) {
      for (Device device : DeviceManager::instance().devices()) {
        const DeviceStats before = stats(device);
        EXPECT_EQ(before.allocated_bytes.aggregate().current, 0) << device.str() << "\n"
                                                           << before.to_string();
        EXPECT_EQ(before.allocation.aggregate().current, 0) << device.str();
        InstructionsBuilder builder(*vm_);
        builder.empty_cache(device);
        vm_->run(builder.take());
        const DeviceStats after = stats(device);
        EXPECT_EQ(after.reserved_bytes.aggregate().current, 0) << device.str() << "\n"
                                                         << after.to_string();
        EXPECT_EQ(after.segment.aggregate().current, 0) << device.str();
      }
    }
    vm_.reset();
    EXPECT_EQ(BlobStorage::destructor_releases(), destructor_releases_at_start_)
        << "a blob was freed by its destructor instead of a ReleaseTensor";
    EXPECT_EQ(TensorStorage::failed_releases(), failed_releases_at_start_);
    LeakCheckedTest::TearDown();
  }

  virtual Options vm_options() const { return Options{}; }

 public:
  // Helpers, public so that free functions of the tests can take the fixture. Each is one
  // synchronous vm::Run.
  vm::VirtualMachine& vm() { return *vm_; }

  DeviceStats stats(Device device) {
    InstructionsBuilder builder(*vm_);
    DeviceStats out;
    builder.query_stats(device, &out);
    vm_->run(builder.take());
    return out;
  }

  std::shared_ptr<BlobObject> allocate(Device device, size_t bytes) {
    InstructionsBuilder builder(*vm_);
    auto blob = builder.allocate_blob(builder.stream(device), bytes);
    vm_->run(builder.take());
    return blob;
  }

  void release(std::shared_ptr<BlobObject> blob) {
    InstructionsBuilder builder(*vm_);
    builder.release(std::move(blob));
    vm_->run(builder.take());
  }

  void write(const std::shared_ptr<BlobObject>& blob, size_t offset,
             const std::vector<uint8_t>& data) {
    InstructionsBuilder builder(*vm_);
    builder.copy_host_to_device(data.data(), blob, offset, data.size());
    vm_->run(builder.take());
  }

  std::vector<uint8_t> read(const std::shared_ptr<BlobObject>& blob, size_t offset, size_t n) {
    std::vector<uint8_t> out(n, 0xCD);
    InstructionsBuilder builder(*vm_);
    builder.copy_device_to_host(blob, offset, out.data(), n);
    vm_->run(builder.take());
    return out;
  }

  // A one-dimensional blob of `values` (of type `dtype`) on `device`, allocated and written in one
  // list.
  template <typename T>
  std::shared_ptr<BlobObject> upload_values(Device device, const std::vector<T>& values,
                                            DType dtype) {
    InstructionsBuilder builder(*vm_);
    auto blob = builder.allocate_blob(builder.stream(device),
                                      {static_cast<int64_t>(values.size())}, dtype);
    builder.copy_host_to_device(values.data(), blob, 0, values.size() * sizeof(T));
    vm_->run(builder.take());
    return blob;
  }

  // The first `n` elements of `blob`, read as T.
  template <typename T>
  std::vector<T> download_values(const std::shared_ptr<BlobObject>& blob, size_t n) {
    std::vector<T> out(n);
    InstructionsBuilder builder(*vm_);
    builder.copy_device_to_host(blob, 0, out.data(), n * sizeof(T));
    vm_->run(builder.take());
    return out;
  }

  std::unique_ptr<vm::VirtualMachine> vm_;

 private:
  uint64_t destructor_releases_at_start_ = 0;
  uint64_t failed_releases_at_start_ = 0;
};

}  // namespace oclvm::testing
