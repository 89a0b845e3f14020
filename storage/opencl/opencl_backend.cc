// storage/opencl/opencl_backend.cc — OpenCL segments, transfers and device discovery.
#include "oclvm/storage/opencl/opencl_backend.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"
#include "oclvm/storage/opencl/cl_check.h"
#include "oclvm/storage/opencl/opencl_devices.h"

namespace oclvm::opencl {

OpenCLBackend::OpenCLBackend(Device device, DeviceProperties properties, cl::Device cl_device,
                             cl::Context context, cl::CommandQueue queue)
    : MemoryBackend(device, std::move(properties)),
      cl_device_(std::move(cl_device)),
      context_(std::move(context)),
      where_(device.str()),
      queue_(std::move(queue)) {}

namespace {

// Frees a segment's SVM memory once the driver deletes its buffer (Note [Host-addressable
// segments]): after the last command using the buffer has completed.
struct SvmRelease {
  cl_context context;
  void* memory;
};

void CL_CALLBACK free_svm(cl_mem, void* user_data) {
  auto* release = static_cast<SvmRelease*>(user_data);
  clSVMFree(release->context, release->memory);
  clReleaseContext(release->context);
  delete release;
}

}  // namespace

void* OpenCLBackend::do_create(size_t bytes) {
  cl_int err = CL_SUCCESS;
  void* svm = nullptr;
  cl::Buffer buffer;
  if (properties().host_addressable) {
    // Note [Host-addressable segments]
    // The release record first: nothing below may throw between clSVMAlloc and the callback.
    auto release = std::make_unique<SvmRelease>(SvmRelease{context_(), nullptr});
    svm = clSVMAlloc(context_(), CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER, bytes, 0);
    if (svm == nullptr) {
      throw OutOfMemoryError("Out of memory on " + where_ + ": clSVMAlloc refused " +
                             std::to_string(bytes) + " bytes");
    }
    release->memory = svm;
    cl_mem handle = clCreateBuffer(context_(), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes,
                                   svm, &err);
    if (err == CL_SUCCESS) {
      clRetainContext(release->context);
      err = clSetMemObjectDestructorCallback(handle, free_svm, release.get());
      if (err == CL_SUCCESS) {
        release.release();  // the callback owns it now
      } else {
        clReleaseContext(release->context);
      }
    }
    if (err != CL_SUCCESS) {
      if (handle != nullptr) clReleaseMemObject(handle);  // released before its memory
      clSVMFree(context_(), svm);
      check_cl(err, "clCreateBuffer(CL_MEM_USE_HOST_PTR over SVM)", where_);
    }
    buffer = cl::Buffer(handle);  // takes the reference clCreateBuffer gave
  } else {
    buffer = cl::Buffer(context_, CL_MEM_READ_WRITE, bytes, nullptr, &err);
    check_cl(err, "clCreateBuffer", where_);
  }
  // Force the lazy driver to allocate now (see the file comment of opencl_backend.h).
  std::vector<cl::Memory> objects{buffer};
  check_cl(queue_.enqueueMigrateMemObjects(objects, CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED),
           "clEnqueueMigrateMemObjects", where_);
  check_cl(queue_.finish(), "clFinish", where_);
  return new CLAllocation{std::move(buffer), device().index, bytes, svm};
}

bool OpenCLBackend::do_release(void* native, size_t) noexcept {
  auto* allocation = static_cast<CLAllocation*>(native);
  // The buffer may still be used by enqueued commands; clReleaseMemObject is deferred by the
  // driver until they complete, so releasing here is safe. cl::Buffer's destructor ignores the
  // result of its release, so take a reference of our own first and drop it with a checked call.
  cl_mem handle = allocation->buffer();
  cl_int err = clRetainMemObject(handle);
  delete allocation;
  if (err == CL_SUCCESS) err = clReleaseMemObject(handle);
  if (err != CL_SUCCESS) {
    log_message(LogLevel::kError, "%s", describe_cl_error(err, "clReleaseMemObject", where_).c_str());
    return false;
  }
  return true;
}

void OpenCLBackend::do_write(void* native, size_t offset, const void* src, size_t n) {
  auto& allocation = *static_cast<CLAllocation*>(native);
  check_cl(queue_.enqueueWriteBuffer(allocation.buffer, CL_TRUE, offset, n, src),
           "clEnqueueWriteBuffer", where_);
}

void OpenCLBackend::do_read(void* native, size_t offset, void* dst, size_t n) {
  auto& allocation = *static_cast<CLAllocation*>(native);
  check_cl(queue_.enqueueReadBuffer(allocation.buffer, CL_TRUE, offset, n, dst),
           "clEnqueueReadBuffer", where_);
}

void OpenCLBackend::do_fill(void* native, size_t offset, uint8_t value, size_t n) {
  auto& allocation = *static_cast<CLAllocation*>(native);
  const cl_uchar pattern = value;
  check_cl(queue_.enqueueFillBuffer(allocation.buffer, pattern, offset, n), "clEnqueueFillBuffer",
           where_);
  check_cl(queue_.finish(), "clFinish", where_);
}

void OpenCLBackend::do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset,
                            size_t n) {
  auto& from = *static_cast<CLAllocation*>(src);
  auto& to = *static_cast<CLAllocation*>(dst);
  check_cl(queue_.enqueueCopyBuffer(from.buffer, to.buffer, src_offset, dst_offset, n),
           "clEnqueueCopyBuffer", where_);
  check_cl(queue_.finish(), "clFinish", where_);
}

