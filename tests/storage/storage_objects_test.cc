// tests/storage/storage_objects_test.cc — TensorStorage / BlobObject / BlobStorage
// (storage/storage_objects.h) on a real allocator of opencl:0.
//
// Covers: the no-cycle proof (weak_ptrs to all three objects expire once the last front-end owner
// is gone and the release has run); views sharing one TensorStorage release exactly once; a
// releaser that keeps the BlobObject (an instruction in flight) delays the free until it runs; the
// double-release error; releasers that throw do not escape ~TensorStorage and leak nothing; the
// destructor fallback of an unreleased BlobStorage; data round-trips through the blob's memory;
// BlobObject layout checks and helpers. Every test ends with the allocator holding nothing and no
// segment or address range leaked; the process-wide fallback counters move only where a test says.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "oclvm/storage/address_space.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/storage/system_allocator.h"
#include "tests/storage/test_util.h"

namespace oclvm {
namespace {

using namespace oclvm::testing;

class StorageObjectsTest : public testing::LeakCheckedTest {
 protected:
  void SetUp() override {
    LeakCheckedTest::SetUp();
    destructor_releases_at_start_ = BlobStorage::destructor_releases();
    failed_releases_at_start_ = TensorStorage::failed_releases();
  }

  void TearDown() override {
    testing::expect_nothing_live(allocator_);
    allocator_.check_invariants();
    EXPECT_EQ(BlobStorage::destructor_releases() - destructor_releases_at_start_,
              expected_destructor_releases_)
        << "blobs freed by their destructor instead of release()";
    EXPECT_EQ(TensorStorage::failed_releases() - failed_releases_at_start_,
              expected_failed_releases_)
        << "releasers that threw from ~TensorStorage";
    LeakCheckedTest::TearDown();
  }

  int64_t live_allocations() const { return allocator_.stats().allocation.aggregate().current; }
  int64_t allocated_bytes() const { return allocator_.stats().allocated_bytes.aggregate().current; }

  // A releaser that counts its calls and then frees directly.
  TensorStorage::Releaser counting_releaser(int* calls) {
    TensorStorage::Releaser direct = make_direct_releaser();
    return [calls, direct](std::shared_ptr<BlobObject> blob) {
      ++*calls;
      direct(std::move(blob));
    };
  }

  SystemAllocator allocator_{opencl_backend(0)};
  // Tests that exercise the fallback paths set these to what they cause.
  uint64_t expected_destructor_releases_ = 0;
  uint64_t expected_failed_releases_ = 0;

