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
"""
import contextlib
import gc
import warnings

import pytest
import torch

import oclvm

DEVICE = "opencl"
pytestmark = pytest.mark.usefixtures("nothing_leaks")


def _pair(*shape):
    torch.manual_seed(sum(shape))
    x = torch.randn(*shape)
    return x, x.to(DEVICE)


def test_in_place_returns_the_callers_tensor():
    x, xd = _pair(5, 7)
    y, yd = _pair(7)
    returned = xd.add_(yd, alpha=2)
    assert returned is xd
    assert torch.equal(xd.cpu(), x.add_(y, alpha=2))


def test_out_argument_is_written_and_returned():
    a, ad = _pair(4, 3)
    b, bd = _pair(3)
    out = torch.empty(4, 3, device=DEVICE)
    returned = torch.mul(ad, bd, out=out)
    assert returned is out
    assert torch.equal(out.cpu(), a * b)


def test_out_argument_of_the_wrong_size_is_resized_as_on_the_cpu():
    a, ad = _pair(6)
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
    x, xd = _pair(4, 8)
    x[:, ::2].mul_(3)
    xd[:, ::2].mul_(3)
    assert torch.equal(xd.cpu(), x)
    x.t()[1:3].zero_()
    xd.t()[1:3].zero_()
    assert torch.equal(xd.cpu(), x)


def test_an_argument_both_read_and_written():
    x, xd = _pair(9)
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
    _, ad = _pair(3, 4)
    _, bd = _pair(5)
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
    x, xd = _pair(3, 4, 5)
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
    big, bigd = _pair(256, 512)
    _, other = _pair(3, 512)
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
    x, xd = _pair(6, 4)
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
    w, wd = _pair(4)
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
    x, xd = _pair(8)
    for _ in range(2):
        assert torch.equal((xd * 1).cpu(), x * 1)
        assert torch.equal((xd.view(torch.int32) + 1).cpu(), x.view(torch.int32) + 1)


def test_threads_reading_one_tensor_at_once_get_the_cpus_results():
    # Kept host aliases are taken only inside a host section and only when nothing else holds
    # them: threads that read the same parameter at once each get the right values.
    x, xd = _pair(32, 16)
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

needs_host_sections = pytest.mark.skipif(
    not torch.opencl.get_device_properties(0).host_sections,
    reason="the device's memory has no host address here (OCLVM_ZERO_COPY set)")


@needs_host_sections
def test_functional_results_are_written_in_device_memory_and_equal_the_cpu():
    x, xd = _pair(64, 32)
    w, wd = _pair(16, 32)
    big, big_d = _pair(512, 128)  # 256 KiB
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
    _, xd = _pair(64, 32)
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
    _, xd = _pair(256, 64)
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


# ---------------------------------------------------------------------------------------------
# Unboxed host kernels (host_kernels.cc, Note [Unboxed host kernels]).

def _unboxed_calls():
    return oclvm._C.host_kernel_calls()


@needs_host_sections
def test_hot_operators_take_the_unboxed_kernels_and_equal_the_cpu_exactly():
    x, xd = _pair(64, 32)
    y, yd = _pair(64, 33)
    y, yd = y[:, :32], yd[:, :32]  # a view: strided, its span compact
    w, wd = _pair(16, 32)
    bias, bias_d = _pair(16)
    batch, batch_d = _pair(3, 8, 8)
    functional = torch.nn.functional
    cases = {
        "add": lambda x, y, w, b, m: x + y,
        "sub with alpha": lambda x, y, w, b, m: torch.sub(x, y, alpha=2),
        "mul by a cpu scalar tensor": lambda x, y, w, b, m: x * torch.tensor(1.5),
        "div": lambda x, y, w, b, m: x / (y.abs() + 1),
        "mm": lambda x, y, w, b, m: x @ w.t(),
        "addmm": lambda x, y, w, b, m: torch.addmm(b, x, w.t()),
        "bmm": lambda x, y, w, b, m: torch.bmm(m, m),
        "relu": lambda x, y, w, b, m: torch.relu(x),
        "gelu tanh": lambda x, y, w, b, m: functional.gelu(x, approximate="tanh"),
        "tanh": lambda x, y, w, b, m: torch.tanh(x),
        "sigmoid": lambda x, y, w, b, m: torch.sigmoid(x),
        "log_softmax": lambda x, y, w, b, m: torch.log_softmax(x, dim=1),
        "softmax": lambda x, y, w, b, m: torch.softmax(x, dim=0),
        "sum over a dim": lambda x, y, w, b, m: x.sum(dim=1, keepdim=True),
        "sum to a dtype": lambda x, y, w, b, m: x.sum(dim=0, dtype=torch.float64),
    }
    for name, case in cases.items():
        expected = case(x, y, w, bias, batch)
        before = _unboxed_calls()
        got = case(xd, yd, wd, bias_d, batch_d)
        assert _unboxed_calls() - before >= 1, name
        assert got.device.type == DEVICE and got.dtype == expected.dtype, name
        assert got.shape == expected.shape and got.stride() == expected.stride(), name
        assert torch.equal(got.cpu(), expected), name


@needs_host_sections
def test_backward_operators_take_the_unboxed_kernels_and_equal_the_cpu():
    x, xd = _pair(32, 16)
    grads = {}
    for device, t in (("cpu", x), (DEVICE, xd)):
        leaf = t.clone().requires_grad_(True)
        before = _unboxed_calls()
        loss = (torch.relu(leaf) + torch.tanh(leaf) + torch.sigmoid(leaf)).log_softmax(dim=1).sum()
        loss.backward()
        grads[device] = (leaf.grad.cpu(), _unboxed_calls() - before)
    assert torch.equal(grads[DEVICE][0], grads["cpu"][0])
    # relu, tanh, sigmoid, 2 adds, log_softmax, sum and the backward of each activation.
    assert grads[DEVICE][1] >= 10


@needs_host_sections
def test_unboxed_kernels_leave_what_they_cannot_take_to_the_fallback():
    x, xd = _pair(64, 64)
    before = _unboxed_calls()
    sparse_columns = xd[:, ::16]  # a view whose span is 16 times its elements: not aliased
    assert torch.equal((sparse_columns + 1).cpu(), x[:, ::16] + 1)
    empty = torch.empty(0, 3, device=DEVICE)
    assert (empty + empty).shape == (0, 3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        xd + torch.ones(64, 64)
    with pytest.raises(RuntimeError):
        torch.mm(xd, torch.ones(3, 3, device=DEVICE))  # a shape error: nothing leaked
    assert _unboxed_calls() - before <= 1  # only the shape error got as far as the CPU kernel


@needs_host_sections
def test_unboxed_kernels_with_optional_tensors_and_several_results_equal_the_cpu():
    """nll_loss (an optional weight, two results) and native_layer_norm (optional weight and
    bias, three results; its backward with an output mask) through the unboxed kernels."""
    x, xd = _pair(16, 10)
    target = torch.randint(0, 10, (16,))
    class_weight, class_weight_d = _pair(10)
    norm_weight, norm_weight_d = _pair(10)
    results = {}
    for device, (inp, cw, nw) in (("cpu", (x, class_weight, norm_weight)),
                                  (DEVICE, (xd, class_weight_d, norm_weight_d))):
        leaf = inp.clone().requires_grad_(True)
        weight = nw.clone().requires_grad_(True)
        before = _unboxed_calls()
        normed = torch.nn.functional.layer_norm(leaf, (10,), weight=weight)
        plain = torch.nn.functional.layer_norm(leaf, (10,))  # no weight, no bias: None arguments
        loss = (torch.nn.functional.cross_entropy(normed, target.to(device), weight=cw)
                + torch.nn.functional.cross_entropy(plain, target.to(device)))
        loss.backward()
        results[device] = (loss.detach().cpu(), leaf.grad.cpu(), weight.grad.cpu(),
                           _unboxed_calls() - before)
    for got, expected in zip(results[DEVICE][:3], results["cpu"][:3]):
        assert torch.equal(got, expected)
    # Two layer norms, two nll_loss forwards and backwards, two layer-norm backwards at least.
    assert results[DEVICE][3] >= 8


@needs_host_sections
def test_in_place_arithmetic_takes_the_unboxed_kernels_and_equals_the_cpu():
    """add_, sub_, mul_ and div_ of a tensor or a Python number (Note [In-place operators without
    boxing]): the caller's own tensor, bumped once, the CPU's bits, one unboxed call each; and
    what the fast path leaves alone gives the CPU's answer."""
    cases = {
        "add_ alpha": lambda x, y: x.add_(y, alpha=-0.1),
        "sub_": lambda x, y: x.sub_(y),
        "mul_ broadcast": lambda x, y: x.mul_(y[0]),
        "div_": lambda x, y: x.div_(y.abs() + 1),
        "mul_ a number": lambda x, y: x.mul_(0.9),
        "add_ itself": lambda x, y: x.add_(x),
    }
    for name, case in cases.items():
        x, xd = _pair(6, 5)
        y = torch.randn(6, 5, generator=torch.Generator().manual_seed(21))
        yd = y.to(DEVICE)
        version, ptr = xd._version, xd.data_ptr()
        expected = case(x, y)
        before = _unboxed_calls()
        got = case(xd, yd)
        assert _unboxed_calls() - before >= 1, name
        assert got is xd and xd.data_ptr() == ptr and xd._version == version + 1, name
        assert torch.equal(xd.cpu(), expected), name
    # Left to the boxed fallback, with the CPU's answers: a CPU scalar written in place, integers
    # given a float, shapes that do not broadcast into self.
    outcomes = {}
    for device in ("cpu", DEVICE):
        answers = []
        for case in (lambda: torch.tensor(2.0).add_(torch.ones((), device=device)),
                     lambda: torch.arange(4, device=device).add_(0.5),
                     lambda: torch.ones(3, device=device).mul_(torch.ones(2, 3, device=device))):
            try:
                answers.append(case().cpu())
            except RuntimeError as error:
                answers.append(str(error).split("\n")[0])
        outcomes[device] = answers
    for got, expected in zip(outcomes[DEVICE], outcomes["cpu"]):
        assert got == expected if isinstance(expected, str) else torch.equal(got, expected)


