// adapters/torch/memory_history.h — torch.opencl.memory's history and snapshots, and the Python
// stacks they carry.
//
// The history itself is oclvm's (storage/memory_history.h, kept per device by the Runtime); this
// file gives it what only the Python side knows: the stack of the Python code that allocated or
// freed each block, captured on the thread that asks (Note [Python stacks in the history]).
//
//   record_memory_history   starts, changes or stops the history on every opencl device
//   memory_snapshot_pickle  PyTorch's snapshot dictionary for the opencl devices, pickled
//
// Compiled into the Python module only (it calls the Python C API).
// Thread-safety: thread-safe, as the Runtime calls under them; python_stack() must run with the
// GIL held or returns null.
#pragma once

#include <string>

#include "oclvm/storage/memory_history.h"

namespace oclvm::torch_adapter {

// Applies `options` to every opencl device and, while recording with contexts, captures the
// Python stack of each allocation (and free, with ContextMode::kAll). Throws what
// Runtime::record_memory_history throws.
void record_memory_history(const HistoryOptions& options);

// Runtime::memory_snapshot of the opencl devices, through to_pickle.
std::string memory_snapshot_pickle(bool with_events);

}  // namespace oclvm::torch_adapter
