"""`make bench` (PyTorch part): the opencl backend's overheads as ratios, measured in one process.

(a) Allocation round trip: `x = torch.empty(1024, device=dev); del x` in a Python loop, on
    "opencl" and on "cpu"; each of REPEATS repetitions times both devices back to back (which
    goes first alternates), so a change in the machine's load moves both. Reported: the median
    time per iteration on each, and the median of the repetitions' opencl / cpu ratios (target:
    <= 1.5x; the cpu number is the cost of the Python and dispatcher path).
(b) Host <-> device copies of 64 MiB: H2D `dev.copy_(cpu)` and D2H `cpu.copy_(dev)`, against
    this machine's plain host memcpy (`cpu_dst.copy_(cpu_src)` of the same 64 MiB, a
    multi-threaded memcpy in torch). Each repetition times the host copy and the device copy back
    to back (alternating which goes first); reported: the median bandwidth of each, and the median
    of the repetitions' device / host ratios as percent of memcpy (target: >= 90%). numpy's
    single-threaded `np.copyto` is printed beside them for scale. Then one more H2D and D2H pair
    into a cleared buffer checks that the bytes came back.

(c) Per-operator cost: tiny operators (`x + y`, `x.add_(y)`, `relu`, `sum`) on 16, 256 and 4096
    float32 elements, each timed over a loop on both devices, back to back in each of REPEATS
    repetitions; reported per operator (median time on each, median of the pairs' ratios) and
    as the median of those ratios over all of them (target: <= 2.5x).
(d) Training steps, steady state (after warm-up steps): the demo's MLP 32-64-4 with SGD +
    momentum (batch 64), and a GPT-2-style decoder from Hugging Face transformers (4 layers x
    128, 4 heads, batch 8 x 64 tokens, AdamW), skipped when transformers is not installed. Both
    devices' models are built first; each of REPEATS repetitions then times STEPS steps on each,
    back to back (alternating which goes first). Reported: the median step time on each, and the
    median of the repetitions' opencl / cpu ratios of their median steps (targets: <= 1.3x;
    GPT-2 <= 1.6x on two pthread devices). By default torch's SGD takes its foreach path on
    opencl (as on every PrivateUse1 device) and its per-tensor loop on cpu, two different
    amounts of Python work; two more MLP rows give both devices the same path (foreach=True,
    foreach=False), comparing the devices' cost for the same work.

(e) With --history: what the memory history costs. (a) and the MLP step on opencl again, with
    torch.opencl.memory._record_memory_history() on (events and Python stacks at every
    allocation and free) and off, back to back in each repetition; reported as the median of the
    pairs' history-on / history-off ratios.

(f) With --parts: where the MLP step's time goes. Its parts (zero_grad, forward, backward,
    optimizer step, item) timed inside whole steps on each device, and the forward pass and the
    optimizer step each timed alone in a loop, as microseconds per call and the device's extra
    over the CPU: the device's cost per operator depends on how much other work runs between two
    calls.

(g) With --compile (and nothing else: the warm-up compiles for minutes): the GPT-2 step of (d)
    with torch.compile(model), Inductor's default backend, on opencl, against the same step eager
    on opencl and compiled on the CPU; reported: the median step of each, the median of the
    rounds' ratios compiled-opencl / eager-opencl and compiled-opencl / compiled-cpu (goal:
    <= 1.1x), and how many fused kernels one step runs on device memory. `make bench-compile`.

(h) With --paths (and nothing else): the native path (OCLVM_KERNELS=native: operators with an
    OpenCL kernel compute on the device) against the host path (CPU kernels on the device's
    memory), each in a process of its own: `x + y`, `x.mul_(s)` and a square matrix's transpose
    made contiguous (a strided copy) on 1,024 and 1 Mi float32 elements (microseconds per call
    over a loop), and the MLP and GPT-2 steps of (d) (median
    step). Reported: each on both paths and native / host; and for one GPT-2 step on the native
    path, the share of operator calls that ran a native kernel (the calls native kernels answered
    against the calls torch.opencl.fallback_counts() counts; their launches, and the strided
    copies, storage operators that neither side counts, are reported apart), the operators that
    fell back most, and its host round
    trips (`_local_scalar_dense` calls on device tensors and device-to-host copies the step's
    operators make, as a dispatch mode sees them) against the `_local_scalar_dense` calls of the
    same step on the CPU.

Run: `make bench`, or `PYTHONPATH=build-torch/python .venv/bin/python bench/torch_bench.py`.
Options: --iters N (allocation loop length, default 100000), --repeats N (default 5),
--mib N (copy size, default 64), --steps N (timed training steps, default 20), --history,
--parts, --compile, --paths.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

import oclvm  # registers the `opencl` device


def alloc_loop_seconds(device: str, iters: int) -> float:
    """Seconds per iteration of the empty/del loop on `device`."""
    empty = torch.empty
    start = time.perf_counter()
    for _ in range(iters):
        x = empty(1024, device=device)
        del x
    return (time.perf_counter() - start) / iters


def paired(measure_a, measure_b, repeats: int) -> tuple[float, float, float]:
    """`measure_a()` and `measure_b()` back to back in each of `repeats` repetitions, alternating
    which goes first, so that a change in the machine's load falls on both: the median of each
    and the median of the repetitions' ratios b / a."""
    a, b = [], []
    for repeat in range(repeats):
        first_a = repeat % 2 == 0
        for measure, into in ((measure_a, a), (measure_b, b)) if first_a else \
                ((measure_b, b), (measure_a, a)):
            into.append(measure())
    return statistics.median(a), statistics.median(b), statistics.median(y / x for x, y in zip(a, b))


