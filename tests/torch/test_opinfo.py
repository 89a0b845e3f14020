"""The OpInfo conformance sweep in `make test`: every op_db operator and every `_foreach_` operator
(functional and in-place), six dtypes, against the CPU.

Runs tests/torch/conformance/opinfo_sweep.py (in a subprocess, so that op_db's test machinery
stays out of this pytest process) over all operators and float32, float16, bfloat16, complex64,
int64 and bool with at most MAX_SAMPLES samples per (operator, dtype), and asserts: no worker
died, nothing timed out, every failure is in the harness's EXPECTED_FAILURES table or among the
device gaps listed here (KNOWN_DEVICE_GAPS: none today) and no listed item passed, and at least
99% of the operators pass per dtype. A failure message lists each offending (operator, dtype, first line of the error); the full results are a JSON-lines file
under pytest's tmp_path. The full sweep (all samples) is the command that regenerates
design/opinfo.md.

MAX_SAMPLES = 20 keeps the first 20 samples of every item (25,800 of the 70,000 samples op_db
makes; every failure seen so far shows by sample 8): the sweep took 1 min 58 s on one PoCL device
of a 2-core machine with a C++ build running beside it (the full sweep: 3 min 50 s - 5 min).
OCLVM_OPINFO=0 skips it.

The OpInfo entries of the operators with native kernels run again on the native path
(OCLVM_KERNELS=native), every sample, and must all pass.

Also checked here: the harness itself survives an operator that kills its worker and one that
hangs (its fault-injection hook, OCLVM_OPINFO_FAULT).
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

HARNESS = pathlib.Path(__file__).resolve().parent / "conformance" / "opinfo_sweep.py"
MAX_SAMPLES = 20
MIN_PASSING_PERCENT = 99.0
# Device bugs and missing features that the sweep finds and that are not fixed yet. They are
# not expected failures (the harness's EXPECTED_FAILURES holds only comparisons that cannot hold
# for reasons other than the device); they are listed here so that `make test` guards every
# other item, and design/opinfo.md shows them as failures.
KNOWN_DEVICE_GAPS = {}


def known_gap(result):
    return ((result["op"], result["dtype"]) in KNOWN_DEVICE_GAPS
            or (result["op"], "*") in KNOWN_DEVICE_GAPS)

pytestmark = pytest.mark.skipif(os.environ.get("OCLVM_OPINFO") == "0",
                                reason="OCLVM_OPINFO=0: the OpInfo sweep is turned off")

sys.path.insert(0, str(HARNESS.parent))
import opinfo_sweep  # noqa: E402  (stdlib-only at import; torch is imported by its workers)


def run_sweep(out, *arguments, env=None, timeout=1800):
    command = [sys.executable, str(HARNESS), "--out", str(out), *arguments]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                               env=env)
    assert completed.returncode in (0, 1), (  # 1: some item did not pass
        f"{' '.join(command)} exited with {completed.returncode}:\n{completed.stderr[-3000:]}")
    return opinfo_sweep.load_results(out)


def first_line(result):
    text = (result.get("detail") or "").strip()
    return text.splitlines()[0][:240] if text else ""


def test_opinfo_sweep_matches_the_cpu(tmp_path):
    out = tmp_path / "opinfo.jsonl"
    results = run_sweep(out, "--max-samples", str(MAX_SAMPLES))
    assert results, "the sweep produced no results"

    problems = []
    for r in results:
        if known_gap(r):
            if r["status"] == opinfo_sweep.PASS:
                problems.append(f"  {r['op']} [{r['dtype']}] passes: remove it from "
                                "KNOWN_DEVICE_GAPS")
            if r["status"] in (opinfo_sweep.FAIL, opinfo_sweep.PASS):
                continue
        if r["status"] in (opinfo_sweep.FAIL, opinfo_sweep.DIED, opinfo_sweep.TIMEOUT):
            problems.append(f"  {r['op']} [{r['dtype']}] {r['status']}: {first_line(r)}")
        elif r["status"] == opinfo_sweep.XPASS:
            problems.append(f"  {r['op']} [{r['dtype']}] unexpected pass: remove it from "
                            f"EXPECTED_FAILURES ({r['expected_reason'][:80]}...)")
    summary = opinfo_sweep.summarize(results)
    low = [f"  {dtype}: {e['percent']:.2f}% of {e['run']} operators pass"
           for dtype, e in summary.items()
           if e["percent"] < MIN_PASSING_PERCENT]
    message = []
    if problems:
        message += [f"{len(problems)} (operator, dtype) items failed, died, timed out or passed "
                    "unexpectedly (no death, timeout or failure outside EXPECTED_FAILURES is "
                    "allowed):"] + problems
    if low:
        message += ["dtypes under their floor of passing operators:"] + low
    if message:
        message.append(f"results: {out}; reproduce one with: {sys.executable} {HARNESS} "
                       "--ops OP --dtypes DTYPE")
    if message:
        pytest.fail("\n".join(message), pytrace=False)


# The OpInfo entries of the operators that have native kernels (native_kernels.h), swept again on
# the native path (OCLVM_KERNELS=native), every sample: there the device computes them itself.
NATIVE_OPERATORS = ["add", "sub", "mul", "div.no_rounding_mode", "true_divide", "pow",
                    "float_power", "cat", "mm", "bmm", "addmm", "addmm.decomposed", "matmul",
                    "nn.functional.linear", "__rmatmul__", "sum", "sum_to_size",
                    "tanh", "softmax", "_softmax_backward_data", "nn.functional.layer_norm",
                    "native_layer_norm", "where", "isneginf", "all", "tril", "triu", "sqrt",
                    "_foreach_mul_", "_foreach_add_", "_foreach_div_", "_foreach_addcmul_",
                    "_foreach_addcdiv_", "_foreach_lerp_", "_foreach_sqrt", "neg", "rsqrt",
                    "mean", "arange", "log_softmax", "nn.functional.cross_entropy",
                    "torch.ops.aten._safe_softmax.default", "nn.functional.gelu",
                    "nn.functional.silu", "nn.functional.relu", "index_select",
                    "nn.functional.embedding", "nn.functional.nll_loss", "gather", "scatter",
                    "scatter_add", "take_along_dim", "index_add", "eq", "ne", "lt", "le", "gt",
                    "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "minimum", "maximum",
                    "any", "sin", "cos", "exp", "log", "masked_fill", "nn.functional.conv1d",
                    "nn.functional.conv2d", "nn.functional.batch_norm", "native_batch_norm",
                    "nn.functional.group_norm", "native_group_norm",
                    "nn.functional.instance_norm", "nn.functional.scaled_dot_product_attention",
                    "__getitem__", "bernoulli", "normal", "normal.in_place",
                    "normal.number_mean", "uniform", "randn", "rand_like", "randn_like",
                    "randint", "randint_like", "nn.functional.dropout",
                    "nn.functional.dropout2d", "nn.functional.dropout3d",
                    "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
                    "nn.functional.adaptive_avg_pool2d", "max_pool2d_with_indices_backward",
                    "nn.functional.avg_pool1d", "nn.functional.adaptive_avg_pool1d", "to",
                    "float", "half", "double", "bfloat16", "int", "long", "bool", "byte", "char",
                    "short", "amax", "amin", "max.reduction_with_dim", "max.reduction_no_dim",
                    "min.reduction_with_dim", "min.reduction_no_dim", "argmax", "argmin",
                    "abs", "clamp", "clamp_min", "clamp_max", "sigmoid", "var", "var.unbiased",
                    "std", "std.unbiased", "var_mean", "var_mean.unbiased", "std_mean",
                    "std_mean.unbiased", "linalg.vector_norm", "nn.functional.normalize"]


def test_native_operators_match_the_cpu(tmp_path):
    out = tmp_path / "opinfo_native.jsonl"
    env = dict(os.environ, OCLVM_KERNELS="native")
    results = run_sweep(out, "--ops", *NATIVE_OPERATORS, env=env)
    assert {r["op"] for r in results} == set(NATIVE_OPERATORS)
    bad = [f"  {r['op']} [{r['dtype']}] {r['status']}: {first_line(r)}" for r in results
           if r["status"] not in (opinfo_sweep.PASS, opinfo_sweep.XFAIL)]
    if bad:
        pytest.fail("on the native path:\n" + "\n".join(bad), pytrace=False)


def test_harness_survives_a_crash_and_a_hang(tmp_path):
    """An operator that kills its worker is recorded as died (signal 11), one that hangs as a
    timeout, and the operators after them still run."""
    env = dict(os.environ, OCLVM_OPINFO_FAULT="crash:abs,hang:neg")
    results = run_sweep(tmp_path / "faults.jsonl", "--ops", "abs", "neg", "add",
                        "--dtypes", "float32", "int64", "--max-samples", "2",
                        "--timeout", "5", env=env, timeout=300)
    status = {(r["op"], r["dtype"]): (r["status"], r.get("detail", "")) for r in results}
    assert set(status) == {(op, d) for op in ("abs", "neg", "add") for d in ("float32", "int64")}
    for dtype in ("float32", "int64"):
        assert status[("abs", dtype)][0] == opinfo_sweep.DIED
        assert "signal 11" in status[("abs", dtype)][1]
        assert status[("neg", dtype)][0] == opinfo_sweep.TIMEOUT
        assert status[("add", dtype)][0] == opinfo_sweep.PASS, status[("add", dtype)]


def test_resume_skips_finished_items(tmp_path):
    out = tmp_path / "resume.jsonl"
    first = run_sweep(out, "--ops", "add", "--dtypes", "float32", "--max-samples", "1",
                      timeout=300)
    both = run_sweep(out, "--ops", "add", "sub", "--dtypes", "float32", "--max-samples", "1",
                     "--resume", timeout=300)
    assert [(r["op"], r["dtype"]) for r in first] == [("add", "float32")]
    assert [(r["op"], r["dtype"]) for r in both] == [("add", "float32"), ("sub", "float32")]
    assert len(out.read_text().splitlines()) == 2
    json.loads(out.read_text().splitlines()[1])
