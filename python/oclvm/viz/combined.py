"""Both views of oclvm.viz in one document: snapshot_svg."""
from ._common import _T_HEIGHT, _WIDTH, _as_snapshot, _num, _svg_open, _trace_of
from .segments import _segment_height, _segments
from .timeline import _timeline


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