# ---------------------------------------------------------------------------------------------
# Unboxed _foreach_ kernels (host_kernels.cc, Note [Foreach operators without boxing]).

def _lists(seed, sizes=((3, 4), (5,), (2, 2))):
    torch.manual_seed(seed)
    cpu = [torch.randn(*s) for s in sizes]
    return cpu, [t.to(DEVICE) for t in cpu]


@needs_host_sections
def test_the_optimizers_foreach_operators_take_the_unboxed_kernels_and_equal_the_cpu():
    """Each _foreach_ operator SGD, Adam and AdamW call, in place on the device lists, against
    the same on the CPU: equal bits, the caller's own tensors, one unboxed call each."""
    cases = {
        "add_ a list, alpha": lambda a, b, c: torch._foreach_add_(a, b, alpha=0.5),
        "add_ a scalar": lambda a, b, c: torch._foreach_add_(a, 2.0),
        "mul_ a scalar": lambda a, b, c: torch._foreach_mul_(a, 0.9),
        "mul_ a list": lambda a, b, c: torch._foreach_mul_(a, b),
        "div_ a scalar": lambda a, b, c: torch._foreach_div_(a, 3.0),
        "div_ scalars": lambda a, b, c: torch._foreach_div_(a, [1.0, 2.0, 3.0]),
        "lerp_": lambda a, b, c: torch._foreach_lerp_(a, b, 0.1),
        "addcmul_": lambda a, b, c: torch._foreach_addcmul_(a, b, c, value=0.3),
        "addcdiv_ a scalar": lambda a, b, c: torch._foreach_addcdiv_(a, b, c, value=0.3),
        "addcdiv_ scalars": lambda a, b, c: torch._foreach_addcdiv_(a, b, c, [0.1, 0.2, 0.3]),
        "maximum_": lambda a, b, c: torch._foreach_maximum_(a, b),
    }
    for name, case in cases.items():
        (a, ad), (b, bd), (c, cd) = _lists(1), _lists(2), _lists(3)
        c, cd = [t.abs() + 1 for t in c], [t.abs() + 1 for t in cd]  # divisors
        ptrs = [t.data_ptr() for t in ad]
        case(a, b, c)
        before = _unboxed_calls()
        case(ad, bd, cd)
        assert _unboxed_calls() - before == 1, name
        assert [t.data_ptr() for t in ad] == ptrs, name
        for got, expected in zip(ad, a):
            assert torch.equal(got.cpu(), expected), name


