// adapters/torch/device.cc — the PrivateUse1 device guard, hooks, default generators and host
// (pinned) allocator of the "opencl" backend.
//
//   GuardImpl   c10::impl::DeviceGuardImplInterface: current device per thread, one default
//               stream per device (every operator of this slice runs synchronously through the
//               VM, so stream synchronization has nothing left to wait for).
//   Hooks       at::PrivateUse1HooksInterface: availability, generators (CPU generators tagged
//               with the opencl device: random ops run on the host through the fallback),
//               getDeviceFromPtr through AddressSpace::resolve, pinned memory, storage resize.
//   HostAllocator  plain host memory for pin_memory(): PoCL shares the host's memory, and no
//               transfer of this slice needs page-locked staging. Tracks its blocks for is_pinned.
//
// Thread-safety: all of them are thread-safe; the current device is per thread.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "adapters/torch/allocator.h"
#include "storage/address_space.h"
#include "storage/backend.h"

namespace oclvm::torch_adapter {

// Grows or shrinks a storage: a new block, a device-to-device copy of the common prefix, then the
// storage takes the new block (the old one is released when its DataPtr dies). Used by resize_ and
// UntypedStorage.resize_.
void resize_storage_bytes(const c10::Storage& storage, size_t bytes) {
  TORCH_CHECK(storage.resizable(), "Expected a resizable storage, but got one that is not");
  const size_t old_bytes = storage.nbytes();
  if (bytes == old_bytes) return;
  c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = CLDeviceAllocator::instance().allocate(bytes);
  const size_t common = std::min(old_bytes, bytes);
  if (common != 0) CLDeviceAllocator::instance().copy_data(fresh.get(), storage.data(), common);
  auto& mutable_storage = const_cast<c10::Storage&>(storage);
  mutable_storage.set_data_ptr_noswap(std::move(fresh));
  mutable_storage.set_nbytes(bytes);
}

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

class GuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device old = getDevice();
    if (device.index() != current_device()) setDevice(device);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, current_device()); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kType, "Expected an opencl device, but got ", device);
    set_current_device(device.index() < 0 ? 0 : device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < device_count()) set_current_device(device.index());
  }
  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  // Every operation of this slice returns after its VM sync point: nothing is in flight.
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void synchronizeStream(const c10::Stream&) const override {}
  bool queryStream(const c10::Stream&) const override { return true; }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

class Generator final : public at::CPUGeneratorImpl {
 public:
  explicit Generator(c10::DeviceIndex index) {
    device_ = c10::Device(kType, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
};

class HostAllocator final : public at::HostAllocator {
 public:
  static HostAllocator& instance() {
    static HostAllocator* allocator = new HostAllocator();  // never destroyed
    return *allocator;
  }
  c10::DataPtr allocate(size_t bytes) override {
    void* ptr = bytes != 0 ? std::malloc(bytes) : nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, bytes == 0 || ptr != nullptr,
                     "Out of host memory: could not pin ", bytes, " bytes");
    if (ptr != nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      live_[ptr] = bytes;
    }
    return c10::DataPtr(ptr, ptr, &deleter, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &deleter; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
  bool owns(const void* ptr) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(const_cast<void*>(ptr)) != 0;
  }

 private:
  static void deleter(void* ptr) {
    if (ptr == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(instance().mutex_);
      instance().live_.erase(ptr);
    }
    std::free(ptr);
  }
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;  // GUARDED_BY(mutex_)
};
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &HostAllocator::instance());

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    static const std::vector<at::Generator> generators = [] {
      std::vector<at::Generator> all;
      for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
        all.push_back(at::make_generator<Generator>(d));
      }
      return all;
    }();
    const c10::DeviceIndex d = index < 0 ? current_device() : index;
    check_device_index(d);
    return generators[static_cast<size_t>(d)];
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    const c10::DeviceIndex d = index < 0 ? current_device() : index;
    check_device_index(d);
    return at::make_generator<Generator>(d);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    const ResolvedAddress where = AddressSpace::instance().resolve(reinterpret_cast<uintptr_t>(data));
    TORCH_CHECK(where.segment != nullptr && where.segment->backend != nullptr &&
                    where.segment->backend->device().type == DeviceType::kOpenCL,
                "Expected an address of opencl memory, but got ", data);
    return at::Device(kType, where.segment->backend->device().index);
  }
  bool isPinnedPtr(const void* data) const override { return HostAllocator::instance().owns(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &HostAllocator::instance(); }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < device_count();
  }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = current_device();
    set_current_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const override {
    resize_storage_bytes(storage, bytes);
  }
};

const bool hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}();

}  // namespace
}  // namespace oclvm::torch_adapter
