// storage/opencl/opencl_kernels.cc — OpenCL programs and kernels: the kernel cache of an
// OpenCLBackend (Note [The kernel cache]) and kernel launches on an OpenCLQueue.
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "oclvm/storage/errors.h"
#include "oclvm/storage/opencl/cl_check.h"
#include "oclvm/storage/opencl/opencl_backend.h"

namespace oclvm::opencl {
namespace {

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

std::string build_log(const cl::Program& program, const cl::Device& device) {
  std::string log;
  if (program.getBuildInfo(device, CL_PROGRAM_BUILD_LOG, &log) != CL_SUCCESS) {
    return "(the driver gave no build log)";
  }
  log = trimmed(std::move(log));
  return log.empty() ? "(the build log is empty)" : log;
}

// What the compiler says of each parameter; false when the driver kept no argument information
// (then only the count is known).
bool kernel_params(const cl::Kernel& kernel, cl_uint count, std::vector<KernelParam>* params) {
  params->assign(count, KernelParam{});
  for (cl_uint i = 0; i < count; ++i) {
    cl_kernel_arg_address_qualifier space = 0;
    std::string type_name;
    std::string name;
    if (kernel.getArgInfo(i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, &space) != CL_SUCCESS ||
        kernel.getArgInfo(i, CL_KERNEL_ARG_TYPE_NAME, &type_name) != CL_SUCCESS) {
      params->assign(count, KernelParam{});
      return false;
    }
    if (kernel.getArgInfo(i, CL_KERNEL_ARG_NAME, &name) != CL_SUCCESS) name.clear();
    KernelParam& param = (*params)[i];
    switch (space) {
      case CL_KERNEL_ARG_ADDRESS_GLOBAL: param.space = KernelParam::Space::kGlobal; break;
      case CL_KERNEL_ARG_ADDRESS_CONSTANT: param.space = KernelParam::Space::kConstant; break;
      case CL_KERNEL_ARG_ADDRESS_LOCAL: param.space = KernelParam::Space::kLocal; break;
      default: param.space = KernelParam::Space::kPrivate; break;
    }
    param.type_name = trimmed(std::move(type_name));
    param.name = trimmed(std::move(name));
  }
  return true;
}

uint64_t next_kernel_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

OpenCLKernel::OpenCLKernel(KernelSource source, Device device, std::vector<KernelParam> params,
                           bool params_known, cl::Kernel kernel)
    : Kernel(std::move(source), device, std::move(params), params_known),
      kernel_(std::move(kernel)),
      id_(next_kernel_id()) {}

cl::Program OpenCLBackend::build_program(const std::string& full_source, const std::string& options,
                                         const KernelSource& source, const KernelDiskCache& disk) {
  std::string driver;
  if (cl_device_.getInfo(CL_DRIVER_VERSION, &driver) != CL_SUCCESS) driver = "unknown";
  const std::string key = kernel_cache_key(properties().platform, properties().name,
                                           trimmed(driver), options, full_source);
  cl_int err = CL_SUCCESS;
  bool disk_error = false;
  if (std::optional<std::vector<unsigned char>> binary = disk.load(key, &disk_error)) {
    maybe_inject(FaultPoint::kBuild, "building a program from its cached binary");
    cl::Program program(context_, {cl_device_}, cl::Program::Binaries{*binary}, nullptr, &err);
    if (err == CL_SUCCESS && program.build({cl_device_}, options.c_str()) == CL_SUCCESS) {
      MutexLock lock(kernel_mutex_);
      ++kernel_stats_.loaded;
      return program;
    }
    disk_error = true;  // a binary this driver no longer takes: build from source below
  }
  maybe_inject(FaultPoint::kBuild, "building a program");
  cl::Program program(context_, full_source, false, &err);
  check_cl(err, "clCreateProgramWithSource", where_);
  err = program.build({cl_device_}, options.c_str());
  if (err == CL_BUILD_PROGRAM_FAILURE || err == CL_INVALID_BUILD_OPTIONS ||
      err == CL_COMPILER_NOT_AVAILABLE) {
    const std::string log = err == CL_BUILD_PROGRAM_FAILURE
                                ? build_log(program, cl_device_)
                                : describe_cl_error(err, "clBuildProgram", where_) +
                                      " (options: '" + source.options + "')";
    throw KernelBuildError("Expected OpenCL C that compiles, but the compiler of " + where_ +
                               " refused the program of kernel '" + source.name + "':\n" + log,
                           log);
  }
  check_cl(err, "clBuildProgram", where_);
  std::vector<std::vector<unsigned char>> binaries;
  bool stored = false;
  if (disk.enabled() && program.getInfo(CL_PROGRAM_BINARIES, &binaries) == CL_SUCCESS &&
      binaries.size() == 1) {
    stored = disk.store(key, binaries[0]);
    disk_error = disk_error || !stored;
  }
  MutexLock lock(kernel_mutex_);
  ++kernel_stats_.compiled;
  if (stored) ++kernel_stats_.stored;
  if (disk_error) ++kernel_stats_.disk_errors;
  return program;
}

std::shared_ptr<const Kernel> OpenCLBackend::kernel(const KernelSource& source) {
  const std::string options = source.options.empty() ? std::string("-cl-kernel-arg-info")
                                                      : source.options + " -cl-kernel-arg-info";
  const std::string program_key = options + '\0' + source.source;
  const std::string kernel_key = program_key + '\0' + source.name;
  std::promise<cl::Program> promise;
  std::shared_future<cl::Program> future;
  bool builder = false;
  std::string cache_dir;
  {
    MutexLock lock(kernel_mutex_);
    if (auto found = kernels_.find(kernel_key); found != kernels_.end()) {
      ++kernel_stats_.hits;
      return found->second;
    }
    auto [entry, inserted] = programs_.try_emplace(program_key);
    if (inserted) {
      entry->second = promise.get_future().share();
      builder = true;
    }
    future = entry->second;
    cache_dir = kernel_cache_dir_;
  }
  if (builder) {
    try {
      const std::string full_source = std::string(kKernelPrelude) + source.source;
      promise.set_value(build_program(full_source, options, source, KernelDiskCache(cache_dir)));
    } catch (...) {
      {
        MutexLock lock(kernel_mutex_);
        programs_.erase(program_key);  // not cached: the next call builds again
      }
      promise.set_exception(std::current_exception());
      throw;
    }
  }
  const cl::Program program = future.get();  // rethrows the build's error to every waiter

  cl_int err = CL_SUCCESS;
  cl::Kernel native(program, source.name.c_str(), &err);
  if (err == CL_INVALID_KERNEL_NAME) {
    std::string names;
    program.getInfo(CL_PROGRAM_KERNEL_NAMES, &names);
    throw InvalidArgument("Expected a kernel the program defines (" + trimmed(names) +
                          "), but got '" + source.name + "'");
  }
  check_cl(err, "clCreateKernel", where_);
  cl_uint count = 0;
  check_cl(native.getInfo(CL_KERNEL_NUM_ARGS, &count), "clGetKernelInfo(CL_KERNEL_NUM_ARGS)",
           where_);
  std::vector<KernelParam> params;
  const bool known = kernel_params(native, count, &params);
  auto made = std::make_shared<const OpenCLKernel>(source, device(), std::move(params), known,
                                                   std::move(native));
  MutexLock lock(kernel_mutex_);
  auto [entry, inserted] = kernels_.try_emplace(kernel_key, std::move(made));
  return entry->second;  // a concurrent caller's kernel when it came first
}

KernelCacheStats OpenCLBackend::kernel_cache_stats() const {
  MutexLock lock(kernel_mutex_);
  return kernel_stats_;
}

void OpenCLBackend::set_kernel_cache_dir(const std::string& dir) {
  MutexLock lock(kernel_mutex_);
  kernel_cache_dir_ = dir;
}

void OpenCLBackend::forget_programs() {
  MutexLock lock(kernel_mutex_);
  kernels_.clear();
  programs_.clear();  // a build under way keeps its own future and finishes as before
}

cl::Kernel& OpenCLQueue::own_kernel(const OpenCLKernel& kernel) {
  if (last_kernel_ != nullptr && last_kernel_id_ == kernel.id()) return *last_kernel_;
  auto found = own_kernels_.find(kernel.id());
  if (found == own_kernels_.end()) {
    // Thread-safe on the shared object: only setting arguments is not.
    cl_int err = CL_SUCCESS;
    const cl::Program program = kernel.native().getInfo<CL_KERNEL_PROGRAM>(&err);
    check_cl(err, "clGetKernelInfo(CL_KERNEL_PROGRAM)", where_);
    cl::Kernel native(program, kernel.source().name.c_str(), &err);
    check_cl(err, "clCreateKernel", where_);
    found = own_kernels_.emplace(kernel.id(), std::move(native)).first;
  }
  last_kernel_id_ = kernel.id();
  last_kernel_ = &found->second;  // unordered_map entries stay where they are
  return found->second;
}

void OpenCLQueue::do_launch(const Kernel& kernel, const KernelArg* args, size_t num_args,
                            const size_t* global, const size_t* local, uint32_t dims) {
  cl::Kernel& native = own_kernel(static_cast<const OpenCLKernel&>(kernel));
  cl_uint index = 0;
  for (size_t i = 0; i < num_args; ++i) {
    const KernelArg& arg = args[i];
    switch (arg.kind) {
      case KernelArg::Kind::kBuffer: {
        const cl_mem buffer = arg.native == nullptr
                                  ? nullptr
                                  : static_cast<const CLAllocation*>(arg.native)->buffer();
        const cl_ulong offset = arg.offset;
        check_cl(clSetKernelArg(native(), index++, sizeof(cl_mem), &buffer), "clSetKernelArg",
                 where_);
        check_cl(clSetKernelArg(native(), index++, sizeof(cl_ulong), &offset), "clSetKernelArg",
                 where_);
        break;
      }
      case KernelArg::Kind::kScalar:
        check_cl(clSetKernelArg(native(), index++, arg.size, arg.bytes.data()), "clSetKernelArg",
                 where_);
        break;
      case KernelArg::Kind::kLocal:
        check_cl(clSetKernelArg(native(), index++, arg.size, nullptr), "clSetKernelArg", where_);
        break;
    }
  }
  bool driver_chooses = true;
  for (uint32_t d = 0; d < dims; ++d) driver_chooses = driver_chooses && local[d] == 0;
  check_cl(clEnqueueNDRangeKernel(queue_(), native(), dims, nullptr, global,
                                  driver_chooses ? nullptr : local, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel", where_);
}

}  // namespace oclvm::opencl