std::unique_ptr<DeviceQueue> OpenCLBackend::create_queue() {
  cl_int err = CL_SUCCESS;
  cl::CommandQueue queue(context_, cl_device_, cl::QueueProperties::None, &err);  // in order
  check_cl(err, "clCreateCommandQueue", where_);
  return std::make_unique<OpenCLQueue>(*this, std::move(queue));
}

// ---------------------------------------------------------------------------------------------
// Queues.

namespace {

class OpenCLMarker final : public QueueMarker {
 public:
  OpenCLMarker(Device device, cl::Event event, cl::CommandQueue queue, std::string where)
      : QueueMarker(device),
        event_(std::move(event)),
        queue_(std::move(queue)),
        where_(std::move(where)) {}
  void wait() override { check_cl(event_.wait(), "clWaitForEvents", where_); }
  bool complete() override {
    cl_int status = CL_QUEUED;
    check_cl(event_.getInfo(CL_EVENT_COMMAND_EXECUTION_STATUS, &status), "clGetEventInfo", where_);
    // A negative status is the error of a command the marker waited for.
    if (status < 0) check_cl(status, "a command before the marker", where_);
    return status == CL_COMPLETE;
  }
  const cl::Event& event() const { return event_; }
  // The queue it was recorded on (retained: a marker may be waited for after its stream is gone).
  cl_command_queue queue() const { return queue_(); }

 private:
  cl::Event event_;
  cl::CommandQueue queue_;
  std::string where_;
};

CLAllocation& cl_allocation(void* native) { return *static_cast<CLAllocation*>(native); }

}  // namespace

OpenCLQueue::OpenCLQueue(OpenCLBackend& backend, cl::CommandQueue queue)
    : DeviceQueue(backend), where_(backend.device().str()), queue_(std::move(queue)) {}

std::shared_ptr<QueueMarker> OpenCLQueue::record_marker() {
  cl::Event event;
  check_cl(queue_.enqueueMarkerWithWaitList(nullptr, &event), "clEnqueueMarkerWithWaitList",
           where_);
  count_command();  // a later finish must cover the marker itself: a query expects it complete
  check_cl(queue_.flush(), "clFlush", where_);
  return std::make_shared<OpenCLMarker>(device(), std::move(event), queue_, where_);
}

void OpenCLQueue::wait_marker(const std::shared_ptr<QueueMarker>& marker) {
  if (marker->device() != device()) {
    marker->wait();  // another device has another context: wait on the host
    return;
  }
  // Same device, so the marker is an OpenCLMarker of this backend's context.
  const auto& recorded = static_cast<const OpenCLMarker&>(*marker);
  if (recorded.queue() != queue_()) {
    // A command may wait for an event of another queue only once that queue has been flushed;
    // until then the marker may never reach the device, and neither does this queue's work.
    // clFlush is thread-safe on any queue.
    check_cl(clFlush(recorded.queue()), "clFlush", where_);
  }
  std::vector<cl::Event> wait_list{recorded.event()};
  check_cl(queue_.enqueueBarrierWithWaitList(&wait_list, nullptr), "clEnqueueBarrierWithWaitList",
           where_);
  count_command();  // later finishes must not skip past the wait
}

void* OpenCLBackend::native_memory(const Segment& segment) const {
  return cl_allocation(segment.native).buffer();
}

void OpenCLQueue::do_finish() { check_cl(queue_.finish(), "clFinish", where_); }

