"""torch.compile on the device: Inductor's CPU code generation for ``opencl`` tensors.

Inductor looks for a device's code generation on the device module at its first compile; the
package's ``__getattr__`` imports this module then (so ``import torch`` never pays for Inductor).
On import this module registers, once:

- the CPU's C++ scheduling (``CppScheduling``) for ``opencl``, with ``WrapperCodegen``, a Python
  wrapper that calls each C++ kernel through ``oclvm_call``: the kernel runs on the host, on
  device memory, inside one host section (Note [Compiled kernels on device memory] in
  ``adapters/torch/module.cc``), with the device tensors' host addresses in place of their
  device addresses, which the host cannot dereference;
- the device's op overrides and its Dynamo ``DeviceInterface``;
- a no-op post-grad pass whose ``uuid`` keys Inductor's caches by this file and by which devices
  have host addresses, so a cached graph made by another version is not reused;
- three changes to Inductor's checks that read ``device.type == "cpu"`` where they mean "its
  kernels are C++ for the host": the scheduler's ``is_cpu`` (loop reordering assumes GPU-style
  loop groups), ``get_current_backend`` (which names Triton for every device but the CPU), and
  max-autotune's timing of ATen choices (on CUDA unless a GPU tensor is among the inputs).

A device whose memory has no host address (``get_device_properties(i).host_sections`` False:
``OCLVM_ZERO_COPY=0`` or ``map``, a GPU without shared virtual memory) cannot run these kernels:
a frame whose graph uses one runs eagerly, with one warning (``WrapperCodegen.create`` raises
Dynamo's ``SkipFrame``). The C++ wrapper (``cpp_wrapper``) and AOTInductor are refused with an
error that says so.

Thread-safety: registration runs under the import lock; the helpers the generated code calls are
called with the GIL held and may be called from any thread.
"""
from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import warnings
from pathlib import Path

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass
from torch._inductor.virtualized import V

from . import _C

DEVICE = "opencl"
Scheduling = CppScheduling

# ---------------------------------------------------------------------------------------------
# What the generated code calls

_ENTRY = "oclvm_entry"


def _entry_source(argtypes: list[str]) -> str:
    """C++ appended to a kernel's source: ``int oclvm_entry(const uint64_t* slots, char* error,
    size_t error_size)``, which calls ``kernel`` with each slot as its parameter (pointers: host
    addresses; integers: int64 values; floats: the bits of a double) and returns 1 with the
    message of whatever the kernel threw (index checks and integer division do)."""
    unpacked = []
    for i, argtype in enumerate(argtypes):
        bare = argtype.replace("const ", "").strip()
        if argtype.endswith("*"):
            unpacked.append(f"reinterpret_cast<{argtype}>(static_cast<uintptr_t>(s[{i}]))")
        elif bare in ("float", "double"):
            unpacked.append(f"static_cast<{bare}>(oclvm_slot_double(s[{i}]))")
        else:
            unpacked.append(f"static_cast<{bare}>(static_cast<int64_t>(s[{i}]))")
    return f"""
// oclvm: one entry for every kernel, called by oclvm._C._host_call
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
static inline double oclvm_slot_double(uint64_t bits) {{
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}}
extern "C" int {_ENTRY}(const uint64_t* s, char* error, size_t error_size) {{
  try {{
    kernel({", ".join(unpacked)});
    return 0;
  }} catch (const std::exception& e) {{
    std::snprintf(error, error_size, "%s", e.what());
  }} catch (...) {{
    std::snprintf(error, error_size, "an unknown C++ exception");
  }}
  return 1;
}}
"""


def oclvm_cpp_pybinding(async_compile, argtypes, source_code):
    """What the generated code calls in place of ``async_compile.cpp_pybinding``: the same kernel
    with the entry appended, returned as that returns it (the binding, or a future of it)."""
    return async_compile.cpp_pybinding(argtypes, source_code + _entry_source(argtypes))


_entries: dict[int, tuple[object, object, int]] = {}  # id(binding) -> (binding, library, entry)


def _entry_of(kernel) -> int:
    """The address of ``oclvm_entry`` in the shared object behind ``kernel``, the function
    Inductor loaded (its ``__self__`` is the extension module of that object)."""
    found = _entries.get(id(kernel))
    if found is not None and found[0] is kernel:
        return found[2]
    library = ctypes.CDLL(kernel.__self__.__file__)  # already loaded: the same handle
    entry = ctypes.cast(getattr(library, _ENTRY), ctypes.c_void_p).value
    _entries[id(kernel)] = (kernel, library, entry)
    return entry


