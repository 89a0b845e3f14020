"""Pictures of a PyTorch memory snapshot as self-contained SVG: the allocation timeline and the
segment map, drawn without a network and with nothing but the standard library.

PyTorch's own viewer (``python -m torch.cuda._memory_viz trace_plot`` / ``segment_plot``) writes
an HTML page whose script comes from a CDN, so on a machine without a network it shows nothing.
This module draws the two views a user needs from the same snapshot, the dictionary that
``torch.cuda.memory._snapshot()`` returns and ``_dump_snapshot(path)`` pickles (``segments`` and
``device_traces``):

- ``timeline_svg(snapshot, device=0, max_entries=None)``, the "Active Memory Timeline": x is the
  index of the event in ``device_traces[device]``, y is live bytes. Every allocation is a band,
  stacked in the order the allocations were made; a band keeps its place while it lives, and when
  it is freed it ends and the bands above it slide down by its size over the next event. The
  band ends at ``free_completed`` (a ``free_requested`` before it changes nothing: the memory is
  held until the free completes). A block freed without an ``alloc`` in the trace (allocated
  before recording began, or before the trace's ring buffer wrapped), and a block the snapshot's
  segments hold at the end (``active_allocated`` or ``active_pending_free``) with no ``alloc``,
  were live from the start: they sit at the bottom, drawn lighter, the ones freed last lowest.
  ``oom`` events are red markers, ``snapshot`` events grey ones. Only the `max_entries` largest
  allocations (default ``DEFAULT_MAX_ENTRIES``) are drawn as bands, as PyTorch's viewer does;
  the others are one grey band "other (N allocations)" on top of the stack, and the picture says
  so. Allocations of the size at the cut are drawn all or none (so that every step of a training
  loop looks alike), unless that would draw fewer than half of `max_entries`: then the earliest.
  Each band's ``<title>`` tooltip gives its size, address, stream, the events that made and
  freed it and its top frames (the Python ones when there are any). Colours follow the order in
  which the allocations were made.
- ``segments_svg(snapshot, device=None)``, the segment map: every segment of the device (None:
  of every device, one section each) is a bar whose width is proportional to its size, on one
  scale for the whole picture, laid out in rows that wrap. Its blocks are drawn by state
  (``active_allocated``, ``active_pending_free``, ``inactive``), each with a tooltip giving its
  address, size, requested size and frames; blocks narrower than a pixel are drawn together as
  one mark whose tooltip counts them.
- ``snapshot_svg(snapshot, device=0)``: the timeline above the segment map of `device`, in one
  document.
- ``main(argv)``: ``python -m oclvm.viz SNAPSHOT.pickle [-o OUT.svg] [--view
  timeline|segments|both] [--device N] [--max-entries N]``.

Promises: the functions only read the snapshot and return the SVG as a string; the same snapshot
gives the same bytes. The SVG has no script, no stylesheet and no external reference, so any
browser opens it offline; every picture has a title, axes with byte units, a legend, and says what
it left out. Bands are capped and polygon points merged to half a pixel (to wider columns past
_POINT_BUDGET points), so a trace of a million events gives a picture of a few MB at most, in
seconds. An empty trace gives a picture that says "no allocations recorded". A snapshot that is
not PyTorch's structure, or a device with no trace, raises ValueError naming what is wrong; the
command turns that, a missing file or a pickle that is not a snapshot into a one-line message and
exit status 1 (2 for a usage error). Without --device it draws the only device with a trace (and
asks for --device when there are several). Its reader unpickles plain data only (dicts, lists,
strings, numbers): a pickle that names a class is refused, so opening a file runs none of its code.

Pure functions, thread-safe. The module needs neither torch nor the native module: it imports
nothing from the package, and ``python python/oclvm/viz.py ...`` runs the same command from a
source tree. ``python -m oclvm.viz`` imports the installed ``oclvm`` package first (Python does,
for ``-m``), which loads torch and the devices.
"""
import argparse
import io
import math
import os
import pickle
import sys

DEFAULT_MAX_ENTRIES = 1000
"""Allocations drawn as bands of their own when `max_entries` is None; the rest are one band."""

# The timeline's picture, in SVG user units.
_WIDTH = 960.0
_T_HEIGHT = 600.0
_LEFT, _RIGHT, _TOP, _BOTTOM = 92.0, 28.0, 82.0, 100.0
_PLOT_W = _WIDTH - _LEFT - _RIGHT
_T_PLOT_H = _T_HEIGHT - _TOP - _BOTTOM

# The segment map's rows.
_ROW_H, _ROW_PITCH, _SEG_GAP = 18.0, 26.0, 2.0
_SEG_TOP = 112.0  # headings and the ruler above the first section
_SECTION_HEAD, _SECTION_GAP = 22.0, 8.0
_TARGET_ROWS = 24  # rows are made wide enough that the whole picture needs about this many
_POINT_BUDGET = 150_000  # polygon points of a timeline, at most about 25 bytes each

_BAND_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3",
                 "#937860", "#da8bc3", "#ccb974", "#64b5cd", "#2f8f83")
_OTHER_COLOUR = "#b4b4b4"
_OOM_COLOUR = "#d62728"
_SNAPSHOT_COLOUR = "#555555"

# Block states: (colour, legend text). PyTorch's docstring names the waiting state
# active_awaiting_free; snapshots spell it active_pending_free. Both are accepted.
_STATES = {
    "active_allocated": ("#4c72b0", "allocated (active_allocated)"),
    "active_pending_free": ("#f28e2b", "freed, waiting for a stream (active_pending_free)"),
    "inactive": ("#e4e4e4", "cached, free (inactive)"),
}
_STATE_ALIASES = {"active_awaiting_free": "active_pending_free"}
_UNKNOWN_STATE = ("#a05195", "unknown state")
_LIVE_STATES = ("active_allocated", "active_pending_free")

_FRAMES_SHOWN = 6
# Frames of the interpreter and of the dispatcher say nothing about the user's program.
_NOISE_NAMES = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp",
                "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_")
_NOISE_FILES = ("core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c",
                "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c",
                "cpython/abstract.h")


# ------------------------------------------------------------------------------------------------
# Formatting


