// vm/stream.cc — stream names and roles.
#include "oclvm/vm/stream.h"

namespace oclvm::vm {

const char* role_name(StreamRole role) {
  switch (role) {
    case StreamRole::kCompute: return "compute";
    case StreamRole::kHostToDevice: return "h2d";
    case StreamRole::kDeviceToHost: return "d2h";
    case StreamRole::kUser: return "user";
  }
  return "unknown";
}

namespace {

std::string stream_name(Device device, StreamRole role, int user_index) {
  std::string name = device.str() + "/" + role_name(role);
  if (role == StreamRole::kUser) name += std::to_string(user_index);
  return name;
}

}  // namespace

Stream::Stream(StreamId id, StreamRole role, int user_index, std::unique_ptr<DeviceQueue> queue,
               DeviceWorker& worker)
    : id_(id),
      role_(role),
      user_index_(user_index),
      queue_(std::move(queue)),
      worker_(worker),
      name_(stream_name(queue_->device(), role, user_index)) {}

}  // namespace oclvm::vm
