// adapters/torch/streams.cc — torch streams as VM streams of the adapter's Runtime, each thread's
// current stream, and events as StreamEvents (streams.h).
#include "adapters/torch/streams.h"

#include <atomic>
#include <limits>
#include <memory>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/native_launches.h"
#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/hot_thread_local.h"

namespace oclvm::torch_adapter {
namespace {

constexpr int kPoolStreams = 4;                    // user streams 0..3 of each device
std::atomic<int> g_next_new_stream{kPoolStreams};  // user indices of getNewStream, all devices

// Per thread: the current torch stream id of each device (0: the default stream), for every
// index a c10::DeviceIndex can hold. The array is made when the thread first makes a stream other
// than the default current, and freed at its exit by a StreamIdsReaper; until then the pointer is
// null and every device's current stream is its default. The thread-local itself is one pointer,
// initial-exec (storage/hot_thread_local.h): read on every allocation, it costs one load and no
// __tls_get_addr call, and it keeps the module's static TLS small (the array is 1 KiB). A
// thread_local destructor that runs after the reaper and makes a non-default stream current gets
// an array that is never freed (t_stream_ids_reaped keeps the reaper from being made twice).
constexpr size_t kMaxDeviceIndices = size_t{std::numeric_limits<c10::DeviceIndex>::max()} + 1;
OCLVM_HOT_TLS thread_local c10::StreamId* t_current_stream_ids = nullptr;
thread_local bool t_stream_ids_reaped = false;

struct StreamIdsReaper {
  ~StreamIdsReaper() {
    delete[] t_current_stream_ids;
    t_current_stream_ids = nullptr;
    t_stream_ids_reaped = true;
  }
};

// Callers pass an already checked device index.
c10::StreamId current_stream_id(c10::DeviceIndex index) {
  OCLVM_DCHECK(index >= 0);
  const c10::StreamId* ids = t_current_stream_ids;
  return ids == nullptr ? 0 : ids[static_cast<size_t>(index)];
}

void set_current_stream_id(c10::DeviceIndex index, c10::StreamId id) {
  OCLVM_DCHECK(index >= 0);
  if (t_current_stream_ids == nullptr) {
    if (id == 0) return;  // already the default
    t_current_stream_ids = new c10::StreamId[kMaxDeviceIndices]();
    if (!t_stream_ids_reaped) {
      static thread_local StreamIdsReaper reaper;  // registers the thread-exit cleanup
      (void)&reaper;
    }
  }
  t_current_stream_ids[static_cast<size_t>(index)] = id;
}

// Each device's default (compute) stream, looked up once: the Runtime is never destroyed and its
// VM keeps every stream it made, after shutdown too, so a pointer stays valid for the process.
// Any thread may fill a slot; two that race store the same pointer.
std::atomic<vm::Stream*> g_default_streams[kMaxDeviceIndices] = {};

// The compute stream of device `index` (checked by the caller), from g_default_streams.
vm::Stream& default_vm_stream(c10::DeviceIndex index) {
  std::atomic<vm::Stream*>& cached = g_default_streams[static_cast<size_t>(index)];
  if (vm::Stream* stream = cached.load(std::memory_order_acquire)) return *stream;
  vm::Stream& stream =
      translate_errors([&]() -> vm::Stream& { return runtime().stream(to_oclvm(index)); });
  cached.store(&stream, std::memory_order_release);
  return stream;
}

// Runs an empty Barrier on each of `streams`: returns once their queues have finished.
void finish_streams(const std::vector<vm::Stream*>& streams) {
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    for (vm::Stream* stream : streams) builder.barrier(*stream, [] {});
    runtime().run(builder.take());
  });
}

// Runs a RecordEvent of `event` on `stream`, as one list.
void run_record(vm::Stream& stream, const std::shared_ptr<StreamEvent>& event) {
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    builder.record_event(stream, event);
    runtime().run(builder.take());
  });
}

// The StreamEvent behind torch's opaque event handle (a heap shared_ptr made by record_event()).
std::shared_ptr<StreamEvent>& event_of(void* handle) {
  return *static_cast<std::shared_ptr<StreamEvent>*>(handle);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Streams

vm::Stream& vm_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "Expected a stream of an opencl device, but got one of ", stream.device());
  check_device_index(stream.device_index());
  if (stream.id() == 0) return default_vm_stream(stream.device_index());
  vm::Stream* found = stream.id() > 0
                          ? runtime().find_stream(static_cast<vm::StreamId>(stream.id() - 1))
                          : nullptr;
  TORCH_CHECK(found != nullptr && found->device() == to_oclvm(stream.device_index()),
              "Expected a stream of ", stream.device(), ", but got stream id ", stream.id(),
              ", which names none");
  return *found;
}

