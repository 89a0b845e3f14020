"""PyTorch's OpInfo database as a conformance suite for the `opencl` device.

Every operator of torch's `op_db` and of its `_foreach_` databases, functional and in-place
(`all_ops`; key `name.variant_test_name`, or `name` when the variant is empty) runs on the device and on the CPU for each of six dtypes it supports on the CPU (float32,
float16, bfloat16, complex64, int64, bool), sample by sample, and the two are compared — the idea
of torch's own `test_ops.py::test_compare_cpu`, with the CPU result as the expected value.

Per sample (`op.sample_inputs("cpu", dtype, requires_grad=...)`, at most `max_samples` of them):
  - the sample is copied to the device: every tensor with `.detach().to("opencl")`, made a leaf
    that requires grad when the CPU tensor does; lists, tuples and dicts are walked; a `device`
    keyword naming the CPU, and any `torch.device("cpu")` argument, become the opencl device;
  - the device call runs first, on its copy; the CPU call then runs on the original sample (an
    operator that mutates its inputs mutates each side's own tensors);
  - `sample.output_process_fn_grad` is applied to both results, as torch's test does;
  - outputs are compared with `torch.testing.assert_close(device.cpu(), cpu, equal_nan=True)` and
    PyTorch's own default tolerances for the dtype (rtol, atol): float32 and complex64
    (1.3e-6, 1e-5), float16 (1e-3, 1e-5), bfloat16 (1.6e-2, 1e-5); int64 and bool exactly.
    Defaults rather than the looser 1e-3 / 1e-3 of torch's test_compare_cpu: the device runs the
    CPU's own kernels through its CPU fallback, so a difference beyond the defaults means the
    device took another route than the CPU (a composite decomposition, another attention
    backend, a materialised conjugate view), which is what this sweep is for. On the native
    path (OCLVM_KERNELS=native), where the device takes its own route by design, an operator
    whose op_db entry overrides TestCommon's tolerance for the dtype (`toleranceOverride`:
    PyTorch's own allowance for that operator's rounding by another implementation) is compared
    within that override where it is looser (its gradients too), and float16 and bfloat16
    values within test_compare_cpu's allowance at each dtype's resolution
    (REDUCED_FLOAT_TOLERANCE: the CPU's kernels for them round differently by layout). A device
    output tensor must be on the opencl device (unless the sample names no device at all);
  - the sample's tensors after the call are compared too (what the operator wrote back:
    running statistics, in-place random fills);
  - differentiable operators (`op.supports_autograd`, dtype in
    `op.supported_backward_dtypes("cpu")`, which holds only floating and complex dtypes) also
    compare gradients: `torch.autograd.grad` of the floating/complex outputs that require grad
    w.r.t. every input tensor that requires grad (allow_unused=True), with grad_outputs drawn
    from a seeded generator, the same values on both sides;
  - an exception on both sides passes only when the types are the same ("both raised"); one
    side raising is a failure with its message.
Samples are made for the CPU, so the "cpu" they name (a `device` keyword, a torch.device, the
string "cpu") becomes the opencl device; the tensors of `args`/`kwargs` of the operators in
`CPU_ARGUMENTS`, which op_db makes on the CPU on purpose, stay there.

Operators with random output (`random_ops()`, derived from op_db itself: the ones whose
test_compare_cpu op_db skips as "output is non-deterministic", and those whose callable reseeds
through `wrapper_set_seed`) run after `torch.manual_seed(SEED)` on each side: on the host path the
device runs the CPU kernel with its own generator, which has the CPU generator's algorithm and is
seeded by torch.manual_seed too, so the values must match. On the native path a sample whose call
drew from the device's Philox stream (`_philox_draws` moved) cannot give the CPU's
numbers, as CUDA's do not: its output's shape, dtype and device are compared, its errors as
every sample's, and the result notes how many samples did so. Where values cannot match
by construction (`METADATA_ONLY`: uninitialised memory) only shape, dtype and device are
compared, and the result says so with the reason.

Isolation (Note [The fork server]): the work runs in worker processes that stream one JSON line
per (op, dtype) to the parent. If a worker dies (SIGSEGV, abort, a stack overflow) the parent
records the item it was on as "died (signal N)", with the sample and the innermost Python frames
faulthandler printed, and a new worker goes on at the next item; an item that takes longer than
`timeout` seconds is recorded as "timeout" and its worker killed. Results go to a JSON-lines
file (`--resume` skips the items already there) and a Markdown report (`write_table`). The
harness's own tests inject a crash or a hang with OCLVM_OPINFO_FAULT (`_injected_fault`).

`EXPECTED_FAILURES` maps (op key, dtype name or "*") to the specific reason the comparison
cannot hold for a reason that is not a device bug; a listed item that passes is reported as an
"unexpected pass". Device bugs are never listed there.

Command:  .venv/bin/python tests/torch/conformance/opinfo_sweep.py [--dtypes ...] [--ops ...]
          [--max-samples N] [--out results.jsonl] [--table design/opinfo.md] [--resume]
          [--timeout S] [--table-only]
          exits 1 when an item failed, died, timed out or passed unexpectedly; 2 on bad usage
Python:   sweep(...) -> list of result dicts; summarize(results); write_table(results, path, ...)
"""
import argparse
import fnmatch
import itertools
import json
import os
import pathlib
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback

