// vm/host_section.h — a span of time in which the calling thread uses a device's memory directly.
//
// Note [Host sections]
// ~~~~~~~~~~~~~~~~~~~~
// On a device whose segments have a host address (Segment::host: fine-grained SVM, or host
// memory), the host can read and write a blob's bytes in place, with no map and no command,
// provided no device command on them runs meanwhile. A HostSection gives exactly that: it holds
// the device's execution right (as a caller running its own list inline does, Note [Caller runs]
// in virtual_machine.cc), so while it lives no instruction of the device is dispatched — a list
// another thread submits meanwhile waits, and is dispatched when the section ends — and it is
// entered only when the device's worker is idle, so every instruction submitted for the device
// before it has been dispatched and, as entering finishes every queue a batch or a release left
// commands on (DeviceWorker::finish_in_flight), has completed on the device. Host reads in the section see every earlier device write; device
// instructions submitted after it see the host's writes. In stream terms, the section is one more
// instruction on every stream of the device, run by the host.
//
// try_enter never waits: it gives nothing when the worker is busy or shut down, and the caller
// takes its ordinary path (lists of instructions). enter waits for the worker to become idle
// (nothing pending, nobody dispatching) and gives nothing only when the VM shuts down or the
// calling thread holds an execution right (it would wait for itself). It has no priority over
// other producers: under an endless stream of asynchronous submissions it may wait as long as
// they last. Since a
// section excludes every other section and instruction of the device, two threads that each do a
// read-modify-write of one tensor in a section never interleave: one runs wholly before the
// other, as two kernels on one CUDA stream do. Not excluded: another device's worker reading
// this device's memory for a cross-device copy; as for any reader and writer of one tensor on two
// devices, ordering those is the caller's.
//
// Inside a section the thread holds an execution right, so it must not wait for the VM (Run and
// Ticket::wait refuse with an Error); a tensor it drops is released detached, as from an
// instruction, and that release runs when the section ends. Sections do not nest on one device.
// What a section may do with instructions is run(list): the list is dispatched at once on the
// section's thread, as a step of the section (Note [Lists run in a host section] in
// virtual_machine.cc) — an allocation for a result the host is about to write, say.
//
// Thread-safety: a HostSection belongs to the thread that entered it and must end on that thread.
#pragma once

#include <optional>

#include "oclvm/storage/device.h"
#include "oclvm/vm/instruction.h"

namespace oclvm::vm {

class DeviceWorker;
class VirtualMachine;

class HostSection {
 public:
  // Enters when `device`'s worker has nothing pending and nobody dispatches; nullopt otherwise.
  // Throws InvalidArgument for an unknown device.
  static std::optional<HostSection> try_enter(VirtualMachine& vm, Device device);
  // Waits until `device`'s worker is idle and enters; nullopt when the VM is shut down or this
  // thread holds an execution right. Throws InvalidArgument for an unknown device.
  static std::optional<HostSection> enter(VirtualMachine& vm, Device device);

  HostSection(HostSection&& other) noexcept : vm_(other.vm_), worker_(other.worker_) {
    other.worker_ = nullptr;
  }
  HostSection& operator=(HostSection&&) = delete;
  HostSection(const HostSection&) = delete;
  HostSection& operator=(const HostSection&) = delete;
  // Ends the section: instructions other threads submitted meanwhile are dispatched now.
  ~HostSection();

  // Dispatches `list` now, on this thread, and returns when every instruction has run; rethrows
  // the first error (as vm::Run). Every instruction must be on a stream of the section's device,
  // and its blobs must have no access by an instruction still pending on this device or by
  // another device: else InvalidArgument, with nothing run. Error after shutdown.
  void run(InstructionList&& list);

 private:
  HostSection(VirtualMachine* vm, DeviceWorker* worker) : vm_(vm), worker_(worker) {}
  VirtualMachine* vm_;
  DeviceWorker* worker_;  // nullptr once moved from
};

}  // namespace oclvm::vm
