"""PyTorch's module corpus as a conformance suite for the `opencl` device.

Every ModuleInfo of torch's `module_db` (torch.testing._internal.common_modules, shipped in the
wheel; key: its name, `nn.Linear`) runs on the device and on the CPU for each dtype it supports
on the CPU among float32, float64, float16 and bfloat16, sample by sample, forward and backward,
and the two are compared: the idea of torch's own `test_modules.py::test_cpu_gpu_parity`, with
the CPU result as the expected value.

Per sample (`module_info.module_inputs_func(module_info, device="cpu", dtype, requires_grad=True,
training)`, for training True and, where `module_info.train_and_eval_differ`, False too, as
torch's `@modules` decorator does; samples without a forward input are passed over, as torch's
tests do; with `max_samples`, at most that many per training mode, spread evenly over the list
(`spread`): a module's samples walk its options in nested loops, so the first N would all share
the outer ones):
  - the module is built on the CPU from the sample's constructor input after
    `torch.manual_seed(SEED)`, cast with `.to(dtype)` and put in the training mode; the device's
    module is `copy.deepcopy` of it moved with `.to("opencl")`, so both start from the same
    parameters and buffers;
  - the forward inputs are copied to the device as the OpInfo sweep copies a sample
    (`opinfo_sweep._to_device`: `.detach().to("opencl")`, a leaf that requires grad when the
    CPU tensor does, one device tensor per CPU tensor);
  - a lazy module (`nn.LazyConv1d`, ...) is first materialised by a forward under no_grad on each
    side after `torch.manual_seed(SEED)`: the device initialises its parameters with its own
    generator, which on the host path has the CPU's algorithm, so they must equal the CPU's; on
    the native path it draws from its Philox stream, so only shapes, dtypes and devices are
    compared and the device module then takes the CPU's values;
  - forward on the device, then on the CPU, each after `torch.manual_seed(SEED)` (the random
    modules, `nn.FractionalMaxPool2d` and `3d`, draw the same numbers on both sides); outputs
    compared with `opinfo_sweep._compare` (`torch.testing.assert_close`, PyTorch's default
    tolerances per dtype: float32 (1.3e-6, 1e-5), float64 (1e-7, 1e-7), float16 (1e-3, 1e-5),
    bfloat16 (1.6e-2, 1e-5)); device outputs must be on the device. Defaults, not the 5e-2 /
    4e-4 of torch's test_cpu_gpu_parity: the device runs the CPU's own kernels, so a larger
    difference means it took another route than the CPU. On the native path (a device whose
    properties say native_kernels) the matrix products are CLBlast's, which sums in another
    order, and a backward through attention and layer norm amplifies that where its sums
    cancel (nn.TransformerDecoderLayer's in_proj_weight gradient: 1.3e-5 apart, 6.8e-4
    relative), so float32 compares within rtol 1e-3, atol 1e-4 there (`NATIVE_FLOAT32`): still
    far inside test_cpu_gpu_parity's; float16 and bfloat16 compare as the OpInfo sweep compares
    them there (`opinfo_sweep.REDUCED_FLOAT_TOLERANCE`: the CPU's own kernels round those types
    differently by layout, and its last-dimension log_softmax loses small values, which
    nn.LinearCrossEntropyLoss's input gradient shows). Then the modules' buffers (running
    statistics), their parameters and the forward inputs are compared as they are after the
    forward;
  - backward: `torch.autograd.backward` of the floating outputs that require grad, with
    grad_outputs drawn from a generator seeded per sample (the same values on both sides), then
    the `.grad` of every input that requires grad and of every parameter is compared (a CPU
    input made by an operation, such as `make_input(...).log()`, retains its grad, as torch's
    test does: its device copy is a leaf);
  - an exception on both sides passes only when the types are the same ("both raised"); one
    side raising is a failure with its message.
A sample that fails is recorded with its first difference and the item goes on to the next
sample, so that the pass rate counts samples: an item (module, dtype) passes when all its
samples pass.

module_db's own decorators for test_cpu_gpu_parity: its device-specific entries (CUDA, XPU, MPS,
meta) do not apply to this device; its two unconditional `unittest.skip`s, `nn.GroupNorm`
(pytorch#98089: CUDA's parameter gradients far from the CPU's) and `nn.KLDivLoss`
(pytorch#115588: its gradcheck failures), are recorded as a note and the modules run anyway:
this device runs the CPU's kernels, and neither reason concerns moving the CPU's computation to
another device. Its tolerance overrides are not used, for the same reason.

Isolation, results and reports are the OpInfo sweep's (opinfo_sweep.py: Note [The fork server],
`serve`, `sweep`; the statuses and report helpers in sweep_report.py): a module that kills its
worker is recorded as "died", one past `timeout` as "timeout", and the next item runs in a fresh worker. OCLVM_OPINFO_FAULT="crash:KEY,hang:KEY"
injects a crash or a hang at module KEY.

`EXPECTED_FAILURES` maps (module, dtype name or "*") to the specific reason the comparison cannot
hold although the device is right, and to the samples it concerns (a predicate on the
ModuleInput): a failing sample that it concerns is counted as an expected failure, any other
failing sample fails the item; an item with no expected failure left is reported as an
"unexpected pass". Device bugs are never listed there. The pass rate is passed samples /
(samples - expected failures).

Command:  .venv/bin/python tests/torch/conformance/module_sweep.py [--dtypes ...]
          [--modules ...] [--max-samples N] [--out results.jsonl] [--table design/module_db.md]
          [--resume] [--timeout S] [--table-only]
          exits 1 when an item failed, died, timed out or (having run whole) passed
          unexpectedly; 2 on bad usage
Python:   sweep(...) -> list of result dicts; summarize(results); unexplained(results, ...);
          write_table(results, path, ...)
"""
import argparse
import datetime
import pathlib
import sys
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import opinfo_sweep as harness  # noqa: E402  (stdlib-only at import; torch is imported by workers)

