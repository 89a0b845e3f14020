// vm/stream.h — a stream: a device, a role and an in-order queue, executed by its device's worker.
//
// Streams are created by the VirtualMachine on first use (VirtualMachine::stream) and live as
// long as it does. Every stream of a device is served by that device's one DeviceWorker, so
// instructions of one device are dispatched in submission order whatever their stream; streams
// of one device still run concurrently on the device (one in-order queue each), which is why
// cross-stream hazards need soft syncs (design/vm.md).
//
// StreamId is how the VM's records name a stream (vm/dependence.h): the stream's index in its
// VirtualMachine (VirtualMachine::find_stream turns it back into the stream).
//
// Thread-safety: immutable after construction (the queue it owns is confined to the worker for
// enqueues; see storage/queue.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "oclvm/storage/device.h"
#include "oclvm/storage/queue.h"

namespace oclvm::vm {

// A stream's id: unique within its VirtualMachine, dense from 0.
using StreamId = int32_t;
inline constexpr StreamId kNoStream = -1;  // no stream (no producer, no access recorded)

enum class StreamRole : uint8_t { kCompute, kHostToDevice, kDeviceToHost, kUser };

// "compute", "h2d", "d2h", "user".
const char* role_name(StreamRole role);

class DeviceWorker;

class Stream {
 public:
  Stream(StreamId id, StreamRole role, int user_index, std::unique_ptr<DeviceQueue> queue,
         DeviceWorker& worker);
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Unique within its VirtualMachine, dense from 0.
  StreamId id() const { return id_; }
  Device device() const { return queue_->device(); }
  StreamRole role() const { return role_; }
  // Distinguishes user streams of one device (0 for the other roles).
  int user_index() const { return user_index_; }
  // "opencl:0/compute", "opencl:1/user2".
  const std::string& name() const { return name_; }

  DeviceQueue& queue() const { return *queue_; }
  DeviceWorker& worker() const { return worker_; }

 private:
  const StreamId id_;
  const StreamRole role_;
  const int user_index_;
  const std::unique_ptr<DeviceQueue> queue_;
  DeviceWorker& worker_;
  const std::string name_;
};

}  // namespace oclvm::vm
