"""oclvm's PyTorch backend: the device ``opencl`` (PyTorch's PrivateUse1) on oclvm's VM.

Importing the package (or ``import torch`` with the package installed: it is a ``torch.backends``
entry point) renames PrivateUse1 to ``opencl``, loads the native module ``oclvm._C`` (which
registers the allocator, device guard, hooks, generators and operators), registers this module as
``torch.opencl`` and generates ``Tensor.opencl()``, ``Tensor.is_opencl``, ``Module.opencl()`` and
the storage methods.

``torch.opencl`` follows ``torch.cuda``'s names and signatures:

- devices: is_available, is_initialized, init, device_count, current_device, set_device, device
  (context manager; torch.load uses it), synchronize, get_device_name, get_device_properties
  (a DeviceProperties), get_device_capability (the device's OpenCL version as (major, minor));
- memory: memory_stats, memory_allocated, max_memory_allocated, memory_reserved,
  max_memory_reserved, reset_peak_memory_stats, reset_accumulated_memory_stats, empty_cache,
  mem_get_info, memory_summary, set_per_process_memory_fraction, get_per_process_memory_fraction,
  host_memory_stats. They read the statistics of the device's oclvm allocator through
  ``torch.accelerator`` (the same c10::DeviceAllocator behind both);
- random numbers, on each device's default generator (a CPU Mersenne Twister owned by the device:
  random operators run CPU kernels, and its state has the CPU generator's layout): manual_seed,
  manual_seed_all, seed, seed_all, initial_seed, get_rng_state, set_rng_state, get_rng_state_all,
  set_rng_state_all. ``torch.manual_seed`` and ``torch.seed`` reach manual_seed_all;
- streams: Stream and Event (classes: ``isinstance`` works), current_stream, default_stream,
  set_stream, stream (context manager). A stream is a VM stream with its own OpenCL queue; an
  event is a marker of one (Note [Event instances are torch.Event]).
"""
import atexit
import dataclasses
import os as _os
import re
import sys

import torch

BACKEND = "opencl"

# The rename may happen once per process; a second import of this package finds it done.
if torch._C._get_privateuse1_backend_name() != BACKEND:
    torch.utils.rename_privateuse1_backend(BACKEND)

from . import _C  # noqa: E402  (static initialisers register allocator, guard, hooks, kernels)

# Backward on the calling thread (design/torch.md, "Backward on the calling thread"): autograd
# runs the backward of device operators on this thread, as it does for the CPU's, instead of
# handing them to a per-device engine thread. The device's operators are CPU kernels, so that
# thread bought no overlap, only a hand-off each way and a second OpenMP team spinning against
# the first. A setting of this (the importing) thread, as torch.autograd.set_multithreading_enabled
# is; OCLVM_AUTOGRAD_THREADS=1 keeps torch's per-device threads.
if _os.environ.get("OCLVM_AUTOGRAD_THREADS", "0") != "1":
    torch.autograd.set_multithreading_enabled(False)