 private:
  uint64_t destructor_releases_at_start_ = 0;
  uint64_t failed_releases_at_start_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Ownership.

TEST_F(StorageObjectsTest, NoCycleEverythingExpiresAfterTheLastOwner) {
  std::shared_ptr<TensorStorage> tensor =
      allocate_tensor_storage(allocator_, {4, 8}, DType::kF32, make_direct_releaser());
  std::weak_ptr<TensorStorage> weak_tensor = tensor;
  std::weak_ptr<BlobObject> weak_blob = tensor->blob();
  std::weak_ptr<BlobStorage> weak_storage = tensor->blob()->storage();
  tensor->blob()->check_invariants();
  EXPECT_EQ(tensor->blob()->storage()->size(), 128u);
  EXPECT_EQ(live_allocations(), 1);
  EXPECT_EQ(allocated_bytes(), 512);  // SystemAllocator rounds to 512 bytes
  EXPECT_EQ(allocator_.stats().requested_bytes.aggregate().current, 128);
  // The front end holds the only references (no hidden owner, no cycle).
  EXPECT_EQ(weak_tensor.use_count(), 1);
  EXPECT_EQ(weak_blob.use_count(), 1);
  EXPECT_EQ(weak_storage.use_count(), 1);

  tensor.reset();
  EXPECT_TRUE(weak_tensor.expired());
  EXPECT_TRUE(weak_blob.expired());
  EXPECT_TRUE(weak_storage.expired());
  EXPECT_EQ(live_allocations(), 0);
  EXPECT_EQ(allocated_bytes(), 0);
  EXPECT_EQ(allocator_.stats().allocation.aggregate().freed, 1);
}

TEST_F(StorageObjectsTest, ViewsShareOneStorageAndReleaseOnceWhenTheLastDies) {
  int calls = 0;
  std::shared_ptr<TensorStorage> base =
      allocate_tensor_storage(allocator_, {1024}, DType::kF16, counting_releaser(&calls));
  std::weak_ptr<BlobStorage> weak_storage = base->blob()->storage();
  // Views (a reshape, a slice, a transpose) are further owners of the same TensorStorage.
  std::vector<std::shared_ptr<TensorStorage>> views(3, base);
  EXPECT_EQ(base.use_count(), 4);

  base.reset();
  views.pop_back();
  views.pop_back();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(live_allocations(), 1);
  EXPECT_FALSE(weak_storage.expired());

  views.clear();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(live_allocations(), 0);
  EXPECT_TRUE(weak_storage.expired());
}

// The shape of the VM's releaser: the hook receives the BlobObject by value and keeps it in an
// instruction that runs later. Until then the memory stays allocated; afterwards all is gone.
TEST_F(StorageObjectsTest, ReleaserThatDefersKeepsTheBlobUntilTheReleaseRuns) {
  std::vector<std::shared_ptr<BlobObject>> pending;  // stands in for ReleaseTensor instructions
  TensorStorage::Releaser deferred = [&pending](std::shared_ptr<BlobObject> blob) {
    pending.push_back(std::move(blob));
  };
  std::shared_ptr<TensorStorage> tensor =
      allocate_tensor_storage(allocator_, {3, 5}, DType::kI64, deferred);
  std::weak_ptr<TensorStorage> weak_tensor = tensor;
  std::weak_ptr<BlobObject> weak_blob = tensor->blob();
  std::weak_ptr<BlobStorage> weak_storage = tensor->blob()->storage();

  tensor.reset();
  EXPECT_TRUE(weak_tensor.expired());
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].use_count(), 1);  // the instruction holds the only reference
  EXPECT_FALSE(pending[0]->storage()->released());
  EXPECT_EQ(live_allocations(), 1);

