"""oclvm's PyTorch backend: the device ``opencl`` (PyTorch's PrivateUse1) on oclvm's VM.

Importing the package (or ``import torch`` with the package installed: it is a ``torch.backends``
entry point) renames PrivateUse1 to ``opencl``, loads the native module ``oclvm._C`` (which
registers the allocator, device guard, hooks and operators), registers this module as
``torch.opencl`` and generates ``Tensor.opencl()``, ``Tensor.is_opencl``, ``Module.opencl()`` and
the storage methods.

``torch.opencl`` follows ``torch.cuda``'s names: is_available, device_count, current_device,
set_device, synchronize, memory_stats, memory_allocated, max_memory_allocated, memory_reserved,
max_memory_reserved, reset_peak_memory_stats, reset_accumulated_memory_stats, empty_cache,
mem_get_info, memory_summary, device (context manager; torch.load uses it), set_per_process_memory_fraction (not supported: raises). The memory functions read the statistics of the device's oclvm allocator through
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
    "empty_cache", "mem_get_info", "manual_seed", "manual_seed_all", "memory_summary",
    "set_per_process_memory_fraction", "device",
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


class device:
    """Context manager making `index` (int, str or torch.device; None: no change) the current
    opencl device inside the block and restoring the previous one after, like torch.cuda.device.
    torch's storage .to()/torch.load(map_location=...) enter it as torch.opencl.device(...)."""

    def __init__(self, index) -> None:
        self.index = -1 if index is None else _index(index)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = _C.current_device()
        if self.index != -1 and self.index != self.previous:
            _C.set_device(self.index)

    def __exit__(self, *exc) -> bool:
        if self.index != -1 and self.index != self.previous:
            _C.set_device(self.previous)
        return False


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


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A readable table of memory_stats(device) (see oclvm.memory): per statistic the current
    value, peak, total allocated and total freed, with large/small-pool sub-rows unless
    `abbreviated`."""
    from . import memory
    index = _index(device)
    return memory.memory_summary(memory_stats(index), index, abbreviated)


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Not supported: oclvm's per-device limit is fixed when the allocator is created."""
    _index(device)  # still reject a non-opencl device with the usual message
    raise NotImplementedError(
        "torch.opencl.set_per_process_memory_fraction is not supported: oclvm's per-device limit "
        "on reserved bytes is read once, when the device's allocator is created. Set the "
        "environment variable OCLVM_MEMORY_LIMIT (bytes, K/M/G suffixes, e.g. "
        "OCLVM_MEMORY_LIMIT=2G) before the process first uses the device instead.")


if not hasattr(torch, BACKEND):
    torch._register_device_module(BACKEND, sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing the package did the work."""