DEVICE = harness.DEVICE
SEED = harness.SEED
DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16")
PARITY_TEST = "test_cpu_gpu_parity"
# module_db's name for its device type when the decorators are asked about this device.
DEVICE_TYPE = "privateuseone"


# (module name, dtype name or "*") -> (why the comparison cannot hold on this device although
# the device is right, which samples that concerns: a function of the ModuleInput). Only causes
# in the comparison itself belong here, never device bugs. Empty: every sample compares.
EXPECTED_FAILURES = {}


def expected_failure(name, dtype_name):
    """(reason, predicate on a ModuleInput) of EXPECTED_FAILURES for the item, or None."""
    return (EXPECTED_FAILURES.get((name, dtype_name))
            or EXPECTED_FAILURES.get((name, "*")))


def all_items(module_db):
    """Every [module name, dtype name] of the sweep, module-major, each module only for the
    dtypes it supports on the CPU."""
    return [[info.name, d] for info in module_db for d in DTYPE_NAMES
            if harness._dtype(d) in info.supported_dtypes("cpu")]


def training_modes(info):
    """True, and False where the module's training mode changes its forward (torch's
    `@modules` runs eval mode only then)."""
    return (True, False) if info.train_and_eval_differ else (True,)


def parity_skips(info, dtype):
    """Notes for module_db's unconditional skips and expected failures of test_cpu_gpu_parity
    that are active for this device and `dtype`."""
    import unittest
    notes = []
    for decorator in info.get_decorators("TestModule", PARITY_TEST, DEVICE_TYPE, dtype, {}):
        if decorator is unittest.expectedFailure:
            notes.append(f"module_db marks {PARITY_TEST} an expected failure; run anyway")
        elif getattr(decorator, "__qualname__", "").startswith("skip."):
            notes.append(f"module_db skips {PARITY_TEST}; run anyway (the device runs the CPU's "
                         "kernels)")
    return notes


# ------------------------------------------------------------------------------------ worker --

def _forward(module, args, kwargs):
    """`module(*args, **kwargs)` after torch.manual_seed(SEED), or the exception it raised."""
    import torch
    try:
        torch.manual_seed(SEED)
        return module(*args, **kwargs)
    except Exception as error:  # noqa: BLE001  (any exception is a result to compare)
        return harness._Raised(error)


