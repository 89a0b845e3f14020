// adapters/torch/host_results.h — results of CPU kernels written straight into device memory
// (Note [Results written in device memory] in host_results.cc).
//
//   install_results_allocator()   at registration: puts oclvm's CPU allocator in front of the
//                                 one torch has (it forwards to it outside a ResultsOnDevice)
//   ResultsOnDevice               a scope, on one thread, inside a host section of a device: the
//                                 CPU allocations this thread makes meanwhile are device blocks
//   adopt_result(tensor, device)  makes a CPU result written in a block the device tensor over
//                                 that block; false when the result is not such a block alone
//   adopted_results()             how many results were adopted (a statistic for tests)
//
// Thread-safety: a ResultsOnDevice scope changes only its own thread's allocations; the
// allocator itself is thread-safe.
#pragma once

#include <ATen/ATen.h>

#include "oclvm/vm/host_section.h"

namespace oclvm::torch_adapter {

void install_results_allocator();

class ResultsOnDevice {
 public:
  // `section` is a host section of opencl device `index`, entered by this thread; it outlives
  // the scope.
  ResultsOnDevice(vm::HostSection& section, c10::DeviceIndex index);
  ~ResultsOnDevice();
  ResultsOnDevice(const ResultsOnDevice&) = delete;
  ResultsOnDevice& operator=(const ResultsOnDevice&) = delete;

 private:
  vm::HostSection* section_;
  c10::DeviceIndex index_;
  ResultsOnDevice* outer_;  // the scope it shadows on this thread (none: nullptr)

  friend class ResultsAllocator;
};

// When `result` is a plain dense CPU tensor whose storage is a block a ResultsOnDevice scope
// handed out and nothing else holds that storage: makes `result` a device tensor on `device`
// with its sizes, strides, offset and dtype over that block (the same TensorImpl when nothing
// else holds it, else a new one; Note [Adopting a result in place]) and returns true. Else
// returns false and changes nothing (the caller copies the result).
bool adopt_result(at::Tensor& result, const c10::Device& device);
// How many results adopt_result has made device tensors of, in this process.
uint64_t adopted_results();

}  // namespace oclvm::torch_adapter
