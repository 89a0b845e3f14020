"""The direct path of the CPU fallback (adapters/torch/fallback.cc, Note [The direct path of the
fallback]): every device tensor of an operator read in one VM list, written arguments uploaded
back in one, results allocated and uploaded in one each.

What the path must keep of ATen's fallback semantics, each compared with the CPU: in-place and
out= operators return the caller's own device tensor; an out= argument of the wrong size is
resized; strided views written in place keep the elements between theirs; tensor lists (the
optimizers' _foreach_ operators) are read and written back; an operator that raises leaves
nothing held; an argument read and written by the same operator (x.add_(x)) reads its old value.
And on host-addressable devices, functional results written in device memory by the CPU kernel
(Note [Results written in device memory]): counted as every allocation, no temporaries left.
The unboxed host kernels, which skip the fallback, are tested in test_unboxed_kernels.py.
"""
import contextlib
import gc
import warnings

import pytest
import torch

import oclvm

from direct_path_util import DEVICE, needs_host_sections, pair

pytestmark = pytest.mark.usefixtures("nothing_leaks")


def test_in_place_returns_the_callers_tensor():
    x, xd = pair(5, 7)
    y, yd = pair(7)
    returned = xd.add_(yd, alpha=2)
    assert returned is xd
    assert torch.equal(xd.cpu(), x.add_(y, alpha=2))


def test_out_argument_is_written_and_returned():
    a, ad = pair(4, 3)
    b, bd = pair(3)
    out = torch.empty(4, 3, device=DEVICE)
    returned = torch.mul(ad, bd, out=out)
    assert returned is out
    assert torch.equal(out.cpu(), a * b)


def test_out_argument_of_the_wrong_size_is_resized_as_on_the_cpu():
    a, ad = pair(6)
    cpu_out, dev_out = torch.empty(2), torch.empty(2, device=DEVICE)
    with warnings.catch_warnings(record=True) as cpu_warnings:
        warnings.simplefilter("always")
        torch.exp(a, out=cpu_out)
    with warnings.catch_warnings(record=True) as dev_warnings:
        warnings.simplefilter("always")
        torch.exp(ad, out=dev_out)
    assert dev_out.shape == cpu_out.shape == (6,)
    assert torch.equal(dev_out.cpu(), cpu_out)
    assert [str(w.message) for w in dev_warnings] == [str(w.message) for w in cpu_warnings]


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_an_out_argument_the_kernel_restrides_keeps_its_strides(dtype):
    # Note [Out arguments keep the CPU kernel's layout]: linalg_lstsq.out makes its solution a
    # column-major view with gaps; contiguous on the device, later kernels took another route.
    torch.manual_seed(7)
    a, b = torch.randn(5, 3, dtype=dtype), torch.randn(5, 2, dtype=dtype)
    cpu = torch.linalg.lstsq(a, b).solution
    dev = torch.linalg.lstsq(a.to(DEVICE), b.to(DEVICE)).solution
    assert dev.shape == cpu.shape and dev.stride() == cpu.stride() == (1, 5)
    torch.testing.assert_close(dev.cpu(), cpu)
    viewed = torch.empty(0, dtype=dtype, device=DEVICE)
    alias = viewed.view(0)  # a view of the out argument's storage sees the new values
    torch.linalg.lstsq(a.to(DEVICE), b.to(DEVICE), out=(viewed, torch.empty(0, dtype=dtype,
                       device=DEVICE), torch.empty(0, dtype=torch.int64, device=DEVICE),
                       torch.empty(0, dtype=a.real.dtype, device=DEVICE)))
    assert viewed.stride() == cpu.stride()
    torch.testing.assert_close(viewed.cpu(), cpu)
    assert alias.untyped_storage().data_ptr() == viewed.untyped_storage().data_ptr()


def test_a_strided_view_written_in_place_keeps_the_elements_between():
    x, xd = pair(4, 8)
    x[:, ::2].mul_(3)
    xd[:, ::2].mul_(3)
    assert torch.equal(xd.cpu(), x)
    x.t()[1:3].zero_()
    xd.t()[1:3].zero_()
    assert torch.equal(xd.cpu(), x)


def test_an_argument_both_read_and_written():
    x, xd = pair(9)
    assert torch.equal(xd.add_(xd).cpu(), x.add_(x))
    assert torch.equal(torch.mul(xd, xd, out=xd).cpu(), torch.mul(x, x, out=x))