@needs_host_sections
def test_functional_foreach_kernels_write_their_results_in_device_memory():
    (a, ad), (b, bd) = _lists(4), _lists(5)
    allocated = torch.opencl.memory_allocated()  # _foreach_sqrt, _foreach_add, _foreach_norm
    for op, args, dev_args in ((torch._foreach_sqrt, ([t.abs() for t in a],),
                                ([t.abs() for t in ad],)),
                               (torch._foreach_add, (a, b), (ad, bd)),
                               (torch._foreach_norm, (a,), (ad,))):
        before, adopted = _unboxed_calls(), oclvm._C.adopted_results()
        got = op(*dev_args)
        assert _unboxed_calls() - before == 1, op
        assert oclvm._C.adopted_results() - adopted == 3, op  # every result: no copies
        expected = op(*args)
        assert all(g.device.type == DEVICE and torch.equal(g.cpu(), e)
                   for g, e in zip(got, expected)), op
        del got
    gc.collect()
    assert torch.opencl.memory_allocated() == allocated


@needs_host_sections
def test_foreach_kernels_alias_a_tensor_named_twice_as_the_cpu_does():
    (a, ad), (b, bd) = _lists(6), _lists(7)
    torch._foreach_add_([a[0], a[0]], [b[0], a[0]])
    before = _unboxed_calls()
    torch._foreach_add_([ad[0], ad[0]], [bd[0], ad[0]])
    assert _unboxed_calls() - before == 1
    assert torch.equal(ad[0].cpu(), a[0])
    # The scale as a device scalar tensor (clip_grad_norm_'s coefficient), then as a CPU one.
    for scale in (torch.tensor(0.5, device=DEVICE), torch.tensor(0.25)):
        torch._foreach_mul_(a, scale.cpu())
        before = _unboxed_calls()
        torch._foreach_mul_(ad, scale)
        assert _unboxed_calls() - before == 1
        for got, expected in zip(ad, a):
            assert torch.equal(got.cpu(), expected)