def _backward(outputs, grad_outputs):
    """None once the gradients are accumulated into the leaves, or the exception raised."""
    import torch
    try:
        torch.autograd.backward(outputs, grad_outputs)
        return None
    except Exception as error:  # noqa: BLE001
        return harness._Raised(error)


def _state(module):
    """The module's buffers and parameters by name, to compare the two sides'."""
    return {"buffers": dict(module.named_buffers()), "parameters": dict(module.named_parameters())}


NATIVE_FLOAT32 = dict(rtol=1e-3, atol=1e-4)


def run_sample(info, module_input, dtype, training, index):
    """Compares one sample on the device and the CPU; returns "both raised" or None, raises
    AssertionError with the first difference."""
    import copy
    import torch
    native = torch.opencl.get_device_properties(0).native_kernels
    harness.FLOAT32_TOLERANCE = NATIVE_FLOAT32 if native else None
    harness.REDUCED_FLOAT_TOLERANCE = harness.NATIVE_REDUCED_FLOAT if native else {}
    constructor = module_input.constructor_input
    cpu_args, cpu_kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
    torch.manual_seed(SEED)
    cpu_module = info.module_cls(*constructor.args, **constructor.kwargs).to(dtype)
    cpu_module.train(training)
    try:
        dev_module = copy.deepcopy(cpu_module).to(DEVICE)
        dev_args, dev_kwargs = harness._to_device((cpu_args, cpu_kwargs), DEVICE, {})
    except Exception as error:  # noqa: BLE001
        raise AssertionError(f"moving the module and its inputs to {DEVICE} raised "
                             f"{harness._Raised(error).describe()}") from None

    if isinstance(cpu_module, torch.nn.LinearCrossEntropyLoss):
        cpu_module.options = harness.as_resolved_on_the_device(cpu_module.options, dtype)
    if info.is_lazy:
        with torch.no_grad():
            dev_init = _forward(dev_module, dev_args, dev_kwargs)
            cpu_init = _forward(cpu_module, cpu_args, cpu_kwargs)
        # On the native path the device initialises from its own Philox stream: only shapes,
        # dtypes and devices compare, then the device module takes the CPU's values.
        if harness._check_pair(dev_init, cpu_init, "materialising forward", native):
            return "both raised"
        harness._compare(_state(dev_module), _state(cpu_module), native, "after materialising")
        if native:
            with torch.no_grad():
                for dev_value, cpu_value in zip(dev_module.state_dict().values(),
                                                cpu_module.state_dict().values()):
                    dev_value.copy_(cpu_value)

    for tensor in harness._tensors((cpu_args, cpu_kwargs)):
        if tensor.requires_grad and not tensor.is_leaf:
            tensor.retain_grad()  # its device copy is a leaf, which gets a .grad
    dev_out = _forward(dev_module, dev_args, dev_kwargs)
    cpu_out = _forward(cpu_module, cpu_args, cpu_kwargs)
    if harness._check_pair(dev_out, cpu_out, "output", False):
        return "both raised"
    harness._compare(_state(dev_module), _state(cpu_module), False, "module after forward")
    harness._compare(harness._tensors((dev_args, dev_kwargs)),
                     harness._tensors((cpu_args, cpu_kwargs)), False, "inputs after forward")

    cpu_outs, cpu_leaves = harness._grad_targets(cpu_out, (cpu_args, cpu_kwargs))
    dev_outs, dev_leaves = harness._grad_targets(dev_out, (dev_args, dev_kwargs))
    if (len(dev_outs), len(dev_leaves)) != (len(cpu_outs), len(cpu_leaves)):
        raise AssertionError(f"expected {len(cpu_outs)} outputs that require grad and "
                             f"{len(cpu_leaves)} inputs that do, as on the CPU, but got "
                             f"{len(dev_outs)} and {len(dev_leaves)}")
    if not cpu_outs:
        return None
    generator = torch.Generator().manual_seed(SEED + index)
    cpu_grads = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in cpu_outs]
    dev_grads = [g.to(DEVICE) for g in cpu_grads]
    if harness._check_pair(_backward(dev_outs, dev_grads), _backward(cpu_outs, cpu_grads),
                           "backward", False):
        return "both raised"
    harness._compare([t.grad for t in dev_leaves], [t.grad for t in cpu_leaves], False,
                     "input grads")
    harness._compare({k: p.grad for k, p in dev_module.named_parameters()},
                     {k: p.grad for k, p in cpu_module.named_parameters()}, False,
                     "parameter grads")
    return None


