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
//   memory_limit(int) -> int   the device allocator's limit on reserved bytes (0: none)
//   set_memory_limit(int, int) sets it (SetMemoryLimit)
//   global_memory(int) -> int  the device's global memory in bytes
//   host_memory_stats() -> dict   the pinned-memory allocator's HostStats, flattened like
//                              torch.cuda.host_memory_stats ("active_bytes.current", ...)
//   live_blocks() -> int       blocks CLDeviceAllocator handed out and not yet released (tests)
//   device_of_address(int) -> int   the PrivateUse1 hooks' getDeviceFromPtr (tests); RuntimeError
//                              for an address outside opencl memory
//
// Thread-safety: as the C++ side; the GIL is released around nothing (no call here blocks long).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include <string>
#include <utility>

#include "adapters/torch/allocator.h"

namespace oclvm::torch_adapter {
namespace {

PyObject* py_device_count(PyObject*, PyObject*) { return PyLong_FromLong(device_count()); }

PyObject* py_current_device(PyObject*, PyObject*) { return PyLong_FromLong(current_device()); }

bool parse_index(PyObject* arg, c10::DeviceIndex* index);

PyObject* py_set_device(PyObject*, PyObject* arg) {
  c10::DeviceIndex index = 0;
  if (!parse_index(arg, &index)) return nullptr;
  set_current_device(index);
  Py_RETURN_NONE;
}

// Runs `fn` (returning a PyObject*), turning C++ exceptions into Python ones: IndexError for a
// device index out of range (c10::IndexError), RuntimeError otherwise.
template <typename Fn>
PyObject* guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const c10::IndexError& e) {
    PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// Parses "(index)" or "(index, bytes)" arguments; false with a Python error set on bad ones.
bool parse_index(PyObject* arg, c10::DeviceIndex* index) {
  const long value = PyLong_AsLong(arg);
  if (value == -1 && PyErr_Occurred()) return false;
  if (value < 0 || value >= device_count()) {
    PyErr_Format(PyExc_IndexError, "Expected an opencl device index in [0, %d), but got %ld",
                 static_cast<int>(device_count()), value);
    return false;
  }
  *index = static_cast<c10::DeviceIndex>(value);
  return true;
}

PyObject* py_memory_limit(PyObject*, PyObject* arg) {
  c10::DeviceIndex index = 0;
  if (!parse_index(arg, &index)) return nullptr;
  return guarded([&] { return PyLong_FromUnsignedLongLong(memory_limit(index)); });
}

PyObject* py_set_memory_limit(PyObject*, PyObject* args) {
  PyObject* index_arg = nullptr;
  PyObject* bytes_arg = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &index_arg, &bytes_arg)) return nullptr;
  // OverflowError for a negative count or one past 2^64 - 1 (the "K" format would wrap).
  const unsigned long long bytes = PyLong_AsUnsignedLongLong(bytes_arg);
  if (PyErr_Occurred()) return nullptr;
  c10::DeviceIndex index = 0;
  if (!parse_index(index_arg, &index)) return nullptr;
  return guarded([&] {
    set_memory_limit(index, bytes);
    Py_RETURN_NONE;
  });
}

// Sets d[key] = value; false with a Python error set on failure.
bool put(PyObject* dict, const std::string& key, int64_t value) {
  PyObject* number = PyLong_FromLongLong(value);
  if (number == nullptr) return false;
  const int status = PyDict_SetItemString(dict, key.c_str(), number);
  Py_DECREF(number);
  return status == 0;
}

PyObject* py_host_memory_stats(PyObject*, PyObject*) {
  at::HostStats stats;
  try {
    stats = at::getHostAllocator(at::kPrivateUse1)->get_stats();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
  const std::pair<const char*, const c10::CachingAllocator::Stat*> named[] = {
      {"active_requests", &stats.active_requests},
      {"active_bytes", &stats.active_bytes},
      {"allocations", &stats.allocations},
      {"allocated_bytes", &stats.allocated_bytes}};
  bool ok = true;
  for (const auto& [name, stat] : named) {
    const std::string prefix(name);
    ok = ok && put(dict, prefix + ".current", stat->current) &&
         put(dict, prefix + ".peak", stat->peak) &&
         put(dict, prefix + ".allocated", stat->allocated) &&
         put(dict, prefix + ".freed", stat->freed);
  }
  ok = ok && put(dict, "num_host_alloc", stats.num_host_alloc) &&
       put(dict, "num_host_free", stats.num_host_free);
  if (!ok) {
    Py_DECREF(dict);
    return nullptr;
  }
  return dict;
}

PyObject* py_global_memory(PyObject*, PyObject* arg) {
  c10::DeviceIndex index = 0;
  if (!parse_index(arg, &index)) return nullptr;
  return guarded([&] { return PyLong_FromUnsignedLongLong(global_memory_bytes(index)); });
}

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
    {"memory_limit", py_memory_limit, METH_O, "The device allocator's memory limit (0: none)."},
    {"set_memory_limit", py_set_memory_limit, METH_VARARGS, "Set the device's memory limit."},
    {"global_memory", py_global_memory, METH_O, "The device's global memory in bytes."},
    {"host_memory_stats", py_host_memory_stats, METH_NOARGS, "Pinned-memory allocator stats."},
    {"live_blocks", py_live_blocks, METH_NOARGS, "Live blocks of the opencl allocator."},
    {"device_of_address", py_device_of_address, METH_O, "Device index of an opencl address."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_C", "oclvm's PyTorch backend (native part).", -1,
                       kMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace oclvm::torch_adapter

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&oclvm::torch_adapter::kModule); }