def test_foreach_operators_on_tensor_lists():
    cpu = [torch.randn(n) for n in (3, 5, 8)]
    dev = [t.to(DEVICE) for t in cpu]
    other = [torch.randn(n) for n in (3, 5, 8)]
    other_dev = [t.to(DEVICE) for t in other]
    torch._foreach_add_(cpu, other, alpha=0.5)
    torch._foreach_add_(dev, other_dev, alpha=0.5)
    for c, d in zip(cpu, dev):
        assert torch.equal(d.cpu(), c)
    products = torch._foreach_mul(dev, other_dev)
    assert all(p.device.type == DEVICE for p in products)
    for p, c, o in zip(products, cpu, other):
        assert torch.equal(p.cpu(), c * o)


def test_adam_foreach_step_equals_the_cpu():
    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 3).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, foreach=True)
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.ones(2, 6).to(device)).square().sum().backward()
            optimizer.step()
        return [p.detach().cpu() for p in model.parameters()]
    for got, expected in zip(run(DEVICE), run("cpu")):
        assert torch.equal(got, expected)


def test_an_operator_that_raises_holds_nothing_and_changes_nothing():
    _, ad = pair(3, 4)
    _, bd = pair(5)
    before = ad.cpu()
    gc.collect()
    live = (oclvm._C.live_blocks(), torch.opencl.memory_allocated())
    with pytest.raises(RuntimeError, match="must match the size"):
        ad.add_(bd)
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.add(ad, bd)
    gc.collect()
    assert (oclvm._C.live_blocks(), torch.opencl.memory_allocated()) == live
    assert torch.equal(ad.cpu(), before)


def test_results_of_every_layout_of_result_equal_the_cpu():
    x, xd = pair(3, 4, 5)
    cases = {
        "permuted result": lambda t: t.permute(2, 0, 1).contiguous().permute(1, 2, 0) * 2,
        "channels_last": lambda t: t.reshape(1, 3, 4, 5).contiguous(
            memory_format=torch.channels_last).relu(),
        "expanded": lambda t: t[:, :1].expand(3, 4, 5).clone(),
        "scalar": lambda t: t.sum(),
        "two results": lambda t: torch.sort(t, dim=-1),
    }
    for name, case in cases.items():
        expected, got = case(x), case(xd)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        for e, g in zip(expected, got):
            assert g.device.type == DEVICE, name
            assert g.stride() == e.stride(), name
            assert torch.equal(g.cpu(), e), name


# ---------------------------------------------------------------------------------------------
# Zero-copy operands (fallback.cc, Note [Zero-copy operands]).

ZERO_COPY_PROBE = """
import torch, oclvm
p = torch.opencl.get_device_properties(0)
x = torch.arange(1 << 16, dtype=torch.float32)  # 256 KiB: above the map threshold
y = torch.ones(1 << 16)
xd, yd = x.to("opencl"), y.to("opencl")
xd.add_(yd, alpha=2)
z = torch.mul(xd, yd)
assert torch.equal(xd.cpu(), x + 2) and torch.equal(z.cpu(), x + 2)
print(p.host_unified_memory, p.zero_copy, p.host_sections, oclvm._C.adopted_results() > 0)
"""


@pytest.mark.parametrize("setting, expected", [
    (None, "True True True True"), ("map", "True True False False"),
    ("0", "True False False False")])