calls = 0  # kernels run through oclvm_call since start (tests)


def oclvm_call(kernel, device_index: int, *args) -> None:
    """Runs a compiled C++ kernel of device ``device_index`` on its arguments (tensors of that
    device or host scalars, ints, floats) in one host section."""
    global calls
    calls += 1
    _C._host_call(_entry_of(kernel), device_index, args)


# ---------------------------------------------------------------------------------------------
# Code generation


def _host_addressable(index: int) -> bool:
    return bool(_C.device_properties(index)["host_sections"])


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=2)


class _DeviceKernelCalls:
    """The device's calls in a Python wrapper (mixed into the main and the subgraph wrapper)."""

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline(f"from {__name__} import oclvm_call, oclvm_cpp_pybinding")

    def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True,
                      cpp_definition=None):
        prefix = "async_compile.cpp_pybinding("
        if not gpu and kernel_body.startswith(prefix):
            kernel_body = "oclvm_cpp_pybinding(async_compile, " + kernel_body[len(prefix):]
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True,
                                     **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type == DEVICE and not triton:
            index = device.index if device.index is not None else torch.opencl.current_device()
            self.writeline(f"oclvm_call({kernel_name}, {index}, {', '.join(call_args)})")
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device,
                                             triton=triton, **kwargs)

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None,
                        is_pinned=False):
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape,
                                       is_pinned)
        # Devices other than the CPU and CUDA's get device='opencl', the current device: name the
        # buffer's own (Inductor writes no device guard for devices it does not take for GPUs).
        if device.type == DEVICE and device.index is not None:
            line = line.replace(f"device='{DEVICE}'", f"device='{DEVICE}:{device.index}'")
        return line


class SubgraphWrapperCodegen(_DeviceKernelCalls, SubgraphPythonWrapperCodegen):
    pass


class WrapperCodegen(_DeviceKernelCalls, PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return SubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        _refuse_devices_without_host_addresses()
        return WrapperCodegen()


def _refuse_devices_without_host_addresses() -> None:
    """Makes Dynamo run the frame being compiled eagerly when its graph uses a device whose
    memory has no host address (SkipFrame, which compile_fx passes through)."""
    graph = V.graph
    indices = {index for index in getattr(graph, "device_idxs", ()) if index is not None}
    if DEVICE not in getattr(graph, "device_types", ()):
        return
    missing = sorted(i for i in indices or {torch.opencl.current_device()}
                     if not _host_addressable(i))
    if not missing:
        return
    from torch._dynamo.exc import SkipFrame
    names = ", ".join(f"{DEVICE}:{i}" for i in missing)
    reason = (f"torch.compile: {names} has no host addresses for its memory (host_sections is "
              "False), so Inductor's C++ kernels cannot run on it; this frame runs eagerly. "
              "backend='aot_eager' compiles for it without Inductor's kernels")
    _warn_once(names, reason)
    raise SkipFrame(reason)


class _Unsupported:
    """Stands for the C++ and FX wrappers, which the device does not have."""

    supports_caching = False

    @staticmethod
    def create(*args, **kwargs):
        raise RuntimeError(
            f"torch.compile on {DEVICE} generates a Python wrapper only: cpp_wrapper, "
            "AOTInductor and the FX wrapper are not supported there (compile with "
            "cpp_wrapper=False, or on the CPU)")


CppWrapperCodegen = _Unsupported
WrapperFxCodegen = _Unsupported
PythonWrapperCodegen = WrapperCodegen


class OpOverrides(DeviceOpOverrides):
    def import_get_raw_stream_as(self, name):
        return f"def {name}(_):\n    return 0\n"

    def set_device(self, device_idx):
        return f"torch.{DEVICE}.set_device({device_idx})"

    def synchronize(self):
        return f"torch.{DEVICE}.synchronize()"

    def device_guard(self, device_idx):
        return f"torch.{DEVICE}.device({device_idx})"

    def cpp_kernel_type(self):
        return "void*"


class _Properties:
    """What Inductor reads of a device's properties: the kernels run on the host's cores."""

    def __init__(self) -> None:
        self.multi_processor_count = multiprocessing.cpu_count()


class Interface(DeviceInterface):
    """Dynamo's view of the device (torch._dynamo.device_interface)."""

    device = torch.opencl.device
    Event = torch.opencl.Event
    Stream = torch.opencl.Stream

    class Worker:
        @staticmethod
        def set_device(device):
            torch.opencl.set_device(device)

        @staticmethod
        def current_device():
            return torch.opencl.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return _Properties()

    current_device = staticmethod(torch.opencl.current_device)
    set_device = staticmethod(torch.opencl.set_device)
    device_count = staticmethod(torch.opencl.device_count)
    is_available = staticmethod(torch.opencl.is_available)
    synchronize = staticmethod(torch.opencl.synchronize)
    current_stream = staticmethod(torch.opencl.current_stream)
    set_stream = staticmethod(torch.opencl.set_stream)
    stream = staticmethod(torch.opencl.stream)
    memory_allocated = staticmethod(torch.opencl.memory_allocated)

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = torch.opencl.current_device()
        if device != previous:
            torch.opencl.set_device(device)
        return previous

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return Interface.exchange_device(device)

    @staticmethod
    def get_raw_stream(device_idx) -> int:
        return 0

    @staticmethod
    def get_compute_capability(device=None) -> str:
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True


class _CacheKey(CustomGraphModulePass):
    """Changes no graph; its uuid keys Inductor's caches by this file's code and by which devices
    have host addresses."""

    def __call__(self, gm) -> None:
        pass

    _code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]

    def uuid(self) -> str:
        hosts = "".join("1" if _host_addressable(i) else "0"
                        for i in range(torch.opencl.device_count()))
        return f"oclvm-{self._code}-{hosts}"