void OpenCLQueue::do_write(void* native, size_t offset, const void* src, size_t n, bool blocking) {
  check_cl(queue_.enqueueWriteBuffer(cl_allocation(native).buffer, blocking ? CL_TRUE : CL_FALSE,
                                     offset, n, src),
           "clEnqueueWriteBuffer", where_);
}

void OpenCLQueue::do_read(void* native, size_t offset, void* dst, size_t n, bool blocking) {
  check_cl(queue_.enqueueReadBuffer(cl_allocation(native).buffer, blocking ? CL_TRUE : CL_FALSE,
                                    offset, n, dst),
           "clEnqueueReadBuffer", where_);
}

void OpenCLQueue::do_fill(void* native, size_t offset, const void* pattern, size_t pattern_size,
                          size_t n) {
  check_cl(clEnqueueFillBuffer(queue_(), cl_allocation(native).buffer(), pattern, pattern_size,
                               offset, n, 0, nullptr, nullptr),
           "clEnqueueFillBuffer", where_);
}

void OpenCLQueue::do_copy(void* src, size_t src_offset, void* dst, size_t dst_offset, size_t n) {
  check_cl(queue_.enqueueCopyBuffer(cl_allocation(src).buffer, cl_allocation(dst).buffer,
                                    src_offset, dst_offset, n),
           "clEnqueueCopyBuffer", where_);
}

void* OpenCLQueue::do_map(void* native, size_t offset, size_t n, bool for_write) {
  cl_int err = CL_SUCCESS;
  void* host = queue_.enqueueMapBuffer(cl_allocation(native).buffer, CL_TRUE,
                                       for_write ? (CL_MAP_READ | CL_MAP_WRITE) : CL_MAP_READ,
                                       offset, n, nullptr, nullptr, &err);
  check_cl(err, "clEnqueueMapBuffer", where_);
  return host;
}

void OpenCLQueue::do_unmap(void* native, void* host) {
  check_cl(queue_.enqueueUnmapMemObject(cl_allocation(native).buffer, host), "clEnqueueUnmapMemObject",
           where_);
}

// ---------------------------------------------------------------------------------------------
// Discovery.

