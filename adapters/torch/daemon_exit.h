// adapters/torch/daemon_exit.h — what becomes of threads CPython ends while it finalizes
// (Note [Daemon threads at exit] in daemon_exit.cc). Part of the module `_C` only: it calls the
// Python C API.
//
// Thread-safety: park_daemon_threads_at_exit is called once, when the module loads;
// note_finalizing_thread from Python's atexit handlers (the finalizing thread, with the GIL).
#pragma once

namespace oclvm::torch_adapter {

// Installs the terminate handler that parks a thread Python ends during finalization instead of
// aborting the process. Idempotent.
void park_daemon_threads_at_exit();

// Records the calling thread as the one finalizing the interpreter: its own terminate is never
// parked. Called from Python's atexit handlers, which run on that thread before finalization.
void note_finalizing_thread();

}  // namespace oclvm::torch_adapter