def spread(count, max_samples):
    """The indices of at most `max_samples` of `count` samples, evenly spaced from the first."""
    if max_samples is None or count <= max_samples:
        return list(range(count))
    return [i * count // max_samples for i in range(max_samples)]


def run_item(info, dtype_name, max_samples, on_sample=None):
    """Runs one (module, dtype), every sample even after a failure, and returns its result dict,
    EXPECTED_FAILURES applied per sample. `on_sample(index)` is called before each sample runs.
    "capped": whether `max_samples` left samples out; "concerned": how many samples that ran
    EXPECTED_FAILURES concerns (an item with none of them that ran cannot pass unexpectedly)."""
    import torch
    harness._injected_fault(info.name)
    dtype = harness._dtype(dtype_name)
    expected = expected_failure(info.name, dtype_name)
    result = {"op": info.name, "dtype": dtype_name, "samples": 0, "passed": 0, "failed": 0,
              "expected_failed": 0, "concerned": 0, "both_raised": 0, "capped": False,
              "status": harness.PASS, "detail": "", "failures": [],
              "notes": parity_skips(info, dtype)}
    if expected:
        result["expected_reason"] = expected[0]
    for training in training_modes(info):
        mode = "train" if training else "eval"
        torch.manual_seed(SEED)
        try:
            inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True,
                                             training=training)
        except Exception as error:  # noqa: BLE001  (the corpus itself failed)
            result["failed"] += 1
            result["failures"].append(f"{mode}: harness: making the samples raised "
                                      f"{harness._Raised(error).describe()}")
            continue
        inputs = [i for i in inputs if i.forward_input is not None]
        chosen = spread(len(inputs), max_samples)
        result["capped"] = result["capped"] or len(chosen) < len(inputs)
        for number in chosen:
            module_input = inputs[number]
            concerned = expected is not None and expected[1](module_input)
            result["concerned"] += concerned
            where = f"{mode} sample {number}" + (f" ({module_input.desc})"
                                                 if module_input.desc else "")
            if on_sample:
                on_sample(result["samples"])
            result["samples"] += 1
            try:
                if run_sample(info, module_input, dtype, training, result["samples"]):
                    result["both_raised"] += 1
                result["passed"] += 1
            except AssertionError as error:
                if concerned:
                    result["expected_failed"] += 1
                    result.setdefault("expected_detail", f"{where}: {str(error).strip()}"[:1000])
                    continue
                result["failed"] += 1
                result["failures"].append(f"{where}: {str(error).strip()}"[:1000])
            except Exception as error:  # noqa: BLE001  (building the module on the CPU failed)
                result["failed"] += 1
                result["failures"].append(f"{where}: harness: {harness._Raised(error).describe()}"
                                          "\n" + traceback.format_exc()[-1000:])
    if result["failures"]:
        result["status"] = harness.FAIL
        result["detail"] = "\n".join(result["failures"][:3])
    elif expected and result["expected_failed"]:
        result["status"] = harness.XFAIL
        result["detail"] = result["expected_detail"]
    elif result["concerned"]:
        result["status"] = harness.XPASS
    elif result["samples"] == 0:
        result["status"] = harness.NO_SAMPLES
    if result["both_raised"]:
        result["notes"].append(f"both raised in {result['both_raised']} of {result['samples']} "
                               "samples")
    return result


def _server(max_samples):
    """The module sweep's fork server (`opinfo_sweep.serve` over module_db)."""
    def load():
        from torch.testing._internal.common_modules import module_db
        by_name = {info.name: info for info in module_db}
        return all_items(module_db), lambda name, dtype_name, on_sample: run_item(
            by_name[name], dtype_name, max_samples, on_sample)
    harness.serve(load)


