"""torch.compile on the `opencl` device with Inductor's default backend (oclvm/_inductor.py).

Inductor generates the CPU's C++ kernels for the device and its wrapper runs them on device
memory in host sections. Checked against the CPU: compiled forward and backward of the model
families (GPT-2, BERT, the channels-last CNN, the MLP) equal eager on the CPU within Inductor's
float32 tolerances; fused kernels really run (oclvm._inductor.calls counts them); dynamic shapes,
views with an offset, random numbers, subgraphs, two devices, max-autotune and reduce-overhead;
recompilation as on the CPU; compiled buffers in the caching allocator's statistics; a kernel's
own error raised, not fatal; and devices without host addresses, where a frame runs eagerly with
one warning.

Where the device has no host addresses (the make-test pass with OCLVM_ZERO_COPY=0), every
compiled frame runs eagerly: the results must still equal the CPU's, and no kernel runs.
"""
import copy
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch._dynamo
import torch._inductor.config
from torch.testing import assert_close

import oclvm

from test_model_families import BERT, CNN, GPT2, MLP

DEV = "opencl"
HOST_SECTIONS = torch.opencl.get_device_properties(0).host_sections
# Inductor's own float32 tolerances for compiled against eager (torch/_inductor's test harness).
INDUCTOR = dict(rtol=1e-4, atol=1e-5)

pytestmark = pytest.mark.usefixtures("nothing_leaks")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    with warnings.catch_warnings():
        # The frame-runs-eagerly warning of devices without host addresses, once per device.
        warnings.filterwarnings("ignore", message="torch.compile: opencl")
        yield
    torch._dynamo.reset()


def kernel_calls() -> int:
    import oclvm._inductor
    return oclvm._inductor.calls


def check_kernels_ran(before: int) -> None:
    """Fused kernels ran on the device where it has host addresses; none where it has none."""
    if HOST_SECTIONS:
        assert kernel_calls() > before
    else:
        assert "oclvm._inductor" not in sys.modules or kernel_calls() == before


def test_pointwise_and_reduction_equal_eager_on_cpu():
    def f(x, y):
        return (torch.relu(x) * y.cos()).sum(dim=1) + x.amax()

    x, y = torch.randn(8, 33), torch.randn(8, 33)
    compiled = torch.compile(f)
    before = kernel_calls() if "oclvm._inductor" in sys.modules else 0
    got = compiled(x.to(DEV), y.to(DEV))
    assert got.device.type == DEV
    assert_close(got.cpu(), f(x, y), **INDUCTOR)
    check_kernels_ran(before)


def test_dynamic_shapes_and_views_with_an_offset():
    def f(x):
        return torch.nn.functional.gelu(x) * 2 + x.mean()

    compiled = torch.compile(f, dynamic=True)
    for rows in (5, 9, 17):
        x = torch.randn(rows, 7)
        assert_close(compiled(x.to(DEV)).cpu(), f(x), **INDUCTOR)
    base = torch.randn(10, 7)
    assert_close(compiled(base.to(DEV)[3:]).cpu(), f(base[3:]), **INDUCTOR)  # storage offset 21


def test_in_place_update_of_an_input():
    def f(x, y):
        x.mul_(2).add_(y)
        return x.sum()

    x, y = torch.randn(6, 4), torch.randn(6, 4)
    dx = x.to(DEV)
    total = torch.compile(f)(dx, y.to(DEV))
    expected = f(x, y)
    assert_close(total.cpu(), expected, **INDUCTOR)
    assert_close(dx.cpu(), x, **INDUCTOR)


def test_random_numbers_repeat_under_a_seed():
    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x)

    compiled = torch.compile(f)
    x = torch.ones(64, 64, device=DEV)
    torch.manual_seed(3)
    first = compiled(x).cpu()
    torch.manual_seed(3)
    second = compiled(x).cpu()
    assert torch.equal(first, second)
    kept = (first >= 2).float().mean().item()  # kept elements are 2 + rand, dropped ones rand
    assert 0.4 < kept < 0.6


def test_cond_subgraphs():
    def f(flag, x):
        return torch.cond(flag, lambda v: v.sin() * 2, lambda v: v.cos() + 1, (x,))

    x = torch.randn(5, 3)
    compiled = torch.compile(f)
    if not HOST_SECTIONS:
        # A frame with subgraphs is lowered inside Inductor's own error handling, so the
        # device's refusal arrives as an error that names the backend to use instead.
        with pytest.raises(Exception, match="aot_eager"):
            compiled(torch.tensor(True), x.to(DEV))
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="aot_eager")
    for flag in (True, False):
        assert_close(compiled(torch.tensor(flag), x.to(DEV)).cpu(), f(torch.tensor(flag), x),
                     **INDUCTOR)


def compiled_training_step_matches_cpu(family, tolerance):
    """One forward and backward of `family`'s model compiled on the device against the same step
    in eager mode on the CPU: loss and every gradient within `tolerance`."""
    cpu = family.build()
    dev = family.build().to(DEV)
    batch = family.batches(1)[0]
    from model_families_util import to_device
    torch.manual_seed(0)
    expected = family.loss(cpu, batch)
    expected.backward()
    before = kernel_calls() if "oclvm._inductor" in sys.modules else 0
    compiled = torch.compile(dev)
    torch.manual_seed(0)
    # Eager's random numbers (dropout), not Inductor's own generator: as Inductor's tests
    # compare compiled with eager.
    with torch._inductor.config.patch(fallback_random=True):
        got = family.loss(compiled, to_device(batch, DEV))
        got.backward()
    assert_close(got.cpu(), expected.detach(), **tolerance)
    for (name, p), (_, q) in zip(cpu.named_parameters(), dev.named_parameters()):
        if p.grad is None:
            assert q.grad is None, name
            continue
        assert_close(q.grad.cpu(), p.grad, **tolerance, msg=lambda m: f"{name}: {m}")
    check_kernels_ran(before)