def format_bytes(count) -> str:
    """`count` bytes with a 1024-based unit: ``0 B``, ``1023 B``, ``1.50 KiB``, ``64.00 MiB``
    (also oclvm.memory.format_bytes, which the memory summary uses)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _exact(count: int) -> str:
    return f"{format_bytes(count)} ({count:,} bytes)"


def _esc(text) -> str:
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _num(value: float) -> str:
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def _nice_step(span: float, target: int) -> float:
    """1, 2 or 5 times a power of ten giving about `target` intervals over `span`."""
    raw = max(span, 1e-12) / target
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if raw <= factor * power * (1 + 1e-9):
            return factor * power
    return 10.0 * power


def _byte_unit(max_bytes: float):
    for shift, name in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if max_bytes >= 1 << shift:
            return float(1 << shift), name
    return 1.0, "B"


def _tick(value: float) -> str:
    if abs(value - round(value)) < 1e-9:
        return str(int(round(value)))
    return f"{value:.6g}"


def _byte_ticks(max_bytes: float, target: int):
    """(top in bytes, [(bytes, label)]) for an axis from 0 that holds `max_bytes`."""
    scale, unit = _byte_unit(max_bytes)
    step = _nice_step(max(max_bytes, 1) / scale, target)
    if unit == "B":
        step = max(step, 1.0)  # no fractions of a byte
    top = max(math.ceil(max(max_bytes, 1) / scale / step - 1e-9), 1) * step
    ticks, value = [], 0.0
    while value <= top + step / 2:
        ticks.append((value * scale, "0" if value == 0 else f"{_tick(value)} {unit}"))
        value += step
    return top * scale, ticks


def _frames_text(frames, limit: int = _FRAMES_SHOWN) -> str:
    """The top (innermost) frames worth showing, one `file:line:name` a line; the Python ones when
    there are any, with how many were left out."""
    if not frames:
        return ""
    useful = [f for f in frames if isinstance(f, dict)
              and not any(n in str(f.get("name", "")) for n in _NOISE_NAMES)
              and not any(n in str(f.get("filename", "")) for n in _NOISE_FILES)]
    python = [f for f in useful if str(f.get("filename", "")).endswith(".py")]
    chosen = python or useful
    lines = [f"  {f.get('filename', '?')}:{f.get('line', '?')}:{f.get('name', '?')}"
             for f in chosen[:limit]]
    hidden = len(frames) - min(len(chosen), limit)
    if hidden > 0:
        lines.append(f"  ({hidden} more frame{'s' if hidden != 1 else ''})")
    return "\n".join(lines)


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


def _addr(value) -> str:
    return f"0x{value:x}" if isinstance(value, int) else "?"


# ------------------------------------------------------------------------------------------------
# Reading and checking a snapshot


def _as_snapshot(snapshot) -> dict:
    """`snapshot` as a dict with 'segments' and 'device_traces' lists; a bare list of segments
    (an old snapshot format, as torch's own reader accepts) has no traces. ValueError otherwise."""
    if isinstance(snapshot, list):
        snapshot = {"segments": snapshot, "device_traces": []}
    if not isinstance(snapshot, dict) or "segments" not in snapshot:
        kind = type(snapshot).__name__
        keys = f" with keys {sorted(map(str, snapshot))[:8]}" if isinstance(snapshot, dict) else ""
        raise ValueError(f"Expected a PyTorch memory snapshot (a dict with 'segments' and "
                         f"'device_traces', as torch.cuda.memory._dump_snapshot writes), "
                         f"but got a {kind}{keys}")
    segments = snapshot["segments"]
    traces = snapshot.get("device_traces", [])
    if not isinstance(segments, list) or not all(isinstance(s, dict) for s in segments):
        raise ValueError("Expected the snapshot's 'segments' to be a list of dicts")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise ValueError("Expected the snapshot's 'device_traces' to be a list of lists, "
                         "one per device")
    return {"segments": segments, "device_traces": traces}


def _field(entry, key, where, default=None):
    value = entry.get(key, default) if isinstance(entry, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"Expected {where} to have an integer '{key}', but got {value!r}")
    return value


class _NoTrace(ValueError):
    pass


def _trace_of(snapshot: dict, device) -> list:
    traces = snapshot["device_traces"]
    if not isinstance(device, int) or isinstance(device, bool):
        raise ValueError(f"Expected a device index, but got {device!r}")
    if not traces:
        raise _NoTrace("The snapshot has no allocation trace (record one with "
                       "torch.cuda.memory._record_memory_history before taking it)")
    if not 0 <= device < len(traces):
        raise _NoTrace(f"The snapshot has traces for devices 0 to {len(traces) - 1}; "
                       f"device {device} has none")
    return traces[device]


def _blocks_of(segment: dict, where: str):
    """(address, block) for each block of `segment`; a block without an address follows the one
    before it (old snapshots give only sizes)."""
    address = _field(segment, "address", where)
    blocks = segment.get("blocks", [])
    if not isinstance(blocks, list):
        raise ValueError(f"Expected {where}'s 'blocks' to be a list")
    out = []
    for i, block in enumerate(blocks):
        size = _field(block, "size", f"{where}.blocks[{i}]")
        start = block.get("address", address)
        out.append((start if isinstance(start, int) else address, block))
        address = (start if isinstance(start, int) else address) + size
    return out


def _state(block) -> str:
    state = block.get("state", "")
    return _STATE_ALIASES.get(state, state)


def _requested(block) -> int:
    value = block.get("requested_size")
    return value if isinstance(value, int) and value > 0 else block["size"]


# ------------------------------------------------------------------------------------------------
# The timeline


class _Allocation:
    """One band: an allocation made in the trace, or one live when the trace began."""
    __slots__ = ("number", "addr", "size", "stream", "frames", "made", "freed", "requested",
                 "before", "drawn", "bottom", "path")

    def __init__(self, number, addr, size, stream, frames, made, before):
        self.number, self.addr, self.size, self.stream = number, addr, size, stream
        self.frames, self.made, self.before = frames, made, before
        self.freed = None      # event index of free_completed; None: live at the end
        self.requested = None  # event index of free_requested, when one came before
        self.drawn = True
        self.bottom = 0
        self.path = []         # (x, bottom offset) points while it lives


def _allocations(snapshot: dict, device: int, trace: list):
    """The trace's allocations and markers: (allocations, stack order at the start, events
    (x, allocation, +1 made / -1 freed), ooms [(x, entry)], snapshots [x])."""
    allocations, events, ooms, snapshots = [], [], [], []
    live = {}                # address -> allocation made in the trace and not yet freed
    freed_unmade = []        # allocations live at the start and freed in the trace, by free

    def new(addr, size, entry, made, before):
        allocation = _Allocation(len(allocations), addr, size, entry.get("stream"),
                                 entry.get("frames") or [], made, before)
        allocations.append(allocation)
        return allocation

    for x, entry in enumerate(trace):
        where = f"device_traces[{device}][{x}]"
        action = entry.get("action") if isinstance(entry, dict) else None
        if action == "alloc":
            addr = _field(entry, "addr", where)
            allocation = new(addr, _field(entry, "size", where), entry, x, False)
            live[addr] = allocation
            events.append((x, allocation, 1))
        elif action == "free_requested":
            allocation = live.get(_field(entry, "addr", where))
            if allocation is not None and allocation.requested is None:
                allocation.requested = x
        elif action in ("free_completed", "free"):
            addr = _field(entry, "addr", where)
            allocation = live.pop(addr, None)
            if allocation is None:  # allocated before the trace began
                allocation = new(addr, _field(entry, "size", where), entry, None, True)
                freed_unmade.append(allocation)
            allocation.freed = x
            events.append((x, allocation, -1))
        elif action == "oom":
            ooms.append((x, entry))
        elif action == "snapshot":
            snapshots.append(x)
        elif not isinstance(action, str):
            raise ValueError(f"Expected {where} to be a dict with an 'action', but got "
                             f"{entry!r:.80}")
        # segment_alloc/free/map/unmap change reserved memory, not what is allocated

    # Blocks the snapshot holds at the end that no alloc in the trace made were live throughout.
    held = []
    for s, segment in enumerate(snapshot["segments"]):
        if segment.get("device", device) != device:
            continue
        for addr, block in _blocks_of(segment, f"segments[{s}]"):
            if _state(block) in _LIVE_STATES and addr not in live:
                held.append((addr, block, segment))
    held.sort(key=lambda item: item[0])
    bottom = [new(addr, _requested(block), {"stream": segment.get("stream"),
                                            "frames": block.get("frames")}, None, True)
              for addr, block, segment in held]
    # Bottom to top: held to the end, then the ones freed last, so the first freed is on top and
    # its end moves the fewest bands.
    initial = bottom + list(reversed(freed_unmade))
    return allocations, initial, events, ooms, snapshots


def _elided(allocations, max_entries: int):
    """The allocations left out of a picture that draws at most `max_entries`: the smallest ones.
    Allocations of the size at the cut are drawn all or none, so that every repetition of a loop
    looks the same, unless that leaves fewer than half the bands drawn: then the first ones."""
    if len(allocations) <= max_entries:
        return []
    ranked = sorted(allocations, key=lambda a: (-a.size, a.number))
    cut = ranked[max_entries].size  # the largest size that does not fit whole
    keep = [a for a in ranked[:max_entries] if a.size > cut]
    if 2 * len(keep) < max_entries:
        keep = ranked[:max_entries]
    kept = {a.number for a in keep}
    return [a for a in allocations if a.number not in kept]


def _walk(allocations, initial, events, span: int):
    """Lays the drawn bands out as a stack: each gets its path [(x, bottom offset)], a band made
    goes on top, and when one is freed the bands above it slide down by its size between its
    event x and x + 1. The elided allocations are one band on top of the stack. Returns (the
    other band's path [(x, bottom, top)], peak bytes, its event, the most bytes elided at once)."""
    stack, drawn_total, other_total, other_path = [], 0, 0, []
    for allocation in initial:
        if allocation.drawn:
            allocation.bottom = drawn_total
            allocation.path.append((0, drawn_total))
            stack.append(allocation)
            drawn_total += allocation.size
        else:
            other_total += allocation.size
    other_path.append((0, drawn_total, drawn_total + other_total))
    peak, peak_x, other_most = drawn_total + other_total, 0, other_total
    for x, allocation, change in events:
        if not allocation.drawn:
            other_path.append((x, drawn_total, drawn_total + other_total))
            other_total += change * allocation.size
            other_path.append((x, drawn_total, drawn_total + other_total))
        elif change > 0:
            allocation.bottom = drawn_total
            allocation.path.append((x, drawn_total))
            stack.append(allocation)
            other_path.append((x, drawn_total, drawn_total + other_total))
            drawn_total += allocation.size
            other_path.append((x, drawn_total, drawn_total + other_total))
        else:
            place = stack.index(allocation)
            allocation.path.append((x, allocation.bottom))
            after = min(x + 1, span)
            for above in stack[place + 1:]:
                above.path.append((x, above.bottom))
                above.bottom -= allocation.size
                above.path.append((after, above.bottom))
            del stack[place]
            other_path.append((x, drawn_total, drawn_total + other_total))
            drawn_total -= allocation.size
            other_path.append((after, drawn_total, drawn_total + other_total))
        if drawn_total + other_total > peak:
            peak, peak_x = drawn_total + other_total, x
        other_most = max(other_most, other_total)
    for allocation in stack:
        allocation.path.append((span, allocation.bottom))
    other_path.append((span, drawn_total, drawn_total + other_total))
    return other_path, peak, peak_x, other_most


def _merge_points(points, columns_per_x: float):
    """`points` [(x, ...)] reduced, in each column of 1 / `columns_per_x` of x, to its first and
    last point and the one with the largest last value (so that a peak stays in the picture)."""
    if len(points) <= 4:
        return points
    out, column, group = [], None, []

    def flush():
        for p in (group[0], max(group, key=lambda p: p[-1]), group[-1]) if group else ():
            if not out or out[-1] != p:
                out.append(p)

    for p in points:
        c = int(p[0] * columns_per_x)
        if c != column:
            flush()
            column, group = c, []
        group.append(p)
    flush()
    return out


def _merged_paths(bands, other_path, x_scale: float):
    """The paths of `bands` and of the other band merged to half a pixel, or to wider columns
    until they hold at most _POINT_BUDGET points together (which bounds the file's size)."""
    per_pixel = 2.0
    while True:
        paths = [_merge_points(band.path, x_scale * per_pixel) for band in bands]
        other = _merge_points(other_path, x_scale * per_pixel)
        if sum(map(len, paths)) + len(other) <= _POINT_BUDGET or per_pixel < 1 / 256:
            return paths, other
        per_pixel /= 2


class _Clock:
    """The time of trace events, relative to the first one with a `time_us`."""

    def __init__(self, trace):
        self.trace = trace
        times = [e["time_us"] for e in trace if isinstance(e, dict)
                 and isinstance(e.get("time_us"), (int, float))]
        self.first = min(times) if times else None
        self.span = max(times) - min(times) if len(times) > 1 else None

    def at(self, x) -> str:
        """' (+1.5 ms)' for event x, '' when it has no time."""
        entry = self.trace[x] if x is not None and 0 <= x < len(self.trace) else None
        t = entry.get("time_us") if isinstance(entry, dict) else None
        if self.first is None or not isinstance(t, (int, float)):
            return ""
        return f" (+{_duration(t - self.first)})"


def _band_tooltip(allocation, clock) -> str:
    if allocation.made is None:
        made = "allocated before the trace began"
    else:
        made = f"allocated at event {allocation.made:,}{clock.at(allocation.made)}"
    if allocation.freed is None and allocation.requested is not None:
        freed = (f"free requested at event {allocation.requested:,}, not completed by the end "
                 f"(a stream still uses it)")
    elif allocation.freed is None:
        freed = "still allocated at the end"
    else:
        freed = f"freed at event {allocation.freed:,}{clock.at(allocation.freed)}"
        if allocation.requested is not None and allocation.requested != allocation.freed:
            freed += f" (free requested at event {allocation.requested:,})"
    stream = "" if allocation.stream is None else f", stream {allocation.stream}"
    tip = (f"allocation {allocation.number}: {_exact(allocation.size)} at "
           f"{_addr(allocation.addr)}{stream}\n{made}, {freed}")
    frames = _frames_text(allocation.frames)
    if frames:
        # An allocation the trace did not see made has the frames of its free.
        freed_by = allocation.made is None and allocation.freed is not None
        tip += ("\nfreed by:\n" if freed_by else "\n") + frames
    return tip


def timeline_svg(snapshot, device=0, max_entries=None) -> str:
    """The allocated-memory timeline of `device` as an SVG document (see the module's docstring).

    `max_entries`: how many of the largest allocations are drawn as bands of their own (None:
    DEFAULT_MAX_ENTRIES); the rest are one band. Raises ValueError when `snapshot` is not a
    snapshot or holds no trace for `device`."""
    return _timeline(_as_snapshot(snapshot), device, max_entries)


def _timeline(snapshot: dict, device: int, max_entries, y0: float = 0.0,
              standalone: bool = True) -> str:
    trace = _trace_of(snapshot, device)
    if max_entries is None:
        max_entries = DEFAULT_MAX_ENTRIES
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 0:
        raise ValueError(f"Expected max_entries to be None or an int >= 0, but got {max_entries!r}")
    allocations, initial, events, ooms, snapshots = _allocations(snapshot, device, trace)
    for allocation in _elided(allocations, max_entries):
        allocation.drawn = False
    bands = [a for a in allocations if a.drawn]
    elided = len(allocations) - len(bands)
    span = max(len(trace), 1)  # event x is drawn at x; the trace ends at len(trace)
    other_path, peak, peak_x, other_most = _walk(allocations, initial, events, span)
    clock = _Clock(trace)

    y_top, y_ticks = _byte_ticks(peak, 6)
    x_scale = _PLOT_W / span
    top = y0 + _TOP

    def px(x):
        return _LEFT + x * x_scale

    def py(value):
        return top + _T_PLOT_H - value / y_top * _T_PLOT_H

    out = []
    if standalone:
        out.append(_svg_open(_WIDTH, _T_HEIGHT, f"Active memory timeline, device {device}"))
    made = sum(1 for _, _, change in events if change > 0)
    freed = len(events) - made
    subtitle = (f"{_count(len(trace), 'event')}: {_count(made, 'allocation')}, "
                f"{_count(freed, 'free')}")
    if allocations:
        subtitle += f"; peak {format_bytes(peak)} at event {peak_x:,}"
    if clock.span is not None:
        subtitle += f"; {_duration(clock.span)} recorded"
    note = None
    if elided:
        smallest = min((a.size for a in bands), default=None)
        if smallest is None:
            drawn_text = "No allocation is drawn as a band"
        else:
            at_cut = sum(1 for a in allocations if a.size == smallest)
            drawn_at_cut = sum(1 for a in bands if a.size == smallest)
            split = (f"; the first {drawn_at_cut:,} of the {at_cut:,} of {format_bytes(smallest)}"
                     if drawn_at_cut < at_cut else "")
            drawn_text = (f"Bands: the {len(bands):,} largest allocations (each \u2265 "
                          f"{format_bytes(smallest)}{split})")
        note = (f"{drawn_text}; grey band on top: the other {elided:,} (at most "
                f"{format_bytes(other_most)} live at once)")
    out.append(_headings(f"Active memory timeline \u2014 device {device}", subtitle, note, y0))
    out.append(_axes(top, _T_PLOT_H, y_ticks, y_top, span, "live bytes",
                     f"event (index in device_traces[{device}])"))

    paths, other = _merged_paths(bands, other_path, x_scale)
    out.append('<g class="bands">\n')
    for band, path in zip(bands, paths):
        lower = [f"{_num(px(x))},{_num(py(b))}" for x, b in path]
        upper = [f"{_num(px(x))},{_num(py(b + band.size))}" for x, b in reversed(path)]
        colour = _BAND_COLOURS[band.number % len(_BAND_COLOURS)]
        lighter = ' fill-opacity="0.55"' if band.before else ""
        out.append(f'<polygon class="band" fill="{colour}"{lighter} '
                   f'points="{" ".join(lower + upper)}">'
                   f'<title>{_esc(_band_tooltip(band, clock))}</title></polygon>\n')
    out.append("</g>\n")
    if elided:
        lower = [f"{_num(px(x))},{_num(py(b))}" for x, b, _ in other]
        upper = [f"{_num(px(x))},{_num(py(t))}" for x, _, t in reversed(other)]
        tip = (f"other ({elided:,} allocations): the allocations smaller than the drawn ones, "
               f"stacked together; at most {_exact(other_most)} live at once")
        out.append(f'<polygon class="other" fill="{_OTHER_COLOUR}" stroke="none" '
                   f'points="{" ".join(lower + upper)}"><title>{_esc(tip)}</title></polygon>\n')

    for x, entry in ooms:
        tip = f"out of memory at event {x:,}{clock.at(x)}"
        if isinstance(entry.get("size"), int):
            tip += f": {_exact(entry['size'])} requested"
        if isinstance(entry.get("device_free"), int):
            tip += f", {_exact(entry['device_free'])} free on the device"
        frames = _frames_text(entry.get("frames") or [])
        if frames:
            tip += "\n" + frames
        cx = px(x)
        out.append(f'<g class="oom"><title>{_esc(tip)}</title>'
                   f'<line x1="{_num(cx)}" y1="{_num(top)}" x2="{_num(cx)}" '
                   f'y2="{_num(top + _T_PLOT_H)}" stroke="{_OOM_COLOUR}" stroke-width="1.5" '
                   f'stroke-dasharray="5 3"/>'
                   f'<polygon points="{_num(cx - 6)},{_num(top - 10)} {_num(cx + 6)},'
                   f'{_num(top - 10)} {_num(cx)},{_num(top)}" fill="{_OOM_COLOUR}"/></g>\n')
    for x in snapshots:
        cx = px(x)
        out.append(f'<g class="snapshot"><title>{_esc(f"snapshot taken at event {x:,}")}'
                   f'{_esc(clock.at(x))}</title><line x1="{_num(cx)}" y1="{_num(top)}" '
                   f'x2="{_num(cx)}" y2="{_num(top + _T_PLOT_H)}" stroke="{_SNAPSHOT_COLOUR}" '
                   f'stroke-width="1" stroke-dasharray="2 3"/></g>\n')

    if not allocations:
        out.append(_empty_note(snapshot, device, _LEFT + _PLOT_W / 2, top + _T_PLOT_H / 2))
    elif peak > 0:
        y = py(peak)
        out.append(f'<g class="peak"><line x1="{_num(_LEFT)}" y1="{_num(y)}" '
                   f'x2="{_num(_LEFT + _PLOT_W)}" y2="{_num(y)}" stroke="#333333" '
                   f'stroke-width="0.8" stroke-dasharray="1 3"/>'
                   f'<text x="{_num(_LEFT + _PLOT_W - 4)}" '
                   f'y="{_num(y - 4 if y - top > 16 else y + 13)}" text-anchor="end" '
                   f'font-size="11" fill="#333333">peak {_esc(format_bytes(peak))}</text></g>\n')

    entries = [("band", _BAND_COLOURS[0], "an allocation (tooltip: size, address, frames)")]
    if any(a.before for a in bands):
        entries.append(("before", _BAND_COLOURS[1], "allocated before the trace began"))
    if elided:
        entries.append(("rect", _OTHER_COLOUR, f"other ({elided:,} allocations)"))
    if ooms:
        entries.append(("oom", _OOM_COLOUR, f"out of memory ({len(ooms):,})"))
    if snapshots:
        entries.append(("snapshot", _SNAPSHOT_COLOUR, "snapshot taken"))
    out.append(_legend(entries, y0 + _T_HEIGHT - 8 - 18 * _legend_rows(entries)))
    if standalone:
        out.append("</svg>\n")
    return "".join(out)


def _headings(title: str, subtitle: str, note, y0: float) -> str:
    out = [f'<text class="title" x="{_num(_WIDTH / 2)}" y="{_num(y0 + 24)}" '
           f'text-anchor="middle" font-size="16" font-weight="bold">{_esc(title)}</text>\n',
           f'<text class="subtitle" x="{_num(_WIDTH / 2)}" y="{_num(y0 + 44)}" '
           f'text-anchor="middle" fill="#333333">{_esc(subtitle)}</text>\n']
    if note:
        out.append(f'<text class="elision" x="{_num(_WIDTH / 2)}" y="{_num(y0 + 62)}" '
                   f'text-anchor="middle" fill="#555555" font-size="11">{_esc(note)}</text>\n')
    return "".join(out)


def _empty_note(snapshot: dict, device: int, x: float, y: float) -> str:
    out = [f'<text class="empty" x="{_num(x)}" y="{_num(y)}" text-anchor="middle" '
           f'font-size="16" fill="#777777">'
           f'{_esc(f"no allocations recorded on device {device}")}</text>\n']
    others = [f"device {i} has {_count(len(t), 'event')}"
              for i, t in enumerate(snapshot["device_traces"]) if i != device and t]
    if others:
        out.append(f'<text x="{_num(x)}" y="{_num(y + 22)}" text-anchor="middle" '
                   f'fill="#777777">{_esc("(" + "; ".join(others) + ": see --device)")}</text>\n')
    return "".join(out)


def _duration(microseconds: float) -> str:
    if microseconds >= 1e6:
        return f"{microseconds / 1e6:.3g} s"
    if microseconds >= 1e3:
        return f"{microseconds / 1e3:.3g} ms"
    return f"{microseconds:.3g} µs"


def _svg_open(width: float, height: float, title: str) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(width)}" '
            f'height="{_num(height)}" viewBox="0 0 {_num(width)} {_num(height)}" '
            f'font-family="sans-serif" font-size="12">\n'
            f"<title>{_esc(title)}</title>\n"
            f'<rect x="0" y="0" width="{_num(width)}" height="{_num(height)}" fill="white"/>\n')