@needs_host_sections
def test_foreach_kernels_leave_bad_and_unusual_lists_to_the_fallback():
    (a, ad), (b, bd) = _lists(8), _lists(9)
    snapshot = [t.cpu() for t in ad]
    stats = torch.opencl.memory_stats()
    # Lists of two lengths: refused (by torch's autograd layer, before any kernel of the device),
    # with nothing written or held, and the next operator runs.
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_(ad, bd[:2])
    for got, expected in zip(ad, snapshot):
        assert torch.equal(got.cpu(), expected)  # nothing written
    assert torch.opencl.memory_stats()["allocated_bytes.all.current"] == \
        stats["allocated_bytes.all.current"]
    torch._foreach_add_(ad, 1.0)
    for got, expected in zip(ad, snapshot):
        assert torch.equal(got.cpu(), expected + 1.0)
    # Empty tensors and scattered views take the boxed fallback, with the CPU's results (the
    # device's own add_ loop, which takes an empty tensor, is not asked: the list is of halves).
    before = _unboxed_calls()
    columns = [torch.randn(8, 64)]
    columns_d = [columns[0].to(DEVICE)]
    torch._foreach_add_([columns[0][:, ::16]], 1.0)
    torch._foreach_add_([columns_d[0][:, ::16]], 1.0)
    assert torch.equal(columns_d[0].cpu(), columns[0])
    empty = [torch.empty(0, device=DEVICE, dtype=torch.half)]
    torch._foreach_add_(empty, 1.0)
    assert _unboxed_calls() == before


