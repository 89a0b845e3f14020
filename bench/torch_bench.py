"""`make bench` (PyTorch part): the opencl backend's overheads as ratios, measured in one process.

(a) Allocation round trip: `x = torch.empty(1024, device=dev); del x` in a Python loop, on
    "opencl" and on "cpu"; the median time per iteration over REPEATS repetitions. Reported as
    opencl / cpu (target: <= 2x; the cpu number is the cost of the Python and dispatcher path).
(b) Host <-> device copies of 64 MiB: H2D `dev.copy_(cpu)` and D2H `cpu.copy_(dev)`, each as a
    bandwidth (best of REPEATS), compared with this machine's plain host memcpy bandwidth
    measured in the same run (`cpu_dst.copy_(cpu_src)` of the same 64 MiB, a multi-threaded
    memcpy in torch, and numpy's single-threaded `np.copyto`). Reported as percent of the
    faster host copy (target: >= 70%).

Run: `make bench`, or `PYTHONPATH=build-torch/python .venv/bin/python bench/torch_bench.py`.
Options: --iters N (allocation loop length, default 100000), --repeats N (default 5),
--mib N (copy size, default 64).
"""
import argparse
import statistics
import sys
import time

import numpy as np
import torch

import oclvm  # noqa: F401  (registers the `opencl` device)


def alloc_loop_seconds(device: str, iters: int) -> float:
    """Seconds per iteration of the empty/del loop on `device`."""
    empty = torch.empty
    start = time.perf_counter()
    for _ in range(iters):
        x = empty(1024, device=device)
        del x
    return (time.perf_counter() - start) / iters


def median_alloc(device: str, iters: int, repeats: int) -> float:
    alloc_loop_seconds(device, min(iters, 1000))  # warm up: first segment, dispatcher caches
    return statistics.median(alloc_loop_seconds(device, iters) for _ in range(repeats))


def best_seconds(fn, repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    if not torch.opencl.is_available():
        print("no opencl device found", file=sys.stderr)
        return 1

    # (a) allocation round trip
    cpu_alloc = median_alloc("cpu", args.iters, args.repeats)
    ocl_alloc = median_alloc("opencl", args.iters, args.repeats)
    alloc_ratio = ocl_alloc / cpu_alloc

    # (b) copies
    nbytes = args.mib << 20
    host_src = torch.rand(nbytes // 4)
    host_dst = torch.empty_like(host_src)
    dev = torch.empty(nbytes // 4, device="opencl")
    np_src = host_src.numpy()
    np_dst = np.empty_like(np_src)

    def bandwidth(fn) -> float:
        return nbytes / best_seconds(fn, args.repeats) / 1e9

    torch_memcpy = bandwidth(lambda: host_dst.copy_(host_src))
    numpy_memcpy = bandwidth(lambda: np.copyto(np_dst, np_src))
    h2d = bandwidth(lambda: dev.copy_(host_src))
    d2h = bandwidth(lambda: host_dst.copy_(dev))
    if not torch.equal(host_dst, host_src):
        print("FAILED: the D2H copy did not return what the H2D copy wrote", file=sys.stderr)
        return 1
    reference = max(torch_memcpy, numpy_memcpy)
    h2d_pct = 100 * h2d / reference
    d2h_pct = 100 * d2h / reference

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print(f"oclvm torch bench (torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print()
    print(f"(a) x = torch.empty(1024, device=dev); del x  "
          f"[{args.iters} iterations, median of {args.repeats}]")
    print(f"    {'device':<10} {'per iteration':>14}")
    print(f"    {'cpu':<10} {cpu_alloc * 1e6:>11.3f} us")
    print(f"    {'opencl':<10} {ocl_alloc * 1e6:>11.3f} us")
    print(f"    ratio opencl/cpu: {alloc_ratio:.2f}x   (target <= 2x: "
          f"{verdict(alloc_ratio <= 2)})")
    print()
    print(f"(b) {args.mib} MiB copies  [best of {args.repeats}]")
    print(f"    {'copy':<34} {'GB/s':>8} {'% of memcpy':>12}")
    print(f"    {'host memcpy: torch cpu copy_':<34} {torch_memcpy:>8.2f} "
          f"{100 * torch_memcpy / reference:>11.1f}%")
    print(f"    {'host memcpy: numpy copyto':<34} {numpy_memcpy:>8.2f} "
          f"{100 * numpy_memcpy / reference:>11.1f}%")
    print(f"    {'H2D opencl.copy_(cpu)':<34} {h2d:>8.2f} {h2d_pct:>11.1f}%   "
          f"(target >= 70%: {verdict(h2d_pct >= 70)})")
    print(f"    {'D2H cpu.copy_(opencl)':<34} {d2h:>8.2f} {d2h_pct:>11.1f}%   "
          f"(target >= 70%: {verdict(d2h_pct >= 70)})")
    print(f"    (memcpy reference = the faster host copy, {reference:.2f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
