"""Human-readable reports of an opencl device's allocator statistics, and allocation traces.

``format_summary(stats, device_index, abbreviated)`` turns the flat dictionary returned by
``torch.opencl.memory_stats()`` (keys such as ``allocated_bytes.large_pool.peak``) into a text
table in the spirit of ``torch.cuda.memory_summary``: one row per statistic, sub-rows per pool,
columns for the current value, the peak, and the running totals of what was allocated and freed.

Promises: the function only reads `stats`; a key that is missing reads as 0, so a report can be
made from an empty dictionary (an allocator that was never used). Pure function, thread-safe.

The memory API of ``torch.opencl`` (memory_stats, memory_allocated, ..., memory_summary,
caching_allocator_alloc) is defined here, as ``torch.cuda``'s is in ``torch.cuda.memory``, and the
package exports it: the same functions under both names.

``record_trace(path, device=None)`` (a context manager, ``torch.opencl.memory.record_trace``)
writes every block the device's allocator hands out and gets back while it is open as an
``oclvm-trace v1`` file, which ``oclvm replay`` replays under every allocator and memory limit.

Memory history and snapshots, as ``torch.cuda.memory``'s: ``_record_memory_history(enabled,
context, stacks, max_entries, ...)`` starts oclvm's memory history on every opencl device (kept
by oclvm itself, in C++, per device); ``_snapshot()`` returns PyTorch's snapshot dictionary
(``segments`` with their ``blocks``, ``device_traces`` with ``alloc`` / ``free_requested`` /
``free_completed`` / ``segment_alloc`` / ``segment_free`` / ``oom`` / ``snapshot`` entries and
their Python ``frames``), ``_dump_snapshot(filename)`` pickles it, so that PyTorch's viewer
(``python -m torch.cuda._memory_viz trace_plot FILE``, pytorch.org/memory_viz) and
``python -m oclvm.viz FILE`` draw it; ``memory_snapshot()`` is its ``segments``, and
``snapshot_svg()`` draws a snapshot (by default one taken now) as oclvm.viz does.
"""
import contextlib
import operator
import os
import pickle
import sys
import warnings

import torch

from . import BACKEND, _C
from ._device import _checked_index, _index
from .streams import StreamContext, current_stream
# One definition for the memory summary and the pictures; viz needs only the standard library.
from .viz import format_bytes

# (title, key prefix, whether the values are byte counts)
_ROWS = (
    ("Allocated memory", "allocated_bytes", True),
    ("Active memory", "active_bytes", True),
    ("Requested memory", "requested_bytes", True),
    ("Device reserved memory", "reserved_bytes", True),
    ("Non-releasable memory", "inactive_split_bytes", True),
    ("Allocations", "allocation", False),
    ("Active allocs", "active", False),
    ("Device reserved segments", "segment", False),
    ("Non-releasable allocs", "inactive_split", False),
)

_POOLS = (("all", None), ("large_pool", "from large pool"), ("small_pool", "from small pool"))
_COLUMNS = (("current", "Cur Usage"), ("peak", "Peak Usage"),
            ("allocated", "Tot Alloc"), ("freed", "Tot Freed"))

_NAME_WIDTH = 26
_CELL_WIDTH = 14


def _format_count(count: int) -> str:
    return f"{count:,}"