  pending[0]->storage()->release();  // what the ReleaseTensor instruction does
  EXPECT_EQ(live_allocations(), 0);
  EXPECT_FALSE(weak_blob.expired());  // the instruction is still alive
  pending.clear();
  EXPECT_TRUE(weak_blob.expired());
  EXPECT_TRUE(weak_storage.expired());
}

TEST_F(StorageObjectsTest, DoubleReleaseThrowsAndChangesNothing) {
  std::shared_ptr<BlobStorage> storage = BlobStorage::allocate(allocator_, 1000);
  EXPECT_FALSE(storage->released());
  EXPECT_EQ(live_allocations(), 1);
  storage->check_invariants();
  storage->release();
  EXPECT_TRUE(storage->released());
  storage->check_invariants();
  EXPECT_EQ(live_allocations(), 0);
  const DeviceStats before = allocator_.stats();

  try {
    storage->release();
    ADD_FAILURE() << "a second release was accepted";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("Expected a live blob, but got one already released"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("1000 bytes on opencl:0"), std::string::npos) << message;
  }
  EXPECT_TRUE(storage->released());
  const DeviceStats after = allocator_.stats();
  EXPECT_EQ(after.allocation.aggregate().freed, before.allocation.aggregate().freed);
  EXPECT_EQ(after.num_device_free, before.num_device_free);
}

TEST_F(StorageObjectsTest, ReleaserErrorDoesNotEscapeTheDestructor) {
  std::shared_ptr<TensorStorage> tensor =
      allocate_tensor_storage(allocator_, {16}, DType::kU8, make_direct_releaser());
  // Someone released the blob early; the direct releaser's release() now throws InvalidArgument.
  tensor->blob()->storage()->release();
  EXPECT_EQ(live_allocations(), 0);
  EXPECT_NO_THROW(tensor.reset());
  expected_failed_releases_ = 1;
}

TEST_F(StorageObjectsTest, ThrowingReleaserLeaksNothing) {
  for (bool standard_exception : {true, false}) {
    SCOPED_TRACE(standard_exception);
    TensorStorage::Releaser throwing = [standard_exception](std::shared_ptr<BlobObject>) {
      if (standard_exception) throw std::runtime_error("the release instruction failed");
      throw 42;
    };
    std::shared_ptr<TensorStorage> tensor =
        allocate_tensor_storage(allocator_, {2, 2}, DType::kF64, throwing);
    std::weak_ptr<BlobObject> weak_blob = tensor->blob();
    std::weak_ptr<BlobStorage> weak_storage = tensor->blob()->storage();
    EXPECT_NO_THROW(tensor.reset());
    // The hook's reference died with it; the unreleased storage freed itself.
    EXPECT_TRUE(weak_blob.expired());
    EXPECT_TRUE(weak_storage.expired());
    EXPECT_EQ(live_allocations(), 0);
  }
  expected_failed_releases_ = 2;
  expected_destructor_releases_ = 2;
}

TEST_F(StorageObjectsTest, UnreleasedBlobStorageFreesItselfAndIsCounted) {
  std::shared_ptr<BlobStorage> storage = BlobStorage::allocate(allocator_, 3 << 20);
  EXPECT_EQ(allocated_bytes(), 3 << 20);
  storage.reset();
  EXPECT_EQ(allocated_bytes(), 0);
  expected_destructor_releases_ = 1;
}

TEST_F(StorageObjectsTest, ReleasedBlobStorageIsNotCountedByItsDestructor) {
  std::shared_ptr<BlobStorage> storage = BlobStorage::allocate(allocator_, 100);
  storage->release();
  storage.reset();
  EXPECT_EQ(live_allocations(), 0);
  // expected_destructor_releases_ stays 0: TearDown checks it.
}

// ---------------------------------------------------------------------------------------------
// Memory.

TEST_F(StorageObjectsTest, DataRoundTripsThroughTheBlobMemory) {
  std::shared_ptr<TensorStorage> tensor =
      allocate_tensor_storage(allocator_, {16, 16}, DType::kI32, make_direct_releaser());
  const BlobObject& blob = *tensor->blob();
  const Allocation& allocation = blob.storage()->allocation();
  ASSERT_TRUE(allocation);
  blob.check_invariants();
  EXPECT_EQ(blob.storage()->size(), 1024u);
  EXPECT_EQ(blob.storage()->device(), (Device{DeviceType::kOpenCL, 0}));
  EXPECT_EQ(&blob.storage()->allocator(), &allocator_);
  EXPECT_EQ(blob.storage()->device_address(), allocation.segment->address + allocation.offset);
  const ResolvedAddress resolved = AddressSpace::instance().resolve(blob.storage()->device_address());
  EXPECT_EQ(resolved.segment, allocation.segment);
  EXPECT_EQ(resolved.offset, allocation.offset);

  std::vector<int32_t> data(256);
  std::iota(data.begin(), data.end(), -100);
  MemoryBackend& backend = *allocation.segment->backend;
  backend.write(*allocation.segment, allocation.offset, data.data(), blob.nbytes());
  std::vector<int32_t> back(256, 0);
  backend.read(*allocation.segment, allocation.offset, back.data(), blob.nbytes());
  EXPECT_EQ(back, data);
}

TEST_F(StorageObjectsTest, ZeroElementTensorHasAnEmptyAllocation) {
  std::shared_ptr<TensorStorage> tensor =
      allocate_tensor_storage(allocator_, {0, 5}, DType::kF32, make_direct_releaser());
  const BlobStorage& storage = *tensor->blob()->storage();
  EXPECT_FALSE(storage.allocation());
  EXPECT_EQ(storage.device_address(), 0u);
  EXPECT_EQ(storage.size(), 0u);
  EXPECT_EQ(tensor->blob()->numel(), 0);
  EXPECT_EQ(live_allocations(), 0);
  // The allocator was not touched:
  EXPECT_EQ(allocator_.stats().allocation.aggregate().allocated, 0);
  std::weak_ptr<BlobStorage> weak_storage = tensor->blob()->storage();
  tensor.reset();
  EXPECT_TRUE(weak_storage.expired());
}

// ---------------------------------------------------------------------------------------------
// Bad input holds nothing and runs no releaser.

TEST_F(StorageObjectsTest, AllocateTensorStorageRejectsBadInputWithoutAllocating) {
  int calls = 0;
  EXPECT_THROW(allocate_tensor_storage(allocator_, {4, -1}, DType::kF32, counting_releaser(&calls)),
               InvalidArgument);
  EXPECT_THROW(allocate_tensor_storage(allocator_, {INT64_MAX, 2}, DType::kU8,
                                       counting_releaser(&calls)),
               InvalidArgument);
  EXPECT_THROW(allocate_tensor_storage(allocator_, {INT64_MAX / 2 + 1}, DType::kI16,
                                       counting_releaser(&calls)),
               InvalidArgument);  // numel fits, bytes do not
  EXPECT_THROW(allocate_tensor_storage(allocator_, {4}, DType::kF32, TensorStorage::Releaser()),
               InvalidArgument);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(allocator_.stats().allocation.aggregate().allocated, 0);
  EXPECT_EQ(allocator_.stats().num_ooms, 0);
}

TEST_F(StorageObjectsTest, OutOfMemoryHoldsNothingAndRunsNoReleaser) {
  SystemAllocator limited(opencl_backend(0), 1 << 20);
  int calls = 0;
  EXPECT_THROW(allocate_tensor_storage(limited, {1 << 20}, DType::kF32, counting_releaser(&calls)),
               OutOfMemoryError);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(limited.stats().num_ooms, 1);
  EXPECT_EQ(limited.stats().allocation.aggregate().allocated, 0);
  // The same allocator still serves a request that fits.
  std::shared_ptr<TensorStorage> fits =
      allocate_tensor_storage(limited, {1 << 18}, DType::kF32, counting_releaser(&calls));
  EXPECT_EQ(limited.stats().reserved_bytes.aggregate().current, 1 << 20);
  fits.reset();
  EXPECT_EQ(calls, 1);
  testing::expect_nothing_live(limited);
}

TEST_F(StorageObjectsTest, TensorStorageRejectsNullBlobAndEmptyReleaser) {
  EXPECT_THROW(TensorStorage(nullptr, make_direct_releaser()), InvalidArgument);
  auto blob = std::make_shared<BlobObject>(BlobStorage::allocate(allocator_, 64),
                                           Dims{16}, DType::kF32);
  EXPECT_THROW(TensorStorage(blob, TensorStorage::Releaser()), InvalidArgument);
  EXPECT_FALSE(blob->storage()->released());  // a rejected construction released nothing
  blob->storage()->release();
}

TEST_F(StorageObjectsTest, BlobStorageRejectsAnotherDevicesAllocation) {
  SystemAllocator host_allocator(host_backend());
  const Allocation foreign = host_allocator.allocate(256);
  try {
    BlobStorage storage(allocator_, foreign);
    ADD_FAILURE() << "an allocation of cpu was wrapped with the opencl:0 allocator";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Expected an allocation made by the system allocator of "
                                         "opencl:0"),
              std::string::npos)
        << e.what();
  }
  host_allocator.deallocate(foreign);
  testing::expect_nothing_live(host_allocator);
}