def _axes(top, height, y_ticks, y_top, span, y_label, x_label) -> str:
    out = ['<g class="y-axis" stroke="#dddddd">\n']
    for value, label in y_ticks:
        y = top + height - value / y_top * height
        out.append(f'<line x1="{_num(_LEFT)}" y1="{_num(y)}" x2="{_num(_LEFT + _PLOT_W)}" '
                   f'y2="{_num(y)}"/><text class="tick" x="{_num(_LEFT - 8)}" y="{_num(y + 4)}" '
                   f'text-anchor="end" stroke="none" fill="#333333">{_esc(label)}</text>\n')
    out.append('</g>\n<g class="x-axis" stroke="#dddddd">\n')
    step = max(_nice_step(span, 8), 1.0)
    value = 0.0
    while value <= span + 1e-9:
        x = _LEFT + value / span * _PLOT_W
        out.append(f'<line x1="{_num(x)}" y1="{_num(top + height)}" x2="{_num(x)}" '
                   f'y2="{_num(top + height + 5)}" stroke="#333333"/>'
                   f'<text class="tick" x="{_num(x)}" y="{_num(top + height + 18)}" '
                   f'text-anchor="middle" stroke="none" fill="#333333">{int(value):,}</text>\n')
        value += step
    out.append("</g>\n")
    out.append(f'<rect x="{_num(_LEFT)}" y="{_num(top)}" width="{_num(_PLOT_W)}" '
               f'height="{_num(height)}" fill="none" stroke="#333333"/>\n')
    out.append(f'<text class="x-label" x="{_num(_LEFT + _PLOT_W / 2)}" '
               f'y="{_num(top + height + 38)}" text-anchor="middle">{_esc(x_label)}</text>\n')
    cy = top + height / 2
    out.append(f'<text class="y-label" x="20" y="{_num(cy)}" text-anchor="middle" '
               f'transform="rotate(-90 20 {_num(cy)})">{_esc(y_label)}</text>\n')
    return "".join(out)