def format_summary(stats: dict, device_index: int, abbreviated: bool = False) -> str:
    """The report for `stats` (a memory_stats() dictionary) of device `device_index`.

    With `abbreviated` only the aggregate row of each statistic is shown; otherwise the large-
    and small-pool sub-rows follow it."""
    def get(key: str) -> int:
        return int(stats.get(key, 0))

    width = _NAME_WIDTH + 2 + len(_COLUMNS) * (_CELL_WIDTH + 3) - 1
    heavy = "=" * width
    light = "-" * width

    lines = [heavy,
             f" oclvm memory summary, device opencl:{device_index}",
             light,
             f" num_alloc_retries: {get('num_alloc_retries'):<10}  num_ooms: {get('num_ooms'):<10}"
             f"  num_device_alloc: {get('num_device_alloc'):<8}  "
             f"num_device_free: {get('num_device_free')}",
             light,
             " " + "Metric".ljust(_NAME_WIDTH) + "".join(
                 " | " + title.rjust(_CELL_WIDTH) for _, title in _COLUMNS),
             light]

    pools = _POOLS[:1] if abbreviated else _POOLS
    for title, prefix, is_bytes in _ROWS:
        render = format_bytes if is_bytes else _format_count
        for pool, pool_title in pools:
            name = title if pool_title is None else "      " + pool_title
            cells = "".join(" | " + render(get(f"{prefix}.{pool}.{column}")).rjust(_CELL_WIDTH)
                            for column, _ in _COLUMNS)
            lines.append(" " + name.ljust(_NAME_WIDTH) + cells)
        lines.append(light)

    oversize = " | ".join(f"{label}: {get(f'oversize_{kind}.current')} cur /"
                          f" {get(f'oversize_{kind}.peak')} peak"
                          for kind, label in (("allocations", "Oversize allocations"),
                                              ("segments", "Oversize segments")))
    lines.append(" " + oversize)
    lines.append(heavy)
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def record_trace(path, device=None):
    """Records the allocations and releases of opencl device `device` (default: the current one)
    into `path` while the block runs, as an ``oclvm-trace v1`` file: ``a ID BYTES`` for each
    block the allocator hands out, ``f ID`` when it comes back. Blocks live before the block began
    are left out (and so are their releases); blocks live at its end stay allocated in the trace.
    Replay it with ``oclvm replay PATH [--allocator NAME] [--limit BYTES] [--plot OUT.svg]``.

    Raises RuntimeError when the file cannot be written or another recording is running;
    leaving the block raises RuntimeError when a write failed (the file is then incomplete)."""
    _C._record_trace_start(os.fspath(path), _index(device))
    try:
        yield
    finally:
        _C._record_trace_stop()


_HISTORY_MODES = {None: 0, "state": 1, "all": 2}
_CONTEXT_MODES = {None: 0, "state": 1, "alloc": 2, "all": 3}
# The actions in oclvm's order (storage/memory_history.h: MemoryAction).
_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom",
            "snapshot")


def _choice(name, value, choices):
    if value not in choices:
        named = ", ".join(repr(c) for c in choices)
        raise ValueError(f"Expected {name} to be one of {named}, but got {value!r}")
    return choices[value]


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                           device=None, clear_history=False, compile_context=False,
                           global_record_annotations=False, skip_actions=None):
    """Starts (``enabled="all"``: events and the stacks of live blocks; ``"state"``: the stacks
    of live blocks only), changes or stops (``None``) the memory history of every opencl device,
    as ``torch.cuda.memory._record_memory_history``. ``context`` chooses when a Python stack is
    captured (None, "state", "alloc", "all": also at frees); ``max_entries`` bounds the events
    kept (the newest replace the oldest); ``clear_history`` drops what was recorded; stopping
    drops it too. ``skip_actions`` names actions not to record. ``stacks`` may be "python" or
    "all"; only Python frames are recorded (oclvm has no C++ unwinder). ``device`` is accepted
    for PyTorch's signature: the history covers every device, as PyTorch's does.
    ``compile_context`` and ``global_record_annotations`` concern torch.compile and
    record_function annotations, which the device does not produce; True raises ValueError.
    The legacy form ``_record_memory_history(True/False, ...)`` means "all" / None.

    Recording off costs one branch per allocation; on, a Python stack per allocation and free
    (``bench/torch_bench.py --history`` measures it). Raises ValueError for a value outside
    these, changing nothing."""
    if isinstance(enabled, bool):
        enabled = "all" if enabled else None
    mode = _choice("enabled", enabled, _HISTORY_MODES)
    context_mode = _choice("context", context, _CONTEXT_MODES)
    _choice("stacks", stacks, {"python": 0, "all": 1})
    if compile_context or global_record_annotations:
        raise ValueError("Expected compile_context and global_record_annotations to be False: "
                         "the opencl device records neither torch.compile contexts nor "
                         "record_function annotations")
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
        raise ValueError(f"Expected max_entries to be an int >= 1, but got {max_entries!r}")
    skip = 0
    for action in skip_actions or ():
        if action not in _ACTIONS:
            raise ValueError(f"Expected skip_actions from {', '.join(_ACTIONS)}, but got "
                             f"{action!r}")
        skip |= 1 << _ACTIONS.index(action)
    if device is not None:
        index = _index(device)
        if not 0 <= index < _C.device_count():
            raise IndexError(f"Expected an opencl device index in [0, {_C.device_count()}), "
                             f"but got {index}")
    _C._record_memory_history(mode, context_mode, min(max_entries, 2**64 - 1),
                              bool(clear_history), skip)