vm::Stream& current_vm_stream(c10::DeviceIndex index) {
  // On every allocate and copy: the index is the caller's checked one, and a current id was
  // checked by exchange_stream when it was set, so only the lookups remain.
  const c10::StreamId id = current_stream_id(index);
  if (id != 0) return *runtime().find_stream(static_cast<vm::StreamId>(id - 1));
  return default_vm_stream(index);
}

c10::Stream torch_stream(const vm::Stream& stream) {
  const c10::Device device(c10::DeviceType::PrivateUse1,
                           static_cast<c10::DeviceIndex>(stream.device().index));
  if (stream.role() == vm::StreamRole::kCompute) return c10::Stream(c10::Stream::DEFAULT, device);
  return c10::Stream(c10::Stream::UNSAFE, device, static_cast<c10::StreamId>(stream.id()) + 1);
}

c10::Stream current_stream(c10::DeviceIndex index) {
  const c10::DeviceIndex d = checked_index(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, d),
                     current_stream_id(d));
}

c10::Stream default_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::DEFAULT,
                     c10::Device(c10::DeviceType::PrivateUse1, checked_index(index)));
}

c10::Stream stream_from_pool(c10::DeviceIndex index) {
  const c10::DeviceIndex d = checked_index(index);
  static std::vector<std::atomic<int>> next(static_cast<size_t>(device_count()));
  const int user = next[static_cast<size_t>(d)].fetch_add(1) % kPoolStreams;
  return translate_errors([&] {
    return torch_stream(runtime().stream(to_oclvm(d), vm::StreamRole::kUser, user));
  });
}

c10::Stream new_stream(c10::DeviceIndex index) {
  const c10::DeviceIndex d = checked_index(index);
  return translate_errors([&] {
    return torch_stream(
        runtime().stream(to_oclvm(d), vm::StreamRole::kUser, g_next_new_stream.fetch_add(1)));
  });
}

c10::Stream exchange_stream(const c10::Stream& stream) {
  vm_stream(stream);  // rejects a stream that does not exist
  const c10::Stream previous(c10::Stream::UNSAFE, stream.device(),
                             current_stream_id(stream.device_index()));
  set_current_stream_id(stream.device_index(), stream.id());
  return previous;
}

// Synchronizing also reports what the native path's lists failed at since the last sync point
// (Note [Launches that do not wait] in native_launches.cc).
void synchronize_stream(const c10::Stream& stream) {
  finish_streams({&vm_stream(stream)});
  wait_native_launches(stream.device_index());
}

bool query_stream(const c10::Stream& stream) {
  auto probe = std::make_shared<StreamEvent>();
  run_record(vm_stream(stream), probe);
  return translate_errors([&] { return probe->query(); });
}

void synchronize_device(c10::DeviceIndex index) {
  const c10::DeviceIndex d = checked_index(index);
  const Runtime& rt = runtime();
  std::vector<vm::Stream*> streams;
  for (vm::StreamId id = 0; vm::Stream* stream = rt.find_stream(id); ++id) {
    if (stream->device() == to_oclvm(d)) streams.push_back(stream);
  }
  finish_streams(streams);
  wait_native_launches(d);
}

// ---------------------------------------------------------------------------------------------
// Events

void record_event(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                  c10::EventFlag flag) {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
              "Expected an event of ", stream.device(), ", but got one of opencl:",
              static_cast<int>(device_index));
  vm::Stream& target = vm_stream(stream);
  if (*event == nullptr) {
    *event = new std::shared_ptr<StreamEvent>(
        std::make_shared<StreamEvent>(flag == c10::EventFlag::BACKEND_DEFAULT));
  }
  const std::shared_ptr<StreamEvent> recorded = event_of(*event);
  run_record(target, recorded);
}

void block_on_event(void* event, const c10::Stream& stream) {
  if (event == nullptr) return;  // never recorded: nothing to wait for
  vm::Stream& target = vm_stream(stream);
  const std::shared_ptr<StreamEvent> awaited = event_of(event);
  translate_errors([&] {
    InstructionsBuilder builder = runtime().builder();
    builder.wait_event(target, awaited);
    runtime().run(builder.take());
  });
}

bool query_event(void* event) {
  return event == nullptr || translate_errors([&] { return event_of(event)->query(); });
}

void synchronize_event(void* event) {
  if (event != nullptr) translate_errors([&] { event_of(event)->synchronize(); });
}

double elapsed_ms(void* start, void* end) {
  TORCH_CHECK(start != nullptr && end != nullptr,
              "Expected two recorded events for elapsed_time, but got one never recorded");
  return translate_errors([&] { return event_of(end)->elapsed_ms_since(*event_of(start)); });
}

void destroy_event(void* event) noexcept { delete &event_of(event); }

}  // namespace oclvm::torch_adapter