def _legend_width(text: str) -> float:
    return 19 + 6.4 * len(text) + 18  # 6.4 units a character is ample for 12-unit sans-serif


def _legend_rows(entries) -> int:
    rows, x = 1, _LEFT
    for _, _, text in entries:
        if x > _LEFT and x + _legend_width(text) - 18 > _WIDTH - _RIGHT:
            rows, x = rows + 1, _LEFT
        x += _legend_width(text)
    return rows


def _legend(entries, y: float) -> str:
    """Legend entries (kind, colour, text) in rows from the plot's left edge, the first row's
    baseline at `y`, the next ones 18 units below."""
    out = ['<g class="legend">\n']
    x = _LEFT
    for kind, colour, text in entries:
        if x > _LEFT and x + _legend_width(text) - 18 > _WIDTH - _RIGHT:
            x, y = _LEFT, y + 18
        out.append(f'<g class="legend-entry"><title>{_esc(text)}</title>')
        if kind in ("oom", "snapshot"):
            dash = "5 3" if kind == "oom" else "2 3"
            out.append(f'<line x1="{_num(x + 7)}" y1="{_num(y - 11)}" x2="{_num(x + 7)}" '
                       f'y2="{_num(y + 3)}" stroke="{colour}" stroke-width="1.5" '
                       f'stroke-dasharray="{dash}"/>')
        else:
            opacity = ' fill-opacity="0.55"' if kind == "before" else ""
            stroke = (' stroke="#333333" stroke-width="0.8"' if kind == "segment" else
                      ' stroke="#888888" stroke-width="0.5"' if colour.startswith("#e") else "")
            out.append(f'<rect x="{_num(x)}" y="{_num(y - 10)}" width="14" height="12" '
                       f'fill="{colour}"{opacity}{stroke}/>')
        out.append(f'<text x="{_num(x + 19)}" y="{_num(y)}">{_esc(text)}</text></g>\n')
        x += _legend_width(text)
    out.append("</g>\n")
    return "".join(out)


