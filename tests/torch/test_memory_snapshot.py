"""torch.opencl.memory's history and snapshots: PyTorch's API and format, read by PyTorch's own
memory viewer (torch.cuda._memory_viz), by oclvm.viz, and by the profiler.

The history is oclvm's (kept per device in C++); these tests check what a PyTorch user sees: the
events of their code with its Python frames, the segments and blocks, the bad arguments PyTorch
refuses, and that recording off leaves nothing behind.
"""
import os
import pickle
import shutil
import subprocess
import sys

import pytest
import torch
import torch.cuda._memory_viz as memory_viz

import oclvm  # noqa: F401  (registers the device)

DEV = "opencl"
memory = torch.opencl.memory


@pytest.fixture(autouse=True)
def history_off():
    memory._record_memory_history(enabled=None)
    yield
    memory._record_memory_history(enabled=None)


def _trace(snapshot, device=0):
    return snapshot["device_traces"][device]


def _allocating_function():
    return torch.empty(12345, dtype=torch.uint8, device=DEV)


def test_events_carry_the_python_frames_of_the_code_that_allocated():
    memory._record_memory_history(max_entries=100000)
    x = _allocating_function()
    address = x.untyped_storage().data_ptr()
    del x
    snapshot = memory._snapshot()
    events = [e for e in _trace(snapshot)
              if e["addr"] == address and not e["action"].startswith("segment")]
    actions = [e["action"] for e in events]
    assert actions[:3] == ["alloc", "free_requested", "free_completed"]
    alloc = events[0]
    assert alloc["size"] >= 12345
    assert alloc["frames"][0]["name"] == "_allocating_function"
    assert alloc["frames"][0]["filename"] == __file__
    assert any(f["name"] == "test_events_carry_the_python_frames_of_the_code_that_allocated"
               for f in alloc["frames"])
    assert events[1]["frames"], "context='all' captures the stack of the free too"
    assert _trace(snapshot)[-1]["action"] == "snapshot"
    assert all(isinstance(e["time_us"], int) for e in _trace(snapshot))


def test_segments_show_live_blocks_with_their_frames():
    memory._record_memory_history()
    x = _allocating_function()
    address = x.untyped_storage().data_ptr()
    segments = memory.memory_snapshot()
    assert torch.opencl.memory_snapshot is memory.memory_snapshot
    blocks = [b for s in segments for b in s["blocks"] if b["address"] == address]
    assert len(blocks) == 1
    assert blocks[0]["state"] == "active_allocated"
    assert blocks[0]["requested_size"] == 12345
    assert blocks[0]["frames"][0]["name"] == "_allocating_function"
    for segment in segments:
        assert sum(b["size"] for b in segment["blocks"]) == segment["total_size"]
        assert segment["segment_type"] in ("small", "large")
    allocated = sum(s["allocated_size"] for s in segments if s["device"] == 0)
    assert allocated == torch.opencl.memory_allocated(0)
    del x


def test_pytorchs_own_viewer_reads_the_snapshot(tmp_path):
    torch.opencl.empty_cache()  # so that the history sees segments made, too
    memory._record_memory_history()
    layer = torch.nn.Linear(64, 64).to(DEV)
    layer(torch.randn(8, 64, device=DEV)).sum().backward()
    path = tmp_path / "snap.pickle"
    memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    assert "Summary of segments" in memory_viz.segsum(snapshot)
    text = memory_viz.trace(snapshot)  # walks every event as PyTorch's tools do
    assert "Device 0 ----" in text and "= cudaMalloc(" in text and "\ndel " in text
    # The viewer pages embed the snapshot for MemoryViz.js (fetched from a CDN when opened).
    for page in (memory_viz.trace_plot(snapshot), memory_viz.segment_plot(snapshot)):
        assert "add_local_files" in page and "snapshot.pickle" in page
    # (memory_viz.memory and .segments fetch flamegraph.pl from the internet: not run here.)


