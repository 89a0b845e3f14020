"""oclvm's PyTorch backend: the device ``opencl`` (PyTorch's PrivateUse1) on oclvm's VM.

Importing the package (or ``import torch`` with the package installed: it is a ``torch.backends``
entry point) renames PrivateUse1 to ``opencl``, loads the native module ``oclvm._C`` (which
registers the allocator, device guard, hooks and operators), registers this module as
``torch.opencl`` and generates ``Tensor.opencl()``, ``Tensor.is_opencl``, ``Module.opencl()`` and
the storage methods.

``torch.opencl`` follows ``torch.cuda``'s names: is_available, device_count, current_device,
set_device, synchronize, memory_stats, memory_allocated, max_memory_allocated, memory_reserved,
max_memory_reserved, reset_peak_memory_stats, reset_accumulated_memory_stats, empty_cache,
mem_get_info. The memory functions read the statistics of the device's oclvm allocator through
``torch.accelerator`` (the same c10::DeviceAllocator behind both).
"""
import sys

import torch

BACKEND = "opencl"

# The rename may happen once per process; a second import of this package finds it done.
if torch._C._get_privateuse1_backend_name() != BACKEND:
    torch.utils.rename_privateuse1_backend(BACKEND)

from . import _C  # noqa: E402  (static initialisers register allocator, guard, hooks, kernels)

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device",
    "synchronize", "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "empty_cache", "mem_get_info", "manual_seed", "manual_seed_all",
]


def _index(device=None) -> int:
    """The device index of `device` (None: the current device; int, str or torch.device)."""
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != BACKEND:
        raise ValueError(f"Expected an {BACKEND} device, but got {device}")
    return _C.current_device() if device.index is None else device.index


def is_available() -> bool:
    return _C.device_count() > 0


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def set_device(device) -> None:
    _C.set_device(_index(device))


def synchronize(device=None) -> None:
    """Every operator returns after its VM sync point, so there is never anything to wait for."""
    _C.synchronize()


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def manual_seed(seed: int) -> None:
    torch.Generator(device=f"{BACKEND}:{current_device()}").manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        torch.Generator(device=f"{BACKEND}:{i}").manual_seed(seed)


def memory_stats(device=None) -> dict:
    """Same keys as torch.cuda.memory_stats (``allocated_bytes.all.current``, ...)."""
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Gives every wholly free cached segment of every opencl device back to the driver."""
    torch.accelerator.empty_cache()


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes: total is OCLVM_MEMORY_LIMIT or the device's global memory, free is
    total minus what oclvm's allocator has reserved."""
    return torch.accelerator.get_memory_info(_index(device))


if not hasattr(torch, BACKEND):
    torch._register_device_module(BACKEND, sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing the package did the work."""
