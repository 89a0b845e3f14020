"""oclvm.viz: a PyTorch memory snapshot drawn as self-contained SVG (the allocation timeline and
the segment map), and its command `python -m oclvm.viz`.

No device is needed: the snapshots are built by hand in PyTorch's structure (the dictionary
torch.cuda.memory._snapshot() returns) and the pictures are checked by parsing them. The module
is loaded from python/oclvm/viz/ by path, so these tests check the sources whichever `oclvm`
package is importable (a built one may predate the module, and the source tree has no _C); only
the test of `python -m oclvm.viz` itself needs an importable package that has it, and skips
otherwise.
"""
import copy
import importlib.util
import os
import pathlib
import pickle
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

_REPO = pathlib.Path(__file__).resolve().parents[2]
_VIZ_DIR = _REPO / "python" / "oclvm" / "viz"
_SPEC = importlib.util.spec_from_file_location("oclvm_viz_under_test", _VIZ_DIR / "__init__.py",
                                               submodule_search_locations=[str(_VIZ_DIR)])
viz = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = viz  # its modules import each other through the package
_SPEC.loader.exec_module(viz)

_NS = "{http://www.w3.org/2000/svg}"
KiB, MiB = 1 << 10, 1 << 20
BASE = 0x7F0000000000
FRAMES = [{"filename": "/usr/lib/libc10_cuda.so", "line": 0, "name": "c10::cuda::malloc"},
          {"filename": "/home/me/model.py", "line": 12, "name": "forward"},
          {"filename": "/home/me/train.py", "line": 40, "name": "step"}]


# ------------------------------------------------------------------------------------------------
# Snapshots by hand


def event(action, addr=None, size=None, t=None, frames=None, **extra):
    entry = {"action": action, "stream": 0, "frames": frames or []}
    if addr is not None:
        entry["addr"] = addr
    if size is not None:
        entry["size"] = size
    if t is not None:
        entry["time_us"] = t
    entry.update(extra)
    return entry


def segment(address, blocks, device=0, stream=0, kind="large"):
    """A segment made of `blocks` [(size, state)] or [(size, state, requested, frames)]."""
    out, addr = [], address
    for block in blocks:
        size, state = block[0], block[1]
        requested = block[2] if len(block) > 2 else size
        out.append({"address": addr, "size": size, "requested_size": requested, "state": state,
                    "frames": block[3] if len(block) > 3 else []})
        addr += size
    total = addr - address
    allocated = sum(b["size"] for b in out if b["state"] == "active_allocated")
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": allocated,
            "active_size": sum(b["size"] for b in out if b["state"] != "inactive"),
            "requested_size": sum(b["requested_size"] for b in out if b["state"] != "inactive"),
            "stream": stream, "segment_type": kind, "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": out}


def small_snapshot():
    """Three allocations on one 4 MiB segment: A (1 MiB) freed through free_requested then
    free_completed, B (2 MiB) live at the end, C (512 KiB) made after A's free and live."""
    a, b, c = BASE, BASE + MiB, BASE + 3 * MiB
    trace = [event("segment_alloc", BASE, 4 * MiB, t=100),
             event("alloc", a, MiB, t=110, frames=FRAMES),
             event("alloc", b, 2 * MiB, t=120),
             event("free_requested", a, MiB, t=130),
             event("free_completed", a, MiB, t=140),
             event("alloc", c, 512 * KiB, t=150)]
    seg = segment(BASE, [(MiB, "inactive"), (2 * MiB, "active_allocated", 2 * MiB - 100),
                         (512 * KiB, "active_allocated"), (512 * KiB, "inactive")])
    return {"segments": [seg], "device_traces": [trace]}


def parse(svg: str):
    return ET.fromstring(svg)


def by_class(root, cls, tag=None):
    return [e for e in root.iter() if cls in (e.get("class") or "").split()
            and (tag is None or e.tag == _NS + tag)]


def title_of(element) -> str:
    node = element.find(_NS + "title")
    if node is None:
        node = next((e for e in element.iter(_NS + "title")), None)
    return "" if node is None else node.text


