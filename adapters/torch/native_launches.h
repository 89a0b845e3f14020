// adapters/torch/native_launches.h — how the native path hands its device work to the VM: without
// waiting for the device (Note [Launches that do not wait] in native_launches.cc).
//
// Every native operator's LaunchKernels and NativeCalls go through submit_native. The list is
// dispatched on the calling thread when its device is idle (Runtime::submit_here) and the call
// returns without waiting for the device; its ticket is kept, per device, until a sync point
// (synchronize, a copy to the host, .item(), a host section) waits for it and throws its failure.
//
// Thread-safety: any thread. The kept tickets and failures of every device sit under one mutex,
// which no wait holds.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>

#include "oclvm/vm/virtual_machine.h"

namespace oclvm::torch_adapter {

// Submits `list`, whose instructions are all on device `index`. Throws (as translate_errors does)
// at once when the list failed as it was dispatched on this thread, and then keeps nothing of
// it; a failure found later is thrown by a later wait_native_launches of the device. With
// OCLVM_LAUNCH_BLOCKING=1, runs the list synchronously instead.
void submit_native(c10::DeviceIndex index, vm::InstructionList&& list);

// Waits for every list submit_native kept for device `index` (every device for -1), and throws
// the oldest failure among them and those kept since the last call (as translate_errors does);
// each other one goes to the log. Returns at once when none is kept, and on a thread that holds
// a device's execution right (inside a host section or an instruction's callback).
void wait_native_launches(c10::DeviceIndex index);

// The lists kept and not yet waited for, on every device (tests).
size_t pending_native_launches();

}  // namespace oclvm::torch_adapter
