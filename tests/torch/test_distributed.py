"""torch.distributed on the `opencl` device: the c10d backend `oclvm` across two processes.

Each test starts two ranks of tests/torch/distributed_worker.py on two PoCL devices
(POCL_DEVICES="basic basic", rank r on opencl:r) and reads what each rank reported. The ranks are
started by this file's launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torch.distributed
.run sets them; it does not kill the other ranks when one exits, which the dead-rank test needs)
and, for DDP, by torch.distributed.run itself. Every launch is bounded: a rank still running after
LAUNCH_TIMEOUT seconds fails the test instead of stalling `make test`.

The ranks run on the devices POCL_DEVICES names when it names two or more, else on two `basic`
devices. `make test` runs this file in each of its three passes; with OCLVM_DIST_FULL=0 (its
second and third passes: two pthread devices, then operands copied) only the collectives test
runs, since the others do not depend on the driver or the operator path.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

WORKER = pathlib.Path(__file__).with_name("distributed_worker.py")
WORLD = 2
LAUNCH_TIMEOUT = 300


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FULL = os.environ.get("OCLVM_DIST_FULL", "1") != "0"
only_in_full_runs = pytest.mark.skipif(not FULL, reason="OCLVM_DIST_FULL=0: collectives only")


def environment():
    env = dict(os.environ)
    if len(env.get("POCL_DEVICES", "").split()) < WORLD:
        env["POCL_DEVICES"] = " ".join(["basic"] * WORLD)
    env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p])  # oclvm as pytest found it
    env.setdefault("OMP_NUM_THREADS", "1")  # two ranks on two cores
    return env


def reports(out_dir):
    results = []
    for rank in range(WORLD):
        path = out_dir / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} wrote no report"
        results.append(json.loads(path.read_text()))
    for rank, result in enumerate(results):
        assert result["ok"], f"rank {rank}: {result['error']}\n{result.get('traceback', '')}"
    return results


def launch(scenario, tmp_path, **extra_env):
    """Both ranks of `scenario`, each a plain process; returns their reports."""
    env = {**environment(), **extra_env}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(WORLD))
    procs = [subprocess.Popen([sys.executable, str(WORKER), scenario, str(tmp_path)],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=LAUNCH_TIMEOUT)[0])
    finally:
        for p in procs:
            p.kill()
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{out[-3000:]}"
    return reports(tmp_path)


def test_every_collective_matches_the_cpu(tmp_path):
    results = launch("collectives", tmp_path)
    for result in results:
        for what, error in result["errors"].items():
            assert error is not None, f"{what}: no error raised"
        assert "same device" in result["errors"]["mixed devices"]
        assert "same device" in result["errors"]["two opencl devices"]
        # Nothing left behind: device memory as before; the twins, pooled while the group
        # lives, are freed with it.
        assert result["allocated_after"] == result["allocated_before"]
        assert result["pinned_in_group"] > 0
        assert result["pinned_active"] == 0


@only_in_full_runs
def test_init_process_group_without_a_backend_uses_oclvm(tmp_path):
    for result in launch("init_default", tmp_path):
        assert result["backend"] == "opencl:oclvm"
        assert result["objects"] == [{"rank": r} for r in range(WORLD)]
        # As with CUDA and NCCL: such a group has no backend for CPU tensors.
        assert "cpu" in result["cpu_error"]


@only_in_full_runs
def test_one_backend_for_cpu_and_device_tensors(tmp_path):
    for result in launch("init_single", tmp_path):
        assert result["objects"] == list(range(WORLD))
        assert result["backend"] == "oclvm"


@only_in_full_runs
def test_mismatched_shapes_across_ranks_are_reported_under_debug_detail(tmp_path):
    for result in launch("mismatched_shapes", tmp_path, TORCH_DISTRIBUTED_DEBUG="DETAIL"):
        assert result["error"] and "mismatch between collectives" in result["error"], result


@only_in_full_runs
@pytest.mark.parametrize("scenario,says", [("dead_rank", "Connection"),
                                           ("stuck_rank", "Timed out")])
def test_a_lost_rank_makes_the_other_fail_not_hang(scenario, says, tmp_path):
    """Rank 1 exits (its connections close), or lives on without calling the collective (gloo's
    timeout, 5 s here): rank 0's all_reduce on device tensors raises, in bounded time."""
    report = launch(scenario, tmp_path)[0]
    assert report["error"] is not None and says in report["error"], report
    assert report["seconds"] < 60, report


@only_in_full_runs
def test_ddp_trains_as_on_the_cpu(tmp_path):
    """DDP of an MLP and of a transformers GPT-2, with and without no_sync() accumulation, started
    by torch.distributed.run: the device's parameters equal the CPU DDP run's."""
    env = environment()
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                          str(WORLD), "--master-port", str(free_port()), str(WORKER), "ddp",
                          str(tmp_path)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=LAUNCH_TIMEOUT)
    assert run.returncode == 0, run.stdout[-3000:]
    for result in reports(tmp_path):
        for case, figures in result.items():
            if case == "ok":
                continue
            assert figures["max_abs_change_by_training"] > 1e-4, case  # it trained
            assert figures["max_abs_diff_across_ranks"] == 0, case
            assert figures["max_abs_diff_vs_cpu"] <= 1e-6, (case, figures)