__all__ = [
    "is_available", "is_initialized", "init", "device_count", "current_device", "set_device",
    "device", "synchronize", "get_device_name", "get_device_properties", "get_device_capability",
    "DeviceProperties",
    "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "empty_cache", "mem_get_info", "memory_summary", "set_per_process_memory_fraction",
    "get_per_process_memory_fraction", "host_memory_stats",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream",
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
    """Always true: the devices are opened when the package is imported."""
    return True


# torch.utils.checkpoint saves and restores a device module's RNG state only when the module's
# `_initialized` is true (torch.cuda's lazy-init flag); the devices are open from the import on.
_initialized = True


def init() -> None:
    """Nothing to do (torch.cuda.init's counterpart): importing the package opened the devices."""


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    """False: oclvm does not track forks (torch.cuda refuses forked children). torch.manual_seed
    and torch.seed seed the device (through manual_seed_all) only when this function and
    manual_seed_all both exist and this one answers False (torch.random._seed_custom_device)."""
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


# ---------------------------------------------------------------------------------------------
# Device information


def _native(name: str):
    """oclvm._C's function `name`; a clear error when the installed native module predates it."""
    function = getattr(_C, name, None)
    if function is None:
        raise RuntimeError(f"Expected oclvm._C.{name}, but the installed native module has none: "
                           "reinstall the oclvm package")
    return function


_OPENCL_VERSION = re.compile(r"OpenCL (\d+)\.(\d+)")


@dataclasses.dataclass(frozen=True, repr=False)
class DeviceProperties:
    """What the OpenCL driver reports of one opencl device (torch.cuda's _CudaDeviceProperties in
    spirit). Immutable; made by get_device_properties()."""

    name: str             # the device's name (CL_DEVICE_NAME)
    platform: str         # its platform's name (CL_PLATFORM_NAME)
    version: str          # CL_DEVICE_VERSION: "OpenCL <major>.<minor> <vendor text>"
    major: int            # the OpenCL version, parsed from `version`
    minor: int
    total_memory: int     # global memory, bytes
    max_allocation: int   # the largest single buffer the device allows, bytes
    base_addr_align: int  # alignment of every buffer's address, bytes
    host_unified_memory: bool  # the host reaches the device's memory directly
    zero_copy: bool       # operators hand CPU kernels the device's memory mapped, not copies
                          # (host-unified memory and OCLVM_ZERO_COPY != "0"; decided once)
    host_sections: bool   # ... and, better, in place with no map and no command: the device's
                          # memory has host addresses (fine-grained SVM); OCLVM_ZERO_COPY not "map"

    def __repr__(self) -> str:
        mib = 1 << 20
        return (f"DeviceProperties(name={self.name!r}, platform={self.platform!r}, "
                f"version={self.version!r}, major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // mib}MB, "
                f"max_allocation={self.max_allocation // mib}MB, "
                f"base_addr_align={self.base_addr_align}, "
                f"host_unified_memory={self.host_unified_memory}, zero_copy={self.zero_copy}, "
                f"host_sections={self.host_sections})")


def _opencl_version(version: str) -> tuple:
    """(major, minor) of an OpenCL device version string ("OpenCL 3.0 PoCL ..." -> (3, 0))."""
    match = _OPENCL_VERSION.match(version)
    if match is None:
        raise RuntimeError(f"Expected a device version of the form 'OpenCL <major>.<minor> ...', "
                           f"but got {version!r}")
    return int(match.group(1)), int(match.group(2))


def get_device_properties(device=None) -> DeviceProperties:
    """The properties of an opencl device (int, str or torch.device; None: the current one).
    Every key of oclvm._C.device_properties becomes a field: a key the class does not know is a
    TypeError, so a change of the native side cannot go unnoticed."""
    native = _native("device_properties")(_index(device))
    major, minor = _opencl_version(native["version"])
    return DeviceProperties(major=major, minor=minor, **native)


def get_device_name(device=None) -> str:
    """The OpenCL name of an opencl device (None: the current one)."""
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple:
    """(major, minor): the OpenCL version the device supports, torch.cuda's compute capability
    counterpart. torch.accelerator.get_device_capability gives the supported dtypes instead."""
    properties = get_device_properties(device)
    return properties.major, properties.minor


# ---------------------------------------------------------------------------------------------
# Random numbers: each device's default generator (adapters/torch/generator.h).

_SEED_MIN = -(1 << 63)
_SEED_MASK = (1 << 64) - 1


def _checked_seed(seed) -> int:
    """`seed` read as torch.Generator.manual_seed reads it: int(seed) in [-2**63, 2**64), negative
    values taken modulo 2**64 (torch.manual_seed(-1) seeds 2**64 - 1)."""
    seed = int(seed)
    if not _SEED_MIN <= seed <= _SEED_MASK:
        raise ValueError(f"Expected a seed in [-2**63, 2**64), but got {seed}")
    return seed & _SEED_MASK


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    seed = _checked_seed(seed)
    _native("manual_seed")(current_device(), seed)


def manual_seed_all(seed: int) -> None:
    """Seeds the default generator of every opencl device (torch.manual_seed calls this)."""
    seed = _checked_seed(seed)
    for index in range(device_count()):
        _native("manual_seed")(index, seed)


def seed() -> None:
    """Seeds the current device's default generator with a nondeterministic number."""
    _native("seed")(current_device())


def seed_all() -> None:
    """Seeds every device's default generator with one nondeterministic number (as torch.cuda:
    the first device draws it, the others take the same)."""
    if device_count() == 0:
        return
    shared = _native("seed")(0)
    for index in range(1, device_count()):
        _native("manual_seed")(index, shared)


def initial_seed() -> int:
    """The seed of the current device's default generator."""
    return _native("initial_seed")(current_device())


def get_rng_state(device="opencl") -> torch.Tensor:
    """The state of the device's default generator (int, str or torch.device; "opencl": the
    current device) as a new 1-D uint8 CPU tensor, in the CPU generator's layout."""
    state = _native("get_rng_state")(_index(device))
    return torch.frombuffer(bytearray(state), dtype=torch.uint8)


def _state_bytes(new_state) -> bytes:
    """The bytes of an RNG state tensor; TypeError / ValueError for anything but a 1-D uint8
    tensor (its length is the native side's to check)."""
    if not isinstance(new_state, torch.Tensor):
        raise TypeError(f"Expected the RNG state as a torch.uint8 tensor, but got "
                        f"{type(new_state).__name__}")
    if new_state.dtype != torch.uint8:
        raise TypeError(f"Expected the RNG state as a torch.uint8 tensor, but got a tensor of "
                        f"{new_state.dtype}")
    if new_state.dim() != 1:
        raise ValueError(f"Expected a 1-D RNG state (what get_rng_state returns), but got shape "
                         f"{tuple(new_state.shape)}")
    return bytes(new_state.detach().cpu().tolist())


def set_rng_state(new_state: torch.Tensor, device="opencl") -> None:
    """Sets the state of the device's default generator to `new_state` (from get_rng_state, or
    torch.get_rng_state(): the layouts agree). A state of the wrong type, shape or length is
    refused and changes nothing."""
    index = _index(device)
    _native("set_rng_state")(index, _state_bytes(new_state))


def get_rng_state_all() -> list:
    """get_rng_state of every device, in index order."""
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states) -> None:
    """set_rng_state(state, i) for the i-th of `new_states`."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


# ---------------------------------------------------------------------------------------------
# Streams and events


class Stream(torch.Stream):
    """A stream of an opencl device: a VM stream with its own in-order OpenCL queue. Like
    torch.cuda.Stream: ``Stream(device=None, priority=0)`` makes a new stream of the device
    (None: the current one); ``Stream(stream_id=..., device_index=..., device_type=...)`` names an
    existing one. OpenCL queues have no priorities: `priority` is accepted and has no effect.
    Every torch API taking a torch.Stream takes it (checked for torch 2.13)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if kwargs:
            made = super().__new__(cls, priority=priority, **kwargs)
        else:
            made = super().__new__(cls, device=torch.device(BACKEND, _index(device)),
                                   priority=priority)
        if made.device.type != BACKEND:
            raise ValueError(f"Expected a stream of an {BACKEND} device, but got one of "
                             f"{made.device}")
        return made


