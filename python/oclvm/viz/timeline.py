"""The "Active Memory Timeline" of oclvm.viz: timeline_svg and the band layout behind it
(allocations made into bands, the largest max_entries of them drawn, the others one band, the
polygon points merged to half a pixel)."""
from ._common import (
    DEFAULT_MAX_ENTRIES, _BAND_COLOURS, _LEFT, _LIVE_STATES, _OOM_COLOUR, _OTHER_COLOUR, _PLOT_W,
    _POINT_BUDGET, _SNAPSHOT_COLOUR, _T_HEIGHT, _T_PLOT_H, _TOP, _WIDTH, _addr, _as_snapshot, _axes,
    _blocks_of, _byte_ticks, _count, _duration, _empty_note, _esc, _exact, _field, _frames_text,
    _headings, _legend, _legend_rows, _num, _requested, _state, _svg_open, _trace_of, format_bytes
)


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