# ------------------------------------------------------------------------------------------------
# The segment map


def segments_svg(snapshot, device=None) -> str:
    """The segment map of `device` (None: every device) as an SVG document (see the module's
    docstring). Raises ValueError when `snapshot` is not a snapshot."""
    return _segments(_as_snapshot(snapshot), device, 0.0, True)


def _segment_height(snapshot: dict, device) -> float:
    return _segment_layout(snapshot, device)[3]


def _segment_layout(snapshot: dict, device):
    """(sections [(device, rows [[(segment, blocks, x)]])], bytes a row holds, legend entries,
    height of the picture)."""
    by_device, states = {}, set()
    for s, segment in enumerate(snapshot["segments"]):
        where = f"segments[{s}]"
        seg_device = segment.get("device", 0)
        if device is not None and seg_device != device:
            continue
        size = _field(segment, "total_size", where)
        _field(segment, "address", where)
        blocks = _blocks_of(segment, where)
        states.update(_state(block) for _, block in blocks)
        by_device.setdefault(seg_device, []).append((segment, blocks, size))
    sizes = [size for group in by_device.values() for _, _, size in group]
    # A row holds the largest segment, and enough that there are about _TARGET_ROWS of them;
    # rounded up to a tick, so that the ruler ends on one.
    row_bytes = max(max(sizes, default=0), sum(sizes) / _TARGET_ROWS, 1)
    row_bytes = max(row_bytes, _byte_ticks(row_bytes, 8)[1][-1][0])
    scale = _PLOT_W / row_bytes
    sections, height = [], _SEG_TOP
    for dev in sorted(by_device, key=lambda d: (not isinstance(d, int), str(d))):
        group = sorted(by_device[dev], key=lambda item: (-item[2], item[0]["address"]))
        rows, row, x = [], [], 0.0
        for segment, blocks, size in group:
            width = size * scale
            if row and x + width > _PLOT_W + 1e-6:
                rows.append(row)
                row, x = [], 0.0
            row.append((segment, blocks, x))
            x += width + _SEG_GAP
        if row:
            rows.append(row)
        sections.append((dev, rows))
        height += _SECTION_HEAD + len(rows) * _ROW_PITCH + _SECTION_GAP
    if not sections:
        height += 60
    entries = [("segment", "#ffffff", "segment (tooltip: address, pool, stream)")]
    entries += [("rect", _STATES[s][0], _STATES[s][1]) for s in _STATES]
    for state in sorted(states - set(_STATES)):
        entries.append(("rect", _UNKNOWN_STATE[0], f"{_UNKNOWN_STATE[1]} ({state})"))
    height += 12 + 18 * _legend_rows(entries)
    return sections, row_bytes, entries, height


