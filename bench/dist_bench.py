"""all_reduce bandwidth of the c10d backend `oclvm`: device tensors against CPU tensors over gloo.

Two ranks on this machine (two PoCL devices, POCL_DEVICES="basic basic" unless set; rank r on
opencl:r), one group "cpu:gloo,opencl:oclvm". For each size from 1 KiB to 64 MiB (float32), each
rank times `dist.all_reduce` of a device tensor and of a CPU tensor of that size, alternating the
two every repetition so both see the same machine; the figure per size and kind is the median
over the repetitions. Reported: time per all_reduce, algorithm bandwidth (bytes / time), the
ratio device / CPU bandwidth (target at 64 MiB: >= 0.8, goal 0.95) and the small-message overhead
(device time - CPU time).

Run: `.venv/bin/python bench/dist_bench.py` (with the package installed or
PYTHONPATH=build-torch/python). Options: --min-kib N (smallest size, default 1), --max-mib N
(largest size, default 64), --repeats N
(default 9), --json FILE (writes the table).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def sizes(min_kib, max_mib):
    size = 1024
    while size < min_kib * 1024:
        size *= 4 if size < 1024 * 1024 else 2
    while size <= max_mib * 1024 * 1024:
        yield size
        size *= 4 if size < 1024 * 1024 else 2


def time_all_reduce(tensor, iters):
    import torch.distributed as dist
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    return (time.perf_counter() - start) / iters


def rank_main(args):
    import torch
    import torch.distributed as dist
    import oclvm  # noqa: F401

    rank = int(os.environ["RANK"])
    device = torch.device("opencl", rank % torch.opencl.device_count())
    torch.opencl.set_device(device)
    dist.init_process_group("cpu:gloo,opencl:oclvm")
    rows = []
    for size in sizes(args.min_kib, args.max_mib):
        numel = size // 4
        on_device = torch.ones(numel, device=device)
        on_cpu = torch.ones(numel)
        iters = max(1, min(200, (4 << 20) // size))
        time_all_reduce(on_device, 1)  # warm-up: first use of the size on both paths
        time_all_reduce(on_cpu, 1)
        times = {"opencl": [], "cpu": []}
        for _ in range(args.repeats):
            times["opencl"].append(time_all_reduce(on_device, iters))
            times["cpu"].append(time_all_reduce(on_cpu, iters))
        median = {k: statistics.median(v) for k, v in times.items()}
        rows.append({"bytes": size, "opencl_s": median["opencl"], "cpu_s": median["cpu"]})
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(rows))


def human(size):
    return f"{size // (1 << 20)} MiB" if size >= 1 << 20 else f"{size // 1024} KiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-kib", type=int, default=1)
    parser.add_argument("--max-mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json")
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    env.setdefault("POCL_DEVICES", "basic basic")
    env.setdefault("OMP_NUM_THREADS", "1")
    argv = [sys.executable, __file__, "--rank-main", "--min-kib", str(args.min_kib),
            "--max-mib", str(args.max_mib),
            "--repeats", str(args.repeats)]
    print(f"all_reduce, 2 ranks, float32, median of {args.repeats}; "
          f"POCL_DEVICES={env['POCL_DEVICES']!r}", flush=True)
    procs = [subprocess.Popen(argv, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [p.communicate()[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit("a rank failed")
    rows = json.loads(outputs[0].strip().splitlines()[-1])
    print(f"{'size':>8} {'opencl':>10} {'cpu':>10} {'opencl GB/s':>12} {'cpu GB/s':>9} "
          f"{'ratio':>6} {'overhead':>10}")
    for row in rows:
        dev_bw = row["bytes"] / row["opencl_s"] / 1e9
        cpu_bw = row["bytes"] / row["cpu_s"] / 1e9
        row["ratio"] = dev_bw / cpu_bw
        print(f"{human(row['bytes']):>8} {row['opencl_s'] * 1e6:>8.0f}us {row['cpu_s'] * 1e6:>8.0f}us"
              f" {dev_bw:>12.3f} {cpu_bw:>9.3f} {row['ratio']:>6.2f}"
              f" {(row['opencl_s'] - row['cpu_s']) * 1e6:>8.0f}us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
