// adapters/torch/memory_history.cc — Python stacks for oclvm's memory history, and snapshots.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#include "adapters/torch/memory_history.h"

#include <memory>
#include <utility>
#include <vector>

#include "adapters/torch/device.h"
#include "adapters/torch/host_view.h"
#include "oclvm/vm/device_worker.h"
#include "oclvm/instructions/memory_snapshot.h"

namespace oclvm::torch_adapter {
namespace {

// Note [Python stacks in the history]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A Python stack can only be read on the thread that runs the Python code, with the GIL held.
// oclvm asks for a context on the thread that builds the AllocateBlob or ReleaseTensor
// (VirtualMachine::capture_memory_context), which for the torch adapter is the thread running the
// operator: the caller of the DataPtr allocation or deletion. torch's Python bindings release the
// GIL around an operator, so the capture takes it back (as PyTorch's own allocator does for its
// history) — but only on a thread Python knows, and never while the thread holds a device (a
// host section, an inline run): another Python thread may hold the GIL and wait for that device
// (a `del` of a tensor runs a synchronous ReleaseTensor), and each would wait for the other.
// Allocations and frees inside a host section therefore get the context captured when the
// section opened (section_memory_context, host_view.h): the same operator's stack. Threads Python
// does not know (a VM worker, C++ threads of torch's) get none. The frames are copied (file, line,
// function name) so that a context can die on any thread without the GIL.
constexpr int kMaxFrames = 128;

std::string utf8(PyObject* text) {
  Py_ssize_t size = 0;
  const char* data = text != nullptr ? PyUnicode_AsUTF8AndSize(text, &size) : nullptr;
  if (data == nullptr) {
    PyErr_Clear();
    return "??";
  }
  return std::string(data, static_cast<size_t>(size));
}

// The frames of this thread, innermost first. Requires the GIL.
void walk_frames(MemoryContext& context) {
  PyFrameObject* frame = PyThreadState_GetFrame(PyThreadState_Get());  // new reference or null
  while (frame != nullptr && static_cast<int>(context.frames.size()) < kMaxFrames) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    context.frames.push_back(
        {utf8(code->co_filename), PyFrame_GetLineNumber(frame), utf8(code->co_name)});
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference or null
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
}

std::shared_ptr<const MemoryContext> python_stack() {
  if (vm::DeviceWorker::holds_execution_right_on_this_thread()) return section_memory_context();
  if (!Py_IsInitialized() || _Py_IsFinalizing() || PyGILState_GetThisThreadState() == nullptr) {
    return nullptr;
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  auto context = std::make_shared<MemoryContext>();
  walk_frames(*context);
  PyGILState_Release(gil);
  return context;
}

}  // namespace

void record_memory_history(const HistoryOptions& options) {
  Runtime& rt = runtime();
  rt.set_memory_context_capture(python_stack);
  rt.record_memory_history(options);
}

std::string memory_snapshot_pickle(bool with_events) {
  std::vector<Device> devices;
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) devices.push_back(to_oclvm(i));
  if (devices.empty()) return to_pickle(MemorySnapshot{});
  return to_pickle(runtime().memory_snapshot(devices, with_events));
}

}  // namespace oclvm::torch_adapter