def test_oclvm_viz_draws_the_snapshot(tmp_path):
    memory._record_memory_history()
    x = torch.ones(1000, device=DEV) * 2
    path = tmp_path / "snap.pickle"
    memory._dump_snapshot(str(path))
    out = tmp_path / "snap.svg"
    done = subprocess.run([sys.executable, "-m", "oclvm.viz", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("<svg") or "<svg" in out.read_text()[:200]
    del x


def test_snapshot_svg_draws_the_current_snapshot():
    memory._record_memory_history()
    x = _allocating_function()
    svg = memory.snapshot_svg()
    assert svg.lstrip().startswith("<") and "<svg" in svg and "</svg>" in svg
    assert "Active memory timeline" in svg and "_allocating_function" in svg
    assert "<svg" in memory.snapshot_svg(view="segments")
    with pytest.raises(ValueError):
        memory.snapshot_svg(view="flamegraph")
    del x


def test_max_entries_keeps_the_newest_and_stopping_drops_the_history():
    memory._record_memory_history(max_entries=4)
    for _ in range(5):
        torch.empty(100, device=DEV)
    trace = _trace(memory._snapshot())
    assert len(trace) == 4
    assert trace[-1]["action"] == "snapshot"
    memory._record_memory_history(enabled=None)
    assert _trace(memory._snapshot()) == []


def test_state_mode_keeps_frames_of_live_blocks_but_no_events():
    memory._record_memory_history(enabled="state")
    x = _allocating_function()
    snapshot = memory._snapshot()
    assert _trace(snapshot) == []
    address = x.untyped_storage().data_ptr()
    block = [b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == address][0]
    assert block["frames"][0]["name"] == "_allocating_function"
    del x


def test_legacy_bool_and_skip_actions():
    memory._record_memory_history(True, skip_actions=["free_requested"])
    torch.empty(100, device=DEV)
    actions = {e["action"] for e in _trace(memory._snapshot())}
    assert "alloc" in actions and "free_completed" in actions
    assert "free_requested" not in actions
    memory._record_memory_history(False)
    assert _trace(memory._snapshot()) == []


def test_an_out_of_memory_request_is_an_oom_event():
    memory._record_memory_history()
    torch.opencl.empty_cache()
    torch.opencl.set_per_process_memory_fraction(0.001)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    finally:
        torch.opencl.set_per_process_memory_fraction(1.0)
    snapshot = memory._snapshot()
    ooms = [e for e in _trace(snapshot) if e["action"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["size"] == 1 << 30
    assert 0 <= ooms[0]["device_free"] < 1 << 30
    assert "raise OutOfMemoryError" in memory_viz.trace(snapshot)


@pytest.mark.parametrize("kwargs", [
    dict(enabled="everything"),
    dict(context="some"),
    dict(stacks="cpp"),
    dict(max_entries=0),
    dict(skip_actions=["allocate"]),
    dict(compile_context=True),
    dict(device=99),
])
def test_bad_arguments_raise_and_change_nothing(kwargs):
    memory._record_memory_history(max_entries=1000)
    torch.empty(100, device=DEV)
    before = len(_trace(memory._snapshot()))
    with pytest.raises((ValueError, IndexError, RuntimeError)):
        memory._record_memory_history(**kwargs)
    after = _trace(memory._snapshot())
    assert len(after) == before + 1, "still recording, nothing dropped (one more snapshot event)"


def test_profiler_sees_device_allocations():
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        x = torch.empty(1 << 20, dtype=torch.uint8, device=DEV)
        del x
    # The allocation is charged to the operator that made it, the free to a [memory] event.
    usage = {(e.name, e.device_memory_usage) for e in prof.events()}
    assert ("aten::empty", 1 << 20) in usage, usage
    assert ("[memory]", -(1 << 20)) in usage, usage


def test_replay_snapshot_from_the_command_line_is_the_same_format(tmp_path):
    program = shutil.which("oclvm") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "build", "oclvm")
    if not os.path.exists(program):
        pytest.skip("the oclvm command is not built (build/oclvm)")
    trace = os.path.join(os.path.dirname(__file__), "..", "..", "traces", "mlp_sgd.trace")
    out = tmp_path / "replay.pickle"
    done = subprocess.run([program, "replay", trace, "--snapshot", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with open(out, "rb") as f:
        snapshot = pickle.load(f)
    actions = [e["action"] for e in _trace(snapshot)]
    assert actions.count("alloc") == 310 and actions.count("free_completed") == 310
    assert "Summary of segments" in memory_viz.segsum(snapshot)