def with_history(measure):
    """`measure` run with the memory history recording (events + Python stacks)."""
    def recorded():
        torch.opencl.memory._record_memory_history(max_entries=100_000)
        try:
            return measure()
        finally:
            torch.opencl.memory._record_memory_history(enabled=None)
    return recorded


def best_seconds(fn, repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def loop_seconds(fn, iters: int) -> float:
    """Seconds per call of `fn` in a loop of `iters` calls."""
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


TINY_OPS = {
    "x + y": lambda x, y: x + y,
    "x.add_(y)": lambda x, y: x.add_(y),
    "relu": lambda x, y: torch.relu(x),
    "sum": lambda x, y: x.sum(),
}


def tiny_operators(iters: int, repeats: int) -> list:
    """[(label, cpu seconds, opencl seconds, median ratio)] per (operator, size), each pair of
    loops timed back to back."""
    rows = []
    for size in (16, 256, 4096):
        x, y = torch.randn(size), torch.randn(size)
        operands = {"cpu": (x.clone(), y), "opencl": (x.to("opencl"), y.to("opencl"))}
        for name, op in TINY_OPS.items():
            calls = {device: (lambda args=operands[device]: op(*args)) for device in operands}
            for call in calls.values():
                loop_seconds(call, min(iters, 50))  # warm up
            rows.append((f"{name} [{size}]",
                         *paired(lambda: loop_seconds(calls["cpu"], iters),
                                 lambda: loop_seconds(calls["opencl"], iters), repeats)))
    return rows


def median_step_seconds(step, steps: int) -> float:
    """Median seconds of `steps` calls of `step`."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def warm_step(make_step, device: str, warmup: int = 3):
    """`make_step(device)` (which builds the model and returns a function running one step,
    reading the loss back) after `warmup` steps."""
    step = make_step(device)
    for _ in range(warmup):
        step()
    return step


def step_seconds(make_step, device: str, steps: int, warmup: int = 3) -> float:
    """Median seconds of a training step on `device` after `warmup` steps."""
    return median_step_seconds(warm_step(make_step, device, warmup), steps)


def paired_steps(make_step, steps: int, repeats: int) -> tuple[float, float, float]:
    """Both devices' models built and warmed up, then `repeats` repetitions of `steps` steps on
    each, back to back: (cpu median step, opencl median step, median ratio opencl / cpu)."""
    cpu, opencl = warm_step(make_step, "cpu"), warm_step(make_step, "opencl")
    return paired(lambda: median_step_seconds(cpu, steps),
                  lambda: median_step_seconds(opencl, steps), repeats)


def mlp_step(device: str, foreach=None):
    """The demo's MLP training step; `foreach` as torch.optim.SGD takes it (None: torch's
    default for the device)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=foreach)
    x, y = torch.randn(64, 32).to(device), torch.randint(0, 4, (64,)).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def gpt2_step(device: str, compiled: bool = False):
    """GPT-2 from transformers (random init): 4 layers x 128, 4 heads, AdamW, batch 8 x 64
    tokens; with `compiled`, the model is torch.compile(model) (Inductor, the default backend)."""
    import transformers
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, n_positions=64,
                                     vocab_size=1000, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 1000, (8, 64)).to(device)
    forward = torch.compile(model) if compiled else model

    def step():
        optimizer.zero_grad()
        loss = forward(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


# Two larger training steps this benchmark does not time: scripts/record_traces.py records their
# allocations as traces/transformer_train.trace and traces/cnn_train.trace, the traces the
# fragmentation, memory-limit and replay-speed figures of design/performance.md are measured on.

def transformer_step(device: str):
    """GPT-2 from transformers (random init): 4 layers x 512, 8 heads, vocabulary 8192, AdamW,
    batch 8 x 128 tokens."""
    import transformers
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8, n_positions=256,
                                     vocab_size=8192, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 8192, (8, 128)).to(device)

    def step():
        optimizer.zero_grad()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def cnn_step(device: str):
    """Four conv-BatchNorm-ReLU stages (32, 64, 128, 256 channels; a 2x2 max pool after the
    first, stride 2 in the others), global average pool and a linear head over 10 classes, on
    batch 32 x 3 x 64 x 64 images; SGD with momentum."""
    def stage(c_in: int, c_out: int, stride: int) -> list:
        return [torch.nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                torch.nn.BatchNorm2d(c_out), torch.nn.ReLU()]
    torch.manual_seed(0)
    model = torch.nn.Sequential(*stage(3, 32, 1), torch.nn.MaxPool2d(2), *stage(32, 64, 2),
                                *stage(64, 128, 2), *stage(128, 256, 2),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(32, 3, 64, 64).to(device), torch.randint(0, 10, (32,)).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--history", action="store_true",
                        help="also measure the memory history's cost (section e)")
    parser.add_argument("--compile", action="store_true",
                        help="only section (g): the GPT-2 step under torch.compile (minutes)")
    parser.add_argument("--parts", action="store_true",
                        help="also split the MLP step into its parts (section f)")
    parser.add_argument("--paths", action="store_true",
                        help="only section (h): the native path against the host path")
    parser.add_argument("--path-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not torch.opencl.is_available():
        print("no opencl device found", file=sys.stderr)
        return 1
    if args.compile:
        return print_compiled_steps(args)
    if args.path_child:
        return measure_path(args)
    if args.paths:
        return print_paths(args)

    # (a) allocation round trip
    for device in ("cpu", "opencl"):
        alloc_loop_seconds(device, min(args.iters, 1000))  # warm up
    cpu_alloc, ocl_alloc, alloc_ratio = paired(lambda: alloc_loop_seconds("cpu", args.iters),
                                               lambda: alloc_loop_seconds("opencl", args.iters),
                                               args.repeats)

    # (b) copies
    nbytes = args.mib << 20
    host_src = torch.rand(nbytes // 4)
    host_dst = torch.empty_like(host_src)
    dev = torch.empty(nbytes // 4, device="opencl")
    np_src = host_src.numpy()
    np_dst = np.empty_like(np_src)

    def copy_seconds(fn):
        def timed() -> float:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        return timed

    memcpy = copy_seconds(lambda: host_dst.copy_(host_src))
    h2d_copy = copy_seconds(lambda: dev.copy_(host_src))
    d2h_copy = copy_seconds(lambda: host_dst.copy_(dev))
    for timed in (memcpy, h2d_copy, d2h_copy):
        timed()  # warm up: the first touch of the pages
    numpy_seconds = best_seconds(lambda: np.copyto(np_dst, np_src), args.repeats)
    memcpy_h2d, h2d_seconds, h2d_ratio = paired(memcpy, h2d_copy, args.repeats)
    memcpy_d2h, d2h_seconds, d2h_ratio = paired(memcpy, d2h_copy, args.repeats)
    # The last timed copy may have been the memcpy itself: check the round trip on its own.
    host_dst.zero_()
    dev.zero_()
    dev.copy_(host_src)
    host_dst.copy_(dev)
    if not torch.equal(host_dst, host_src):
        print("FAILED: the D2H copy did not return what the H2D copy wrote", file=sys.stderr)
        return 1

    def gbps(seconds: float) -> float:
        return nbytes / seconds / 1e9

    # Percent of memcpy: the pairs' time ratios device / memcpy, inverted.
    h2d_pct, d2h_pct = 100 / h2d_ratio, 100 / d2h_ratio

    # (c) tiny operators, (d) training steps
    tiny = tiny_operators(max(args.iters // 50, 200), args.repeats)
    tiny_ratio = statistics.median(ratio for *_, ratio in tiny)
    steps = [("MLP 32-64-4 SGD step", mlp_step),
             ("  same SGD path: foreach on both", lambda device: mlp_step(device, True)),
             ("  same SGD path: per-tensor on both", lambda device: mlp_step(device, False))]
    try:
        import transformers  # noqa: F401
        steps.append(("GPT-2 4x128 AdamW step, batch 8x64", gpt2_step))
    except ImportError:
        print("transformers is not installed: the GPT-2 step is skipped", file=sys.stderr)
    step_rows = [(label, *paired_steps(make, args.steps, args.repeats)) for label, make in steps]

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print(f"oclvm torch bench (torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print()
    print(f"(a) x = torch.empty(1024, device=dev); del x  "
          f"[{args.iters} iterations, median of {args.repeats} back-to-back pairs]")
    print(f"    {'device':<10} {'per iteration':>14}")
    print(f"    {'cpu':<10} {cpu_alloc * 1e6:>11.3f} us")
    print(f"    {'opencl':<10} {ocl_alloc * 1e6:>11.3f} us")
    print(f"    ratio opencl/cpu (median of the pairs): {alloc_ratio:.2f}x   (target <= 1.5x: "
          f"{verdict(alloc_ratio <= 1.5)})")
    print()
    print(f"(b) {args.mib} MiB copies  [median of {args.repeats} back-to-back pairs with memcpy]")
    print(f"    {'copy':<34} {'GB/s':>8} {'% of memcpy':>12}")
    print(f"    {'host memcpy: torch cpu copy_':<34} {gbps(memcpy_h2d):>8.2f} {100:>11.1f}%")
    print(f"    {'H2D opencl.copy_(cpu)':<34} {gbps(h2d_seconds):>8.2f} {h2d_pct:>11.1f}%   "
          f"(target >= 90%: {verdict(h2d_pct >= 90)})")
    print(f"    {'host memcpy: torch cpu copy_':<34} {gbps(memcpy_d2h):>8.2f} {100:>11.1f}%")
    print(f"    {'D2H cpu.copy_(opencl)':<34} {gbps(d2h_seconds):>8.2f} {d2h_pct:>11.1f}%   "
          f"(target >= 90%: {verdict(d2h_pct >= 90)})")
    print(f"    (for scale: numpy's single-threaded copyto, best of {args.repeats}: "
          f"{gbps(numpy_seconds):.2f} GB/s)")
    print()
    print(f"(c) tiny operators  [median of {args.repeats} back-to-back pairs of loops]")
    print(f"    {'operator':<20} {'cpu':>10} {'opencl':>10} {'ratio':>8}")
    for label, cpu, ocl, ratio in tiny:
        print(f"    {label:<20} {cpu * 1e6:>7.2f} us {ocl * 1e6:>7.2f} us {ratio:>7.2f}x")
    print(f"    median ratio opencl/cpu: {tiny_ratio:.2f}x   (target <= 2.5x: "
          f"{verdict(tiny_ratio <= 2.5)})")
    print()
    print(f"(d) training steps, steady state  [after 3 warm-up steps, {args.repeats} back-to-back "
          f"pairs of {args.steps} steps; median step, median of the pairs' ratios]")
    print(f"    {'model':<36} {'cpu':>10} {'opencl':>10} {'ratio':>8}")
    for label, cpu, ocl, ratio in step_rows:
        print(f"    {label:<36} {cpu * 1e3:>7.3f} ms {ocl * 1e3:>7.3f} ms {ratio:>7.2f}x")
    print("    (targets: <= 1.3x on the default device, <= 1.6x for GPT-2 on two pthread devices;")
    print("    by default SGD takes its foreach path on opencl and its per-tensor loop on cpu)")
    if args.history:
        print_history_cost(args)
    if args.parts:
        print_mlp_parts(args)
    return 0


def print_history_cost(args) -> None:
    """Section (e): the allocation loop and the MLP step with the memory history on and off."""
    def alloc_loop():
        return alloc_loop_seconds("opencl", args.iters)

    def mlp_steps():
        return step_seconds(mlp_step, "opencl", args.steps)

    alloc = paired(alloc_loop, with_history(alloc_loop), args.repeats)
    mlp = paired(mlp_steps, with_history(mlp_steps), args.repeats)
    print()
    print("(e) memory history on (events + Python stacks) / off, opencl  "
          f"[median of {args.repeats} back-to-back pairs]")
    print(f"    {'work':<36} {'off':>10} {'on':>10} {'ratio':>8}")
    print(f"    {'empty(1024) + del':<36} {alloc[0] * 1e6:>7.2f} us {alloc[1] * 1e6:>7.2f} us "
          f"{alloc[2]:>7.2f}x")
    print(f"    {'MLP 32-64-4 SGD step':<36} {mlp[0] * 1e3:>7.2f} ms {mlp[1] * 1e3:>7.2f} ms "
          f"{mlp[2]:>7.2f}x")


PARTS = ("zero_grad", "forward", "backward", "step", "item")


def mlp_parts(device: str, steps: int) -> dict:
    """Microseconds per call of each part of the MLP step, timed inside whole steps (after 100
    warm-up steps), and of the forward pass and the optimizer step alone in a loop."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x, y = torch.randn(64, 32).to(device), torch.randint(0, 4, (64,)).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()
    spent = dict.fromkeys(PARTS, 0.0)
    for i in range(steps + 100):
        marks = [time.perf_counter()]
        optimizer.zero_grad()
        marks.append(time.perf_counter())
        loss = loss_fn(model(x), y)
        marks.append(time.perf_counter())
        loss.backward()
        marks.append(time.perf_counter())
        optimizer.step()
        marks.append(time.perf_counter())
        loss.item()
        marks.append(time.perf_counter())
        if i >= 100:
            for part, start, end in zip(PARTS, marks, marks[1:]):
                spent[part] += end - start
    result = {f"{part} (in the step)": seconds / steps * 1e6 for part, seconds in spent.items()}
    result["forward alone"] = loop_seconds(lambda: loss_fn(model(x), y), steps) * 1e6
    result["step alone"] = loop_seconds(optimizer.step, steps) * 1e6
    return result


def print_mlp_parts(args) -> None:
    """Section (f): the MLP step's parts on each device (medians of --repeats runs)."""
    steps = max(args.steps * 100, 1000)
    runs = {"cpu": [], "opencl": []}
    for repeat in range(args.repeats):
        for device in (("cpu", "opencl") if repeat % 2 == 0 else ("opencl", "cpu")):
            runs[device].append(mlp_parts(device, steps))
    median = {device: {key: statistics.median(run[key] for run in results)
                       for key in results[0]} for device, results in runs.items()}
    print()
    print(f"(f) the MLP step's parts, us per call  [{steps} steps, median of {args.repeats} runs "
          "per device]")
    print(f"    {'part':<24} {'cpu':>9} {'opencl':>9} {'extra':>9}")
    for key, cpu in median["cpu"].items():
        ocl = median["opencl"][key]
        print(f"    {key:<24} {cpu:>9.1f} {ocl:>9.1f} {ocl - cpu:>+9.1f}")


def print_compiled_steps(args) -> int:
    """Section (g): the GPT-2 step with torch.compile(model) on the device, against the same
    step eager on the device and compiled on the CPU. The three models are built and warmed up
    (the warm-up compiles the forward and backward graphs), then each repetition times
    `args.steps` steps of each, back to back."""
    import oclvm._inductor
    rows = {}
    for name, device, compiled in (("compiled opencl", "opencl", True),
                                   ("eager opencl", "opencl", False),
                                   ("compiled cpu", "cpu", True)):
        start = time.perf_counter()
        rows[name] = warm_step(lambda d: gpt2_step(d, compiled), device)
        print(f"    {name}: built and warmed up in {time.perf_counter() - start:.1f} s",
              file=sys.stderr, flush=True)
    calls_before = oclvm._inductor.calls
    rows["compiled opencl"]()
    kernels_per_step = oclvm._inductor.calls - calls_before
    times = {name: [] for name in rows}
    order = list(rows)
    for repeat in range(args.repeats):
        for name in order[repeat % 3:] + order[:repeat % 3]:
            times[name].append(median_step_seconds(rows[name], args.steps))

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    eager_ratio = ratio("compiled opencl", "eager opencl")
    cpu_ratio = ratio("compiled opencl", "compiled cpu")
    print(f"oclvm torch bench, torch.compile (torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads)")
    print()
    print(f"(g) GPT-2 4x128 AdamW step, batch 8x64, torch.compile(model)  [after 3 warm-up steps, "
          f"{args.repeats} rounds of {args.steps} steps of each; median step, median of the "
          f"rounds' ratios]")
    for name in order:
        print(f"    {name:<16} {statistics.median(times[name]) * 1e3:>8.3f} ms")
    print(f"    compiled opencl / eager opencl:  {eager_ratio:.2f}x")
    print(f"    compiled opencl / compiled cpu:  {cpu_ratio:.2f}x   (goal <= 1.1x: "
          f"{'ok' if cpu_ratio <= 1.1 else 'MISSED'})")
    print(f"    fused C++ kernels run on device memory per step: {kernels_per_step}")
    return 0


def round_trips(make_step, device: str) -> dict:
    """The host round trips of one step of `make_step(device)` after a warm-up step: the
    `_local_scalar_dense` calls (`.item()`, `bool(tensor)`) on tensors of `device` and the copies
    from an opencl tensor into host memory among the operators the step dispatches (a dispatch
    mode sees each operator torch calls, not the ones an operator calls inside). An `.item()` of a
    CPU tensor on an opencl step (AdamW's step counts live on the CPU) is no round trip."""
    from torch.utils._python_dispatch import TorchDispatchMode
    aten = torch.ops.aten
    # (source, destination) of each copy operator's call
    copies = {aten._to_copy.default: lambda args, result: (args[0], result),
              aten.copy_.default: lambda args, result: (args[1], args[0]),
              aten._copy_from.default: lambda args, result: (args[0], args[1]),
              aten._copy_from_and_resize.default: lambda args, result: (args[0], args[1])}

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.scalars = self.copies = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if func is aten._local_scalar_dense.default:
                self.scalars += args[0].device.type == device
            elif func in copies:
                source, destination = copies[func](args, result)
                self.copies += (source.device.type == "opencl"
                                and destination.device.type == "cpu")
            return result

    step = make_step(device)
    step()
    count = Count()
    with count:
        step()
    return {"scalars": count.scalars, "copies": count.copies}


def measure_path(args) -> int:
    """Section (h), in the child process of one path: prints one JSON object of timings (seconds)
    and the GPT-2 step's native launches and fallback counts; on the native path also the step's
    host round trips and those of the same step on the CPU."""
    import json
    out = {}
    for n in (1024, 1 << 20):
        x, y = torch.randn(n, device="opencl"), torch.randn(n, device="opencl")
        reps = 2000 if n == 1024 else 100
        side = int(n ** 0.5)
        square = x.view(side, side)
        for label, fn in ((f"x + y, {n} floats", lambda: x + y),
                          (f"x.mul_(s), {n} floats", lambda: x.mul_(1.0)),
                          (f"transpose copy, {n} floats", lambda: square.t().contiguous())):
            fn()
            x.cpu()  # compiled and finished before the loop
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            x.cpu()
            out[label] = (time.perf_counter() - start) / reps
    out["MLP step"] = step_seconds(mlp_step, "opencl", args.steps)
    try:
        step = warm_step(gpt2_step, "opencl")
    except ImportError:
        step = None
    if step is not None:
        out["GPT-2 step"] = median_step_seconds(step, args.steps)
        launches, copies = oclvm._C.native_kernel_calls(), oclvm._C.native_copy_calls()
        calls = oclvm._C.native_operator_calls()
        torch.opencl.reset_fallback_counts()
        step()
        out["gpt2_native_launches"] = oclvm._C.native_kernel_calls() - launches
        out["gpt2_native_calls"] = oclvm._C.native_operator_calls() - calls
        out["gpt2_native_copies"] = oclvm._C.native_copy_calls() - copies
        out["gpt2_fallbacks"] = torch.opencl.fallback_counts()
        if args.path_child == "native":
            out["gpt2_round_trips"] = round_trips(gpt2_step, "opencl")
            out["gpt2_cpu_round_trips"] = round_trips(gpt2_step, "cpu")
    print(json.dumps(out))
    return 0


def print_paths(args) -> int:
    """Section (h): both paths, each measured by a child process of its own (the path is chosen
    once per process)."""
    import json
    import subprocess
    results = {}
    for path in ("host", "native"):
        completed = subprocess.run(
            [sys.executable, __file__, "--path-child", path, "--steps", str(args.steps)],
            env=dict(os.environ, OCLVM_KERNELS=path), capture_output=True, text=True)
        if completed.returncode != 0:
            print(completed.stderr[-3000:], file=sys.stderr)
            return 1
        results[path] = json.loads(completed.stdout.strip().splitlines()[-1])
    host, native = results["host"], results["native"]
    print(f"oclvm torch bench, kernel paths (torch {torch.__version__}, "
          f"{torch.opencl.get_device_name(0)})")
    print()
    print("(h) native path / host path, the same work")
    for key, seconds in host.items():
        if not isinstance(seconds, float):
            continue
        unit, scale = ("ms", 1e3) if "step" in key else ("us", 1e6)
        print(f"    {key:<31} host {seconds * scale:>9.1f} {unit}   native "
              f"{native[key] * scale:>9.1f} {unit}   native / host {native[key] / seconds:.2f}x")
    if "gpt2_fallbacks" in native:
        native_calls = native["gpt2_native_calls"]
        fell_back = sum(native["gpt2_fallbacks"].values())
        share = native_calls / max(1, native_calls + fell_back)
        print(f"    GPT-2 step on the native path: {native_calls} operator calls ran native "
              f"kernels ({native['gpt2_native_launches']} launches), {fell_back} ran a CPU "
              f"kernel: {share:.1%} of calls native (bar >= 95%); and "
              f"{native['gpt2_native_copies']} strided copies on the device")
        top = sorted(native["gpt2_fallbacks"].items(), key=lambda kv: -kv[1])[:12]
        print("    most frequent fallbacks: " +
              (", ".join(f"{k} {v}" for k, v in top) or "none: every call ran a native kernel"))
        trips, cpu = native["gpt2_round_trips"], native["gpt2_cpu_round_trips"]
        print(f"    its host round trips: {trips['scalars']} _local_scalar_dense calls on device "
              f"tensors and {trips['copies']} device-to-host copies; the CPU's step makes "
              f"{cpu['scalars']} _local_scalar_dense calls (bar: no more than the CPU's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