# The statuses, result files and report are shared with module_sweep.py; both it and
# tests/torch/test_opinfo.py reach them through this module.
from sweep_report import (  # noqa: F401
    DEFAULT_TIMEOUT, DEVICE, DIED, DTYPE_NAMES, FAIL, NO_SAMPLES, PASS, RANDOM_NOTE, SEED,
    TIMEOUT, XFAIL, XPASS, _cell, _first_line, add_sweep_arguments, load_results,
    pthread_driver_refused, rewrite_table, summarize, write_table)


# (op key, dtype name or "*") -> why the comparison cannot hold on this device although the
# device is right. Only causes in the test method itself belong here, never device bugs.
EXPECTED_FAILURES = {
    ("as_strided.partial_views", "*"):
        "the sample views a larger storage and as_strided reads storage outside the input view; "
        ".to(device) copies only the view's elements, as CUDA's does (op_db marks this sample "
        "expectedFailure for test_compare_cpu on every device)",
    ("istft", "complex64"):
        "sample 8 passes window=window[:8], a view made without grad mode of a leaf that "
        "requires grad: the CPU's autograd sends the window's gradient to that base, so "
        "autograd.grad w.r.t. the view is None; .to(device) makes a standalone leaf, which gets "
        "the gradient (the CPU gives the same one for window[:8].clone())",
}

# Expected failures on the native path only (OCLVM_KERNELS=native), where the device computes with
# its own kernels.
NATIVE_EXPECTED_FAILURES = {
    ("nn.functional.conv2d", "complex64"):
        "torch's conv2d computes a complex convolution as three real ones and subtracts them "
        "(Gauss's trick); the native float32 convolutions sum in CLBlast's order, and the "
        "subtraction cancels most of the value: 1.8e-6 relative on the sample's worst element, "
        "past complex64's default 1.3e-6 (its float32 convolutions pass)",
    **{("_foreach_add_", dtype):
       "the sample's alpha=3.14: the CPU's element-at-a-time loop (a vector's tail) rounds "
       "alpha * other to the dtype before it adds; the device adds with one fma in float and "
       "rounds once, as the CPU's vectorised loop does for the other elements. Where alpha * "
       "other outweighs the sum, that is 2 units in the last place: 0.0039 at 2.2 in float16 "
       "(add and sub's own samples pass)"
       for dtype in ("float16", "bfloat16")},
    **{("nn.functional.cross_entropy", dtype):
       "sample 17's gradient w.r.t. its soft target is -weight * log_softmax(input): the CPU's "
       "float16/bfloat16 log_softmax over the last dimension loses the small values to "
       "cancellation (-0.002926 in float16, 0.0 in bfloat16, where float64 gives -0.0024564); "
       "the device's is the float computation rounded once (-0.0024567, -0.0024414)"
       for dtype in ("float16", "bfloat16")},
    **{("nn.functional.scaled_dot_product_attention", dtype):
       "sample 8 (causal, 3 queries by 6 keys): the device takes torch's math decomposition, in "
       "float32 and rounded once, the CPU its flash kernel, whose query and key gradients round "
       "steps to the dtype; against float64 the device's dq and dk are 3 to 6 times closer "
       "(float16: 0.0029 and 0.0019 against the CPU's 0.0093 and 0.0100; bfloat16: 0.024 and "
       "0.014 against 0.089 and 0.089)"
       for dtype in ("float16", "bfloat16")},
}

