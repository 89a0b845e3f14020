// adapters/torch/streams.h — torch's streams and events of the opencl device: VM streams of the
// adapter's Runtime, each thread's current stream, and StreamEvents.
//
// A torch stream of device d is a VM stream of opencl:d. c10 stream id 0 is the device's compute
// stream (torch's default stream); id k > 0 names the VM stream whose StreamId is k - 1 (the
// pool's and new streams are VM user streams). A pool of kPoolStreams user streams per device
// serves getStreamFromGlobalPool round robin; getNewStream makes another user stream. OpenCL
// queues have no priorities: a priority is accepted and has no effect. Every operator runs its
// instructions on this thread's current stream of the device it writes, and returns after its VM
// sync point, so a stream is idle when no operator is running on it; synchronize and query still
// ask the device.
//
// An event is torch's opaque handle to a heap std::shared_ptr<StreamEvent>, made by its first
// record (RecordEvent / WaitEvent instructions over queue markers).
//
// guard.h exposes all of this to torch through c10::impl::DeviceGuardImplInterface.
//
// Thread-safety: every function is thread-safe; the current stream is per thread and device. An
// event handle is used as torch uses it: recorded by one thread at a time, destroyed once.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter {

// ---- Streams ----------------------------------------------------------------------------------
// The VM stream behind `stream`; throws a c10 error for another device type, an unknown id, or an
// id of another device.
vm::Stream& vm_stream(const c10::Stream& stream);
// The torch stream of a VM stream of an opencl device.
c10::Stream torch_stream(const vm::Stream& stream);
// This thread's current stream of device `index` (the default stream until set); `index` must be
// a valid device index (the caller checked it). On every allocation: no check of its own.
vm::Stream& current_vm_stream(c10::DeviceIndex index);

// The torch streams of device `index` (the current device when negative; each checks the index):
// this thread's current one, the default one, the next of the pool, a new one.
c10::Stream current_stream(c10::DeviceIndex index);
c10::Stream default_stream(c10::DeviceIndex index);
c10::Stream stream_from_pool(c10::DeviceIndex index);
c10::Stream new_stream(c10::DeviceIndex index);
// Makes `stream` this thread's current stream of its device and returns the previous one. Throws
// a c10 error, changing nothing, for a stream that does not exist.
c10::Stream exchange_stream(const c10::Stream& stream);

// Returns once every command given to `stream` has completed.
void synchronize_stream(const c10::Stream& stream);
// Records a marker on the stream and asks the device whether it has completed. The VM finishes
// a stream's queue at the end of every list, so this answers once the work already given to the
// stream is done: it may wait for a list another thread is running there, and then says true.
bool query_stream(const c10::Stream& stream);
// synchronize_stream for every stream of device `index` (the current device when negative).
void synchronize_device(c10::DeviceIndex index);

// ---- Events -----------------------------------------------------------------------------------
// Records `*event` (made here when null) on `stream`; `device_index` is -1 or the stream's.
void record_event(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                  c10::EventFlag flag);
// Makes `stream` wait for the event's last record; nothing for an event never recorded.
void block_on_event(void* event, const c10::Stream& stream);
// Whether the event's last record has completed (true for one never recorded).
bool query_event(void* event);
void synchronize_event(void* event);
// Milliseconds between two recorded events (both made with timing).
double elapsed_ms(void* start, void* end);
void destroy_event(void* event) noexcept;

}  // namespace oclvm::torch_adapter