# The device's own loops for SGD's operators (foreach_loops.cc, Note [Fused foreach loops]).

def _fused_calls():
    return oclvm._C.fused_foreach_calls()


@needs_host_sections
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sgds_foreach_operators_run_the_devices_loops_and_equal_the_cpu_bit_for_bit(dtype):
    """Lengths that end inside and on a vector, one past the intra-op grain (split over the
    threads), an empty tensor; alphas and scalars of every kind the loops take."""
    torch.manual_seed(11)
    sizes = [(1,), (7,), (3, 11), (64, 32), (40000,), (0,)]
    cases = {
        "add_ a list, alpha -0.1": lambda a, b: torch._foreach_add_(a, b, alpha=-0.1),
        "add_ a list, alpha 1": lambda a, b: torch._foreach_add_(a, b),
        "add_ a list, integer alpha": lambda a, b: torch._foreach_add_(a, b, alpha=3),
        "add_ a scalar": lambda a, b: torch._foreach_add_(a, 1e-8),
        "add_ an integer": lambda a, b: torch._foreach_add_(a, -2),
        "mul_ a scalar": lambda a, b: torch._foreach_mul_(a, 0.9),
        "mul_ an integer": lambda a, b: torch._foreach_mul_(a, 3),
        "mul_ by infinity": lambda a, b: torch._foreach_mul_(a, float("inf")),
    }
    for name, case in cases.items():
        a = [torch.randn(s, dtype=dtype) for s in sizes]
        b = [torch.randn(s, dtype=dtype) for s in sizes]
        ad, bd = [t.to(DEVICE) for t in a], [t.to(DEVICE) for t in b]
        ptrs = [t.data_ptr() for t in ad]
        case(a, b)
        before = _fused_calls()
        case(ad, bd)
        assert _fused_calls() - before == 1, name
        assert [t.data_ptr() for t in ad] == ptrs, name
        for got, expected in zip(ad, a):
            assert torch.equal(got.cpu(), expected), name
        for got, expected in zip(bd, b):
            assert torch.equal(got.cpu(), expected), name  # read, not written


@needs_host_sections
def test_sgd_with_momentum_steps_on_the_devices_loops_as_the_cpu_steps():
    """torch's foreach SGD on the device (its default there) against the CPU's per-tensor SGD
    (its default): the same parameters, bit for bit, after each step."""
    def steps(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                                    weight_decay=1e-4)
        x, y = torch.randn(64, 32).to(device), torch.randint(0, 4, (64,)).to(device)
        for _ in range(4):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            yield [p.detach().cpu() for p in model.parameters()]
    before = _fused_calls()
    for got, expected in zip(steps(DEVICE), steps("cpu")):
        for g, e in zip(got, expected):
            assert torch.equal(g, e)
    assert _fused_calls() - before >= 8  # two add_ a step at least, after the first