# Operators whose output values cannot match the CPU's by construction: only shape, dtype and
# device are compared.
METADATA_ONLY = {
    name: "returns uninitialised memory: the values are whatever the block held before"
    for name in ("empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                 "new_empty_strided")
}


# Operators whose sample functions make the tensors of `args` / `kwargs` on the CPU on purpose
# (with torch.tensor(...), not on the sample's device): those stay on the CPU, as they do when
# torch's own test makes the samples on CUDA. Only `input` goes to the device.
CPU_ARGUMENTS = {
    "tensor_split": "indices_or_sections as a tensor must be on the CPU (sample_inputs_"
                    "tensor_split builds it with torch.tensor(...))",
}


def op_key(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


class _InPlaceForeach:
    """The in-place variant of a `_foreach_` OpInfo (`_foreach_add_` beside `_foreach_add`),
    as an item of its own: the optimizers call these. It returns nothing, so what is compared is
    what it wrote into the sample's tensors, and how many times it bumped their versions (torch
    has no ADInplaceOrView kernel for these; a device's kernel bumps them itself, and autograd
    relies on it to refuse a saved tensor changed in place); no gradients (in-place on leaves
    that require grad is an error on both sides, and not what optimizers do)."""

    def __init__(self, op):
        self._op = op
        self.name = op.name + "_"

    def __getattr__(self, attribute):
        return getattr(self._op, attribute)

    def __call__(self, *args, **kwargs):
        return self._op.inplace_variant(*args, **kwargs)

    def supported_backward_dtypes(self, device_type):
        return set()


def all_ops():
    """op_db and the `_foreach_` operators, which torch keeps in databases of their own (not in
    op_db): the functional forms and, where one exists, the in-place form of each."""
    from torch.testing._internal import common_methods_invocations as cmi
    ops = list(cmi.op_db)
    for name in ("foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db",
                 "foreach_reduce_op_db", "foreach_other_op_db"):
        for op in getattr(cmi, name):
            ops.append(op)
            if op.inplace_variant is not None:
                ops.append(_InPlaceForeach(op))
    return ops


def _dtype(name):
    import torch
    return getattr(torch, name)


def _skip_reasons(op, test_name):
    """The reasons of op_db's unittest.skip decorators on TestCommon.`test_name` for `op` (the
    reason lives in the decorator's closure)."""
    reasons = []
    for info in op.decorators:
        if getattr(info, "test_name", None) != test_name:
            continue
        for decorator in getattr(info, "decorators", ()):
            for cell in getattr(decorator, "__closure__", None) or ():
                if isinstance(cell.cell_contents, str):
                    reasons.append(cell.cell_contents)
    return reasons


def random_ops(op_db):
    """Keys of the operators whose output is random, as op_db marks them."""
    keys = set()
    for op in op_db:
        code = getattr(op.op, "__code__", None)
        if code is not None and "wrapper_set_seed" in code.co_names:
            keys.add(op_key(op))
        if any("non-deterministic" in r for r in _skip_reasons(op, "test_compare_cpu")):
            keys.add(op_key(op))
    return keys - set(METADATA_ONLY)


def all_items(op_db):
    """Every (op key, dtype name) pair of the sweep, op-major, each operator only for the dtypes
    it supports on the CPU."""
    items = []
    for op in op_db:
        supported = op.supported_dtypes("cpu")
        items.extend([op_key(op), d] for d in DTYPE_NAMES if _dtype(d) in supported)
    return items


def select_items(items, ops=None, dtypes=None):
    """The items whose key matches one of `ops` (keys or fnmatch patterns; None: all) and whose
    dtype is in `dtypes` (None: all six)."""
    dtypes = dtypes or DTYPE_NAMES
    return [[key, d] for key, d in items if d in dtypes
            and (not ops or any(fnmatch.fnmatchcase(key, p) for p in ops))]


def expected_failure(key, dtype):
    table = dict(EXPECTED_FAILURES)
    if os.environ.get("OCLVM_KERNELS") == "native":
        table.update(NATIVE_EXPECTED_FAILURES)
    return table.get((key, dtype)) or table.get((key, "*"))


# ------------------------------------------------------------------------------------ worker --

class _Raised:
    """An exception one side raised."""

    def __init__(self, error):
        self.error = error

    def describe(self):
        lines = str(self.error).strip().splitlines()
        return f"{type(self.error).__name__}: {lines[0] if lines else ''}"[:300]


def _to_device(value, device, memo, keep_cpu=False):
    """`value` with its tensors copied to `device`; a tensor met twice (by identity) becomes
    one device tensor, so that gradients accumulate the same way on both sides. The samples
    were made for the CPU, so the device they name ("cpu" or torch.device("cpu"), as sample
    functions pass their `device` on) becomes `device`. With `keep_cpu`, tensors stay."""
    import torch
    if isinstance(value, torch.Tensor):
        if keep_cpu:
            return value
        if id(value) not in memo:
            moved = value.detach().to(device)
            if value.requires_grad:
                moved.requires_grad_(True)
            memo[id(value)] = (value, moved)  # keeps `value` alive so its id stays unique
        return memo[id(value)][1]
    if isinstance(value, torch.device) or (isinstance(value, str) and value == "cpu"):
        if torch.device(value).type != "cpu":
            return value
        memo["device named"] = (None, None)
        return torch.device(device)
    if isinstance(value, list):
        return [_to_device(v, device, memo, keep_cpu) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_device(v, device, memo, keep_cpu) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device, memo, keep_cpu) for k, v in value.items()}
    return value


def _sample_to_device(sample, device, key=None):
    """The device copy of `sample`, and whether it names the device at all (a sample with no
    tensor and no device, such as arange(2), runs on the CPU on both sides)."""
    from torch.testing._internal.opinfo.core import SampleInput
    memo = {}
    keep_cpu = key in CPU_ARGUMENTS
    moved = SampleInput(_to_device(sample.input, device, memo),
                        args=_to_device(sample.args, device, memo, keep_cpu),
                        kwargs=_to_device(sample.kwargs, device, memo, keep_cpu),
                        output_process_fn_grad=sample.output_process_fn_grad,
                        broadcasts_input=sample.broadcasts_input, name=sample.name)
    return moved, bool(memo)


def _tensors(value):
    """The tensors in a nested value, in order."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _versions(value):
    """The version counters of the tensors in a nested value, in order."""
    return [t._version for t in _tensors(value)]


def as_resolved_on_the_device(options, dtype):
    """LinearCrossEntropyOptions whose "auto" acc_policy and chunking_method are what torch
    resolves them to on the device. torch picks them by device type (_AUTO_DEFAULTS in
    torch/nn/modules/linear_cross_entropy_options.py: "accurate" with float32 accumulation on
    "cpu", the fallback "compact" in the input's dtype on device types it does not list), so the
    CPU reference computes with the device's resolution, given explicitly; an explicit policy
    accumulates in the input's dtype on every device, as "auto" does on the device. Options
    without "auto", and no options, come back as they are."""
    import dataclasses
    from torch.nn.modules import linear_cross_entropy_options as lce
    if options is None or "auto" not in (options.acc_policy, options.chunking_method):
        return options
    policy, chunking = lce._AUTO_DEFAULTS.get((DEVICE, dtype), lce._AUTO_FALLBACK)
    chunking_method = options.chunking_method
    if chunking_method == "auto":
        chunking_method = None if options.batch_chunk_size is not None else chunking
    return dataclasses.replace(
        options, acc_policy=policy if options.acc_policy == "auto" else options.acc_policy,
        chunking_method=chunking_method)


def _call(op, sample, seeded):
    import torch
    try:
        if seeded:
            torch.manual_seed(SEED)
        out = op(sample.input, *sample.args, **sample.kwargs)
        return sample.output_process_fn_grad(out)
    except Exception as error:  # noqa: BLE001  (any exception is a result to compare)
        return _Raised(error)


# assert_close's tolerance for float32 tensors when not PyTorch's default (None): the module sweep
# sets it on the native path (module_sweep.run_sample).
FLOAT32_TOLERANCE = None

# assert_close's tolerances for float16 and bfloat16 tensors on the native path (run_item sets
# them; empty otherwise). The CPU's own kernels round these types differently by layout: a
# vectorised loop computes a + alpha * b as one fused step, its element-at-a-time loop (short or
# strided runs, a vector's tail) rounds the product to the dtype first, and 1 / sqrt(x) likewise.
# No one formula on the device gives the CPU's bits everywhere; the device's kernels compute in
# float and round once. Values therefore compare within torch's own allowance for a device
# against the CPU (test_compare_cpu: 1e-3 absolute and relative), which is float16's resolution,
# scaled eight times for bfloat16, whose resolution (2^-7) is eight times float16's (2^-10); each
# never tighter than PyTorch's default for the dtype.
REDUCED_FLOAT_TOLERANCE = {}
NATIVE_REDUCED_FLOAT = {"float16": dict(rtol=1e-3, atol=1e-3),
                        "bfloat16": dict(rtol=1.6e-2, atol=8e-3)}

# The tolerance of the (op, dtype) being compared when op_db overrides TestCommon's for it and the
# sweep runs on the native path (None otherwise): run_item sets it. torch's test_compare_cpu
# compares outputs only; this sweep compares gradients too, and they come from the same other
# route (sdpa's math backward), so the allowance covers them as well.
OP_TOLERANCE = None


def _common_tolerance(op, dtype):
    """op_db's toleranceOverride of TestCommon.test_compare_cpu for `op` and `dtype` on this
    device (not CUDA's or the CPU's own), as assert_close's keyword arguments; None when it has
    none."""
    from torch.testing._internal.common_device_type import toleranceOverride
    for info in op.decorators:  # DecorateInfo entries (bare decorators apply to every test)
        if not hasattr(info, "is_active") or not info.is_active("TestCommon", "test_compare_cpu",
                                                                DEVICE, dtype, {}):
            continue
        for decorator in info.decorators:
            if isinstance(decorator, toleranceOverride) and dtype in decorator.d:
                limit = decorator.d[dtype]
                return dict(atol=limit.atol, rtol=limit.rtol)
    return None


def _compare(actual, expected, metadata_only, path="output", on_device=True):
    """Raises AssertionError when the device value `actual` differs from the CPU's `expected`.
    With `on_device`, a tensor the CPU made on the CPU must be on the device."""
    import torch
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{path}: expected a tensor, but got {type(actual).__name__}")
        if on_device and expected.device.type == "cpu" and actual.device.type != DEVICE:
            raise AssertionError(f"{path}: expected a tensor on {DEVICE}, but got one on "
                                 f"{actual.device}")
        if metadata_only:
            if (actual.shape, actual.dtype) != (expected.shape, expected.dtype):
                raise AssertionError(f"{path}: expected shape {tuple(expected.shape)} dtype "
                                     f"{expected.dtype}, but got {tuple(actual.shape)} "
                                     f"{actual.dtype}")
            return
        try:
            tolerance = (FLOAT32_TOLERANCE if expected.dtype == torch.float32 else
                         REDUCED_FLOAT_TOLERANCE.get(str(expected.dtype).replace("torch.", "")))
            try:
                torch.testing.assert_close(actual.detach().cpu(), expected.detach(),
                                           equal_nan=True, **(tolerance or {}))
            except AssertionError:
                if OP_TOLERANCE is None:
                    raise
                torch.testing.assert_close(actual.detach().cpu(), expected.detach(),
                                           equal_nan=True, **OP_TOLERANCE)
        except AssertionError as error:  # one line: "not close!; Mismatched ...; Greatest ..."
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            raise AssertionError(f"{path}: " + "; ".join(lines)) from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise AssertionError(f"{path}: expected a sequence of {len(expected)}, but got "
                                 f"{type(actual).__name__} {actual!r:.100}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, metadata_only, f"{path}[{i}]", on_device)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or actual.keys() != expected.keys():
            raise AssertionError(f"{path}: expected a dict with keys {sorted(expected)}")
        for k in expected:
            _compare(actual[k], expected[k], metadata_only, f"{path}[{k!r}]", on_device)
        return
    if isinstance(actual, torch.Tensor):
        raise AssertionError(f"{path}: expected {type(expected).__name__} {expected!r:.100}, "
                             "but got a tensor")
    if isinstance(expected, float) and isinstance(actual, float):
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except AssertionError as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            raise AssertionError(f"{path}: " + "; ".join(lines)) from None
        return
    if actual != expected and not metadata_only:
        raise AssertionError(f"{path}: expected {expected!r:.100}, but got {actual!r:.100}")


def _grad_targets(outputs, inputs):
    """The floating/complex outputs that carry a graph, and the inputs that require grad."""
    outs = [t for t in _tensors(outputs) if t.requires_grad and t.grad_fn is not None
            and (t.is_floating_point() or t.is_complex())]
    leaves = [t for t in _tensors(inputs) if t.requires_grad]
    return outs, leaves


def _grads(outputs, sample, grad_outputs):
    import torch
    outs, leaves = _grad_targets(outputs, (sample.input, sample.args, sample.kwargs))
    try:
        return list(torch.autograd.grad(outs, leaves, grad_outputs, allow_unused=True))
    except Exception as error:  # noqa: BLE001
        return _Raised(error)


def _check_pair(dev, cpu, what, metadata_only, on_device=True):
    """None when the two results agree; "both raised" when both raised the same type; otherwise
    raises AssertionError with the difference."""
    if isinstance(dev, _Raised) or isinstance(cpu, _Raised):
        if isinstance(dev, _Raised) and isinstance(cpu, _Raised):
            if type(dev.error) is type(cpu.error):
                return "both raised"
            raise AssertionError(f"{what}: device raised {dev.describe()}; CPU raised "
                                 f"{cpu.describe()}")
        if isinstance(dev, _Raised):
            raise AssertionError(f"{what}: device raised {dev.describe()}")
        raise AssertionError(f"{what}: CPU raised {cpu.describe()}, device did not")
    _compare(dev, cpu, metadata_only, what, on_device)
    return None


def _injected_fault(key):
    """The harness's own test hook: OCLVM_OPINFO_FAULT="crash:KEY,hang:KEY2" makes the worker
    die by SIGSEGV at operator KEY and sleep forever at KEY2."""
    for fault in os.environ.get("OCLVM_OPINFO_FAULT", "").split(","):
        kind, _, target = fault.partition(":")
        if target != key:
            continue
        if kind == "crash":
            import ctypes
            ctypes.string_at(0)  # a real invalid read, as a faulting kernel would make
        if kind == "hang":
            while True:
                time.sleep(60)


def run_item(op, dtype_name, max_samples, random_keys, on_sample=None):
    """Runs one (op, dtype) and returns its result dict (status before expected failures).
    `on_sample(index)` is called before each sample runs."""
    import torch
    global OP_TOLERANCE, REDUCED_FLOAT_TOLERANCE
    key = op_key(op)
    _injected_fault(key)
    dtype = _dtype(dtype_name)
    native = os.environ.get("OCLVM_KERNELS") == "native"
    OP_TOLERANCE = _common_tolerance(op, dtype) if native else None
    REDUCED_FLOAT_TOLERANCE = NATIVE_REDUCED_FLOAT if native else {}
    differentiable = dtype in op.supported_backward_dtypes("cpu")
    seeded = key in random_keys
    metadata_reason = METADATA_ONLY.get(key)
    result = {"op": key, "dtype": dtype_name, "samples": 0, "both_raised": 0,
              "status": PASS, "detail": "", "notes": []}
    if metadata_reason:
        result["notes"].append(f"values not compared ({metadata_reason})")
    if seeded:
        result["notes"].append(RANDOM_NOTE)
    grads_both_raised = 0
    philox_samples = 0
    torch.manual_seed(SEED)
    try:
        samples = op.sample_inputs("cpu", dtype, requires_grad=differentiable)
        for index, sample in enumerate(itertools.islice(samples, max_samples)):
            result["samples"] += 1
            where = f"sample {index}"
            if on_sample:
                on_sample(index)
            try:
                dev_sample, on_device = _sample_to_device(sample, DEVICE, key)
            except Exception as error:  # noqa: BLE001
                raise AssertionError(f"{where}: moving the sample to {DEVICE} raised "
                                     f"{_Raised(error).describe()}") from None
            written = isinstance(op, _InPlaceForeach)
            dev_versions = _versions(dev_sample.input) if written else None
            cpu_versions = _versions(sample.input) if written else None
            if "options" in sample.kwargs and key.startswith("nn.functional.linear_cross_entropy"):
                sample.kwargs["options"] = as_resolved_on_the_device(sample.kwargs["options"],
                                                                     dtype)
            draws = _philox_draws()
            dev_out = _call(op, dev_sample, seeded)
            drew = seeded and native and _philox_draws() != draws
            cpu_out = _call(op, sample, seeded)
            if _check_pair(dev_out, cpu_out, f"{where} output",
                           metadata_reason is not None or drew, on_device):
                result["both_raised"] += 1
                continue
            if drew:
                philox_samples += 1
                continue
            if written:
                dev_bumps = [after - before for before, after
                             in zip(dev_versions, _versions(dev_sample.input))]
                cpu_bumps = [after - before for before, after
                             in zip(cpu_versions, _versions(sample.input))]
                if dev_bumps != cpu_bumps:
                    raise AssertionError(f"{where}: the written tensors' versions went up by "
                                         f"{dev_bumps} on {DEVICE}, by {cpu_bumps} on the CPU")
            if metadata_reason:
                continue
            # Arguments the operator mutated (running statistics, in-place random fills, out=)
            # must have been written back the same way.
            _compare(_tensors((dev_sample.input, dev_sample.args, dev_sample.kwargs)),
                     _tensors((sample.input, sample.args, sample.kwargs)), False,
                     f"{where} inputs after the call", on_device=False)
            if not differentiable:
                continue
            outs, _ = _grad_targets(cpu_out, (sample.input, sample.args, sample.kwargs))
            if not outs:
                continue
            generator = torch.Generator().manual_seed(SEED + index)
            grad_cpu = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outs]
            grad_dev = [g.to(DEVICE) for g in grad_cpu]
            dev_grads = _grads(dev_out, dev_sample, grad_dev)
            cpu_grads = _grads(cpu_out, sample, grad_cpu)
            if _check_pair(dev_grads, cpu_grads, f"{where} gradients", False):
                grads_both_raised += 1
    except AssertionError as error:
        result["status"] = FAIL
        result["detail"] = str(error).strip()[:2000]
    except Exception as error:  # noqa: BLE001  (sample generation itself failed)
        result["status"] = FAIL
        result["detail"] = ("harness: " + _Raised(error).describe() + "\n" +
                            traceback.format_exc()[-1500:])
    if result["status"] == PASS and result["samples"] == 0:
        result["status"] = NO_SAMPLES
    if result["both_raised"]:
        result["notes"].append(f"both raised in {result['both_raised']} of {result['samples']} "
                               "samples")
    if grads_both_raised:
        result["notes"].append(f"gradients: both raised in {grads_both_raised} samples")
    if philox_samples:
        result["notes"].append(f"{philox_samples} of {result['samples']} samples drew from the "
                               "device's Philox stream: shape, dtype and device compared")
    return result


def _philox_draws():
    """How many draws the device's generators have made from their Philox streams (the native
    path's random operators) in this process."""
    import oclvm
    return oclvm._C.philox_draws()


# Note [The fork server]
# ~~~~~~~~~~~~~~~~~~~~~~
# Importing torch and op_db costs about 7 s, and an operator that kills its process would cost a
# fresh interpreter each time. So one server process imports them once, without touching the
# device, and forks a worker per run of items; a worker that dies costs a fork, not an import.
# The server has run no operator when it forks (only torch's import-time threads exist, which
# torch itself keeps fork-safe, as DataLoader workers rely on), and each worker initialises the
# device for itself. Not with PoCL's pthread driver, though: importing op_db finds the devices,
# which starts that driver's scheduler threads in the server, and a forked worker, which has none
# of them, waits forever on its first command. The sweep refuses that driver. Protocol, JSON lines: server -> parent {"ready", "items": every (op,
# dtype) of op_db, so the parent never imports op_db}, then per request (a JSON list of items)
# {"worker": pid}, the worker's {"start": [op, dtype]} / result lines / {"done"}, and the
# server's {"exit": code} once the worker is gone (code < 0: killed by signal -code).

def _server(max_samples):
    """The OpInfo sweep's fork server (`serve` over op_db)."""
    def load():
        op_db = all_ops()
        by_key = {op_key(op): op for op in op_db}
        random_keys = random_ops(op_db)

        def run(key, dtype_name, on_sample):
            return run_item(by_key[key], dtype_name, max_samples, random_keys, on_sample)
        return all_items(op_db), run
    serve(load)


def serve(load):
    """A fork server (Note [The fork server]): `load()`, called once after torch is imported,
    returns (every [key, dtype name] item, `run(key, dtype name, on_sample)` -> result dict);
    then it reads one JSON list of items per line from stdin and forks a worker for each, which
    runs them. Anything else written to fd 1 goes to stderr. The module sweep
    (module_sweep.py) serves module_db through it."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import warnings
    warnings.simplefilter("ignore")
    import torch  # noqa: F401  (autoloads the oclvm backend)
    all_keys, run = load()
    out.write(json.dumps({"ready": True, "items": all_keys}) + "\n")
    for request in sys.stdin:
        items = json.loads(request)
        pid = os.fork()
        if pid == 0:  # the worker
            import faulthandler
            faulthandler.enable()  # a fatal signal prints the Python stack to stderr
            code = 0

            def on_sample(index):
                out.write(json.dumps({"sample": index}) + "\n")
            try:
                for key, dtype_name in items:
                    out.write(json.dumps({"start": [key, dtype_name]}) + "\n")
                    began = time.monotonic()
                    result = run(key, dtype_name, on_sample)
                    result["seconds"] = round(time.monotonic() - began, 2)
                    out.write(json.dumps(result) + "\n")
                out.write(json.dumps({"done": True}) + "\n")
            except BaseException:  # noqa: BLE001  (reported through the exit code)
                traceback.print_exc()
                code = 3
            finally:
                sys.stderr.flush()
                os._exit(code)
        out.write(json.dumps({"worker": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")


# ------------------------------------------------------------------------------------ parent --

def _finish(result, max_samples):
    """Applies the expected-failure table and records the sample bound."""
    reason = expected_failure(result["op"], result["dtype"])
    result["max_samples"] = max_samples
    if reason:
        result["expected_reason"] = reason
        if result["status"] in (PASS, NO_SAMPLES):
            result["status"] = XPASS
        else:
            result["status"] = XFAIL
    return result


def sweep(ops=None, dtypes=None, max_samples=None, out=None, resume=False,
          timeout=DEFAULT_TIMEOUT, progress=True, script=None, finish=None):
    """Runs the items in forked workers, one at a time (Note [The fork server]), and returns
    every result (with `resume`, those already in `out` first). Each result is also appended to
    `out` as it arrives. `script` is the harness whose `--server` serves the items (default:
    this one, op_db); `finish(result, max_samples)` applies its expected failures (default:
    `_finish`, with EXPECTED_FAILURES)."""
    finish = finish or _finish
    server = _Server(max_samples, script)  # it knows the corpus: the parent never imports it
    items = select_items(server.items, ops, dtypes)
    if not items:
        server.close()
        raise ValueError(f"Expected --ops {ops} and --dtypes {dtypes} to select items of the "
                         "corpus, but they select none")
    previous = load_results(out) if resume else []
    done = {(r["op"], r["dtype"]) for r in previous}
    pending = [item for item in items if tuple(item) not in done]
    results = list(previous)
    if out and not resume:
        pathlib.Path(out).write_text("")
    sink = open(out, "a", buffering=1) if out else None
    counts = {}
    total = len(pending)
    started = time.monotonic()

    def record(result):
        finish(result, max_samples)
        results.append(result)
        counts[result["status"]] = counts.get(result["status"], 0) + 1
        if sink:
            sink.write(json.dumps(result) + "\n")
        if progress:
            finished = sum(counts.values())
            summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            print(f"[{finished}/{total} {time.monotonic() - started:.0f}s] {result['op']} "
                  f"{result['dtype']}: {result['status']}  ({summary})", file=sys.stderr,
                  flush=True)

    try:
        while pending:
            if server is None:
                server = _Server(max_samples, script)
            pending = server.run(pending, timeout, record)
            if server.gone:
                server.close()
                server = None
    finally:
        if server is not None:
            server.close()
        if sink:
            sink.close()
    return results


def _at(sample):
    return "before its first sample" if sample is None else f"at sample {sample}"


class _Server:
    """The parent's handle on a fork server (Note [The fork server]). Starting it is retried a
    few times, a minute apart: the package may be in the middle of a reinstall."""

    STARTS = 5

    def __init__(self, max_samples, script=None):
        command = [sys.executable, os.path.abspath(script or __file__), "--server"]
        if max_samples is not None:
            command += ["--max-samples", str(max_samples)]
        for attempt in range(self.STARTS):
            self.log = tempfile.TemporaryFile("w+")
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=self.log)
            self.buffer = b""
            self.gone = False
            message = self._next(None)
            if message is not None and message.get("ready"):
                self.items = message["items"]
                return
            self.close()
            if attempt + 1 < self.STARTS:
                print(f"opinfo_sweep: the server did not start ({self.tail(3)}); retrying in "
                      "60 s", file=sys.stderr, flush=True)
                time.sleep(60)
        raise RuntimeError(f"the sweep server did not start: {self.tail(20)}")

    def tail(self, lines):
        self.log.seek(0)
        text = self.log.read().strip().splitlines()
        return " | ".join(line.strip() for line in text[-lines:])[:1500]

    def crash_site(self):
        """The innermost Python frames faulthandler printed for a fatal signal, or the last
        lines of stderr."""
        self.log.seek(0)
        lines = self.log.read().splitlines()
        for i, line in enumerate(lines):
            if (line.startswith(("Current thread", "Thread 0x"))
                    and "most recent call first" in line):
                frames = [re.sub(r'File "(?:[^"]*/)?([^"/]*)", line (\d+) in (.*)', r"\3 (\1:\2)",
                                 f.strip())
                          for f in lines[i + 1:i + 4] if f.strip().startswith("File")]
                return "innermost: " + " <- ".join(frames)
        return "stderr: " + self.tail(3)

    def _next(self, deadline):
        """The next message; None when the server is gone; "timeout" past `deadline`."""
        while b"\n" not in self.buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.process.stdout], [], [], wait)
            if not ready:
                return "timeout"
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                self.gone = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, items, timeout, record):
        """Runs `items` in one worker until it finishes, dies or times out; returns the items
        not yet recorded."""
        self.log.seek(0)
        self.log.truncate()
        self.process.stdin.write((json.dumps(items) + "\n").encode())
        self.process.stdin.flush()
        remaining = list(items)
        worker, current, began, sample, timed_out = None, None, None, None, False
        while True:
            deadline = None if current is None else began + timeout
            message = self._next(deadline)
            if message == "timeout":
                os.kill(worker, signal.SIGKILL)
                record({"op": current[0], "dtype": current[1], "status": TIMEOUT,
                        "samples": 0 if sample is None else sample + 1, "both_raised": 0,
                        "notes": [], "seconds": timeout,
                        "detail": f"no result within {timeout:.0f} s ({_at(sample)})"})
                remaining, current, timed_out = remaining[1:], None, True
                continue
            if message is None or "exit" in message:  # the worker (or the server) is gone
                code = None if message is None else message["exit"]
                if current is not None:
                    how = "the fork server died" if code is None else (
                        f"signal {-code}" if code < 0 else f"exit code {code}")
                    if code is not None and code < 0:
                        try:
                            how += f" ({signal.Signals(-code).name})"
                        except ValueError:
                            pass
                    record({"op": current[0], "dtype": current[1], "status": DIED,
                            "samples": 0 if sample is None else sample + 1, "both_raised": 0,
                            "notes": [], "seconds": round(time.monotonic() - began, 2),
                            "detail": f"died ({how}) {_at(sample)}; {self.crash_site()}"})
                    remaining = remaining[1:]
                elif remaining and not timed_out and code != 0:
                    raise RuntimeError(f"a sweep worker exited with {code} between items: "
                                       f"{self.tail(20)}")
                return remaining
            if "worker" in message:
                worker = message["worker"]
            elif "sample" in message:
                sample = message["sample"]
            elif "start" in message:
                current, began, sample = message["start"], time.monotonic(), None
                if not remaining or remaining[0] != current:
                    raise RuntimeError(f"a worker started {current}, expected {remaining[:1]}")
            elif "done" not in message:
                record(message)
                remaining, current = remaining[1:], None

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", nargs="+", choices=DTYPE_NAMES, default=list(DTYPE_NAMES))
    parser.add_argument("--ops", nargs="+", help="op keys or fnmatch patterns (default: all)")
    add_sweep_arguments(parser, "(op, dtype)", "(op, dtype)")
    args = parser.parse_args(argv)
    if args.server:
        _server(args.max_samples)
        return 0
    if not args.table_only and pthread_driver_refused("opinfo_sweep"):
        return 2
    if args.table_only:
        results = load_results(args.out)
    else:
        try:
            results = sweep(args.ops, args.dtypes, args.max_samples, args.out, args.resume,
                            args.timeout)
        except ValueError as error:
            parser.error(str(error))
    if args.table:
        rewrite_table(write_table, results, args.table, "opinfo_sweep.py", argv,
                      args.max_samples)
    for dtype, e in summarize(results).items():
        print(f"{dtype}: run {e['run']}, pass {e[PASS]}, fail {e[FAIL]}, expected failure "
              f"{e[XFAIL]}, unexpected pass {e[XPASS]}, died {e[DIED]}, timeout {e[TIMEOUT]}, "
              f"{e['percent']:.1f}% passing", file=sys.stderr)
    bad = any(r["status"] in (FAIL, DIED, TIMEOUT, XPASS) for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