def _generate_for_device_as_for_cpu() -> None:
    """Two of Inductor's checks ask whether a device is the CPU where they mean "its kernels are
    CppScheduling's", and the device's are:
    - the scheduler skips loop reordering, reindexing and index inversion for nodes whose
      is_cpu() is true: they assume GPU-style (numel, rnumel) loop groups;
    - get_current_backend() names the code generator: the CPU's is config.cpu_backend ("cpp"),
      any other device's config.cuda_backend ("triton"), and the C++ code generator then loses
      the types of its values (index_expr in a random-number kernel) and would widen half
      precision as for Triton. Inductor's modules import the function by name, so each module's
      name is replaced."""
    import torch._inductor.codegen.common as common
    import torch._inductor.kernel.mm_common as mm_common
    import torch._inductor.utils as utils
    from torch._inductor.scheduler import BaseSchedulerNode

    def is_cpu(self) -> bool:
        device = self.get_device()
        return device is not None and device.type in ("cpu", DEVICE)

    BaseSchedulerNode.is_cpu = is_cpu

    original = utils.get_current_backend

    def get_current_backend(device_type: str | None = None) -> str:
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        return original("cpu" if device_type == DEVICE else device_type)

    for module in (utils, common, mm_common):
        if getattr(module, "get_current_backend", None) is original:
            module.get_current_backend = get_current_backend


def _time_aten_choices_on_the_device() -> None:
    """max-autotune times an operator's ATen choices (addmm with or without its bias fused) with
    GPUDeviceBenchmarkMixin unless the layout is the CPU's, and that asks CUDA for the device
    when no GPU tensor is among the inputs. The device's are timed on the host's clock, each run
    synchronized."""
    from torch._inductor import autotune_process
    from torch._inductor.runtime.benchmarking import benchmarker

    original = autotune_process.GPUDeviceBenchmarkMixin.do_bench

    def do_bench(self, fn, *input_tensors, out=None):
        tensors = [t for t in (*input_tensors, out) if isinstance(t, torch.Tensor)]
        devices = {t.device for t in tensors if t.device.type == DEVICE}
        if not devices:
            return original(self, fn, *input_tensors, out=out)
        if len(devices) > 1:
            raise RuntimeError(f"Can not mix devices {sorted(map(str, devices))}")
        index = next(iter(devices)).index or 0

        def run():
            fn()
            torch.opencl.synchronize(index)

        return benchmarker.benchmark_cpu(run)

    autotune_process.GPUDeviceBenchmarkMixin.do_bench = do_bench


def _register() -> None:
    _C._inductor_init(torch.Tensor, torch._C._dynamo.guards._torchinductor_pyobject_tensor_data_ptr)
    _generate_for_device_as_for_cpu()
    _time_aten_choices_on_the_device()
    register_device_op_overrides(DEVICE, OpOverrides())
    register_interface_for_device(DEVICE, Interface)
    register_backend_for_device(DEVICE, Scheduling, WrapperCodegen, CppWrapperCodegen,
                                WrapperFxCodegen, device_custom_pass=_CacheKey())


_register()