def _as_stream(plain: torch.Stream) -> Stream:
    return Stream(stream_id=plain.stream_id, device_index=plain.device_index,
                  device_type=plain.device_type)


# Note [Event instances are torch.Event]
# torch 2.13 accepts only objects whose type is exactly torch.Event in two places: the argument
# of Event.elapsed_time ("expected other to be a torch.Event object") and the event given to
# Stream.record_event. Instances of a Python subclass could never be timed against each other.
# So calling torch.opencl.Event makes a plain torch.Event of the opencl device, and the class's
# metaclass makes isinstance(x, torch.opencl.Event) true for every torch.Event of an opencl device
# (also those that Stream.record_event() returns). issubclass(torch.opencl.Event, torch.Event)
# holds; type(torch.opencl.Event()) is torch.Event.
class _EventType(type):
    def __instancecheck__(cls, instance) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        return type(instance) is torch.Event and instance.device.type == BACKEND


class Event(torch.Event, metaclass=_EventType):
    """An event of the opencl device: a marker of the stream it is recorded on (torch.cuda.Event's
    signature). With enable_timing, elapsed_time() gives the milliseconds between two recorded
    events (host time at which the recorded work had completed). Makes a torch.Event: see Note
    [Event instances are torch.Event]. `blocking` has no effect (synchronize() always waits on
    the host); interprocess events are refused."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False):
        if interprocess:
            raise ValueError("Expected interprocess=False: opencl events cannot be shared "
                             "between processes")
        return torch.Event(device=BACKEND, enable_timing=enable_timing, blocking=blocking)


def current_stream(device=None) -> Stream:
    """This thread's current stream of the device (its default stream until set)."""
    return _as_stream(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None) -> Stream:
    """The device's default stream (oclvm's compute stream of that device)."""
    index = _index(device)
    # Stream id 0 is the default stream of every opencl device (adapters/torch/streams.h).
    return Stream(stream_id=0, device_index=index,
                  device_type=torch.accelerator.current_stream(index).device_type)


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


def _drain_autograd_at_exit() -> None:
    """Before the interpreter finalises: let autograd's opencl threads drop the last backward
    (Note [Autograd threads at exit] in adapters/torch/module.cc; without it a script ending
    right after backward() aborted in about 1 run in 6)."""
    try:
        _C.drain_autograd()
    except RuntimeError:
        pass  # a device that fails now has nothing left to drain; exit goes on


atexit.register(_drain_autograd_at_exit)
