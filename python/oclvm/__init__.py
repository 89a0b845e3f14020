"""oclvm's PyTorch backend: the device ``opencl`` (PyTorch's PrivateUse1) on oclvm's VM.

Importing the package (or ``import torch`` with the package installed: it is a ``torch.backends``
entry point) renames PrivateUse1 to ``opencl``, loads the native module ``oclvm._C`` (which
registers the allocator, device guard, hooks and operators), registers this module as
``torch.opencl`` and generates ``Tensor.opencl()``, ``Tensor.is_opencl``, ``Module.opencl()`` and
the storage methods.

``torch.opencl`` follows ``torch.cuda``'s names: is_available, device_count, current_device,
set_device, synchronize, memory_stats, memory_allocated, max_memory_allocated, memory_reserved,
max_memory_reserved, reset_peak_memory_stats, reset_accumulated_memory_stats, empty_cache,
mem_get_info, memory_summary, set_per_process_memory_fraction, get_per_process_memory_fraction,
host_memory_stats,
device (context manager; torch.load uses it), and the streams: Stream, Event, current_stream,
default_stream, set_stream, stream (context manager). The memory functions read the statistics of
the device's oclvm allocator through ``torch.accelerator`` (the same c10::DeviceAllocator behind
both). A stream is a VM stream with its own OpenCL queue; an Event is a marker of one.
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
    "set_per_process_memory_fraction", "get_per_process_memory_fraction", "host_memory_stats", "device", "Stream",
    "Event", "current_stream", "default_stream", "set_stream", "stream",
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
    """Waits until every stream of the device has finished its work."""
    torch.accelerator.synchronize(_index(device))


# Stream and Event return torch.Stream / torch.Event objects rather than subclasses: torch's
# Event.elapsed_time (and friends) accept only the exact torch types.
def Stream(device=None, priority: int = 0) -> torch.Stream:
    """A new stream of an opencl device (default: the current one): a VM user stream with its own
    OpenCL queue. OpenCL queues have no priorities; `priority` is accepted and has no effect."""
    return torch.Stream(device=torch.device(BACKEND, _index(device)), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False,
          interprocess: bool = False) -> torch.Event:
    """An event of the opencl device: a marker of the stream it is recorded on. With
    enable_timing, elapsed_time() gives the milliseconds between two recorded events (host time
    at which the recorded work had completed)."""
    if interprocess:
        raise ValueError("Expected interprocess=False: opencl events cannot be shared between "
                         "processes")
    return torch.Event(device=BACKEND, enable_timing=enable_timing, blocking=blocking)


def current_stream(device=None) -> torch.Stream:
    """This thread's current stream of the device (its default stream until set)."""
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None) -> torch.Stream:
    """The device's default stream (oclvm's compute stream of that device)."""
    index = _index(device)
    # Stream id 0 is the default stream of every opencl device (adapters/torch/allocator.h).
    return torch.Stream(stream_id=0, device_index=index,
                        device_type=current_stream(index).device_type)


def set_stream(stream: torch.Stream) -> None:
    """Makes `stream` this thread's current stream of its device, and its device the current
    device (as torch.accelerator.set_stream and torch.cuda.set_stream do)."""
    torch.accelerator.set_stream(stream)


class stream:
    """Context manager running the block's operators on `stream` (None: no change), like
    torch.cuda.stream: inside, the stream's device is the current device and the stream its
    current stream; after, the previous current device and that device's previous stream are
    restored."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.previous_stream = None
        self.previous_device = -1

    def __enter__(self):
        if self.stream is not None:
            self.previous_device = _C.current_device()
            self.previous_stream = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc) -> bool:
        if self.stream is not None:
            set_stream(self.previous_stream)
            _C.set_device(self.previous_device)
        return False


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
    """Limits what the device's allocator may reserve to `fraction` (0 to 1) of the device's
    global memory, like torch.cuda's: a request that would need more raises
    torch.OutOfMemoryError. Lowering the limit under what is reserved gives the cached free
    segments back; live tensors are never taken back. 1 removes the limit (OCLVM_MEMORY_LIMIT
    sets the limit a process starts with)."""
    index = _index(device)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"Expected a float fraction, but got {type(fraction).__name__}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"Expected a fraction in [0, 1], but got {fraction}")
    if fraction == 1:
        _C.set_memory_limit(index, 0)
        return
    # At least one byte: a limit of 0 means "none" to oclvm, a fraction of 0 means "nothing".
    _C.set_memory_limit(index, max(1, int(fraction * _C.global_memory(index))))


def host_memory_stats() -> dict:
    """Statistics of the pinned-memory (host) allocator behind pin_memory(), with
    torch.cuda.host_memory_stats's keys: active_requests / active_bytes / allocations /
    allocated_bytes (.current .peak .allocated .freed), num_host_alloc, num_host_free. It has no
    cache, so active and allocated agree."""
    return _C.host_memory_stats()


def get_per_process_memory_fraction(device=None) -> float:
    """The device's memory limit as a fraction of its global memory (1.0 without a limit)."""
    index = _index(device)
    limit = _C.memory_limit(index)
    return 1.0 if limit == 0 else min(1.0, limit / _C.global_memory(index))


if not hasattr(torch, BACKEND):
    torch._register_device_module(BACKEND, sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing the package did the work."""
