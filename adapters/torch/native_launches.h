// adapters/torch/native_launches.h — how the native path hands its device work to the VM: without
// waiting for the device (Note [Launches that do not wait] in native_launches.cc).
//
// Every native operator's LaunchKernels and NativeCalls go through submit_native. The list is
// dispatched on the calling thread when its device is idle (Runtime::submit_here) and the call
// returns without waiting for the device; its ticket is kept, per device, until a sync point
// (synchronize, a copy to the host, .item(), a host section) waits for it and throws its failure.
//
// A kernel that finds an error in its input (an index out of range) cannot throw: it records the
// error in its device's error word (device_error_arg), and the next sync point throws it (Note
// [Errors found on the device] in native_launches.cc).
//
// Thread-safety: any thread. The kept tickets and failures of every device sit under one mutex,
// which no wait holds.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>

#include "oclvm/instructions/instructions.h"
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

// What a kernel found wrong in its input, in the device's error word.
enum class DeviceError : int32_t {
  kNone = 0,
  kIndexOutOfRange = 1,    // an index outside [0, size): the word holds the index and the size
  kTargetOutOfBounds = 2,  // a loss's class target outside [0, classes): the target, the classes
  kIndexOutOfDataBounds = 3,  // kIndexOutOfRange where the CPU words it as its dim-1 kernel does
  kIndexOutOfBoundsOfDim = 4,  // kIndexOutOfRange as gather and scatter word it: the code's bits
                               // above 8 hold the dimension
  kIndexOutOfBoundsForIndexing = 5,  // kIndexOutOfRange as advanced indexing words it (the index
                                     // as given, before a negative one counts from the end): the
                                     // code's bits above 8 hold the index tensor's position
};

// Device `index`'s error word, a read-write blob argument for a kernel (Note [Errors found on
// the device]): the first work-item to find an error claims the word's first int with
// atomic_cmpxchg(0 -> its DeviceError) and then writes the offending value and the bound at
// elements 1 and 2 of the word, as longs. Allocates the word (32 bytes of device memory, kept
// until exit) on the device's first call.
LaunchArg device_error_arg(c10::DeviceIndex index);

// Called once a list with a kernel given device_error_arg(index) was submitted: marks the word, so
// that the device's next sync point reads it; with OCLVM_LAUNCH_BLOCKING=1, reads it at once and
// throws what it holds. (Marked after the submission, so that a sync point on another thread that
// takes the mark reads the word after this kernel.)
void device_errors_submitted(c10::DeviceIndex index);

// The OpenCL C declaration of the helper kernels call to report an error into the word argument
// `err` (OCLVM_BLOB(long, err)): oclvm_report(err_base, err_offset, code, value, bound).
extern const char* const kDeviceErrorSource;

}  // namespace oclvm::torch_adapter