// ---------------------------------------------------------------------------------------------
// BlobObject layout.

TEST(DTypeTest, SizesAndNames) {
  const std::vector<std::pair<DType, size_t>> sizes = {
      {DType::kF32, 4}, {DType::kF16, 2}, {DType::kBF16, 2}, {DType::kF64, 8}, {DType::kI8, 1},
      {DType::kU8, 1},  {DType::kI16, 2}, {DType::kI32, 4},  {DType::kI64, 8}, {DType::kBool, 1}};
  for (auto [dtype, size] : sizes) EXPECT_EQ(dtype_size(dtype), size) << dtype_name(dtype);
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_STREQ(dtype_name(DType::kBool), "bool");
  EXPECT_STREQ(dtype_name(DType::kI64), "i64");
}

TEST(ContiguousStridesTest, RowMajor) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Dims{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({5}), (Dims{1}));
  EXPECT_EQ(contiguous_strides({}), (Dims{}));
  EXPECT_EQ(contiguous_strides({3, 1, 2}), (Dims{2, 2, 1}));
}

TEST_F(StorageObjectsTest, BlobObjectLayoutHelpers) {
  std::shared_ptr<BlobStorage> storage = BlobStorage::allocate(allocator_, 24 * 4);

  const BlobObject contiguous(storage, {2, 3, 4}, DType::kF32);
  EXPECT_EQ(contiguous.stride(), (Dims{12, 4, 1}));
  EXPECT_EQ(contiguous.numel(), 24);
  EXPECT_EQ(contiguous.nbytes(), 96);
  EXPECT_EQ(contiguous.storage_offset(), 0);
  EXPECT_EQ(contiguous.dtype(), DType::kF32);
  EXPECT_TRUE(contiguous.is_contiguous());
  EXPECT_EQ(contiguous.extension().find<int>(), nullptr) << "nothing kept for a layer above yet";

  const BlobObject transposed(storage, {4, 3, 2}, DType::kF32, {1, 4, 12});
  EXPECT_EQ(transposed.numel(), 24);
  EXPECT_FALSE(transposed.is_contiguous());

  // Seen as a 2x12 matrix: row 1 alone (offset 12) is contiguous; every other column is not.
  const BlobObject row(storage, {1, 12}, DType::kF32, {12, 1}, 12);
  EXPECT_TRUE(row.is_contiguous());
  EXPECT_EQ(row.nbytes(), 48);
  const BlobObject strided(storage, {2, 6}, DType::kF32, {12, 2}, 0);
  EXPECT_FALSE(strided.is_contiguous());

  // Size-1 dimensions may have any stride; an empty tensor is contiguous.
  const BlobObject ones(storage, {1, 24, 1}, DType::kF32, {999, 1, 7});
  EXPECT_TRUE(ones.is_contiguous());
  const BlobObject empty(storage, {3, 0}, DType::kF32, {5, 5});
  EXPECT_TRUE(empty.is_contiguous());
  EXPECT_EQ(empty.nbytes(), 0);
  const BlobObject scalar(storage, {}, DType::kF64, {}, 11);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.nbytes(), 8);
  EXPECT_TRUE(scalar.is_contiguous());

  // Byte views of the same storage reinterpret it.
  const BlobObject bytes(storage, {96}, DType::kU8, {}, 0);
  EXPECT_EQ(bytes.nbytes(), 96);

  for (const BlobObject* blob :
       {&contiguous, &transposed, &row, &strided, &ones, &empty, &scalar, &bytes}) {
    blob->check_invariants();
  }

  storage->release();
}

