// oclvm/oclvm.h — the one header an embedder includes (design/embedding.md).
//
// oclvm is an instruction-driven storage runtime for eager tensors on OpenCL devices: device
// memory is allocated, copied, filled and released by instructions that a per-device stream
// worker executes in stream order. An eager tensor runtime embeds it as its storage layer:
//
//   oclvm::Runtime runtime(oclvm::Options::from_environment());
//   auto storage = runtime.create_storage(oclvm::parse_device("opencl:0"), 4096);  // TensorStorage
//   oclvm::InstructionsBuilder b = runtime.builder();
//   b.fill(storage->blob(), 0, 4096, 0x2a);
//   std::vector<uint8_t> host(4096);
//   b.copy_device_to_host(storage->blob(), 0, host.data(), host.size());
//   runtime.run(b.take());          // returns when all of it has completed; throws the first error
//   storage.reset();                // the last owner's releaser runs a ReleaseTensor
//
// What this header brings in, and where each piece is documented:
//   Runtime                       instructions/runtime.h   devices, storages, run, statistics
//   InstructionsBuilder           instructions/builder.h   every instruction and its checks
//   TensorStorage, BlobObject,    storage/storage_objects.h  the split ownership of tensor memory
//     BlobStorage, DType, Dims
//   Device, parse_device          storage/device.h
//   Options, format_bytes         storage/options.h        allocator, memory limit, platform
//   DeviceStats                   storage/stats.h          PyTorch's statistics fields
//   Error, InvalidArgument,       storage/errors.h         what every call throws
//     OutOfMemoryError, BackendError
//   vm::Stream, vm::Ticket,       vm/virtual_machine.h
//     vm::InstructionList, vm::VmOptions
//   kVersion, library_version     version.h
//
// Thread-safety: stated per type in each header and summed up in design/embedding.md.
#pragma once

#include "oclvm/instructions/builder.h"
#include "oclvm/instructions/instructions.h"
#include "oclvm/instructions/runtime.h"
#include "oclvm/storage/device.h"
#include "oclvm/storage/errors.h"
#include "oclvm/storage/log.h"
#include "oclvm/storage/options.h"
#include "oclvm/storage/stats.h"
#include "oclvm/storage/storage_objects.h"
#include "oclvm/version.h"
#include "oclvm/vm/stream.h"
#include "oclvm/vm/virtual_machine.h"
