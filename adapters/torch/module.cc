// adapters/torch/module.cc — the Python extension module `oclvm._C`.
//
// Loading the module registers everything by static initialisation (registration.cc: the
// PrivateUse1 allocator, guard, hooks, host allocator, kernels and the CPU fallback). The
// functions below are the few things the Python package needs that torch does not already expose
// through torch.accelerator. Like the rest of the adapter, they reach oclvm only through its one
// Runtime (device.h), never the process-wide VM. Written against the plain Python C API, so the
// module links neither pybind11 nor libtorch_python.
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
//   adopted_results() -> int   results CPU kernels wrote straight into device blocks, since start
//                              (Note [Results written in device memory]; tests)
//   host_kernel_calls() -> int calls that took an unboxed host kernel's fast path, since start
//                              (Note [Unboxed host kernels]; tests)
//   fused_foreach_calls() -> int    calls of those that ran the device's own _foreach_ loops
//                              (Note [Fused foreach loops]; tests)
//   native_kernel_calls() -> int    launches of native operators' kernels, since start
//                              (native_kernels.h; tests)
//   philox_draws() -> int      draws from the generators' Philox streams, since start
//                              (generator.h; tests and the OpInfo sweep)
//   native_copy_calls() -> int      launches of the native strided copy, since start (ditto)
//   native_operator_calls() -> int  operator calls a native kernel answered, since start (ditto;
//                              the bench's share of calls computed on the device)
//   pending_native_launches() -> int  lists the native path submitted and no sync point has
//                              waited for yet (Note [Launches that do not wait]; tests)
//   native_matrix_products() -> bool  whether the module was built with CLBlast, which the
//                              native path's mm, bmm and addmm use (native_blas.cc; tests)
//   fallback_counts() -> dict  {operator name: calls} of the calls that ran a CPU kernel since
//                              start or the last reset (fallback_counts.h)
//   reset_fallback_counts()    sets them to 0
//   device_of_address(int) -> int   the PrivateUse1 hooks' getDeviceFromPtr (tests); RuntimeError
//                              for an address outside opencl memory
//   device_properties(int) -> dict  name, platform, version, total_memory, max_allocation,
//                              base_addr_align (bytes)
//   manual_seed(int, int)      seeds the device's default generator (generator.h)
//   seed(int) -> int           seeds it nondeterministically; returns the seed
//   initial_seed(int) -> int   its current seed
//   get_rng_state(int) -> bytes     its state (the CPU generator's bytes, then the Philox offset's)
//   set_rng_state(int, bytes)  sets it (the CPU generator's bytes alone: offset 0); ValueError for
//                              bytes of another length, nothing changed
//   drain_autograd()           waits until autograd's opencl threads hold no finished backward
//                              (called at interpreter exit: Note [Autograd threads at exit])
//   _note_finalizing_thread()  records the calling thread as the one finalizing the interpreter
//                              (an atexit handler; Note [Daemon threads at exit] in
//                              daemon_exit.cc, whose terminate handler loading the module installs)
//   _record_trace_start(str, int), _record_trace_stop() -> int   the allocation trace of
//                              torch.opencl.memory.record_trace (trace_recorder.h); RuntimeError
//                              for a file that cannot be written or a second recording
//   _record_memory_history(mode, context, max_entries, clear, skip)   oclvm's memory history
//                              on every opencl device (memory_history.h); the arguments are the
//                              enum values of storage/memory_history.h (torch.opencl.memory
//                              parses PyTorch's strings); ValueError for one out of range
//   _memory_snapshot(bool) -> bytes   PyTorch's snapshot dictionary, pickled (with the events
//                              when true)
//   _inductor_init(type, int)  keeps torch.Tensor and the address of torch's
//                              `void* (*)(PyObject*)` that gives a tensor's data_ptr(), for
//   _host_call(int, int, tuple)   runs a compiled kernel's entry on device memory (Note [Compiled
//                              kernels on device memory]); RuntimeError when the device has no
//                              host addresses or the kernel throws, TypeError for bad arguments
//
// Thread-safety: as the C++ side. Calls that wait for a device (the memory history, snapshots,
// _host_call) release the GIL while they wait; the rest block only briefly and keep it.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <torch/csrc/autograd/autograd.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "adapters/torch/allocator.h"
#include "adapters/torch/daemon_exit.h"
#include "adapters/torch/device.h"
#include "adapters/torch/fallback_counts.h"
#include "adapters/torch/foreach_loops.h"
#include "adapters/torch/generator.h"
#include "adapters/torch/host_kernels.h"
#include "adapters/torch/host_results.h"
#include "adapters/torch/host_view.h"
#include "adapters/torch/memory_history.h"
#include "adapters/torch/native_kernels.h"
#include "adapters/torch/native_launches.h"
#include "adapters/torch/trace_recorder.h"

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