# ------------------------------------------------------------------------------------ parent --

def sweep(modules=None, dtypes=None, max_samples=None, out=None, resume=False,
          timeout=harness.DEFAULT_TIMEOUT, progress=True):
    """Runs the items in forked workers (Note [The fork server] in opinfo_sweep.py) and returns
    every result (with `resume`, those already in `out` first)."""
    return harness.sweep(modules, list(dtypes or DTYPE_NAMES), max_samples, out, resume,
                         timeout, progress, script=__file__, finish=_finish)


def _finish(result, max_samples):
    """Records the sample bound (the worker has applied EXPECTED_FAILURES per sample)."""
    result["max_samples"] = max_samples
    return result


def sample_counts(result):
    """(samples run, samples passed, expected failures) of a result. A worker that died or timed
    out is charged every sample it reached: what it compared before is lost with it."""
    if result["status"] in (harness.DIED, harness.TIMEOUT):
        return max(result["samples"], 1), 0, 0
    return result["samples"], result.get("passed", 0), result.get("expected_failed", 0)


def summarize(results):
    """Per dtype and for "all": {"modules", "passed modules" (every sample passed, or failed
    as expected), "samples", "passed samples", "expected failures" (samples), the count of each
    status, "percent" (passed samples / (samples - expected failures))}."""
    table = {}
    for dtype in (*DTYPE_NAMES, "all"):
        rows = [r for r in results if dtype in ("all", r["dtype"])]
        if not rows:
            continue
        entry = {"modules": len(rows), "passed modules": sum(
            r["status"] in (harness.PASS, harness.XFAIL) for r in rows)}
        for status in (harness.FAIL, harness.XFAIL, harness.XPASS, harness.DIED,
                       harness.TIMEOUT, harness.NO_SAMPLES):
            entry[status] = sum(r["status"] == status for r in rows)
        counts = [sample_counts(r) for r in rows]
        entry["samples"] = sum(run for run, _, _ in counts)
        entry["passed samples"] = sum(passed for _, passed, _ in counts)
        entry["expected failures"] = sum(expected for _, _, expected in counts)
        compared = entry["samples"] - entry["expected failures"]
        entry["percent"] = 100.0 * entry["passed samples"] / compared if compared else 100.0
        table[dtype] = entry
    return table


def unexplained(results, known_gaps=None, floor=None):
    """Lines, one per finding, for what a run must not hold: an item that died, timed out or
    failed, unless `known_gaps` ({(module, dtype or "*"): what is wrong}) lists it as a device
    gap not yet fixed (a listed item that passes is a finding too); an unexpected pass of an
    item that ran whole (a bounded run may leave out the samples that fail as expected); and,
    with `floor`, a dtype whose percentage of passing samples is under it."""
    known_gaps = known_gaps or {}
    lines = []
    for r in results:
        item = f"{r['op']} [{r['dtype']}]"
        gap = (r["op"], r["dtype"]) in known_gaps or (r["op"], "*") in known_gaps
        if gap and r["status"] == harness.PASS:
            lines.append(f"{item} passes: remove it from KNOWN_DEVICE_GAPS")
        elif r["status"] in (harness.DIED, harness.TIMEOUT) or (
                r["status"] == harness.FAIL and not gap):
            lines.append(f"{item} {r['status']}: {harness._first_line(r)}")
        elif r["status"] == harness.XPASS and not r.get("capped"):
            lines.append(f"{item} unexpected pass: no sample failed of the {r['concerned']} "
                         "that EXPECTED_FAILURES concerns; remove it")
    for dtype, e in summarize(results).items():
        if floor is not None and e["percent"] < floor:
            lines.append(f"{dtype}: {e['percent']:.2f}% of the samples pass, under the floor of "
                         f"{floor}%")
    return lines