def _segments(snapshot: dict, device, y0: float, standalone: bool) -> str:
    sections, row_bytes, entries, height = _segment_layout(snapshot, device)
    scale = _PLOT_W / row_bytes
    out = []
    which = "all devices" if device is None else f"device {device}"
    if standalone:
        out.append(_svg_open(_WIDTH, height, f"Allocator segments, {which}"))
    segments = [seg for _, rows in sections for row in rows for seg, _, _ in row]
    reserved = sum(seg["total_size"] for seg in segments)
    by_state = {}
    for _, rows in sections:
        for row in rows:
            for _, blocks, _ in row:
                for _, block in blocks:
                    live = _state(block) if _state(block) in _LIVE_STATES else "inactive"
                    by_state[live] = by_state.get(live, 0) + block["size"]
    allocated = by_state.get("active_allocated", 0)
    share = f" ({100 * allocated / reserved:.0f}%)" if reserved else ""
    subtitle = (f"{_count(len(segments), 'segment')}, {format_bytes(reserved)} reserved: "
                f"{format_bytes(allocated)} allocated{share}, "
                f"{format_bytes(by_state.get('active_pending_free', 0))} waiting to be freed, "
                f"{format_bytes(by_state.get('inactive', 0))} cached")
    note = "one bar per segment, its width proportional to its size; the largest first"
    out.append(_headings(f"Allocator segments \u2014 {which}", subtitle, note, y0))

    # A byte ruler for one row's width.
    ruler_y = y0 + _SEG_TOP - 18
    _, ticks = _byte_ticks(row_bytes, 8)
    out.append('<g class="x-axis">\n')
    out.append(f'<line x1="{_num(_LEFT)}" y1="{_num(ruler_y)}" x2="{_num(_LEFT + _PLOT_W)}" '
               f'y2="{_num(ruler_y)}" stroke="#333333"/>\n')
    for value, label in ticks:
        if value > row_bytes * (1 + 1e-9):
            break
        x = _LEFT + value * scale
        out.append(f'<line x1="{_num(x)}" y1="{_num(ruler_y - 5)}" x2="{_num(x)}" '
                   f'y2="{_num(ruler_y)}" stroke="#333333"/><text class="tick" x="{_num(x)}" '
                   f'y="{_num(ruler_y - 9)}" text-anchor="middle" fill="#333333" '
                   f'font-size="11">{_esc(label)}</text>\n')
    out.append(f'<text class="x-label" x="{_num(_LEFT - 8)}" y="{_num(ruler_y + 4)}" '
               f'text-anchor="end" font-size="11" fill="#333333">bytes</text>\n</g>\n')

    y = y0 + _SEG_TOP
    for dev, rows in sections:
        dev_segments = [seg for row in rows for seg, _, _ in row]
        dev_reserved = sum(seg["total_size"] for seg in dev_segments)
        dev_allocated = sum(block["size"] for row in rows for _, blocks, _ in row
                            for _, block in blocks if _state(block) == "active_allocated")
        header = (f"device {dev}: {_count(len(dev_segments), 'segment')}, "
                  f"{format_bytes(dev_reserved)} "
                  f"reserved, {format_bytes(dev_allocated)} allocated")
        out.append(f'<text class="device" x="{_num(_LEFT)}" y="{_num(y + 12)}" '
                   f'font-weight="bold">{_esc(header)}</text>\n')
        y += _SECTION_HEAD
        for row in rows:
            for segment, blocks, x in row:
                out.append(_segment_bar(segment, blocks, _LEFT + x, y, scale))
            y += _ROW_PITCH
        y += _SECTION_GAP
    if not sections:
        out.append(f'<text class="empty" x="{_num(_LEFT + _PLOT_W / 2)}" y="{_num(y + 30)}" '
                   f'text-anchor="middle" font-size="16" fill="#777777">'
                   f'{_esc(f"no segments on {which}")}</text>\n')

    out.append(_legend(entries, y0 + height - 8 - 18 * _legend_rows(entries)))
    if standalone:
        out.append("</svg>\n")
    return "".join(out)