@pytest.mark.parametrize("family", [MLP, CNN], ids=lambda f: f.name)
def test_compiled_training_step_equals_eager_on_cpu(family):
    compiled_training_step_matches_cpu(family, INDUCTOR)


@pytest.mark.parametrize("family", [GPT2, BERT], ids=lambda f: f.name)
def test_compiled_transformer_step_equals_eager_on_cpu(family):
    # Inductor fuses softmax and layer norm in its own order of summation: the transformers'
    # gradients differ from eager by a few float32 ulps of their largest terms.
    compiled_training_step_matches_cpu(family, dict(rtol=1e-3, atol=1e-4))


def test_recompiles_as_on_the_cpu():
    """The same calls compile the same number of graphs on the device as on the CPU: shapes that
    change once mark a dimension dynamic, a new dtype recompiles, a repeated call compiles
    nothing."""
    if not HOST_SECTIONS:
        pytest.skip("the device's frames run eagerly: it compiles no graph")
    def f(x):
        return x * 2 + 1

    def graphs(device):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        compiled = torch.compile(f)
        for shape, dtype in [((4,), torch.float32), ((4,), torch.float32), ((6,), torch.float32),
                             ((9,), torch.float32), ((9,), torch.float64)]:
            compiled(torch.ones(shape, dtype=dtype, device=device))
        return dict(torch._dynamo.utils.counters["stats"])

    assert graphs(DEV) == graphs("cpu")


def test_compiled_buffers_come_from_the_caching_allocator():
    def f(x):
        y = x.exp()  # an intermediate buffer the wrapper allocates, then mm's output
        return (y @ y).relu()

    compiled = torch.compile(f)
    x = torch.randn(16, 16, device=DEV)
    compiled(x)  # compile
    before = torch.opencl.memory_stats()["allocation.all.allocated"]
    got = compiled(x)
    allocations = torch.opencl.memory_stats()["allocation.all.allocated"] - before
    assert allocations >= 2  # the buffer between the kernels and the result, at least
    assert_close(got.cpu(), f(x.cpu()), **INDUCTOR)


def test_kernel_errors_are_raised_not_fatal():
    def f(x, i):
        return x[i] + 1

    x, i = torch.randn(4), torch.tensor([0, 9])
    compiled = torch.compile(f)
    with pytest.raises(Exception) as on_cpu:
        compiled(x, i)
    torch._dynamo.reset()
    with pytest.raises(Exception) as on_device:
        compiled(x.to(DEV), i.to(DEV))
    assert "out of bounds" in str(on_cpu.value)
    assert "out of bounds" in str(on_device.value)
    assert_close(compiled(x.to(DEV), torch.tensor([1, 3], device=DEV)).cpu(), x[[1, 3]] + 1)


def test_modes():
    """reduce-overhead (CUDA graphs: skipped off CUDA, as on the CPU) and max-autotune (the ATen
    choices of addmm timed on the device) give the CPU's results."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    expected = model(x)
    dev = copy.deepcopy(model).to(DEV)
    for mode in ("reduce-overhead", "max-autotune"):
        torch._dynamo.reset()
        assert_close(torch.compile(dev, mode=mode)(x.to(DEV)).cpu(), expected, **INDUCTOR)


def test_cpp_wrapper_is_refused_with_a_reason():
    if not HOST_SECTIONS:
        pytest.skip("the frame runs eagerly before a wrapper is chosen")
    compiled = torch.compile(lambda x: x.sin() + 1, options={"cpp_wrapper": True})
    with pytest.raises(Exception, match="cpp_wrapper"):
        compiled(torch.randn(4, device=DEV))


@pytest.mark.two_devices
def test_second_device():
    def f(x, y):
        return (x * y).softmax(dim=-1)

    x, y = torch.randn(6, 10), torch.randn(6, 10)
    got = torch.compile(f)(x.to(f"{DEV}:1"), y.to(f"{DEV}:1"))
    assert got.device == torch.device(DEV, 1)
    assert_close(got.cpu(), f(x, y), **INDUCTOR)


def test_device_without_host_addresses_runs_eagerly_with_one_warning():
    """OCLVM_ZERO_COPY=0: no device memory has a host address. Each frame runs eagerly, equal to
    the CPU, with one warning per device that says what to use instead."""
    script = textwrap.dedent("""
        import warnings
        import torch
        import oclvm
        assert not torch.opencl.get_device_properties(0).host_sections
        def f(x):
            return x.sin() * 2 + x.sum()
        x = torch.randn(32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = torch.compile(f)
            for _ in range(3):
                got = compiled(x.to("opencl"))
        torch.testing.assert_close(got.cpu(), f(x))
        ours = [str(w.message) for w in caught if "has no host addresses" in str(w.message)]
        assert len(ours) == 1, ours
        assert "aot_eager" in ours[0], ours[0]
        import oclvm._inductor
        assert oclvm._inductor.calls == 0
        print("ok")
    """)
    env = dict(os.environ, OCLVM_ZERO_COPY="0")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().endswith("ok")