@needs_host_sections
def test_what_the_devices_loops_do_not_take_runs_as_before_with_the_cpus_answer():
    """Each list or value the loops leave alone: the result, or the error, is the CPU's, and
    the loops ran nothing."""
    torch.manual_seed(12)
    base = torch.arange(9.0)
    base_d = base.to(DEVICE)
    overlapping = ([base[1:5]], [base[0:4]]), ([base_d[1:5]], [base_d[0:4]])
    # Contiguous both, and at one address, but a size-1 dimension's stride differs: ATen calls
    # that a partial overlap.
    same_address = tuple(([t[:4].view(1, 4)], [t.as_strided((1, 4), (1, 1))])
                         for t in (base, base_d))
    cases = {
        "halves": ([torch.randn(5, dtype=torch.half)], [torch.randn(5, dtype=torch.half)], 0.5),
        "a transposed tensor": ([torch.randn(4, 6).t()], [torch.randn(6, 4)], 0.5),
        "other broadcast": ([torch.randn(2, 5)], [torch.randn(5)], 0.5),
        "other of another dtype": ([torch.randn(5)], [torch.randn(5, dtype=torch.float64)], 0.5),
        "a boolean alpha": ([torch.randn(5)], [torch.randn(5)], True),
        "a complex alpha": ([torch.randn(5)], [torch.randn(5)], 1j),
        "an alpha beyond float": ([torch.randn(5)], [torch.randn(5)], 1e300),
        "integers": ([torch.arange(5)], [torch.arange(5)], 2),
        "a pair that partly overlaps": (*overlapping[0], 0.5),
        "one address, two layouts": (*same_address[0], 0.5),
    }
    for name, (a, b, alpha) in cases.items():
        if name == "a pair that partly overlaps":
            lists = {"cpu": overlapping[0], DEVICE: overlapping[1]}
        elif name == "one address, two layouts":
            lists = {"cpu": same_address[0], DEVICE: same_address[1]}
        else:
            lists = {"cpu": ([t.clone() for t in a], b),
                     DEVICE: ([t.to(DEVICE) for t in a], [t.to(DEVICE) for t in b])}
        outcomes = {}
        for device, (x, y) in lists.items():
            before = _fused_calls()
            try:
                torch._foreach_add_(x, y, alpha=alpha)
                outcomes[device] = [t.cpu() for t in x]
            except RuntimeError as error:
                outcomes[device] = str(error).split("\n")[0]
            if device == DEVICE:
                assert _fused_calls() == before, name
        if isinstance(outcomes["cpu"], str):
            assert outcomes[DEVICE] == outcomes["cpu"], name
        else:
            assert all(torch.equal(g, e) for g, e in zip(outcomes[DEVICE], outcomes["cpu"])), name
    assert torch.equal(base_d.cpu(), base)
    # A scale beyond float's range: the CPU's answer, whatever it is, and no loop.
    x = [torch.randn(5)]
    xd = [x[0].to(DEVICE)]
    outcomes = []
    before = _fused_calls()
    for lst in (x, xd):
        try:
            torch._foreach_mul_(lst, 1e300)
            outcomes.append(lst[0].cpu())
        except RuntimeError as error:
            outcomes.append(str(error))
    assert _fused_calls() == before
    assert type(outcomes[0]) is type(outcomes[1])
    assert outcomes[0] == outcomes[1] if isinstance(outcomes[0], str) else \
        torch.equal(outcomes[0], outcomes[1])


FUSED_UNDER_DEFAULT_KERNELS = """
import torch, oclvm
assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
torch.manual_seed(13)
for dtype in (torch.float32, torch.float64):
    a, b = [torch.randn(1000, dtype=dtype)], [torch.randn(1000, dtype=dtype)]
    ad, bd = [a[0].to("opencl")], [b[0].to("opencl")]
    before = oclvm._C.fused_foreach_calls()
    torch._foreach_add_(a, b, alpha=-0.1)
    torch._foreach_add_(ad, bd, alpha=-0.1)
    assert oclvm._C.fused_foreach_calls() - before == 1
    assert torch.equal(ad[0].cpu(), a[0]), dtype
print("equal")
"""


