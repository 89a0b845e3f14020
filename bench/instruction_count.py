"""Instructions per allocation round trip, counted by callgrind: a figure this shared machine's
load cannot move.

`x = torch.empty(1024, device=dev); del x` in a Python loop, as bench/torch_bench.py (a) times it,
run under `valgrind --tool=callgrind` at two loop lengths N and 3N for each device; the difference
of the two totals over 2N is the cost of one iteration, with the interpreter's start-up, torch's
import and the device's first use cancelled out. Printed per device, and the opencl - cpu
difference: what oclvm's allocation and release (the VM lists, the caching allocator, the adapter)
cost in instructions. Instructions are not time (a lock or an atomic costs more than an add), but
they move by less than 1 % between runs where wall-clock ratios move by 30 %.

Run: `PYTHONPATH=build-torch/python .venv/bin/python bench/instruction_count.py [--iters N]`
(needs valgrind; about two minutes at the default N = 10000).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def loop(device: str, iters: int) -> None:
    import torch
    import oclvm  # noqa: F401  (registers the `opencl` device)

    empty = torch.empty
    for _ in range(1000):  # first use: the device, the first segment, dispatcher caches
        x = empty(1024, device=device)
        del x
    for _ in range(iters):
        x = empty(1024, device=device)
        del x


def callgrind_total(device: str, iters: int, directory: str) -> int:
    out = os.path.join(directory, f"callgrind.{device}.{iters}.out")
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
               os.path.abspath(__file__), "--loop", device, str(iters)]
    # A fixed hash seed: dictionary layouts, and so the interpreter's own work, repeat exactly.
    # One OpenBLAS thread: numpy's (imported by torch) otherwise spin in blas_thread_server for a
    # time that changes from run to run, ±2,000 instructions per iteration in the difference.
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: the callgrind run of {device} failed "
                         f"(exit {done.returncode}):\n{done.stderr[-2000:]}")
    with open(out) as f:
        match = re.search(r"^totals: (\d+)", f.read(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"error: no totals line in {out}")
    return int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=10000, help="N (default 10000)")
    parser.add_argument("--loop", nargs=2, metavar=("DEVICE", "ITERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        loop(args.loop[0], int(args.loop[1]))
        return 0
    if args.iters < 1:
        parser.error(f"--iters must be at least 1, got {args.iters}")
    per_iteration = {}
    with tempfile.TemporaryDirectory() as directory:
        for device in ("cpu", "opencl"):
            print(f"counting {device}: callgrind at {args.iters} and {3 * args.iters} iterations",
                  flush=True)
            short = callgrind_total(device, args.iters, directory)
            long = callgrind_total(device, 3 * args.iters, directory)
            per_iteration[device] = (long - short) / (2 * args.iters)
    cpu, opencl = per_iteration["cpu"], per_iteration["opencl"]
    print(f"instructions per empty(1024) + del: cpu {cpu:.0f}, opencl {opencl:.0f}, "
          f"opencl - cpu {opencl - cpu:.0f} ({opencl / cpu:.2f} x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
