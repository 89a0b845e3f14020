// adapters/torch/trace_recorder.cc — TraceRecorder: one line per allocation and release.
#include "adapters/torch/trace_recorder.h"

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <new>

#include "oclvm/storage/errors.h"

namespace oclvm::torch_adapter {

TraceRecorder& TraceRecorder::instance() {
  static TraceRecorder* recorder = new TraceRecorder();  // never destroyed: releases run at exit
  return *recorder;
}

void TraceRecorder::start(const std::string& path, int device) {
  MutexLock lock(mutex_);
  if (file_ != nullptr) {
    throw Error("Expected one allocation trace at a time, but '" + path_ +
                "' is being recorded");
  }
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    throw Error("Expected to write an allocation trace to '" + path + "', but opening it failed (" +
                std::strerror(errno) + ")");
  }
  file_ = file;
  path_ = path;
  device_ = device;
  next_id_ = 1;
  events_ = 0;
  write_failed_ = false;
  live_.clear();
  write_line("# oclvm-trace v1\n# recorded by torch.opencl.memory.record_trace on opencl:%d\n",
             device);
  active_.store(true);
}

uint64_t TraceRecorder::stop() {
  MutexLock lock(mutex_);
  if (file_ == nullptr) throw Error("Expected a running allocation trace to stop, but got none");
  active_.store(false);
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  live_.clear();
  if (write_failed_ || !closed) {
    throw Error("Expected to write the allocation trace '" + path_ +
                "', but writing it failed; the file is incomplete");
  }
  return events_;
}

void TraceRecorder::record_allocate(const void* block, size_t bytes, int device) {
  MutexLock lock(mutex_);
  if (file_ == nullptr || device != device_) return;
  const uint64_t id = next_id_++;
  try {
    live_[block] = id;
  } catch (const std::bad_alloc&) {
    write_failed_ = true;  // the trace cannot be kept whole; the allocation itself goes on
    return;
  }
  write_line("a %llu %zu\n", static_cast<unsigned long long>(id), bytes);
}

void TraceRecorder::record_release(const void* block) {
  MutexLock lock(mutex_);
  if (file_ == nullptr) return;
  const auto it = live_.find(block);
  if (it == live_.end()) return;  // allocated before the recording began, or on another device
  write_line("f %llu\n", static_cast<unsigned long long>(it->second));
  live_.erase(it);
}

void TraceRecorder::write_line(const char* format, ...) {
  if (write_failed_) return;
  va_list args;
  va_start(args, format);
  const int written = std::vfprintf(file_, format, args);
  va_end(args);
  if (written < 0) {
    write_failed_ = true;
    return;
  }
  if (format[0] != '#') ++events_;
}

}  // namespace oclvm::torch_adapter