@needs_host_sections
def test_add_with_alpha_rounds_as_the_cpus_default_kernels_round():
    """ATen's DEFAULT kernels (no AVX2) round alpha's product and the sum apart; the device's
    loop follows the kernels ATen chose (Note [Fused foreach loops])."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    done = subprocess.run([sys.executable, "-c", FUSED_UNDER_DEFAULT_KERNELS], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "equal"


@needs_host_sections
@pytest.mark.parametrize("op", [
    pytest.param(lambda t: torch._foreach_mul_(t, 2.0), id="mul_ (the device's loop)"),
    pytest.param(lambda t: torch._foreach_div_(t, 2.0), id="div_ (host aliases)"),
    pytest.param(lambda t: torch._foreach_clamp_min_(t, 0.0), id="clamp_min_ (boxed)"),
])
def test_foreach_operators_in_place_bump_versions_and_refuse_inference_tensors(op):
    """As the CPU's per-tensor operators do: autograd then sees a saved tensor changed, and an
    inference tensor is refused outside inference mode (before anything is written, where the
    CPU writes first)."""
    outcomes = {}
    for device in ("cpu", DEVICE):
        torch.manual_seed(14)
        w = torch.randn(3, device=device)
        x = torch.randn(3, device=device, requires_grad=True)
        y = (x * w).sum()
        op([w])
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
        with torch.inference_mode():
            frozen = torch.ones(3, device=device)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor") as error:
            op([frozen])
        outcomes[device] = (w._version, str(error.value))
        if device == DEVICE:
            assert torch.equal(frozen.cpu(), torch.ones(3))  # nothing written
    assert outcomes[DEVICE] == outcomes["cpu"]


@needs_host_sections
def test_foreach_kernels_over_hundreds_of_parameters_equal_the_cpu():
    """Long lists (an optimizer over a large model) past host_aliases' linear search, with views
    of one storage at several places in them."""
    torch.manual_seed(10)
    base = torch.randn(40)
    cpu = [torch.randn(3) for _ in range(300)] + [base[i * 8:(i + 1) * 8] for i in range(5)]
    other = [torch.randn_like(t) for t in cpu]
    base_d = base.to(DEVICE)
    dev = [t.to(DEVICE) for t in cpu[:300]] + [base_d[i * 8:(i + 1) * 8] for i in range(5)]
    other_d = [t.to(DEVICE) for t in other]
    torch._foreach_addcmul_(cpu, other, other, value=0.5)
    before = _unboxed_calls()
    torch._foreach_addcmul_(dev, other_d, other_d, value=0.5)
    assert _unboxed_calls() - before == 1
    for got, expected in zip(dev, cpu):
        assert torch.equal(got.cpu(), expected)
    assert torch.equal(base_d.cpu(), base)


@needs_host_sections
def test_a_foreach_kernel_that_raises_in_its_section_changes_nothing_and_holds_nothing():
    """Integer lists added floats in place: the CPU kernel refuses the cast inside the section, as
    on the CPU; the section ends, nothing is written or held, and the next operator runs."""
    ints = [torch.arange(4), torch.arange(3)]
    ints_d = [t.to(DEVICE) for t in ints]
    floats_d = [torch.rand(4, device=DEVICE), torch.rand(3, device=DEVICE)]
    with pytest.raises(RuntimeError, match="can't be cast") as on_cpu:
        torch._foreach_add_(ints, [t.cpu() for t in floats_d])
    allocated = torch.opencl.memory_allocated()
    before = _unboxed_calls()
    with pytest.raises(RuntimeError) as on_device:
        torch._foreach_add_(ints_d, floats_d)
    assert _unboxed_calls() - before == 1
    assert str(on_device.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    assert torch.opencl.memory_allocated() == allocated
    for got, expected in zip(ints_d, ints):
        assert torch.equal(got.cpu(), expected)
    torch._foreach_add_(ints_d, 1)
    assert torch.equal(ints_d[0].cpu(), ints[0] + 1)