def _segment_bar(segment, blocks, x0, y, scale) -> str:
    size = segment["total_size"]
    width = max(size * scale, 0.5)
    allocated = sum(b["size"] for _, b in blocks if _state(b) == "active_allocated")
    pending = sum(b["size"] for _, b in blocks if _state(b) == "active_pending_free")
    inactive = sum(b["size"] for _, b in blocks if _state(b) not in _LIVE_STATES)
    pool = segment.get("segment_type")
    details = ", ".join(part for part in (f"{pool} pool" if pool else "",
                                          f"stream {segment['stream']}"
                                          if "stream" in segment else "") if part)
    tip = (f"segment {_addr(segment['address'])}: {_exact(size)}"
           + (f" ({details})" if details else "")
           + f"\n{format_bytes(allocated)} allocated, {format_bytes(pending)} waiting to be "
           f"freed, {format_bytes(inactive)} free; {_count(len(blocks), 'block')}")
    frames = _frames_text(segment.get("frames") or [])
    if frames:
        tip += "\n" + frames
    out = [f'<g class="segment"><rect class="segment-outline" x="{_num(x0)}" y="{_num(y)}" '
           f'width="{_num(width)}" height="{_num(_ROW_H)}" fill="#ffffff" stroke="#333333" '
           f'stroke-width="0.8"><title>{_esc(tip)}</title></rect>\n']

    # Blocks wider than a pixel get a mark each; runs of narrower ones share one.
    base = segment["address"]
    run = []

    def mark(start, end, state, tip):
        colour = _STATES.get(state, _UNKNOWN_STATE)[0]
        bx, bw = x0 + (start - base) * scale, max((end - start) * scale, 0.3)
        line = ' stroke="#ffffff" stroke-width="0.6"' if bw > 3 else ""
        out.append(f'<rect class="block" data-state="{_esc(state)}" x="{_num(bx)}" '
                   f'y="{_num(y + 1)}" width="{_num(bw)}" height="{_num(_ROW_H - 2)}" '
                   f'fill="{colour}"{line}><title>{_esc(tip)}</title></rect>\n')

    def flush():
        if not run:
            return
        if len(run) == 1:
            single(*run[0])
        else:
            totals = {}
            for _, block in run:
                totals[_state(block)] = totals.get(_state(block), 0) + block["size"]
            state = max(sorted(totals), key=lambda s: totals[s])
            start, end = run[0][0], run[-1][0] + run[-1][1]["size"]
            parts = ", ".join(f"{format_bytes(totals[s])} {s}" for s in sorted(totals))
            mark(start, end, state, f"{len(run):,} small blocks at {_addr(start)}: {parts}")
        run.clear()

    def single(addr, block):
        state = _state(block)
        requested = _requested(block)
        tip = f"block {_addr(addr)}: {_exact(block['size'])}, {state}"
        if state in _LIVE_STATES and requested != block["size"]:
            lost = block["size"] - requested
            tip += f" (requested {requested:,} bytes: {lost:,} lost to rounding)"
        frames = _frames_text(block.get("frames") or [])
        if frames:
            tip += "\n" + frames
        mark(addr, addr + block["size"], state, tip)

    for addr, block in blocks:
        if block["size"] * scale < 1.0:
            run.append((addr, block))
            if sum(b["size"] for _, b in run) * scale >= 1.0:
                flush()
        else:
            flush()
            single(addr, block)
    flush()
    if width >= 80:
        used = f"{100 * allocated / size:.0f}% allocated" if size else ""
        label = f"{format_bytes(size)}, {used}" if width >= 150 else format_bytes(size)
        # Twice, a white outline under the text, so that it reads on any block's colour.
        at = f'x="{_num(x0 + 4)}" y="{_num(y + _ROW_H - 5)}" font-size="10" pointer-events="none"'
        out.append(f'<text class="label" {at} fill="none" stroke="#ffffff" stroke-width="2.5" '
                   f'stroke-opacity="0.85" stroke-linejoin="round">{_esc(label)}</text>'
                   f'<text class="label" {at} fill="#111111">{_esc(label)}</text>\n')
    out.append("</g>\n")
    return "".join(out)


