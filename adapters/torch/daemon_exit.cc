// adapters/torch/daemon_exit.cc — daemon threads that Python ends during interpreter
// finalization are parked instead of aborting the process (daemon_exit.h).
//
// Note [Daemon threads at exit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// When the main thread finalizes the interpreter, CPython 3.11 to 3.13 end every other thread
// that tries to take the GIL back: take_gil calls PyThread_exit_thread, which is pthread_exit, a
// forced unwind of that thread's stack. torch releases the GIL in many places a thread returns
// through: around every operator its Python bindings call (pybind11's gil_scoped_release), in
// THPVariable_clear around the destruction of every tensor Python drops (device, deleter and
// use count do not matter), and when a tensor Python holds is copied or dropped without the GIL
// (PyObject preservation takes it in TensorImpl's noexcept incref/decref). Each of those frames
// is noexcept, so the forced unwind reaches std::terminate: "terminate called without an active
// exception", SIGABRT, on the CPU as on the device and on CUDA (the same torch code). A daemon
// thread busy with tensors when the program ends therefore aborts the process now and then;
// device operations take longer than the CPU's, so a busy device thread is more often inside one.
//
// No change of oclvm's makes torch keep the GIL there, so the module catches the end of the
// road: its terminate handler, installed when the module loads, parks the calling thread for
// good when the interpreter is finalizing and the thread is not the one finalizing it. That
// thread was being ended anyway; parked, it holds no GIL and runs no code, and the process ends
// when the finalizing thread calls exit() (CPython 3.14 parks such threads itself). Every other
// terminate (the finalizing thread's own, or any before finalization) goes to the handler that
// was installed before, then std::abort, as before. The finalizing thread is the one that runs
// Python's atexit handlers, which all run before finalization starts: the package's atexit
// handler records it (note_finalizing_thread). Until it has, nothing is parked.
//
// What a parked thread holds stays held: torch's frames that end here have finished the
// operator (a binding's release) or the free (THPVariable_clear), and oclvm never touches Python
// inside a host section (Note [Python stacks in the history] in memory_history.cc), so no lock
// of oclvm's is held by a parked thread.
#include "adapters/torch/daemon_exit.h"

#include <Python.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <exception>

namespace oclvm::torch_adapter {
namespace {

std::terminate_handler g_previous = nullptr;    // set once, when the module loads
std::atomic<bool> g_finalizer_known{false};     // note_finalizing_thread has run
pthread_t g_finalizer{};                        // valid once g_finalizer_known is true

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

[[noreturn]] void park_or_terminate() {
  if (g_finalizer_known.load(std::memory_order_acquire) &&
      pthread_equal(pthread_self(), g_finalizer) == 0 && interpreter_finalizing()) {
    for (;;) pause();  // Note [Daemon threads at exit]: the process ends around this thread
  }
  if (g_previous != nullptr) g_previous();
  std::abort();
}

}  // namespace

void park_daemon_threads_at_exit() {
  static const bool installed = [] {
    g_previous = std::set_terminate(&park_or_terminate);
    return true;
  }();
  (void)installed;
}

void note_finalizing_thread() {
  g_finalizer = pthread_self();
  g_finalizer_known.store(true, std::memory_order_release);
}

}  // namespace oclvm::torch_adapter