def _snapshot(device=None, augment_with_fx_traces=False):
    """PyTorch's memory snapshot of the opencl devices (``device`` is accepted and ignored, as
    by ``torch.cuda.memory._snapshot``): ``{"segments": [...], "device_traces": [[...], ...],
    "allocator_settings": {}}``; see the module's docstring. Taking it records a ``snapshot``
    event."""
    return pickle.loads(_C._memory_snapshot(True))


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    """Writes ``_snapshot()`` to `filename` as a pickle (what PyTorch's viewer and
    ``python -m oclvm.viz`` read). Raises OSError when the file cannot be written."""
    data = _C._memory_snapshot(True)
    with open(os.fspath(filename), "wb") as f:
        f.write(data)


def memory_snapshot(mempool_id=None, include_traces=True):
    """The segments of every opencl device and their blocks (``_snapshot()["segments"]``)."""
    return pickle.loads(_C._memory_snapshot(bool(include_traces)))["segments"]


_VIEWS = ("timeline", "segments", "both")


def snapshot_svg(snapshot=None, device=None, view="both", max_entries=None) -> str:
    """The pictures ``python -m oclvm.viz`` draws (see oclvm.viz), as an SVG string, of
    `snapshot` (default: ``_snapshot()`` taken now) for `device` (default: the current one):
    ``view="timeline"`` the allocation timeline, ``"segments"`` the segment map, ``"both"``
    (default) one above the other. Raises ValueError for another view, or a device without a
    recorded trace in a timeline view (start ``_record_memory_history()`` first)."""
    from . import viz
    if view not in _VIEWS:
        raise ValueError(f"Expected view to be one of {', '.join(_VIEWS)}, but got {view!r}")
    snapshot = _snapshot() if snapshot is None else snapshot
    index = _index(device)
    if view == "segments":
        return viz.segments_svg(snapshot, index)
    if view == "timeline":
        return viz.timeline_svg(snapshot, index, max_entries)
    return viz.snapshot_svg(snapshot, index, max_entries)


# ---------------------------------------------------------------------------------------------
# The memory API of torch.opencl


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
    index = _index(device)
    return format_summary(memory_stats(index), index, abbreviated)


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


def _nested(flat: dict) -> dict:
    """A flat statistics dictionary ("allocated_bytes.all.current": n) as nested dictionaries
    ({"allocated_bytes": {"all": {"current": n}}}), the form torch.cuda's *_as_nested_dict give."""
    nested = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        level = nested
        for parent in parents:
            level = level.setdefault(parent, {})
        level[leaf] = value
    return nested


def memory_stats_as_nested_dict(device=None) -> dict:
    """memory_stats(device) as nested dictionaries (``["allocated_bytes"]["all"]["current"]``)."""
    return _nested(memory_stats(device))