# ------------------------------------------------------------------------------------------------
# Both views


def snapshot_svg(snapshot, device=0, max_entries=None) -> str:
    """The timeline of `device` above the segment map of `device`, in one SVG document."""
    snapshot = _as_snapshot(snapshot)
    _trace_of(snapshot, device)
    segments_height = _segment_height(snapshot, device)
    height = _T_HEIGHT + segments_height
    return (_svg_open(_WIDTH, height, f"Memory of device {device}: timeline and segments")
            + _timeline(snapshot, device, max_entries, 0.0, False)
            + f'<line x1="16" y1="{_num(_T_HEIGHT)}" x2="{_num(_WIDTH - 16)}" '
              f'y2="{_num(_T_HEIGHT)}" stroke="#bbbbbb"/>\n'
            + _segments(snapshot, device, _T_HEIGHT, False)
            + "</svg>\n")


# ------------------------------------------------------------------------------------------------
# The command


class _NotPlainData(pickle.UnpicklingError):
    pass


class _PlainData(pickle.Unpickler):
    """Unpickles dicts, lists, tuples, strings and numbers only: a snapshot holds nothing else,
    and refusing classes means opening a file runs none of its code."""

    def find_class(self, module, name):
        raise _NotPlainData(f"it holds a {module}.{name} object, and a memory snapshot holds "
                            f"plain data only")


def load(path) -> dict:
    """The snapshot pickled in `path` (as torch.cuda.memory._dump_snapshot writes it). Raises
    OSError when it cannot be read and ValueError when it is not a snapshot."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        snapshot = _PlainData(io.BytesIO(data)).load()
    except _NotPlainData as e:
        raise ValueError(f"{path} is not a memory snapshot: {e}") from None
    except Exception as e:  # a truncated or foreign file fails in many ways
        raise ValueError(f"{path} is not a memory snapshot pickle "
                         f"({type(e).__name__}: {e})") from None
    try:
        return _as_snapshot(snapshot)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _default_device(snapshot: dict) -> int:
    # A trace of only `snapshot` markers (taking a snapshot marks every device) has nothing to
    # draw; the device that allocated is the one meant.
    with_events = [i for i, trace in enumerate(snapshot["device_traces"])
                   if any(e.get("action") != "snapshot" for e in trace)]
    if len(with_events) > 1:
        raise ValueError(f"Devices {', '.join(map(str, with_events))} have traces: "
                         f"choose one with --device")
    return with_events[0] if with_events else 0


def main(argv=None) -> int:
    """``python -m oclvm.viz SNAPSHOT.pickle [-o OUT.svg] [--view V] [--device N]``: writes the
    picture and prints where. Returns 0; raises SystemExit with a message on an error."""
    parser = argparse.ArgumentParser(
        prog="python -m oclvm.viz",
        description="Draw a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) as a "
                    "self-contained SVG: the allocation timeline and the segment map.")
    parser.add_argument("snapshot", help="the pickled snapshot")
    parser.add_argument("-o", "--output",
                        help="the SVG to write ('-': standard output; default: the snapshot's "
                             "name with .svg)")
    parser.add_argument("--view", choices=("timeline", "segments", "both"), default="both")
    parser.add_argument("--device", type=int, default=None,
                        help="the device (default: the only one with a trace; the segments "
                             "view alone shows every device)")
    parser.add_argument("--max-entries", type=int, default=None,
                        help=f"allocations drawn as bands of their own (default "
                             f"{DEFAULT_MAX_ENTRIES}); the smaller ones are one band")
    args = parser.parse_args(argv)
    if args.max_entries is not None and args.max_entries < 0:
        parser.error("--max-entries must be >= 0")

    def fail(message):
        raise SystemExit(f"oclvm.viz: error: {message}")

    try:
        snapshot = load(args.snapshot)
    except FileNotFoundError:
        fail(f"{args.snapshot}: no such file")
    except OSError as e:
        fail(f"{args.snapshot}: {e.strerror or e}")
    except ValueError as e:
        fail(str(e))
    try:
        if args.view == "segments":
            svg = segments_svg(snapshot, args.device)
        else:
            device = _default_device(snapshot) if args.device is None else args.device
            if args.view == "timeline":
                svg = timeline_svg(snapshot, device, args.max_entries)
            else:
                svg = snapshot_svg(snapshot, device, args.max_entries)
    except _NoTrace as e:
        fail(f"{args.snapshot}: {e} (--view segments draws the segment map alone)")
    except ValueError as e:
        fail(f"{args.snapshot}: {e}")
    output = args.output or os.path.splitext(args.snapshot)[0] + ".svg"
    if output == "-":
        sys.stdout.write(svg)
        return 0
    try:
        with open(output, "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as e:
        fail(f"{output}: {e.strerror or e}")
    print(f"wrote {output} ({args.view}, {len(svg):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