def test_zero_copy_is_decided_once_shown_and_can_be_forced_off(setting, expected):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "OCLVM_ZERO_COPY"}
    if setting is not None:
        env["OCLVM_ZERO_COPY"] = setting
    done = subprocess.run([sys.executable, "-c", ZERO_COPY_PROBE], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == expected  # PoCL's CPU devices are host-unified


def test_large_operands_in_place_and_out_of_place_equal_the_cpu():
    torch.manual_seed(5)
    x, y = torch.randn(300, 400), torch.randn(300, 400)  # 480 KB each: mapped when zero-copy
    xd, yd = x.to(DEVICE), y.to(DEVICE)
    xd.mul_(yd).add_(1)
    x.mul_(y).add_(1)
    assert torch.equal(xd.cpu(), x)
    xd.t().sub_(yd.t())  # a transposed view written in place through its mapping
    x.t().sub_(y.t())
    assert torch.equal(xd.cpu(), x)
    assert torch.equal((xd @ yd.t()).cpu(), x @ y.t())
    out = torch.empty(3, device=DEVICE)  # out= of the wrong size: copied, resized
    torch.add(xd, yd, out=out)
    assert torch.equal(out.cpu(), x + y)


def test_a_kernel_that_raises_on_mapped_operands_leaves_nothing_mapped():
    big, bigd = pair(256, 512)
    _, other = pair(3, 512)
    gc.collect()
    live = (oclvm._C.live_blocks(), torch.opencl.memory_allocated())
    for _ in range(3):
        with pytest.raises(RuntimeError, match="must match the size"):
            bigd.add_(other)
    gc.collect()
    assert (oclvm._C.live_blocks(), torch.opencl.memory_allocated()) == live
    assert torch.equal(bigd.cpu(), big)
    bigd.add_(1)  # the blob is not left mapped: the device uses it again
    assert torch.equal(bigd.cpu(), big + 1)



def _in_threads(work, count):
    """Runs work(errors) on `count` threads at once; returns what they appended to errors, and
    any exception one raised."""
    import threading
    errors = []

    def run():
        try:
            work(errors)
        except Exception as e:  # pragma: no cover - reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_two_threads_updating_one_tensor_in_place_never_interleave():
    # Each in-place operator is one host section (or one list pair on the copy path, where the
    # VM orders the lists): two threads adding to one tensor lose no update, as two kernels on one
    # stream lose none. (On the CPU the same loop is a data race.)
    counter = torch.zeros(1 << 14, device=DEVICE)
    step = torch.ones(1 << 14, device=DEVICE)
    rounds = 300

    def work(errors):
        for _ in range(rounds):
            counter.add_(step)
            _ = counter * 2  # a functional operator in between: allocation and release

    errors = _in_threads(work, 3)
    assert not errors, errors
    if torch.opencl.get_device_properties(0).host_sections:
        assert torch.equal(counter.cpu(), torch.full((1 << 14,), 3.0 * rounds))
    else:
        # The copy path reads and writes back in two lists: concurrent writers may lose updates,
        # as the design says; every value is still one the adds produced.
        values = counter.cpu()
        assert float(values.min()) >= rounds and float(values.max()) <= 3 * rounds


def test_an_out_argument_restrided_within_its_bytes_keeps_the_cpus_values_and_layout():
    # The CPU kernel resizes the out= tensor to [32, 64] with the transposed input's strides; the
    # bytes stay the device's, so the device tensor takes that layout (no copy that would have to
    # transpose the bytes onto themselves).
    x = torch.arange(2048.0).reshape(64, 32)
    expected = torch.empty(2048)
    with pytest.warns(UserWarning, match="was resized"):
        torch.add(x.t(), 0, out=expected)
    out = torch.empty(2048, device=DEVICE)
    with pytest.warns(UserWarning, match="was resized"):
        torch.add(x.to(DEVICE).t(), 0, out=out)
    assert torch.equal(out.cpu(), expected)
    assert out.shape == expected.shape


def test_host_aliases_kept_with_their_block_follow_every_change_of_their_tensor():
    # Note [Host aliases kept with their block] (host_view.cc): a block keeps the CPU tensors its
    # operands were handed over as, and the next operator takes one only if it is exactly what
    # would be made. Each step below changes what a kept one would have to be.
    x, xd = pair(6, 4)
    for _ in range(3):  # the tensor, its transpose, both in one call, the same tensor twice
        assert torch.equal((xd @ xd.t()).cpu(), x @ x.t())
        assert torch.equal((xd * xd).cpu(), x * x)
        assert torch.equal(xd.t().sum(0).cpu(), x.t().sum(0))
        assert torch.equal(xd[1:].sub(xd[:-1]).cpu(), x[1:].sub(x[:-1]))
    # requires_grad, on and off over the same bytes (Note [Kernels that ask whether an input
    # requires grad]); and a conjugate view over kept bytes
    w, wd = x.clone().requires_grad_(), xd.clone().requires_grad_()
    for _ in range(2):
        assert torch.equal((wd * 3).detach().cpu(), (w * 3).detach())
        assert torch.equal((wd.detach() * 3).cpu(), w.detach() * 3)
    z = torch.randn(5, dtype=torch.complex64)
    zd = z.to(DEVICE)
    assert torch.equal((zd.conj() * 2).cpu(), z.conj() * 2)
    assert torch.equal((zd * 2).cpu(), z * 2)
    # an out= argument the kernel restrides within its bytes, then read again
    out, expected = torch.empty(24, device=DEVICE), torch.empty(24)
    with pytest.warns(UserWarning, match="was resized"):
        torch.add(xd.t(), 0, out=out)
    with pytest.warns(UserWarning, match="was resized"):
        torch.add(x.t(), 0, out=expected)
    assert torch.equal((out + 1).cpu(), expected + 1)
    # an out= argument the kernel grows (its bytes move to new memory), then read again
    grown, grown_cpu = torch.zeros(2, device=DEVICE), torch.zeros(2)
    with pytest.warns(UserWarning, match="was resized"):
        torch.mul(xd, 2, out=grown)
    with pytest.warns(UserWarning, match="was resized"):
        torch.mul(x, 2, out=grown_cpu)
    assert torch.equal((grown * 1).cpu(), grown_cpu)
    # in place on the same bytes through two views, then read through a third
    xd.t().mul_(2)
    x.t().mul_(2)
    xd[0].add_(1)
    x[0].add_(1)
    assert torch.equal((xd.t() @ xd).cpu(), x.t() @ x)


def test_a_host_alias_kept_in_inference_mode_serves_training_afterwards():
    # Made in inference mode, a host alias is an inference tensor, which may not be made to
    # require grad outside it: a kept one is taken only in the mode it was made in.
    w, wd = pair(4)
    with torch.inference_mode():
        assert torch.equal((wd * 2).cpu(), w * 2)
    wd.requires_grad_()
    w.requires_grad_()
    (wd * 2).sum().backward()
    (w * 2).sum().backward()
    assert torch.equal(wd.grad.cpu(), w.grad)
    assert torch.equal(wd.detach().cpu(), w.detach())
    with torch.inference_mode():
        assert torch.equal((wd * 3).cpu(), w.detach() * 3)


def test_a_host_alias_is_not_taken_for_another_dtype_over_the_same_bytes():
    x, xd = pair(8)
    for _ in range(2):
        assert torch.equal((xd * 1).cpu(), x * 1)
        assert torch.equal((xd.view(torch.int32) + 1).cpu(), x.view(torch.int32) + 1)


def test_threads_reading_one_tensor_at_once_get_the_cpus_results():
    # Kept host aliases are taken only inside a host section and only when nothing else holds
    # them: threads that read the same parameter at once each get the right values.
    x, xd = pair(32, 16)
    expected = [x @ x.t(), x.t() * 2, x.sum(1)]

    def work(errors):
        for _ in range(200):
            got = [xd @ xd.t(), xd.t() * 2, xd.sum(1)]
            for a, b in zip(got, expected):
                if not torch.allclose(a.cpu(), b):
                    errors.append("values differ")

    errors = _in_threads(work, 3)
    assert not errors, errors[:3]


def test_a_list_mixing_the_cpu_and_the_device_is_refused_as_on_cuda():
    # The one-device check of CUDA's cat kernel looks into lists (Note [Device checks as on CUDA]).
    big = torch.ones(20000, device=DEVICE)
    assert torch.cat([big, big]).device.type == "opencl"
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.cat([torch.zeros(20000), big])


# ---------------------------------------------------------------------------------------------
# Results written in device memory (host_results.cc, Note [Results written in device memory]).

@needs_host_sections
def test_functional_results_are_written_in_device_memory_and_equal_the_cpu():
    x, xd = pair(64, 32)
    w, wd = pair(16, 32)
    big, big_d = pair(512, 128)  # 256 KiB
    cases = {  # name: (one operator, the number of its results)
        "mul": (lambda a, b, c: a * 1.5, 1),
        "mm": (lambda a, b, c: a @ b.t(), 1),
        "softmax": (lambda a, b, c: torch.softmax(a, dim=1), 1),
        "sort": (lambda a, b, c: torch.sort(a, dim=0), 2),
        "foreach": (lambda a, b, c: torch._foreach_mul([a, b], 3.0), 2),
        "large": (lambda a, b, c: torch.exp(c), 1),
    }
    for name, (case, results) in cases.items():
        expected = case(x, w, big)
        before = oclvm._C.adopted_results()
        got = case(xd, wd, big_d)
        assert oclvm._C.adopted_results() - before == results, name
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        got = got if isinstance(got, (tuple, list)) else (got,)
        for e, g in zip(expected, got):
            assert g.device.type == DEVICE and g.stride() == e.stride(), name
            torch.testing.assert_close(g.cpu(), e, rtol=1e-6, atol=1e-6, msg=name)


@needs_host_sections
def test_an_adopted_result_is_a_device_tensor_in_every_respect():
    # The CPU kernel's own TensorImpl and StorageImpl become the device tensor (Note [Adopting a
    # result in place] in host_results.cc): its keys, storage, allocator and autograd must be a
    # device tensor's, in and out of inference mode.
    _, xd = pair(64, 32)
    for mode in (contextlib.nullcontext, torch.inference_mode):
        with mode():
            before = oclvm._C.adopted_results()
            result = xd * 2
            assert oclvm._C.adopted_results() - before == 1
            fresh = torch.empty(64, 32, device=DEVICE)
            assert torch._C._dispatch_keys(result) == torch._C._dispatch_keys(fresh)
            assert result.is_inference() == fresh.is_inference()
            assert result.device == xd.device and result.untyped_storage().device == xd.device
            gc.collect()
            allocated = torch.opencl.memory_allocated()
            result.resize_(128, 32)  # grows through the device allocator: a new device block
            assert result.device == xd.device
            assert torch.opencl.memory_allocated() - allocated == 128 * 32 * 4 - 64 * 32 * 4
            torch.testing.assert_close(result[:64].cpu(), xd.cpu() * 2)
            del result, fresh
    leaf = xd.clone().requires_grad_()
    (leaf.relu() * 3).sum().backward()
    assert leaf.grad.device == xd.device
    torch.testing.assert_close(leaf.grad.cpu(), (xd.cpu() > 0).float() * 3)


@needs_host_sections
def test_a_kernel_that_returns_one_result_twice_gives_two_equal_device_tensors():
    # The first is adopted (a new device tensor, since the TensorImpl has two holders); the
    # second is copied from the block. The copy used to read through a null pointer (segfault).
    lib = torch.library.Library("oclvm_test_twice", "DEF")
    lib.define("twice(Tensor x) -> (Tensor, Tensor)")

    def twice(x):
        doubled = x * 2
        return doubled, doubled
    lib.impl("twice", twice, "CPU")
    x = torch.arange(6.0)
    before = oclvm._C.adopted_results()
    first, second = torch.ops.oclvm_test_twice.twice(x.to(DEVICE))
    assert oclvm._C.adopted_results() - before == 1
    assert first.device.type == DEVICE and second.device.type == DEVICE
    torch.testing.assert_close(first.cpu(), x * 2)
    torch.testing.assert_close(second.cpu(), x * 2)


@needs_host_sections
def test_results_in_device_memory_are_counted_as_every_allocation_and_leave_no_temporaries():
    _, xd = pair(256, 64)
    gc.collect()
    before = torch.opencl.memory_allocated()
    values, indices = torch.sort(xd, dim=1)  # the CPU kernel allocates temporaries too
    with_results = torch.opencl.memory_allocated() - before
    del values, indices
    gc.collect()
    assert torch.opencl.memory_allocated() == before
    same_sizes = (torch.empty(256, 64, device=DEVICE),
                  torch.empty(256, 64, dtype=torch.int64, device=DEVICE))
    assert with_results == torch.opencl.memory_allocated() - before
    del same_sizes


@needs_host_sections
def test_a_kernel_that_raises_after_allocating_leaves_nothing_behind():
    not_positive_definite = -torch.eye(8, device=DEVICE)
    gc.collect()
    live = (oclvm._C.live_blocks(), torch.opencl.memory_allocated())
    with pytest.raises(RuntimeError, match="positive-definite"):
        torch.linalg.cholesky(not_positive_definite)
    gc.collect()
    assert (oclvm._C.live_blocks(), torch.opencl.memory_allocated()) == live


def test_cpu_operators_keep_host_memory():
    before = oclvm._C.adopted_results()
    x = torch.ones(1000) * 2
    assert x.device.type == "cpu" and torch.equal(x, torch.full((1000,), 2.0))
    assert oclvm._C.adopted_results() == before
