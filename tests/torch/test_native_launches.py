"""The native path's launches do not wait for the device (Note [Launches that do not wait] in
adapters/torch/native_launches.cc): an operator returns once its kernel is enqueued, a sync point
(synchronize, .item(), a copy to the host) waits for what was launched and reports its failures,
and OCLVM_LAUNCH_BLOCKING=1 makes every launch wait.

PoCL's devices take the host path by default, so these tests run in subprocesses with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, the in-process ones run here too.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import oclvm

from native_util import native_only, run_file_natively


def run_script(script, **env):
    full = dict(os.environ, OCLVM_KERNELS="native", PYTHONPATH=os.pathsep.join(sys.path), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full,
                          capture_output=True, text=True, timeout=300)


def test_native_launches_in_a_subprocess():
    run_file_natively(__file__)


@native_only
@pytest.mark.parametrize("sync", ["synchronize", "item", "cpu"])
def test_an_operator_returns_before_its_sync_point_which_waits(sync):
    torch.opencl.synchronize()
    assert oclvm._C.pending_native_launches() == 0
    x = torch.arange(1000, dtype=torch.float32).to("opencl")
    y = x * 2 + 1
    z = y - x
    assert oclvm._C.pending_native_launches() >= 3  # mul, add, sub: none waited for
    if sync == "synchronize":
        torch.opencl.synchronize()
        value = z.cpu()
    elif sync == "item":
        value = z[999].item()
    else:
        value = z.cpu()
    assert oclvm._C.pending_native_launches() == 0
    expected = torch.arange(1000, dtype=torch.float32) + 1
    if sync == "item":
        assert value == expected[999].item()
    else:
        assert torch.equal(value, expected)


@native_only
def test_launches_from_two_threads_each_compute_their_own():
    import threading
    results, errors = {}, []

    def work(k):
        try:
            t = torch.full((4096,), float(k), device="opencl")
            for _ in range(200):
                t = t + 1
            results[k] = t
        except Exception as e:  # reported below: a thread's exception is otherwise lost
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    torch.opencl.synchronize()
    for k in range(2):
        assert torch.equal(results[k].cpu(), torch.full((4096,), float(k + 200)))


def test_launch_blocking_waits_for_every_launch():
    out = run_script("""
        import torch, oclvm
        x = torch.arange(1000, dtype=torch.float32).to("opencl")
        y = x * 2 + 1
        print(oclvm._C.pending_native_launches(), y[999].item())
    """, OCLVM_LAUNCH_BLOCKING="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "0 1999.0\n", (out.stdout, out.stderr)


# A launch refused by the driver (an injected fault at the `launch` point) fails as it is
# dispatched: the operator that made it raises, naming the fault, and the next ones work. Every
# fourth launch fails; nothing is lost and memory is back where it started.
def test_a_refused_launch_raises_from_its_operator_and_nothing_leaks():
    out = run_script("""
        import gc, torch, oclvm
        start = torch.opencl.memory_allocated()
        x = torch.arange(1000, dtype=torch.float32).to("opencl")
        ok = failed = 0
        for i in range(40):
            try:
                y = x * 2
                ok += 1
            except RuntimeError as e:
                assert "injected fault" in str(e) and "LaunchKernel" in str(e), e
                failed += 1
        torch.opencl.synchronize()
        assert torch.equal(y.cpu(), torch.arange(1000, dtype=torch.float32) * 2)
        x = y = None
        gc.collect()
        assert torch.opencl.memory_allocated() == start, torch.opencl.memory_allocated()
        print(ok, failed, oclvm._C.pending_native_launches())
    """, OCLVM_FAULTS="launch:every=4")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "30 10 0\n", (out.stdout, out.stderr)


# Two threads launching on one device: a list that finds the device busy goes to its worker, and
# its failure is reported by a later sync point instead. Every failure reaches Python from one or
# the other, and the process ends cleanly.
def test_failures_of_queued_launches_reach_a_later_sync_point():
    out = run_script("""
        import threading, torch, oclvm
        raised = {"operator": 0, "sync": 0}
        lock = threading.Lock()

        def work():
            t = torch.ones(4096, device="opencl")
            for _ in range(300):
                try:
                    t = t + 1
                except RuntimeError as e:
                    assert "injected fault" in str(e), e
                    with lock:
                        raised["operator"] += 1
            try:
                torch.opencl.synchronize()
            except RuntimeError as e:
                assert "injected fault" in str(e), e
                with lock:
                    raised["sync"] += 1

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        torch.opencl.synchronize()
        print(raised["operator"] + raised["sync"] > 0, oclvm._C.pending_native_launches())
    """, OCLVM_FAULTS="launch:p=0.05,seed=3")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "True 0\n", (out.stdout, out.stderr)


# Exit with launches never waited for: as clean as the exit of a process that waited.
def test_exit_with_launches_in_flight_is_clean():
    out = run_script("""
        import torch
        x = torch.ones(1 << 16, device="opencl")
        for _ in range(500):
            x = x * 1.0001
    """)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr
