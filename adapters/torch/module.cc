// adapters/torch/module.cc — the Python extension module `oclvm._C`.
//
// Loading the module registers everything by static initialisation (allocator.cc: the
// PrivateUse1 allocator; device.cc: guard, hooks, host allocator; ops.cc: kernels and the CPU
// fallback). The functions below are the few things the Python package needs that torch does not
// already expose through torch.accelerator. Written against the plain Python C API, so the module
// links neither pybind11 nor libtorch_python.
//
//   device_count() -> int      OpenCL devices oclvm found
//   current_device() -> int    this thread's current device
//   set_device(int)            sets it (IndexError for a device that does not exist)
//   synchronize()              returns at once: every operator has already reached its sync point
//   live_blocks() -> int       blocks CLDeviceAllocator handed out and not yet released (tests)
//   device_of_address(int) -> int   the PrivateUse1 hooks' getDeviceFromPtr (tests); RuntimeError
//                              for an address outside opencl memory
//
// Thread-safety: as the C++ side; the GIL is released around nothing (no call here blocks long).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include "adapters/torch/allocator.h"

namespace oclvm::torch_adapter {
namespace {

PyObject* py_device_count(PyObject*, PyObject*) { return PyLong_FromLong(device_count()); }

PyObject* py_current_device(PyObject*, PyObject*) { return PyLong_FromLong(current_device()); }

PyObject* py_set_device(PyObject*, PyObject* arg) {
  const long index = PyLong_AsLong(arg);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  if (index < 0 || index >= device_count()) {
    PyErr_Format(PyExc_IndexError, "Expected an opencl device index in [0, %d), but got %ld",
                 static_cast<int>(device_count()), index);
    return nullptr;
  }
  set_current_device(static_cast<c10::DeviceIndex>(index));
  Py_RETURN_NONE;
}

PyObject* py_synchronize(PyObject*, PyObject*) { Py_RETURN_NONE; }

PyObject* py_live_blocks(PyObject*, PyObject*) {
  return PyLong_FromSize_t(CLDeviceAllocator::instance().live_blocks());
}

PyObject* py_device_of_address(PyObject*, PyObject* arg) {
  const unsigned long long address = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return nullptr;
  try {
    const at::Device device = at::detail::getPrivateUse1Hooks().getDeviceFromPtr(
        reinterpret_cast<void*>(static_cast<uintptr_t>(address)));
    return PyLong_FromLong(device.index());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyMethodDef kMethods[] = {
    {"device_count", py_device_count, METH_NOARGS, "Number of OpenCL devices."},
    {"current_device", py_current_device, METH_NOARGS, "This thread's current device index."},
    {"set_device", py_set_device, METH_O, "Set this thread's current device index."},
    {"synchronize", py_synchronize, METH_NOARGS, "Wait for all work (none is ever pending)."},
    {"live_blocks", py_live_blocks, METH_NOARGS, "Live blocks of the opencl allocator."},
    {"device_of_address", py_device_of_address, METH_O, "Device index of an opencl address."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_C", "oclvm's PyTorch backend (native part).", -1,
                       kMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace oclvm::torch_adapter

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&oclvm::torch_adapter::kModule); }
