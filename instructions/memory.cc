// instructions/memory.cc — the memory:: facade: one synchronous vm::Run per call on the
// process-wide VM.
//
// Alloc(place, 0) gives a blob with an empty allocation (Paddle allows zero-size allocations; it
// touches no driver and no statistic); Free of it is a no-op release. Used() is the allocator's
// allocated_bytes (rounded block bytes) on `place` now.
#include "oclvm/instructions/memory.h"

#include "oclvm/instructions/builder.h"
#include "oclvm/storage/errors.h"
#include "oclvm/vm/virtual_machine.h"

namespace oclvm::memory {

std::shared_ptr<BlobObject> Alloc(Device place, size_t bytes) {
  vm::VirtualMachine& vm = vm::VirtualMachine::instance();
  InstructionsBuilder builder(vm);
  vm::Stream& stream = builder.stream(place);
  std::shared_ptr<BlobObject> blob =
      bytes == 0 ? builder.allocate_blob(stream, Dims{0}, DType::kU8)
                 : builder.allocate_blob(stream, bytes);
  vm.run(builder.take());
  return blob;
}

void Free(Device place, std::shared_ptr<BlobObject> blob) {
  if (blob == nullptr) {
    throw InvalidArgument("Expected a blob to free on " + place.str() + ", but got a null pointer");
  }
  if (blob->device() != place) {
    throw InvalidArgument("Expected a blob on " + place.str() + ", but got one on " +
                          blob->device().str());
  }
  vm::VirtualMachine& vm = vm::VirtualMachine::instance();
  InstructionsBuilder builder(vm);
  builder.release(std::move(blob));
  vm.run(builder.take());
}

uint64_t Used(Device place) {
  vm::VirtualMachine& vm = vm::VirtualMachine::instance();
  InstructionsBuilder builder(vm);
  DeviceStats stats;
  builder.query_stats(place, &stats);
  vm.run(builder.take());
  return static_cast<uint64_t>(
      stats.allocated_bytes.aggregate().current);
}

}  // namespace oclvm::memory