def texts(root):
    return ["".join(e.itertext()) for e in root.iter(_NS + "text")]


def legend(root):
    return ["".join(t.itertext()) for g in by_class(root, "legend-entry")
            for t in g.iter(_NS + "text")]


def points(polygon):
    return [tuple(map(float, p.split(","))) for p in polygon.get("points").split()]


def frame_rect(root):
    """The plot area: the axes' frame (the rect with no fill)."""
    rect = next(r for r in root.iter(_NS + "rect") if r.get("fill") == "none")
    return (float(rect.get("x")), float(rect.get("y")), float(rect.get("width")),
            float(rect.get("height")))


# ------------------------------------------------------------------------------------------------
# The timeline


def test_one_band_per_allocation_with_a_tooltip_giving_size_address_and_frames():
    root = parse(viz.timeline_svg(small_snapshot()))
    bands = by_class(root, "band", "polygon")
    assert len(bands) == 3
    tips = [title_of(b) for b in bands]
    assert "1.00 MiB (1,048,576 bytes)" in tips[0] and f"0x{BASE:x}" in tips[0]
    assert "/home/me/model.py:12:forward" in tips[0], "the Python frames are shown"
    assert "c10::cuda::malloc" not in tips[0], "C++ frames give way to Python ones when present"
    assert "2.00 MiB (2,097,152 bytes)" in tips[1] and "still allocated at the end" in tips[1]
    assert "512.00 KiB" in tips[2]
    assert "allocated at event 1 (+10 µs)" in tips[0]
    colours = [b.get("fill") for b in bands]
    assert len(set(colours)) == 3, "neighbouring allocations have different colours"


def test_a_free_ends_its_band_at_free_completed_and_counts_once():
    root = parse(viz.timeline_svg(small_snapshot()))
    tip = title_of(by_class(root, "band", "polygon")[0])
    assert "freed at event 4" in tip and "(free requested at event 3)" in tip
    subtitle = texts(root)[texts(root).index(next(t for t in texts(root) if "events:" in t))]
    assert "6 events: 3 allocations, 1 free;" in subtitle
    assert "peak 3.00 MiB at event 2" in subtitle, "A and B together, before A's free"
    x0, _, width, _ = frame_rect(root)
    a = points(by_class(root, "band", "polygon")[0])
    assert max(x for x, _ in a) == pytest.approx(x0 + 4 / 6 * width, abs=0.1)


