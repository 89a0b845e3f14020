"""The `opencl` device under injected device faults (OCLVM_FAULTS, storage/faults.h), in fresh
interpreters: every failure reaches Python as a typed error (torch.OutOfMemoryError for a refused
segment, RuntimeError naming the injected fault and the device for a failed copy, fill or finish;
a failed release, which torch runs in a deleter that cannot raise, is one line on stderr), no
operator crashes the process, and once the work is done memory_allocated and the live blocks
are back to where they started.
"""
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import gc, torch, oclvm
    errors = {"oom": 0, "runtime": 0, "ok": 0}
    start_allocated = torch.opencl.memory_allocated()
    start_blocks = oclvm._C.live_blocks()
    for i in range(300):
        try:
            x = torch.full((1000 + i,), float(i), device="opencl")   # fill
            y = torch.arange(1000 + i, dtype=torch.float32).to("opencl")  # upload
            z = x + y                                                  # fallback: copies
            assert z.cpu()[5].item() == float(i) + 5.0
            torch.opencl.empty_cache()
            errors["ok"] += 1
        except torch.OutOfMemoryError as e:
            assert "opencl:0" in str(e), e
            errors["oom"] += 1
        except RuntimeError as e:
            assert "injected fault" in str(e) and "opencl:0" in str(e), e
            errors["runtime"] += 1
    x = y = z = None
    gc.collect()
    assert torch.opencl.memory_allocated() == start_allocated, torch.opencl.memory_allocated()
    assert oclvm._C.live_blocks() == start_blocks
    print(errors["ok"] > 0, errors["oom"] + errors["runtime"] > 0)
""")


@pytest.mark.parametrize("rules", ["copy:every=25", "fill:every=3", "finish:every=40",
                                   "segment:p=0.6,seed=4",
                                   "segment:p=0.3,copy:p=0.05,fill:p=0.05,finish:p=0.05,seed=9"])
def test_faults_surface_typed_and_nothing_leaks(rules):
    env = dict(os.environ, OCLVM_FAULTS=rules, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "True True\n", (out.stdout, out.stderr)
    # Every failure reaches Python, except a release's: torch frees memory in a deleter that
    # cannot raise, so a failed finish there is reported on stderr (the block is given back all
    # the same, as memory_allocated shows).
    for line in out.stderr.splitlines():
        assert line.startswith("oclvm: releasing a tensor") and "injected fault" in line, line



def test_malformed_fault_rules_are_a_clear_error():
    env = dict(os.environ, OCLVM_FAULTS="copy:sometimes", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", "import torch, oclvm; torch.ones(1, device='opencl')"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "OCLVM_FAULTS" in out.stderr
