"""Pieces both views of oclvm.viz draw with: the layout constants and colours, byte and
number formatting, reading a snapshot's structure (with ValueError naming what is wrong), and the
SVG parts every picture has (the document, headings, axes, legend)."""
import math



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