namespace {

template <cl_int Name, typename T>
T device_info(const cl::Device& device, const std::string& where, const char* what) {
  T value{};
  check_cl(device.getInfo(Name, &value), what, where);
  return value;
}

std::string platform_name(const cl::Platform& platform) {
  std::string name;
  check_cl(platform.getInfo(CL_PLATFORM_NAME, &name), "clGetPlatformInfo(CL_PLATFORM_NAME)",
           "platform discovery");
  // getInfo keeps the C string's terminator in some CLHPP versions.
  while (!name.empty() && name.back() == '\0') name.pop_back();
  return name;
}

std::vector<cl::Device> platform_devices(const cl::Platform& platform) {
  std::vector<cl::Device> devices;
  cl_int err = platform.getDevices(CL_DEVICE_TYPE_ALL, &devices);
  if (err == CL_DEVICE_NOT_FOUND) return {};
  check_cl(err, "clGetDeviceIDs", "platform " + platform_name(platform));
  return devices;
}

std::unique_ptr<MemoryBackend> make_backend(const cl::Platform& platform, const cl::Device& device,
                                            DeviceIndex index) {
  const Device id{DeviceType::kOpenCL, index};
  const std::string where = id.str();
  DeviceProperties properties;
  properties.platform = platform_name(platform);
  properties.name = device_info<CL_DEVICE_NAME, std::string>(device, where, "clGetDeviceInfo(CL_DEVICE_NAME)");
  properties.version = device_info<CL_DEVICE_VERSION, std::string>(device, where, "clGetDeviceInfo(CL_DEVICE_VERSION)");
  for (std::string* s : {&properties.name, &properties.version}) {
    while (!s->empty() && s->back() == '\0') s->pop_back();
  }
  properties.global_mem_bytes = device_info<CL_DEVICE_GLOBAL_MEM_SIZE, cl_ulong>(
      device, where, "clGetDeviceInfo(CL_DEVICE_GLOBAL_MEM_SIZE)");
  properties.max_alloc_bytes = device_info<CL_DEVICE_MAX_MEM_ALLOC_SIZE, cl_ulong>(
      device, where, "clGetDeviceInfo(CL_DEVICE_MAX_MEM_ALLOC_SIZE)");
  // CL_DEVICE_MEM_BASE_ADDR_ALIGN is given in bits.
  properties.base_addr_align_bytes = device_info<CL_DEVICE_MEM_BASE_ADDR_ALIGN, cl_uint>(
                                         device, where, "clGetDeviceInfo(CL_DEVICE_MEM_BASE_ADDR_ALIGN)") / 8;
  if (properties.base_addr_align_bytes == 0) properties.base_addr_align_bytes = 1;
  properties.host_unified_memory = device_info<CL_DEVICE_HOST_UNIFIED_MEMORY, cl_bool>(
                                       device, where, "clGetDeviceInfo(CL_DEVICE_HOST_UNIFIED_MEMORY)") != CL_FALSE;
  // Note [Host-addressable segments]. An OpenCL 1.x driver does not know the query: no SVM.
  cl_device_svm_capabilities svm = 0;
  if (properties.version.rfind("OpenCL 1.", 0) != 0 &&
      clGetDeviceInfo(device(), CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, nullptr) !=
          CL_SUCCESS) {
    svm = 0;
  }
  properties.host_addressable =
      properties.host_unified_memory && (svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0;
  properties.cpu_device = (device_info<CL_DEVICE_TYPE, cl_device_type>(
                               device, where, "clGetDeviceInfo(CL_DEVICE_TYPE)") &
                           CL_DEVICE_TYPE_CPU) != 0;

  cl_int err = CL_SUCCESS;
  cl::Context context(device, nullptr, nullptr, nullptr, &err);
  check_cl(err, "clCreateContext", where);
  cl::CommandQueue queue(context, device, cl::QueueProperties::None, &err);  // in order
  check_cl(err, "clCreateCommandQueue", where);
  return std::make_unique<OpenCLBackend>(id, std::move(properties), device, std::move(context),
                                         std::move(queue));
}

}  // namespace

DiscoveredPlatform discover(const Options& options) {
  if (!options.pocl_default_devices.empty()) {
    // PoCL reads POCL_DEVICES once, when the ICD loader first loads it: set it before the first
    // OpenCL call, and never over a user's value (overwrite = 0).
    setenv("POCL_DEVICES", options.pocl_default_devices.c_str(), 0);
  }
  std::vector<cl::Platform> platforms;
  cl_int err = cl::Platform::get(&platforms);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR: no ICD installed */) platforms.clear();
  else check_cl(err, "clGetPlatformIDs", "platform discovery");

  DiscoveredPlatform result;
  std::string seen;   // the platforms' names, for OCLVM_PLATFORM's error
  std::string found;  // each platform with its device count, for why_none
  for (const cl::Platform& platform : platforms) {
    const std::string name = platform_name(platform);
    seen += (seen.empty() ? "'" : ", '") + name + "'";
    if (!options.platform.empty() && name.find(options.platform) == std::string::npos) continue;
    std::vector<cl::Device> devices = platform_devices(platform);
    found += (found.empty() ? "'" : ", '") + name + "' with " + std::to_string(devices.size()) +
             (devices.size() == 1 ? " device" : " devices");
    if (devices.empty()) continue;
    result.name = name;
    for (size_t i = 0; i < devices.size(); ++i) {
      result.backends.push_back(make_backend(platform, devices[i], static_cast<DeviceIndex>(i)));
    }
    return result;
  }
  if (!options.platform.empty()) {
    throw InvalidArgument("Expected OCLVM_PLATFORM='" + options.platform +
                          "' to match an OpenCL platform with devices, but the platforms are: " +
                          (seen.empty() ? std::string("none") : seen));
  }
  const std::string environment =
      options.driver_environment.empty() ? std::string("none of POCL_DEVICES, OCL_ICD_VENDORS, "
                                                       "OCL_ICD_FILENAMES is set")
                                         : options.driver_environment;
  if (platforms.empty()) {
    result.why_none = "the OpenCL ICD loader found no platform (environment: " + environment +
                      "); install an OpenCL driver (Debian: pocl-opencl-icd for the CPU), or "
                      "point OCL_ICD_VENDORS at the folder of its .icd file; `clinfo -l` lists "
                      "what the loader finds";
  } else {
    result.why_none = "no OpenCL platform has a device (platforms: " + found + "; environment: " +
                      environment + "); PoCL exposes the drivers POCL_DEVICES names: unset it, "
                      "or set it to 'basic', 'pthread' or 'basic basic'; `clinfo -l` lists "
                      "what the loader finds";
  }
  return result;
}

}  // namespace oclvm::opencl
