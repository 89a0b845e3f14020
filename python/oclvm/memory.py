"""Human-readable reports of an opencl device's allocator statistics, and allocation traces.

``format_summary(stats, device_index, abbreviated)`` turns the flat dictionary returned by
``torch.opencl.memory_stats()`` (keys such as ``allocated_bytes.large_pool.peak``) into a text
table in the spirit of ``torch.cuda.memory_summary``: one row per statistic, sub-rows per pool,
columns for the current value, the peak, and the running totals of what was allocated and freed.

Promises: the function only reads `stats`; a key that is missing reads as 0, so a report can be
made from an empty dictionary (an allocator that was never used). Pure function, thread-safe.

The memory API of ``torch.opencl`` (memory_stats, memory_allocated, ..., memory_summary) is here
too, as ``torch.cuda``'s is in ``torch.cuda.memory``: the same functions under both names.

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
import os
import pickle
import sys

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
    from . import _C, _index  # the package's device resolution, as every torch.opencl call
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
    from . import _C
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
        from . import _index
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
    from . import _C
    return pickle.loads(_C._memory_snapshot(True))


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    """Writes ``_snapshot()`` to `filename` as a pickle (what PyTorch's viewer and
    ``python -m oclvm.viz`` read). Raises OSError when the file cannot be written."""
    from . import _C
    data = _C._memory_snapshot(True)
    with open(os.fspath(filename), "wb") as f:
        f.write(data)


def memory_snapshot(mempool_id=None, include_traces=True):
    """The segments of every opencl device and their blocks (``_snapshot()["segments"]``)."""
    from . import _C
    return pickle.loads(_C._memory_snapshot(bool(include_traces)))["segments"]


_VIEWS = ("timeline", "segments", "both")


def snapshot_svg(snapshot=None, device=None, view="both", max_entries=None) -> str:
    """The pictures ``python -m oclvm.viz`` draws (see oclvm.viz), as an SVG string, of
    `snapshot` (default: ``_snapshot()`` taken now) for `device` (default: the current one):
    ``view="timeline"`` the allocation timeline, ``"segments"`` the segment map, ``"both"``
    (default) one above the other. Raises ValueError for another view, or a device without a
    recorded trace in a timeline view (start ``_record_memory_history()`` first)."""
    from . import _index, viz
    if view not in _VIEWS:
        raise ValueError(f"Expected view to be one of {', '.join(_VIEWS)}, but got {view!r}")
    snapshot = _snapshot() if snapshot is None else snapshot
    index = _index(device)
    if view == "segments":
        return viz.segments_svg(snapshot, index)
    if view == "timeline":
        return viz.timeline_svg(snapshot, index, max_entries)
    return viz.snapshot_svg(snapshot, index, max_entries)


# The memory API, defined in the package (it needs the native module), under this name too.
from . import (  # noqa: E402,F401
    caching_allocator_alloc, caching_allocator_delete, device_memory_used, empty_cache,
    get_per_process_memory_fraction, host_memory_stats, host_memory_stats_as_nested_dict,
    list_gpu_processes, max_memory_allocated, max_memory_cached, max_memory_reserved,
    mem_get_info, memory_allocated, memory_cached, memory_reserved, memory_stats,
    memory_stats_as_nested_dict, memory_summary, reset_accumulated_memory_stats,
    reset_max_memory_allocated, reset_max_memory_cached, reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