def host_memory_stats_as_nested_dict() -> dict:
    """host_memory_stats() as nested dictionaries (``["allocated_bytes"]["current"]``)."""
    return _nested(host_memory_stats())


def device_memory_used(device=None) -> int:
    """Bytes of the device in use: total - free of mem_get_info, i.e. what this process's oclvm
    allocator has reserved. torch.cuda's counts every process on the GPU (NVML); OpenCL cannot see
    other processes, so here the device is used as oclvm accounts for it, the account mem_get_info
    gives too (used + free == total)."""
    free, total = mem_get_info(device)
    return total - free


def memory_cached(device=None) -> int:
    """Deprecated; memory_reserved(device), as torch.cuda's."""
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """Deprecated; max_memory_reserved(device), as torch.cuda's (with its FutureWarning)."""
    warnings.warn("torch.opencl.max_memory_cached has been renamed to "
                  "torch.opencl.max_memory_reserved", FutureWarning, stacklevel=2)
    return max_memory_reserved(device)


def reset_max_memory_allocated(device=None) -> None:
    """Deprecated; reset_peak_memory_stats(device), which resets every peak, as torch.cuda's."""
    warnings.warn("torch.opencl.reset_max_memory_allocated now calls "
                  "torch.opencl.reset_peak_memory_stats, which resets /all/ peak memory stats.",
                  FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None) -> None:
    """Deprecated; reset_peak_memory_stats(device), which resets every peak, as torch.cuda's."""
    warnings.warn("torch.opencl.reset_max_memory_cached now calls "
                  "torch.opencl.reset_peak_memory_stats, which resets /all/ peak memory stats.",
                  FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


# The blocks caching_allocator_alloc handed out, by address, each held by a uint8 tensor until
# caching_allocator_delete drops it. Thread-safe: each use is one dict operation under the GIL.
_RAW_BLOCKS = {}


def caching_allocator_alloc(size, device=None, stream=None) -> int:
    """Allocates `size` bytes from the device's oclvm allocator (as torch.cuda's does from CUDA's
    caching allocator) on `stream` (None: the device's current stream) and returns the block's
    address, the one its tensors' data_ptr() give (a device address, not a host pointer). Give it
    back with caching_allocator_delete; until then it counts in memory_allocated. `device` None:
    the stream's device, or the current device. A size of 0 gives address 0."""
    if stream is not None and not isinstance(stream, torch.Stream):
        raise TypeError(f"Expected a torch.opencl.Stream or None, but got "
                        f"{type(stream).__name__}: opencl streams have no raw handle")
    if device is None and stream is not None:
        device = stream.device
    index = _checked_index(device)
    if stream is None:
        stream = current_stream(index)
    elif stream.device != torch.device(BACKEND, index):
        raise ValueError(f"Expected a stream of {BACKEND}:{index} (the allocation's device), "
                         f"but got one of {stream.device}")
    size = operator.index(size)
    if size < 0:
        raise ValueError(f"Expected a size >= 0 in bytes, but got {size}")
    if size == 0:
        return 0
    with StreamContext(stream):
        block = torch.empty(size, dtype=torch.uint8, device=torch.device(BACKEND, index))
    address = block.data_ptr()
    _RAW_BLOCKS[address] = block
    return address


def caching_allocator_delete(mem_ptr: int) -> None:
    """Gives back the block at `mem_ptr` that caching_allocator_alloc returned (0: nothing to do).
    The release is stream-ordered, as every tensor's: after the work queued on its stream."""
    mem_ptr = operator.index(mem_ptr)
    if mem_ptr == 0:
        return
    if _RAW_BLOCKS.pop(mem_ptr, None) is None:
        raise ValueError(f"Expected an address that caching_allocator_alloc returned and that was "
                         f"not deleted yet, but got {mem_ptr:#x}")


# torch.cuda.memory has it too; defined with the device's other queries in the package.
from . import list_gpu_processes  # noqa: E402,F401