TEST_F(StorageObjectsTest, BlobObjectRejectsBadLayouts) {
  std::shared_ptr<BlobStorage> storage = BlobStorage::allocate(allocator_, 24 * 4);
  using Shape = Dims;
  auto expect_rejected = [&](Shape shape, DType dtype, Shape stride, int64_t offset,
                             const std::string& expected) {
    try {
      BlobObject blob(storage, shape, dtype, stride, offset);
      ADD_FAILURE() << "accepted a bad layout; expected: " << expected;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  expect_rejected({2, -3}, DType::kF32, {}, 0, "Expected a shape of non-negative sizes");
  expect_rejected({2, 3}, DType::kF32, {3}, 0, "Expected 2 strides for shape [2, 3]");
  expect_rejected({2, 3}, DType::kF32, {3, -1}, 0, "Expected non-negative strides");
  expect_rejected({2, 3}, DType::kF32, {3, 1}, -1, "Expected a non-negative storage offset");
  // One element too many: 25 floats in a 96-byte storage.
  expect_rejected({25}, DType::kF32, {1}, 0, "Expected a layout within the 96-byte storage");
  expect_rejected({24}, DType::kF32, {1}, 1, "(100 bytes)");
  expect_rejected({2, 12}, DType::kF32, {13, 1}, 0, "(100 bytes)");
  expect_rejected({12}, DType::kF64, {1}, 1, "(104 bytes)");
  expect_rejected({2}, DType::kF32, {INT64_MAX}, 0, "overflows 64 bits");
  expect_rejected({INT64_MAX, INT64_MAX}, DType::kU8, {}, 0, "fits in 64 bits");
  // The exact fit is accepted.
  EXPECT_NO_THROW(BlobObject(storage, {23}, DType::kF32, {1}, 1));
  EXPECT_NO_THROW(BlobObject(storage, {12}, DType::kF64, {1}, 0));

  EXPECT_THROW(BlobObject(nullptr, {1}, DType::kF32), InvalidArgument);
  storage->release();
  try {
    BlobObject blob(storage, {1}, DType::kF32);
    ADD_FAILURE() << "a blob object was built over a released storage";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Expected a live blob, but got one already released"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace oclvm
