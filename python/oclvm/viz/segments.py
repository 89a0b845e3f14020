"""The segment map of oclvm.viz: segments_svg, every segment of a device as a bar of its
blocks, laid out in rows on one scale."""
from ._common import (
    _LEFT, _LIVE_STATES, _PLOT_W, _ROW_H, _ROW_PITCH, _SECTION_GAP, _SECTION_HEAD, _SEG_GAP,
    _SEG_TOP, _STATES, _TARGET_ROWS, _UNKNOWN_STATE, _WIDTH, _addr,
    _as_snapshot, _blocks_of, _byte_ticks, _count, _esc, _exact, _field, _frames_text, _headings,
    _legend, _legend_rows, _num, _requested, _state, _svg_open, format_bytes
)


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
