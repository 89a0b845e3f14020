// adapters/torch/device.cc — the PrivateUse1 device guard, hooks and host
// (pinned) allocator of the "opencl" backend.
//
//   Streams     torch streams are VM streams (allocator.h): the default stream is the device's
//               compute stream, a pool of kPoolStreams user streams per device serves
//               getStreamFromGlobalPool round robin, getNewStream makes another user stream. The
//               current stream is per thread and device. OpenCL queues have no priorities: a
//               priority is accepted and has no effect.
//   GuardImpl   c10::impl::DeviceGuardImplInterface: current device per thread, the streams, and
//               events as StreamEvents (RecordEvent / WaitEvent instructions over queue
//               markers). Every operator returns after its VM sync point, so a stream is idle
//               when no operator is running on it; synchronize/query still ask the device.
//   Hooks       at::PrivateUse1HooksInterface: availability, generators (generator.h: the
//               device's random state is a CPU generator's, which the fallback hands CPU kernels),
//               getDeviceFromPtr through AddressSpace::resolve, pinned memory, storage resize.
//   HostAllocator  plain host memory for pin_memory(): PoCL shares the host's memory, and no
//               transfer needs page-locked staging (each returns after its sync point). Tracks
//               its blocks for is_pinned and keeps torch's HostStats (no cache).
//
// Thread-safety: all of them are thread-safe; the current device is per thread.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "adapters/torch/allocator.h"
#include "adapters/torch/generator.h"
#include "oclvm/storage/address_space.h"
#include "oclvm/storage/backend.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter {
namespace {

constexpr int kPoolStreams = 4;           // user streams 0..3 of each device
std::atomic<int> g_next_new_stream{kPoolStreams};  // user indices of getNewStream, all devices

// Per thread: the current torch stream id of each device (0: the default stream).
std::vector<c10::StreamId>& current_stream_ids() {
  thread_local std::vector<c10::StreamId> ids;
  if (ids.size() < static_cast<size_t>(device_count())) ids.resize(device_count(), 0);
  return ids;
}

c10::Stream pool_stream(c10::DeviceIndex index) {
  static std::vector<std::atomic<int>> next(static_cast<size_t>(device_count()));
  const int user = next[static_cast<size_t>(index)].fetch_add(1) % kPoolStreams;
  return translate_errors([&] {
    return torch_stream(adapter_vm().stream(to_oclvm(index),
                                                               vm::StreamRole::kUser, user));
  });
}

c10::Stream new_stream(c10::DeviceIndex index) {
  return translate_errors([&] {
    return torch_stream(adapter_vm().stream(
        to_oclvm(index), vm::StreamRole::kUser, g_next_new_stream.fetch_add(1)));
  });
}

// Runs an empty Barrier on each of `streams`: returns once their queues have finished.
void finish_streams(const std::vector<vm::Stream*>& streams) {
  translate_errors([&] {
    InstructionsBuilder builder(adapter_vm());
    for (vm::Stream* stream : streams) builder.barrier(*stream, [] {});
    vm::Run(builder.take());
  });
}

// The StreamEvent behind torch's opaque event handle (a heap shared_ptr made by record()).
std::shared_ptr<StreamEvent>& event_of(void* handle) {
  return *static_cast<std::shared_ptr<StreamEvent>*>(handle);
}

}  // namespace

vm::Stream& vm_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "Expected a stream of an opencl device, but got one of ", stream.device());
  check_device_index(stream.device_index());
  vm::VirtualMachine& vm = adapter_vm();
  if (stream.id() == 0) return translate_errors([&]() -> vm::Stream& {
    return vm.stream(to_oclvm(stream.device_index()));
  });
  vm::Stream* found = stream.id() > 0 ? vm.find_stream(static_cast<vm::StreamId>(stream.id() - 1))
                                      : nullptr;
  TORCH_CHECK(found != nullptr && found->device() == to_oclvm(stream.device_index()),
              "Expected a stream of ", stream.device(), ", but got stream id ", stream.id(),
              ", which names none");
  return *found;
}

