// bench/raw_kernel_chain.cc — the baseline of vm_bench's kernel chain: the same kernels enqueued
// by a plain OpenCL loop on a queue of its own, with no VM in between. Kept apart so that
// vm_bench.cc itself includes no OpenCL header.
#include "bench/raw_kernel_chain.h"

#include <CL/opencl.hpp>

#include <stdexcept>
#include <string>

#include "oclvm/storage/opencl/opencl_backend.h"

namespace oclvm::bench {

struct RawKernelChain::Queue {
  cl::CommandQueue queue;
};

RawKernelChain::RawKernelChain(MemoryBackend& backend) {
  auto& cl_backend = dynamic_cast<opencl::OpenCLBackend&>(backend);
  cl_int err = CL_SUCCESS;
  queue_ = std::make_unique<Queue>(
      Queue{cl::CommandQueue(cl_backend.context(), cl_backend.cl_device(), 0, &err)});
  if (err != CL_SUCCESS) throw std::runtime_error("clCreateCommandQueue: " + std::to_string(err));
}

RawKernelChain::~RawKernelChain() = default;

void RawKernelChain::run(const Kernel& kernel, const Segment& a, size_t a_offset, const Segment& b,
                         size_t b_offset, size_t global, int launches) {
  cl::Kernel& native = static_cast<const opencl::OpenCLKernel&>(kernel).native();
  const cl_mem buffers[2] = {opencl::OpenCLBackend::allocation_of(a).buffer(),
                             opencl::OpenCLBackend::allocation_of(b).buffer()};
  const cl_ulong offsets[2] = {a_offset, b_offset};
  for (int i = 0; i < launches; ++i) {
    // Ping-pong: the destination of one launch is the source of the next.
    const int dst = i % 2;
    const int src = 1 - dst;
    cl_int err = clSetKernelArg(native(), 0, sizeof(cl_mem), &buffers[dst]);
    err |= clSetKernelArg(native(), 1, sizeof(cl_ulong), &offsets[dst]);
    err |= clSetKernelArg(native(), 2, sizeof(cl_mem), &buffers[src]);
    err |= clSetKernelArg(native(), 3, sizeof(cl_ulong), &offsets[src]);
    err |= clEnqueueNDRangeKernel(queue_->queue(), native(), 1, nullptr, &global, nullptr, 0,
                                  nullptr, nullptr);
    if (err != CL_SUCCESS) throw std::runtime_error("a raw launch failed");
  }
  if (queue_->queue.finish() != CL_SUCCESS) throw std::runtime_error("clFinish failed");
}

}  // namespace oclvm::bench