def write_table(results, path, command, max_samples):
    """Writes the Markdown report of `results` to `path`: the summary per dtype, then one row
    per (module, dtype) with its samples passed and failed and the first line of its first
    failure."""
    import torch
    lines = [
        "# The module sweep: module_db on the opencl device against the CPU",
        "",
        f"Regenerated by `{command}` on {datetime.date.today().isoformat()}, torch "
        f"{torch.__version__}, "
        f"{'all samples' if max_samples is None else f'at most {max_samples} samples'} per "
        "(module, dtype, training mode). The harness, its tolerances and its expected-failure "
        "table are in `tests/torch/conformance/module_sweep.py`; `make test` runs a bounded "
        "sweep (`tests/torch/test_module_db.py`).",
        "",
        "Per sample: the module built on the CPU, deep-copied to the device, forward on both "
        "sides after the same seed; the outputs (`assert_close`, PyTorch's default tolerances "
        "per dtype), the buffers, parameters and inputs after the forward, and after a backward "
        "with the same grad_outputs the gradients of the inputs and parameters. Training and "
        "eval mode where module_db says they differ. \"passed\" includes samples where both "
        "sides raised the same exception type; \"expected\" counts the failing samples that "
        "the harness's EXPECTED_FAILURES explains. % passing = passed samples / (samples − "
        "expected). A module passes when every sample passes or fails as expected.",
        "",
        "| dtype | modules | modules passing | failed | expected failure | unexpected pass | "
        "died | timeout | samples | passed | expected | % passing |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for dtype, e in summarize(results).items():
        lines.append(f"| {dtype} | {e['modules']} | {e['passed modules']} | {e[harness.FAIL]} "
                     f"| {e[harness.XFAIL]} | {e[harness.XPASS]} | {e[harness.DIED]} | "
                     f"{e[harness.TIMEOUT]} | {e['samples']} | {e['passed samples']} | "
                     f"{e['expected failures']} | {e['percent']:.2f} |")
    lines += ["", "| module | dtype | samples | passed | expected | failed | status | notes / "
              "reason / first line of the first failure |", "|---|---|---:|---:|---:|---:|---|---|"]
    for r in sorted(results, key=lambda r: (r["op"], DTYPE_NAMES.index(r["dtype"]))):
        run, passed, expected = sample_counts(r)
        parts = [f"expected: {r['expected_reason']}"] if r.get("expected_reason") else []
        parts += r.get("notes", [])
        parts += [harness._first_line(r)] if harness._first_line(r) else []
        lines.append(f"| `{r['op']}` | {r['dtype']} | {run} | {passed} | {expected} | "
                     f"{run - passed - expected} | {r['status']} | "
                     f"{harness._cell('; '.join(parts))} |")
    pathlib.Path(path).write_text("\n".join(lines).rstrip() + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", nargs="+", choices=DTYPE_NAMES, default=list(DTYPE_NAMES))
    parser.add_argument("--modules", nargs="+",
                        help="module names (nn.Linear) or fnmatch patterns (default: all)")
    harness.add_sweep_arguments(parser, "(module, dtype)", "(module, dtype, training mode)")
    args = parser.parse_args(argv)
    if args.server:
        _server(args.max_samples)
        return 0
    if not args.table_only and harness.pthread_driver_refused("module_sweep"):
        return 2
    try:
        results = (harness.load_results(args.out) if args.table_only else
                   sweep(args.modules, args.dtypes, args.max_samples, args.out, args.resume,
                         args.timeout))
    except ValueError:
        parser.error(f"--modules {args.modules} and --dtypes {args.dtypes} select no item of "
                     "module_db")
    if args.table:
        harness.rewrite_table(write_table, results, args.table, "module_sweep.py", argv,
                              args.max_samples)
    for dtype, e in summarize(results).items():
        print(f"{dtype}: {e['passed samples']} of {e['samples']} samples pass, "
              f"{e['expected failures']} fail as expected ({e['percent']:.2f}%); "
              f"{e['passed modules']} of {e['modules']} modules pass; failed "
              f"{e[harness.FAIL]}, expected failure {e[harness.XFAIL]}, unexpected pass "
              f"{e[harness.XPASS]}, died {e[harness.DIED]}, timeout {e[harness.TIMEOUT]}",
              file=sys.stderr)
    return 1 if unexplained(results) else 0


if __name__ == "__main__":
    sys.exit(main())