def test_the_bands_above_a_freed_one_slide_down_by_its_size():
    root = parse(viz.timeline_svg(small_snapshot()))
    _, top, _, height = frame_rect(root)
    bottom = top + height
    a, b, c = by_class(root, "band", "polygon")
    b_points = points(b)
    b_lower = b_points[:len(b_points) // 2]
    # B starts on top of A (1 MiB up) and ends on the axis after A is freed; A ends where B was.
    assert b_lower[0][1] < bottom - 1
    assert b_lower[-1][1] == pytest.approx(bottom, abs=0.1)
    assert max(y for _, y in points(a)) == pytest.approx(bottom, abs=0.1)
    # C, made after the slide, starts right on top of B (2 MiB): the bands do not overlap.
    per_mib = bottom - b_lower[0][1]
    assert max(y for _, y in points(c)) == pytest.approx(bottom - 2 * per_mib, abs=0.2)
    assert min(y for _, y in points(a)) == pytest.approx(bottom - per_mib, abs=0.2)


def test_axes_have_byte_units_ticks_a_title_and_a_legend():
    root = parse(viz.timeline_svg(small_snapshot()))
    words = texts(root)
    assert "Active memory timeline \u2014 device 0" in words
    assert "live bytes" in words and "event (index in device_traces[0])" in words
    assert {"0", "1 MiB", "2 MiB", "3 MiB"} <= set(words)
    assert any(w == "peak 3.00 MiB" for w in words)
    assert legend(root) == ["an allocation (tooltip: size, address, frames)"]
    assert root.get("viewBox") == "0 0 960.0 600.0"
    assert root.find(_NS + "title").text == "Active memory timeline, device 0"


def test_a_block_freed_without_an_alloc_was_live_from_the_start():
    trace = [event("free_requested", BASE + 8 * MiB, 64 * KiB),
             event("free_completed", BASE + 8 * MiB, 64 * KiB, frames=FRAMES),
             event("alloc", BASE, MiB),
             event("free_completed", BASE + 9 * MiB, 32 * KiB)]
    root = parse(viz.timeline_svg({"segments": [], "device_traces": [trace]}))
    bands = by_class(root, "band", "polygon")
    assert len(bands) == 3
    before = [b for b in bands if b.get("fill-opacity")]
    assert len(before) == 2, "the two blocks freed without an alloc are drawn lighter"
    tips = [title_of(b) for b in before]
    assert all("allocated before the trace began" in t for t in tips)
    assert "freed by:\n  /home/me/model.py:12:forward" in tips[0]
    x0 = frame_rect(root)[0]
    assert all(min(x for x, _ in points(b)) == pytest.approx(x0) for b in before)
    # The one freed last sits lowest, so the first free moves nothing above it.
    _, top, _, height = frame_rect(root)
    lowest = max(before, key=lambda b: max(y for _, y in points(b)))
    assert "32.00 KiB" in title_of(lowest)
    assert "allocated before the trace began" in legend(root)


def test_blocks_live_in_the_snapshot_without_an_alloc_are_bands_for_the_whole_trace():
    snapshot = small_snapshot()
    # A block held since before the recording, and one waiting for its stream.
    snapshot["segments"].append(segment(BASE + 64 * MiB, [(256 * KiB, "active_allocated"),
                                                          (128 * KiB, "active_pending_free"),
                                                          (128 * KiB, "inactive")]))
    root = parse(viz.timeline_svg(snapshot))
    bands = by_class(root, "band", "polygon")
    assert len(bands) == 5, "B and C are in the trace: not counted twice"
    held = [title_of(b) for b in bands if "before the trace began, still allocated" in
            title_of(b)]
    assert len(held) == 2 and "256.00 KiB" in held[0] and "128.00 KiB" in held[1]


def test_a_free_requested_but_not_completed_keeps_its_band_to_the_end():
    snapshot = small_snapshot()
    snapshot["device_traces"][0].append(event("free_requested", BASE + 3 * MiB, 512 * KiB))
    snapshot["segments"][0]["blocks"][2]["state"] = "active_pending_free"
    root = parse(viz.timeline_svg(snapshot))
    bands = by_class(root, "band", "polygon")
    assert len(bands) == 3
    assert "free requested at event 6, not completed by the end" in title_of(bands[2])
    x0, _, width, _ = frame_rect(root)
    assert max(x for x, _ in points(bands[2])) == pytest.approx(x0 + width)


def test_oom_and_snapshot_events_are_marked():
    snapshot = small_snapshot()
    snapshot["device_traces"][0] += [event("oom", size=6 * MiB, device_free=MiB, t=160),
                                     event("snapshot", 0, 0, t=170)]
    root = parse(viz.timeline_svg(snapshot))
    (oom,) = by_class(root, "oom", "g")
    assert "out of memory at event 6 (+60 µs): 6.00 MiB (6,291,456 bytes) requested, " \
           "1.00 MiB (1,048,576 bytes) free on the device" in title_of(oom)
    assert oom.find(_NS + "line").get("stroke") == "#d62728"
    (snap,) = by_class(root, "snapshot", "g")
    assert "snapshot taken at event 7" in title_of(snap)
    assert legend(root)[-2:] == ["out of memory (1)", "snapshot taken"]


def _big_snapshot(n_events=10_000):
    """n_events alloc/free pairs of many sizes; a tenth of the blocks stay live a while."""
    trace, live = [], []
    for i in range(n_events // 2):
        addr = BASE + i * 4 * MiB
        size = 512 * (1 + (i * 7919) % 4096)
        trace.append(event("alloc", addr, size, t=i * 10, frames=FRAMES))
        live.append((addr, size))
        if len(live) > 40 or i % 10:
            gone = live.pop(0 if i % 3 else len(live) - 1)
            trace.append(event("free_completed", gone[0], gone[1], t=i * 10 + 5))
    return {"segments": [], "device_traces": [trace]}


def test_large_traces_draw_the_largest_allocations_and_say_what_was_elided():
    snapshot = _big_snapshot()
    svg = viz.timeline_svg(snapshot)
    root = parse(svg)
    allocs = sum(1 for e in snapshot["device_traces"][0] if e["action"] == "alloc")
    bands = by_class(root, "band", "polygon")
    assert 0 < len(bands) <= viz.DEFAULT_MAX_ENTRIES
    (other,) = by_class(root, "other", "polygon")
    elided = allocs - len(bands)
    assert f"other ({elided:,} allocations)" in title_of(other)
    assert f"other ({elided:,} allocations)" in legend(root)
    (note,) = by_class(root, "elision")
    assert re.fullmatch(rf"Bands: the {len(bands):,} largest allocations \(each \u2265 [\d.]+ "
                        rf"[KM]iB\); grey band on top: the other {elided:,} \(at most [\d.]+ "
                        rf"[KM]iB live at once\)", note.text)
    drawn_sizes = [int(re.search(r"\(([\d,]+) bytes\)", title_of(b)).group(1).replace(",", ""))
                   for b in bands]
    smallest_drawn = min(drawn_sizes)
    sizes = sorted((e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"),
                   reverse=True)
    assert sizes[len(bands) - 1] == smallest_drawn, "the largest ones are the drawn ones"
    assert len(svg) < 4_000_000, "the file's size is bounded"


def test_max_entries_sets_how_many_bands_are_drawn():
    snapshot = _big_snapshot(2_000)
    allocs = sum(1 for e in snapshot["device_traces"][0] if e["action"] == "alloc")
    root = parse(viz.timeline_svg(snapshot, max_entries=10))
    assert len(by_class(root, "band", "polygon")) <= 10
    everything = parse(viz.timeline_svg(snapshot, max_entries=allocs))
    assert len(by_class(everything, "band", "polygon")) == allocs
    assert not by_class(everything, "other") and not by_class(everything, "elision")
    nothing = parse(viz.timeline_svg(snapshot, max_entries=0))
    assert not by_class(nothing, "band") and len(by_class(nothing, "other", "polygon")) == 1
    with pytest.raises(ValueError, match="max_entries"):
        viz.timeline_svg(snapshot, max_entries=-1)


def test_allocations_of_one_size_are_drawn_all_or_none():
    """Every repetition of a loop looks the same: the cut does not split a size."""
    trace = []
    for step in range(4):
        for i, size in enumerate((4 * MiB, 2 * MiB, 2 * MiB, MiB)):
            addr = BASE + (step * 8 + i) * 8 * MiB
            trace += [event("alloc", addr, size)]
        for i, size in enumerate((4 * MiB, 2 * MiB, 2 * MiB, MiB)):
            trace += [event("free_completed", BASE + (step * 8 + i) * 8 * MiB, size)]
    root = parse(viz.timeline_svg({"segments": [], "device_traces": [trace]}, max_entries=6))
    sizes = sorted(title_of(b).split(":")[1].split("(")[0].strip()
                   for b in by_class(root, "band", "polygon"))
    assert sizes == ["4.00 MiB"] * 4, "six would split the 2 MiB ones: only the 4 MiB are drawn"
    # Fewer than half the bands that way: then the first of the size at the cut, and it says so.
    root = parse(viz.timeline_svg({"segments": [], "device_traces": [trace]}, max_entries=10))
    assert len(by_class(root, "band", "polygon")) == 10
    assert "(each \u2265 2.00 MiB; the first 6 of the 8 of 2.00 MiB)" in \
        by_class(root, "elision")[0].text


def test_the_same_snapshot_gives_the_same_bytes():
    snapshot = _big_snapshot(3_000)
    snapshot["segments"] = small_snapshot()["segments"]
    first = viz.snapshot_svg(snapshot)
    assert viz.snapshot_svg(copy.deepcopy(snapshot)) == first
    assert viz.snapshot_svg(pickle.loads(pickle.dumps(snapshot))) == first


def test_an_empty_trace_says_no_allocations_were_recorded():
    root = parse(viz.timeline_svg({"segments": [], "device_traces": [[], [event("alloc", 1, 8)]]}))
    assert not by_class(root, "band")
    assert "no allocations recorded on device 0" in texts(root)
    assert "(device 1 has 1 event: see --device)" in texts(root)
    # Events that allocate nothing (segments only) draw an empty picture too.
    only_segments = {"segments": [], "device_traces": [[event("segment_alloc", BASE, 2 * MiB)]]}
    assert "no allocations recorded on device 0" in texts(parse(viz.timeline_svg(only_segments)))


def test_a_device_with_no_trace_and_a_non_snapshot_are_clear_errors():
    with pytest.raises(ValueError, match="devices 0 to 0; device 3 has none"):
        viz.timeline_svg(small_snapshot(), device=3)
    with pytest.raises(ValueError, match="no allocation trace"):
        viz.timeline_svg({"segments": [], "device_traces": []})
    with pytest.raises(ValueError, match="Expected a PyTorch memory snapshot"):
        viz.timeline_svg({"weights": [1, 2]})
    with pytest.raises(ValueError, match="Expected a PyTorch memory snapshot"):
        viz.segments_svg(42)
    bad = small_snapshot()
    del bad["device_traces"][0][1]["size"]
    with pytest.raises(ValueError, match=r"device_traces\[0\]\[1\] to have an integer 'size'"):
        viz.timeline_svg(bad)


# ------------------------------------------------------------------------------------------------
# The segment map


def test_every_segment_is_a_bar_proportional_to_its_size_with_its_blocks_by_state():
    snapshot = small_snapshot()
    # PyTorch's docstring calls the waiting state active_awaiting_free; both spellings are read.
    snapshot["segments"].append(segment(BASE + 64 * MiB, [(MiB, "active_awaiting_free"),
                                                          (MiB, "inactive")], kind="small"))
    root = parse(viz.segments_svg(snapshot))
    outlines = by_class(root, "segment-outline", "rect")
    assert len(outlines) == 2
    widths = [float(r.get("width")) for r in outlines]
    assert widths[0] / widths[1] == pytest.approx(4 * MiB / (2 * MiB), rel=1e-3)
    assert "segment 0x7f0000000000: 4.00 MiB (4,194,304 bytes) (large pool, stream 0)" \
        in title_of(outlines[0])
    assert "2.50 MiB allocated" in title_of(outlines[0])
    blocks = by_class(root, "block", "rect")
    states = [b.get("data-state") for b in blocks]
    assert states == ["inactive", "active_allocated", "active_allocated", "inactive",
                      "active_pending_free", "inactive"]
    fills = {b.get("data-state"): b.get("fill") for b in blocks}
    assert len(set(fills.values())) == 3, "each state has its colour"
    tip = title_of(blocks[1])
    assert f"block 0x{BASE + MiB:x}: 2.00 MiB (2,097,152 bytes), active_allocated" in tip
    assert "(requested 2,097,052 bytes: 100 lost to rounding)" in tip
    assert legend(root) == ["segment (tooltip: address, pool, stream)",
                            "allocated (active_allocated)",
                            "freed, waiting for a stream (active_pending_free)",
                            "cached, free (inactive)"]
    words = texts(root)
    assert "Allocator segments \u2014 all devices" in words
    assert "bytes" in words and "4 MiB" in words
    assert any(w.startswith("2 segments, 6.00 MiB reserved: 2.50 MiB allocated (42%)")
               for w in words)


def test_blocks_narrower_than_a_pixel_are_drawn_together():
    many = [(512, "active_allocated" if i % 3 else "inactive") for i in range(4096)]
    big = segment(BASE, [(64 * MiB, "inactive")])
    root = parse(viz.segments_svg({"segments": [big, segment(BASE + 128 * MiB, many)],
                                   "device_traces": []}))
    blocks = by_class(root, "block", "rect")
    assert len(blocks) < 60
    merged = [title_of(b) for b in blocks if "small blocks" in title_of(b)]
    assert merged and all(re.search(r"\d+ small blocks at 0x[0-9a-f]+: ", t) for t in merged)
    assert sum(int(t.split()[0].replace(",", "")) for t in merged) == 4096


def test_the_segment_map_has_a_section_per_device_or_only_the_one_asked_for():
    snapshot = small_snapshot()
    snapshot["segments"].append(segment(BASE + 512 * MiB, [(2 * MiB, "inactive")], device=1))
    snapshot["device_traces"].append([])
    everything = parse(viz.segments_svg(snapshot))
    headers = ["".join(t.itertext()) for t in by_class(everything, "device")]
    assert [h.split(":")[0] for h in headers] == ["device 0", "device 1"]
    one = parse(viz.segments_svg(snapshot, device=1))
    assert len(by_class(one, "segment-outline")) == 1
    assert "Allocator segments \u2014 device 1" in texts(one)
    none = parse(viz.segments_svg(snapshot, device=7))
    assert "no segments on device 7" in texts(none)


def test_snapshot_svg_stacks_both_views_in_one_document():
    svg = viz.snapshot_svg(small_snapshot())
    root = parse(svg)
    words = texts(root)
    assert "Active memory timeline \u2014 device 0" in words
    assert "Allocator segments \u2014 device 0" in words
    height = float(root.get("height"))
    assert height > 600
    (segment_title,) = [t for t in root.iter(_NS + "text") if "".join(t.itertext()) ==
                        "Allocator segments \u2014 device 0"]
    assert float(segment_title.get("y")) > 600
    assert max(float(r.get("y")) for r in by_class(root, "segment-outline")) < height
    assert "<script" not in svg and "http://" not in svg.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")


# ------------------------------------------------------------------------------------------------
# The command


def _run(*args, cwd=None):
    """The command, run as `python python/oclvm/viz`: what `python -m oclvm.viz` runs once the
    package is imported."""
    return subprocess.run([sys.executable, str(_VIZ_DIR), *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def _dump(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f)
    return path


def test_the_command_writes_each_view(tmp_path):
    path = _dump(tmp_path / "snap.pickle", small_snapshot())
    for view, title in (("timeline", "Active memory timeline"),
                        ("segments", "Allocator segments"), ("both", "Memory of device 0")):
        out = tmp_path / f"{view}.svg"
        result = _run(path, "-o", out, "--view", view)
        assert result.returncode == 0, result.stderr
        assert f"wrote {out} ({view}," in result.stdout
        assert parse(out.read_text()).find(_NS + "title").text.startswith(title)
    # Without -o the picture lands next to the snapshot; in-process main() does the same.
    assert viz.main([str(path), "--device", "0"]) == 0
    assert (tmp_path / "snap.svg").read_text() == (tmp_path / "both.svg").read_text()
    result = _run(path, "-o", "-", "--view", "timeline", "--max-entries", "1")
    assert result.returncode == 0 and len(by_class(parse(result.stdout), "band")) == 1


def test_the_command_gives_the_same_bytes_in_every_process(tmp_path):
    snapshot = _big_snapshot(2_000)
    snapshot["segments"] = small_snapshot()["segments"]
    path = _dump(tmp_path / "snap.pickle", snapshot)
    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outputs.append(subprocess.run([sys.executable, str(_VIZ_DIR), str(path), "-o", "-"],
                                      capture_output=True, env=env, timeout=120).stdout)
    assert outputs[0] == outputs[1] == viz.snapshot_svg(snapshot).encode()


@pytest.mark.parametrize("case, message", [
    ("missing", "missing.pickle: no such file"),
    ("text", "is not a memory snapshot pickle"),
    ("list", "Expected the snapshot's 'segments' to be a list of dicts"),
    ("dict", "Expected a PyTorch memory snapshot"),
    ("class", "holds a collections.OrderedDict object, and a memory snapshot holds plain data"),
    ("device", "device 5 has none (--view segments draws the segment map alone)"),
    ("segments only", "The snapshot has no allocation trace"),
    ("devices", "Devices 0, 1 have traces: choose one with --device"),
])
def test_the_command_fails_with_one_line_and_status_1(tmp_path, case, message):
    import collections
    path = tmp_path / f"{case}.pickle"
    args = []
    if case == "text":
        path.write_text("not a pickle\n")
    elif case == "list":
        _dump(path, [1, 2, 3])
    elif case == "dict":
        _dump(path, {"state_dict": {}})
    elif case == "class":
        _dump(path, collections.OrderedDict(segments=[], device_traces=[]))
    elif case == "device":
        _dump(path, small_snapshot())
        args = ["--device", "5"]
    elif case == "segments only":  # an old snapshot: a list of segments, no trace
        _dump(path, small_snapshot()["segments"])
    elif case == "devices":
        snapshot = small_snapshot()
        snapshot["device_traces"].append([event("alloc", 1, 8)])
        _dump(path, snapshot)
    result = _run(path, "-o", tmp_path / "out.svg", *args)
    assert result.returncode == 1
    assert message in result.stderr
    assert result.stderr.startswith("oclvm.viz: error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.svg").exists()


def test_the_command_draws_the_segments_of_a_snapshot_without_a_trace(tmp_path):
    path = _dump(tmp_path / "old.pickle", small_snapshot()["segments"])
    result = _run(path, "--view", "segments", "-o", tmp_path / "out.svg")
    assert result.returncode == 0, result.stderr
    assert len(by_class(parse((tmp_path / "out.svg").read_text()), "segment-outline")) == 1


def test_the_command_runs_none_of_a_pickles_code(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    path = _dump(tmp_path / "evil.pickle", {"segments": [], "device_traces": [[Payload()]]})
    result = _run(path, "-o", tmp_path / "out.svg")
    assert result.returncode == 1 and "holds a posix.mkdir object" in result.stderr
    assert not marker.exists()


def test_the_command_reports_usage_errors_with_status_2(tmp_path):
    path = _dump(tmp_path / "snap.pickle", small_snapshot())
    assert _run(path, "--view", "flame").returncode == 2
    assert _run(path, "--max-entries", "-3").returncode == 2
    assert _run().returncode == 2


def test_python_dash_m_oclvm_viz(tmp_path):
    """`python -m oclvm.viz` as a user runs it: needs an importable `oclvm` package that has the
    module and its native _C (importing the package loads it)."""
    spec = importlib.util.find_spec("oclvm")
    package = pathlib.Path(spec.origin).parent if spec and spec.origin else None
    if package is None or not (package / "viz" / "__init__.py").exists():
        pytest.skip(f"the importable oclvm package ({package}) has no viz module: built before it")
    if not any(package.glob("_C*")):
        pytest.skip(f"the importable oclvm package ({package}) has no built _C")
    path = _dump(tmp_path / "snap.pickle", small_snapshot())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(package.parent)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                 if p]))
    result = subprocess.run([sys.executable, "-m", "oclvm.viz", str(path), "-o",
                             str(tmp_path / "out.svg")], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert parse((tmp_path / "out.svg").read_text()).find(_NS + "title").text == \
        "Memory of device 0: timeline and segments"
    missing = subprocess.run([sys.executable, "-m", "oclvm.viz", str(tmp_path / "nope.pickle")],
                             capture_output=True, text=True, env=env, timeout=300)
    assert missing.returncode == 1 and "nope.pickle: no such file" in missing.stderr


def test_a_device_with_only_snapshot_markers_is_not_a_choice(tmp_path):
    # Taking a snapshot marks every device's trace; the device that allocated is the one drawn.
    snapshot = small_snapshot()
    snapshot["device_traces"].append([{"action": "snapshot", "addr": 0, "size": 0, "stream": 0,
                                       "time_us": 1, "frames": []}])
    path = _dump(tmp_path / "snap.pickle", snapshot)
    out = tmp_path / "out.svg"
    assert viz.main([str(path), "-o", str(out)]) == 0
    assert out.read_text() == viz.snapshot_svg(snapshot, device=0)
