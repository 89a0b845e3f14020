// vm/host_section.cc — Note [Host sections].
#include "oclvm/vm/host_section.h"

#include "oclvm/vm/virtual_machine.h"

namespace oclvm::vm {

// try_enter and enter hand the execution right they take to the section they return, which gives
// it back when it is destroyed; the analysis follows no capability from a function into an object.
std::optional<HostSection> HostSection::try_enter(VirtualMachine& vm, Device device)
    OCLVM_NO_THREAD_SAFETY_ANALYSIS {
  DeviceWorker& worker = vm.worker(device);
  if (!worker.try_acquire_idle()) return std::nullopt;
  worker.finish_in_flight();  // Note [Batches that end with a marker]
  return HostSection(&vm, &worker);
}

std::optional<HostSection> HostSection::enter(VirtualMachine& vm, Device device)
    OCLVM_NO_THREAD_SAFETY_ANALYSIS {
  DeviceWorker& worker = vm.worker(device);
  if (DeviceWorker::holds_execution_right_on_this_thread()) return std::nullopt;
  if (!worker.acquire_when_idle()) return std::nullopt;
  worker.finish_in_flight();  // Note [Batches that end with a marker]
  return HostSection(&vm, &worker);
}

void HostSection::run(InstructionList&& list) { vm_->run_in_section(*worker_, std::move(list)); }

HostSection::~HostSection() {
  if (worker_ == nullptr) return;  // moved from
  worker_->assert_execution_right();
  worker_->release_execution();
}

}  // namespace oclvm::vm
