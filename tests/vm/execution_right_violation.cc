// tests/vm/execution_right_violation.cc — code that breaks the execution right on purpose.
//
// Never part of a binary: the ctest entry oclvm_vm.execution_right_is_checked (clang builds
// only, CMakeLists.txt) compiles it and passes when clang's thread-safety analysis rejects it,
// naming the right. It shows that the rule of vm/device_worker.h is checked by the compiler, not
// only written down.
#include "oclvm/storage/allocator.h"
#include "oclvm/vm/device_worker.h"

namespace oclvm::vm {

// Reaches a worker's allocator without taking the worker's execution right first.
Allocator& allocator_without_the_right(DeviceWorker& worker) { return worker.allocator(); }

}  // namespace oclvm::vm