// Runs `fn` with the GIL released and returns its result, rethrowing its exception once the GIL
// is back: for calls that wait for a device, which another thread may hold while it waits for
// the GIL (Note [Python stacks in the history], memory_history.cc).
template <typename Fn>
auto without_gil(Fn&& fn) -> decltype(fn()) {
  std::exception_ptr error;
  decltype(fn()) result{};
  Py_BEGIN_ALLOW_THREADS
  try {
    result = fn();
  } catch (...) {
    error = std::current_exception();
  }
  Py_END_ALLOW_THREADS
  if (error) std::rethrow_exception(error);
  return result;
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

PyObject* py_record_trace_start(PyObject*, PyObject* args) {
  const char* path = nullptr;
  PyObject* index_arg = nullptr;
  if (!PyArg_ParseTuple(args, "sO", &path, &index_arg)) return nullptr;
  c10::DeviceIndex index = 0;
  if (!parse_index(index_arg, &index)) return nullptr;
  return guarded([&] {
    TraceRecorder::instance().start(path, index);
    Py_RETURN_NONE;
  });
}

PyObject* py_record_trace_stop(PyObject*, PyObject*) {
  return guarded([&] { return PyLong_FromUnsignedLongLong(TraceRecorder::instance().stop()); });
}

PyObject* py_record_memory_history(PyObject*, PyObject* args) {
  int mode = 0;
  int context = 0;
  unsigned long long max_entries = 0;
  int clear = 0;
  unsigned int skip = 0;
  if (!PyArg_ParseTuple(args, "iiKpI", &mode, &context, &max_entries, &clear, &skip)) {
    return nullptr;
  }
  if (mode < 0 || mode > static_cast<int>(HistoryMode::kAll) || context < 0 ||
      context > static_cast<int>(ContextMode::kAll) || max_entries == 0 ||
      skip >= (1u << kMemoryActionCount)) {
    PyErr_Format(PyExc_ValueError,
                 "Expected a history mode in [0, 2], a context mode in [0, 3], max_entries >= 1 "
                 "and a skip mask below %u, but got %d, %d, %llu, %u",
                 1u << kMemoryActionCount, mode, context, max_entries, skip);
    return nullptr;
  }
  HistoryOptions options;
  options.mode = static_cast<HistoryMode>(mode);
  options.context = static_cast<ContextMode>(context);
  options.max_entries = static_cast<size_t>(max_entries);
  options.clear = clear != 0;
  options.skip = skip;
  return guarded([&] {
    without_gil([&] {
      record_memory_history(options);
      return 0;
    });
    Py_RETURN_NONE;
  });
}

PyObject* py_memory_snapshot(PyObject*, PyObject* arg) {
  const int with_events = PyObject_IsTrue(arg);
  if (with_events < 0) return nullptr;
  return guarded([&] {
    const std::string bytes = without_gil([&] { return memory_snapshot_pickle(with_events != 0); });
    return PyBytes_FromStringAndSize(bytes.data(), static_cast<Py_ssize_t>(bytes.size()));
  });
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

bool put_bool(PyObject* dict, const std::string& key, bool value) {
  return PyDict_SetItemString(dict, key.c_str(), value ? Py_True : Py_False) == 0;
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

PyObject* py_adopted_results(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(adopted_results());
}

PyObject* py_host_kernel_calls(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(host_kernel_calls());
}

PyObject* py_fused_foreach_calls(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(fused_foreach_calls());
}

PyObject* py_philox_draws(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(philox_draws());
}

PyObject* py_native_kernel_calls(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(native_kernel_calls());
}

PyObject* py_native_copy_calls(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(native_copy_calls());
}

PyObject* py_native_operator_calls(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(native_operator_calls());
}

PyObject* py_pending_native_launches(PyObject*, PyObject*) {
  return PyLong_FromSize_t(pending_native_launches());
}

PyObject* py_native_matrix_products(PyObject*, PyObject*) {
  return PyBool_FromLong(native_matrix_products());
}

PyObject* py_fallback_counts(PyObject*, PyObject*) {
  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
  for (const auto& [name, calls] : fallback_counts()) {
    PyObject* value = PyLong_FromUnsignedLongLong(calls);
    const bool ok = value != nullptr && PyDict_SetItemString(dict, name.c_str(), value) == 0;
    Py_XDECREF(value);
    if (!ok) {
      Py_DECREF(dict);
      return nullptr;
    }
  }
  return dict;
}

PyObject* py_reset_fallback_counts(PyObject*, PyObject*) {
  reset_fallback_counts();
  Py_RETURN_NONE;
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

PyObject* py_device_properties(PyObject*, PyObject* arg) {
  c10::DeviceIndex index = 0;
  if (!parse_index(arg, &index)) return nullptr;
  const DeviceProperties* found = nullptr;
  bool native = false;
  PyObject* none = guarded([&] {
    found = &device_properties(index);
    native = native_kernels(index);
    Py_RETURN_NONE;
  });
  if (none == nullptr) return nullptr;
  Py_DECREF(none);
  const DeviceProperties& properties = *found;
  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
  const std::pair<const char*, const std::string*> texts[] = {
      {"name", &properties.name}, {"platform", &properties.platform},
      {"version", &properties.version}};
  bool ok = true;
  for (const auto& [key, text] : texts) {
    PyObject* value = PyUnicode_DecodeUTF8(text->data(), static_cast<Py_ssize_t>(text->size()),
                                           "replace");
    ok = ok && value != nullptr && PyDict_SetItemString(dict, key, value) == 0;
    Py_XDECREF(value);
  }
  ok = ok && put(dict, "total_memory", static_cast<int64_t>(properties.global_mem_bytes)) &&
       put(dict, "max_allocation", static_cast<int64_t>(properties.max_alloc_bytes)) &&
       put(dict, "base_addr_align", static_cast<int64_t>(properties.base_addr_align_bytes)) &&
       put_bool(dict, "host_unified_memory", properties.host_unified_memory) &&
       put_bool(dict, "zero_copy", zero_copy(index)) &&
       put_bool(dict, "host_sections", host_addressable(index)) &&
       put_bool(dict, "cpu_device", properties.cpu_device) &&
       put_bool(dict, "native_kernels", native);
  if (!ok) {
    Py_DECREF(dict);
    return nullptr;
  }
  return dict;
}

// The default generator of the device named by `arg`, or null with a Python error set.
at::Generator* generator_of(PyObject* arg) {
  c10::DeviceIndex index = 0;
  if (!parse_index(arg, &index)) return nullptr;
  return const_cast<at::Generator*>(&default_generator(index));
}

PyObject* py_manual_seed(PyObject*, PyObject* args) {
  PyObject* index_arg = nullptr;
  PyObject* seed_arg = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &index_arg, &seed_arg)) return nullptr;
  // As torch.manual_seed: any integer, taken modulo 2^64 (negative seeds included).
  const unsigned long long seed = PyLong_AsUnsignedLongLongMask(seed_arg);
  if (PyErr_Occurred()) return nullptr;
  at::Generator* generator = generator_of(index_arg);
  if (generator == nullptr) return nullptr;
  return guarded([&] {
    generator->set_current_seed(seed);
    Py_RETURN_NONE;
  });
}

PyObject* py_seed(PyObject*, PyObject* arg) {
  at::Generator* generator = generator_of(arg);
  if (generator == nullptr) return nullptr;
  return guarded([&] { return PyLong_FromUnsignedLongLong(generator->seed()); });
}

PyObject* py_initial_seed(PyObject*, PyObject* arg) {
  at::Generator* generator = generator_of(arg);
  if (generator == nullptr) return nullptr;
  return guarded([&] { return PyLong_FromUnsignedLongLong(generator->current_seed()); });
}

PyObject* py_get_rng_state(PyObject*, PyObject* arg) {
  at::Generator* generator = generator_of(arg);
  if (generator == nullptr) return nullptr;
  return guarded([&] {
    const at::Tensor state = generator->get_state();
    return PyBytes_FromStringAndSize(static_cast<const char*>(state.const_data_ptr()),
                                     static_cast<Py_ssize_t>(state.nbytes()));
  });
}

PyObject* py_set_rng_state(PyObject*, PyObject* args) {
  PyObject* index_arg = nullptr;
  PyObject* state_arg = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &index_arg, &state_arg)) return nullptr;
  if (!PyBytes_Check(state_arg)) {
    PyErr_Format(PyExc_TypeError, "Expected the state as bytes, but got %s",
                 Py_TYPE(state_arg)->tp_name);
    return nullptr;
  }
  at::Generator* generator = generator_of(index_arg);
  if (generator == nullptr) return nullptr;
  const auto size = static_cast<int64_t>(PyBytes_GET_SIZE(state_arg));
  // get_state's layout, or the CPU generator's alone (DeviceGenerator::set_state).
  const int64_t expected = generator->get_state().numel();
  const int64_t host_only = expected - DeviceGenerator::kOffsetBytes;
  if (size != expected && size != host_only) {
    PyErr_Format(PyExc_ValueError,
                 "Expected an RNG state of %lld bytes (or %lld, the CPU generator's), but got "
                 "%lld bytes",
                 static_cast<long long>(expected), static_cast<long long>(host_only),
                 static_cast<long long>(size));
    return nullptr;
  }
  return guarded([&] {
    at::Tensor state = at::empty({size}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(state.mutable_data_ptr(), PyBytes_AS_STRING(state_arg),
                static_cast<size_t>(size));
    generator->set_state(state);
    Py_RETURN_NONE;
  });
}

// Note [Autograd threads at exit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Autograd runs the backward of device tensors on a thread per device. That thread wakes the
// caller as soon as the gradients are in and only then drops its reference to the finished
// backward, which may hold tensors whose Python objects it must release. A program that ends right
// after backward() (a training script) raced that release against the interpreter's
// finalisation: the thread asked for the GIL after finalisation began, was unwound through a
// noexcept frame, and the process aborted ("terminate called without an active exception") in
// about 1 run in 6. The CPU runs backward on the caller's thread and never aborts. At exit the
// package runs this (atexit): a tiny backward on each device, built in C++ so it holds no Python
// object, with the GIL released. Each device thread handles it only after it has dropped the
// previous backward, releasing whatever Python objects that held while the interpreter is whole.
PyObject* py_note_finalizing_thread(PyObject*, PyObject*) {
  note_finalizing_thread();
  Py_RETURN_NONE;
}

PyObject* py_drain_autograd(PyObject*, PyObject*) {
  std::string failure;
  Py_BEGIN_ALLOW_THREADS
  try {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      const at::TensorOptions options =
          at::TensorOptions().device(c10::DeviceType::PrivateUse1, d);
      const at::Tensor leaf = at::ones({1}, options).requires_grad_(true);
      // mul and its backward have native kernels: on the native path the drain runs no CPU
      // kernel (no fallback warning at exit).
      torch::autograd::backward({leaf.mul(2)}, {at::ones({1}, options)});
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  Py_END_ALLOW_THREADS
  if (!failure.empty()) {
    PyErr_SetString(PyExc_RuntimeError, failure.c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}

// Note [Compiled kernels on device memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch.compile's Inductor generates C++ kernels for the device, as for the CPU (oclvm/_inductor.py
// registers the CPU's code generation for opencl). Each kernel is `extern "C" void kernel(...)`
// over raw pointers and scalars; the package appends an entry with one signature to its source,
// `int oclvm_entry(const uint64_t* slots, char* error, size_t error_size)`, which unpacks each
// slot as the kernel's parameter and returns 1 with the message of anything the kernel threw.
// _host_call(entry, device, args) fills the slots and calls it:
//   - a tensor's slot is its data_ptr() (torch's own function, the one Inductor's bindings call),
//     then, when a live block of the device allocator holds that address, the block's host
//     address at the same offset. A device address is never dereferenceable on the host, so every
//     device tensor must translate: one on another device, or on a device whose memory has no
//     host address, is refused. An address no block holds is host memory (a CPU scalar tensor
//     Dynamo passes in) and stays as it is; an empty tensor's null stays null;
//   - an int's slot is its int64 value, a float's the bits of its double.
// The kernel then runs inside one host section of the device (Note [Host sections] in
// vm/host_section.h), with the GIL released: the section begins once the device's worker is idle,
// so every instruction the wrapper queued before (the device operators between fused kernels) has
// finished, and nothing reaches the device until the kernel returns. The kernel's OpenMP team
// works inside the caller's section, as the device's CPU kernels do. The argument tuple keeps its
// tensors, and so their blocks, alive throughout.
using TensorDataFn = void* (*)(PyObject*);
// Set once by _inductor_init and read under the GIL only.
PyTypeObject* g_tensor_type = nullptr;
TensorDataFn g_tensor_data = nullptr;

PyObject* py_inductor_init(PyObject*, PyObject* args) {
  PyObject* type = nullptr;
  unsigned long long data_fn = 0;
  if (!PyArg_ParseTuple(args, "OK", &type, &data_fn)) return nullptr;
  if (!PyType_Check(type) || data_fn == 0) {
    PyErr_SetString(PyExc_TypeError, "_inductor_init expects torch.Tensor and a function address");
    return nullptr;
  }
  Py_INCREF(type);
  Py_XDECREF(reinterpret_cast<PyObject*>(g_tensor_type));
  g_tensor_type = reinterpret_cast<PyTypeObject*>(type);
  g_tensor_data = reinterpret_cast<TensorDataFn>(static_cast<uintptr_t>(data_fn));
  Py_RETURN_NONE;
}

// Fills `slots` from `items` (a tuple) and lists the tensor slots in `tensors`; false with a
// Python error set for an argument that is neither a tensor, an int nor a float.
bool fill_slots(PyObject* items, c10::SmallVector<uint64_t, 16>& slots,
                c10::SmallVector<uint32_t, 16>& tensors) {
  const Py_ssize_t count = PyTuple_GET_SIZE(items);
  slots.resize(static_cast<size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* item = PyTuple_GET_ITEM(items, i);
    uint64_t& slot = slots[static_cast<size_t>(i)];
    if (PyObject_TypeCheck(item, g_tensor_type)) {
      slot = reinterpret_cast<uintptr_t>(g_tensor_data(item));
      tensors.push_back(static_cast<uint32_t>(i));
    } else if (PyLong_Check(item)) {  // bool too
      const long long value = PyLong_AsLongLong(item);
      if (value == -1 && PyErr_Occurred()) return false;
      slot = static_cast<uint64_t>(value);
    } else if (PyFloat_Check(item)) {
      const double value = PyFloat_AS_DOUBLE(item);
      std::memcpy(&slot, &value, sizeof slot);
    } else {
      PyErr_Format(PyExc_TypeError,
                   "a compiled kernel's argument %zd is a %s; expected a tensor, an int or a float",
                   i, Py_TYPE(item)->tp_name);
      return false;
    }
  }
  return true;
}

PyObject* py_host_call(PyObject*, PyObject* args) {
  unsigned long long entry = 0;
  PyObject* device = nullptr;
  PyObject* items = nullptr;
  if (!PyArg_ParseTuple(args, "KOO!", &entry, &device, &PyTuple_Type, &items)) return nullptr;
  if (g_tensor_type == nullptr || entry == 0) {
    PyErr_SetString(PyExc_RuntimeError, "_host_call needs _inductor_init first and an entry");
    return nullptr;
  }
  c10::DeviceIndex index = 0;
  if (!parse_index(device, &index)) return nullptr;
  return guarded([&]() -> PyObject* {
    c10::SmallVector<uint64_t, 16> slots;
    c10::SmallVector<uint32_t, 16> tensors;
    if (!fill_slots(items, slots, tensors)) return nullptr;
    without_gil([&] {
      const int device_number = index;  // DeviceIndex is a char to a stream
      TORCH_CHECK(host_addressable(index), "opencl:", device_number,
                  "'s memory has no host addresses, so torch.compile's C++ kernels cannot run on "
                  "it (torch.opencl.get_device_properties(", device_number,
                  ").host_sections is False)");
      const CLDeviceAllocator& allocator = CLDeviceAllocator::instance();
      for (const uint32_t i : tensors) {
        if (slots[i] == 0) continue;
        const CLDeviceAllocator::HostPlace place =
            allocator.host_place(reinterpret_cast<const void*>(static_cast<uintptr_t>(slots[i])));
        if (!place.found) continue;  // host memory
        TORCH_CHECK(place.device == index, "A kernel compiled for opencl:", device_number,
                    " got a tensor on opencl:", static_cast<int>(place.device), " (argument ", i,
                    ")");
        TORCH_CHECK(place.host != nullptr, "A kernel compiled for opencl:", device_number,
                    " got a tensor whose memory has no host address (argument ", i, ")");
        slots[i] = reinterpret_cast<uintptr_t>(place.host);
      }
      std::optional<vm::HostSection> section = host_section(index);
      TORCH_CHECK(section, "opencl:", device_number, " cannot open a host section here (the VM is shut "
                  "down, or this thread runs an instruction's callback)");
      char error[512] = {};
      using Entry = int (*)(const uint64_t*, char*, size_t);
      const int failed = reinterpret_cast<Entry>(static_cast<uintptr_t>(entry))(
          slots.data(), error, sizeof error);
      section.reset();
      TORCH_CHECK(failed == 0, "A compiled kernel on opencl:", device_number, " failed: ", error);
      return 0;
    });
    Py_RETURN_NONE;
  });
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
    {"adopted_results", py_adopted_results, METH_NOARGS,
     "Results CPU kernels wrote straight into device blocks, since start."},
    {"host_kernel_calls", py_host_kernel_calls, METH_NOARGS,
     "Calls that took an unboxed host kernel's fast path, since start."},
    {"fused_foreach_calls", py_fused_foreach_calls, METH_NOARGS,
     "Calls that ran the device's own _foreach_ loops, since start."},
    {"philox_draws", py_philox_draws, METH_NOARGS,
     "Draws from the generators' Philox streams since the process started."},
    {"native_kernel_calls", py_native_kernel_calls, METH_NOARGS,
     "Launches of native operators' kernels, since start."},
    {"native_copy_calls", py_native_copy_calls, METH_NOARGS,
     "Launches of the native strided copy, since start."},
    {"native_operator_calls", py_native_operator_calls, METH_NOARGS,
     "Operator calls a native kernel answered, since start."},
    {"pending_native_launches", py_pending_native_launches, METH_NOARGS,
     "Lists the native path submitted that no sync point has waited for yet."},
    {"native_matrix_products", py_native_matrix_products, METH_NOARGS,
     "Whether the module was built with CLBlast, for the native path's matrix products."},
    {"fallback_counts", py_fallback_counts, METH_NOARGS,
     "{operator: calls} of the calls that ran a CPU kernel, since start or the last reset."},
    {"reset_fallback_counts", py_reset_fallback_counts, METH_NOARGS,
     "Set the fallback counts to 0."},
    {"device_of_address", py_device_of_address, METH_O, "Device index of an opencl address."},
    {"device_properties", py_device_properties, METH_O, "What the driver says of a device."},
    {"manual_seed", py_manual_seed, METH_VARARGS, "Seed a device's default generator."},
    {"seed", py_seed, METH_O, "Seed a device's default generator nondeterministically."},
    {"initial_seed", py_initial_seed, METH_O, "The seed of a device's default generator."},
    {"get_rng_state", py_get_rng_state, METH_O, "The state of a device's default generator."},
    {"set_rng_state", py_set_rng_state, METH_VARARGS, "Set a device's default generator state."},
    {"drain_autograd", py_drain_autograd, METH_NOARGS, "Wait for autograd's device threads."},
    {"_note_finalizing_thread", py_note_finalizing_thread, METH_NOARGS,
     "Record the thread finalizing the interpreter (an atexit handler)."},
    {"_record_trace_start", py_record_trace_start, METH_VARARGS,
     "Start writing the device's allocations to an oclvm-trace v1 file."},
    {"_record_trace_stop", py_record_trace_stop, METH_NOARGS,
     "Stop the allocation trace; returns the events written."},
    {"_record_memory_history", py_record_memory_history, METH_VARARGS,
     "Start, change or stop the memory history of every opencl device."},
    {"_memory_snapshot", py_memory_snapshot, METH_O,
     "PyTorch's memory snapshot dictionary of the opencl devices, pickled."},
    {"_inductor_init", py_inductor_init, METH_VARARGS,
     "Keep torch.Tensor and torch's data_ptr function for _host_call."},
    {"_host_call", py_host_call, METH_VARARGS,
     "Run a compiled kernel's entry on device memory, in one host section."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_C", "oclvm's PyTorch backend (native part).", -1,
                       kMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace oclvm::torch_adapter

PyMODINIT_FUNC PyInit__C() {
  oclvm::torch_adapter::park_daemon_threads_at_exit();  // Note [Daemon threads at exit]
  return PyModule_Create(&oclvm::torch_adapter::kModule);
}