c10::Stream torch_stream(const vm::Stream& stream) {
  const c10::Device device(c10::DeviceType::PrivateUse1,
                           static_cast<c10::DeviceIndex>(stream.device().index));
  if (stream.role() == vm::StreamRole::kCompute) return c10::Stream(c10::Stream::DEFAULT, device);
  return c10::Stream(c10::Stream::UNSAFE, device, static_cast<c10::StreamId>(stream.id()) + 1);
}

vm::Stream& current_vm_stream(c10::DeviceIndex index) {
  // On every allocate and copy: the index is the caller's checked one, and a current id was
  // checked by exchangeStream when it was set, so only the lookups remain.
  const c10::StreamId id = current_stream_ids()[static_cast<size_t>(index)];
  vm::VirtualMachine& vm = adapter_vm();
  if (id == 0) {
    return translate_errors([&]() -> vm::Stream& { return vm.stream(to_oclvm(index)); });
  }
  return *vm.find_stream(static_cast<vm::StreamId>(id - 1));
}

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
    const c10::DeviceIndex index = device.index() < 0 ? current_device() : device.index();
    check_device_index(index);
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, index),
                       current_stream_ids()[static_cast<size_t>(index)]);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    const c10::DeviceIndex index = device.index() < 0 ? current_device() : device.index();
    check_device_index(index);
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kType, index));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*isHighPriority*/) const override {
    const c10::DeviceIndex index = device.index() < 0 ? current_device() : device.index();
    check_device_index(index);
    return pool_stream(index);
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    const c10::DeviceIndex index = device.index() < 0 ? current_device() : device.index();
    check_device_index(index);
    return new_stream(index);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    vm_stream(stream);  // rejects a stream that does not exist
    c10::StreamId& current = current_stream_ids()[static_cast<size_t>(stream.device_index())];
    const c10::Stream previous(c10::Stream::UNSAFE, stream.device(), current);
    current = stream.id();
    return previous;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  // torch.accelerator.get_device_capability: the dtypes a device tensor can have and convert
  // from and to (the CPU's kernels compute them). Left out, as the CPU cannot convert them either:
  // the quantized types, the bit-packed containers (bits*), the sub-byte integers and float4.
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_device_index(device.index() < 0 ? current_device() : device.index());
    c10::DeviceCapability capability;
    auto& types = capability.capability_data.supported_scalar_types;
    types.has_QInt8 = types.has_QUInt8 = types.has_QInt32 = false;
    types.has_QUInt4x2 = types.has_QUInt2x4 = false;
    types.has_Bits1x8 = types.has_Bits2x4 = types.has_Bits4x2 = false;
    types.has_Bits8 = types.has_Bits16 = false;
    types.has_Float4_e2m1fn_x2 = false;
    types.has_UInt1 = types.has_UInt2 = types.has_UInt3 = types.has_UInt4 = false;
    types.has_UInt5 = types.has_UInt6 = types.has_UInt7 = false;
    types.has_Int1 = types.has_Int2 = types.has_Int3 = types.has_Int4 = false;
    types.has_Int5 = types.has_Int6 = types.has_Int7 = false;
    return capability;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    finish_streams({&vm_stream(stream)});
  }
  // Records a marker on the stream and asks the device whether it has completed. The VM finishes
  // a stream's queue at the end of every list, so this answers once the work already given to the
  // stream is done: it may wait for a list another thread is running there, and then says true.
  bool queryStream(const c10::Stream& stream) const override {
    auto probe = std::make_shared<StreamEvent>();
    translate_errors([&] {
      InstructionsBuilder builder(adapter_vm());
      builder.record_event(vm_stream(stream), probe);
      vm::Run(builder.take());
    });
    return translate_errors([&] { return probe->query(); });
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    const c10::DeviceIndex d = index < 0 ? current_device() : index;
    check_device_index(d);
    const vm::VirtualMachine& vm = adapter_vm();
    std::vector<vm::Stream*> streams;
    for (vm::StreamId id = 0; vm::Stream* stream = vm.find_stream(id); ++id) {
      if (stream->device() == to_oclvm(d)) streams.push_back(stream);
    }
    finish_streams(streams);
  }

  // Events: the handle is a heap std::shared_ptr<StreamEvent>, made by the first record.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Expected an event of ", stream.device(), ", but got one of opencl:",
                static_cast<int>(device_index));
    vm::Stream& target = vm_stream(stream);
    if (*event == nullptr) {
      *event = new std::shared_ptr<StreamEvent>(
          std::make_shared<StreamEvent>(flag == c10::EventFlag::BACKEND_DEFAULT));
    }
    const std::shared_ptr<StreamEvent> recorded = event_of(*event);
    translate_errors([&] {
      InstructionsBuilder builder(adapter_vm());
      builder.record_event(target, recorded);
      vm::Run(builder.take());
    });
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;  // never recorded: nothing to wait for
    vm::Stream& target = vm_stream(stream);
    const std::shared_ptr<StreamEvent> awaited = event_of(event);
    translate_errors([&] {
      InstructionsBuilder builder(adapter_vm());
      builder.wait_event(target, awaited);
      vm::Run(builder.take());
    });
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || translate_errors([&] { return event_of(event)->query(); });
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) translate_errors([&] { event_of(event)->synchronize(); });
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Expected two recorded events for elapsed_time, but got one never recorded");
    return translate_errors([&] { return event_of(end)->elapsed_ms_since(*event_of(start)); });
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete &event_of(event);
  }
  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    CLDeviceAllocator::instance().recordStream(data, stream);
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

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
      MutexLock lock(mutex_);
      live_[ptr] = bytes;
      for (c10::CachingAllocator::Stat* stat : {&stats_.active_requests, &stats_.allocations}) {
        stat->increase(1);
      }
      stats_.active_bytes.increase(bytes);
      stats_.allocated_bytes.increase(bytes);
      ++stats_.num_host_alloc;
    }
    return c10::DataPtr(ptr, ptr, &deleter, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &deleter; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  // Blocks are plain host memory that no device command reads after its operator returned.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}  // no cache: freed blocks go straight back to malloc
  // No cache, so active == allocated; the time stats stay 0 (malloc is not timed).
  at::HostStats get_stats() override {
    MutexLock lock(mutex_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    MutexLock lock(mutex_);
    for (c10::CachingAllocator::Stat* stat : all_stats()) stat->reset_accumulated();
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    MutexLock lock(mutex_);
    for (c10::CachingAllocator::Stat* stat : all_stats()) stat->reset_peak();
  }
  bool owns(const void* ptr) const {
    MutexLock lock(mutex_);
    return live_.count(const_cast<void*>(ptr)) != 0;
  }

 private:
  static void deleter(void* ptr) {
    if (ptr == nullptr) return;
    {
      HostAllocator& self = instance();
      MutexLock lock(self.mutex_);
      auto it = self.live_.find(ptr);
      if (it != self.live_.end()) {
        self.stats_.active_requests.decrease(1);
        self.stats_.allocations.decrease(1);
        self.stats_.active_bytes.decrease(it->second);
        self.stats_.allocated_bytes.decrease(it->second);
        ++self.stats_.num_host_free;
        self.live_.erase(it);
      }
    }
    std::free(ptr);
  }
  std::array<c10::CachingAllocator::Stat*, 4> all_stats() {
    return {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
            &stats_.allocated_bytes};
  }
  mutable Mutex mutex_;
  std::unordered_map<void*, size_t> live_ OCLVM_GUARDED_BY(mutex_);
  at::HostStats stats_ OCLVM_GUARDED_BY(mutex_);
};
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &HostAllocator::instance());

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    const c10::DeviceIndex d = index < 0 ? current_device() : index;
    check_device_index(d);
    return at::make_generator<DeviceGenerator>(d);
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
