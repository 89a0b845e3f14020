"""torch.opencl.memory.record_trace: the device's allocations as an `oclvm-trace v1` file that
`oclvm replay` accepts and whose live peak is what the model held.

Replays use the `oclvm` program of the core build (build/oclvm); without it those checks skip.
"""
import json
import pathlib
import subprocess

import pytest
import torch

import oclvm

DEV = "opencl"
_REPO = pathlib.Path(__file__).resolve().parents[2]
_OCLVM = _REPO / "build" / "oclvm"


def _events(path):
    return [line.split() for line in pathlib.Path(path).read_text().splitlines()
            if line and not line.startswith("#")]


def test_records_every_block_handed_out_and_given_back(tmp_path):
    path = tmp_path / "small.trace"
    before = torch.empty(100, device=DEV)  # live before: neither it nor its release is recorded
    with torch.opencl.memory.record_trace(path):
        a = torch.empty(1000, device=DEV)          # 4000 bytes
        b = torch.empty(256, dtype=torch.uint8, device=DEV)
        del a
        del before
        c = torch.ones(3, device=DEV) + 1          # a result and the operands it needed
        del c
    text = pathlib.Path(path).read_text()
    assert text.startswith("# oclvm-trace v1\n")
    events = _events(path)
    assert events[0] == ["a", "1", "4000"]
    assert events[1] == ["a", "2", "256"]
    assert events[2] == ["f", "1"]
    allocated = {e[1] for e in events if e[0] == "a"}
    freed = [e[1] for e in events if e[0] == "f"]
    assert set(freed) <= allocated and len(freed) == len(set(freed))
    assert "2" not in freed, "b is still live at the end: it stays allocated in the trace"
    del b


def test_the_trace_replays_with_the_models_live_peak(tmp_path):
    if not _OCLVM.exists():
        pytest.skip("build/oclvm is not built")
    path = tmp_path / "mlp.trace"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32, device=DEV)
    y = torch.randint(0, 4, (16,), device=DEV)
    with torch.opencl.memory.record_trace(path):
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        del loss
    out = subprocess.run([str(_OCLVM), "replay", str(path), "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["events"] == len(_events(path)) > 20
    assert report["live_peak_bytes"] > 0 and report["ooms"] == 0


def test_bad_paths_and_a_second_recording_are_clear_errors(tmp_path):
    with pytest.raises(RuntimeError, match="Expected to write an allocation trace to '.*no_dir/x"):
        with torch.opencl.memory.record_trace(tmp_path / "no_dir" / "x.trace"):
            pass
    with torch.opencl.memory.record_trace(tmp_path / "one.trace"):
        with pytest.raises(RuntimeError, match="Expected one allocation trace at a time"):
            with torch.opencl.memory.record_trace(tmp_path / "two.trace"):
                pass
    x = torch.empty(10, device=DEV)  # recording is off again: allocations go on untouched
    assert x.device.type == DEV
    assert not (tmp_path / "two.trace").exists()


def test_the_memory_api_is_under_torch_opencl_memory_too():
    """As torch.cuda.memory: the same functions under torch.opencl and torch.opencl.memory."""
    for name in ("memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved", "reset_peak_memory_stats",
                 "reset_accumulated_memory_stats", "empty_cache", "mem_get_info",
                 "memory_summary", "set_per_process_memory_fraction",
                 "get_per_process_memory_fraction", "host_memory_stats"):
        assert getattr(torch.opencl.memory, name) is getattr(torch.opencl, name), name
    x = torch.empty(1024, device=DEV)
    assert torch.opencl.memory.memory_allocated() == torch.opencl.memory_allocated() > 0
    assert "oclvm memory summary, device opencl:0" in torch.opencl.memory.memory_summary()
    del x
