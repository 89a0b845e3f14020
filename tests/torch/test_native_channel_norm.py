"""Batch norm and group norm on the native path (Note [Native batch and group norm] in
adapters/torch/native_channel_norm.cc): forward, backward and the running statistics against the
CPU, in both layouts batch norm takes; the calls the native path leaves give the CPU's values and
errors.

PoCL's devices take the host path by default, so these tests run in a subprocess with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, they run in this process.
"""
import pytest
import torch
import torch.nn.functional as F

import oclvm

from native_util import assert_the_cpus_error, native_only, run_file_natively


def test_native_channel_norm_in_a_subprocess():
    run_file_natively(__file__, staged_too=False)


def answered_natively():
    return oclvm._C.native_operator_calls()


def leaf(t, device):
    return t.to(device).detach().requires_grad_()


def normalize_both(norm, x, w, b, dtype, running=None):
    """norm(x, w, b, running) on the CPU and the device with a backward of one gradient: each
    side's (y, dx, dw, db, running statistics after the call)."""
    results = []
    for device in ("cpu", "opencl"):
        ws = leaf(w, device) if w is not None else None
        bs = leaf(b, device) if b is not None else None
        stats = tuple(t.to(device).clone() for t in running) if running else None
        xs = x.to(device) if x.is_contiguous() else x.to(device).contiguous(
            memory_format=torch.channels_last)
        xs = xs.detach().requires_grad_()
        y = norm(xs, ws, bs, stats)
        grad = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
        y.backward(grad.to(device))
        results.append((y, xs.grad, ws.grad if ws is not None else None,
                        bs.grad if bs is not None else None, stats))
    return results


def assert_close_to_cpu(got, expected, dtype):
    tolerance = dict(atol=1e-5, rtol=1.3e-6) if dtype == torch.float32 else dict(atol=1e-12,
                                                                               rtol=1e-12)
    for name, a, e in zip(("y", "dx", "dw", "db"), got, expected):
        if e is None:
            assert a is None, name
            continue
        assert a.device.type == "opencl", name
        assert a.stride() == e.stride(), (name, a.stride(), e.stride())
        torch.testing.assert_close(a.cpu(), e, **tolerance, msg=lambda m: f"{name}: {m}")
    if expected[4] is not None:
        for a, e in zip(got[4], expected[4]):
            torch.testing.assert_close(a.cpu(), e, **tolerance, msg=lambda m: f"running: {m}")


BATCH = {
    "train_running": ((4, 3, 5, 5), True, True, True, False),
    "train_channels_last": ((4, 3, 5, 5), True, True, True, True),
    "train_no_affine_no_running": ((4, 3, 5, 5), True, False, False, False),
    "eval": ((4, 3, 5, 5), False, True, True, False),
    "eval_channels_last": ((4, 3, 5, 5), False, True, True, True),
    "vector_rows": ((8, 6), True, True, True, False),
    "sequence": ((4, 3, 7), True, True, True, False),
    "volume": ((2, 3, 3, 4, 5), True, True, True, False),
}


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", BATCH.values(), ids=BATCH.keys())
def test_batch_norm_runs_natively_and_matches_the_cpu(case, dtype):
    shape, training, affine, running, channels_last = case
    g = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=g, dtype=dtype) * 3 + 1
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    c = shape[1]
    w = torch.randn(c, generator=g, dtype=dtype) if affine else None
    b = torch.randn(c, generator=g, dtype=dtype) if affine else None
    stats = (torch.randn(c, generator=g, dtype=dtype),
             torch.rand(c, generator=g, dtype=dtype) + 0.5) if running else None

    def norm(x, w, b, stats):
        mean, var = stats if stats else (None, None)
        return F.batch_norm(x, mean, var, w, b, training=training, momentum=0.1, eps=1e-5)

    before = answered_natively()
    expected, got = normalize_both(norm, x, w, b, dtype, stats)
    assert answered_natively() >= before + 2  # the forward and the backward
    assert not {"aten::native_batch_norm", "aten::native_batch_norm_backward"} & set(
        torch.opencl.fallback_counts())
    assert_close_to_cpu(got, expected, dtype)


GROUP = {
    "affine": ((2, 8, 4, 4), 4, True),
    "one_group": ((2, 8, 4, 4), 1, False),
    "a_group_per_channel": ((3, 6, 5), 6, True),
    "vector_rows": ((5, 6), 2, True),
}


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", GROUP.values(), ids=GROUP.keys())
def test_group_norm_runs_natively_and_matches_the_cpu(case, dtype):
    shape, groups, affine = case
    g = torch.Generator().manual_seed(8)
    x = torch.randn(shape, generator=g, dtype=dtype) * 2 + 0.5
    w = torch.randn(shape[1], generator=g, dtype=dtype) if affine else None
    b = torch.randn(shape[1], generator=g, dtype=dtype) if affine else None
    before = answered_natively()
    expected, got = normalize_both(lambda x, w, b, _: F.group_norm(x, groups, w, b, 1e-5), x, w, b,
                                   dtype)
    assert answered_natively() >= before + 2
    assert not {"aten::native_group_norm", "aten::native_group_norm_backward"} & set(
        torch.opencl.fallback_counts())
    assert_close_to_cpu(got, expected, dtype)


@native_only
@pytest.mark.parametrize("weight", [
    lambda to: to(torch.full((1,), 1.5)).expand(4),        # one element, stride 0
    lambda to: to(torch.arange(8.0) / 4 + 0.5)[::2],       # every other element
], ids=["expanded", "strided"])
def test_batch_norm_reads_a_strided_weight_and_bias_as_the_cpu(weight):
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(5))

    def norm(to):
        xs = to(x).requires_grad_()
        w, b = weight(to), weight(to) * 2
        y = F.batch_norm(xs, None, None, w, b, training=True)
        y.sum().backward()
        return y, xs.grad

    before = answered_natively()
    got, expected = norm(lambda t: t.to("opencl")), norm(lambda t: t.clone())
    assert answered_natively() >= before + 2
    for a, e in zip(got, expected):
        torch.testing.assert_close(a.cpu(), e, atol=1e-5, rtol=1.3e-6)


@native_only
def test_batch_norm_of_a_constant_channel_with_eps_0_is_the_cpus():
    """torch's InvStd is 0 where the variance and eps are both 0: y is the bias, not NaN."""
    x = torch.ones(2, 3, 4)
    x[:, 1] = torch.arange(8.0).view(2, 4)
    b = torch.tensor([0.5, -1.0, 2.0])
    norm = torch.ops.aten.native_batch_norm  # F.batch_norm refuses eps=0 in training
    expected = norm(x, None, b, None, None, True, 0.1, 0.0)
    before = answered_natively()
    got = norm(x.to("opencl"), None, b.to("opencl"), None, None, True, 0.1, 0.0)
    assert answered_natively() == before + 1
    for a, e in zip(got, expected):
        torch.testing.assert_close(a.cpu(), e, equal_nan=False)


@native_only
@pytest.mark.parametrize("mask", [(True, False, False), (False, True, False),
                                  (False, False, True), (False, True, True)], ids=str)
def test_backward_computes_what_the_mask_asks(mask):
    g = torch.Generator().manual_seed(9)
    x, grad = torch.randn(3, 4, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    w = torch.randn(4, generator=g)
    _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5)
    _, gmean, rstd = torch.ops.aten.native_group_norm(x, w, None, 3, 4, 5, 2, 1e-5)

    def both(call, *tensors):
        expected = call(*tensors)
        got = call(*(t.to("opencl") for t in tensors))
        for wanted, a, e in zip(mask, got, expected):
            assert (a is not None) == wanted
            if wanted:
                torch.testing.assert_close(a.cpu(), e, atol=1e-5, rtol=1e-5)

    before = answered_natively()
    both(lambda dy, x, w, m, r: torch.ops.aten.native_batch_norm_backward(
        dy, x, w, None, None, m, r, True, 1e-5, list(mask)), grad, x, w, mean, invstd)
    both(lambda dy, x, w, m, r: torch.ops.aten.native_group_norm_backward(
        dy, x, m, r, w, 3, 4, 5, 2, list(mask)), grad, x, w, gmean, rstd)
    assert answered_natively() == before + 2


@native_only
def test_temporaries_return_to_the_cache():
    x = torch.randn(4, 8, 6, 6, device="opencl", requires_grad=True)
    w = torch.ones(8, device="opencl", requires_grad=True)
    torch.opencl.synchronize()
    held = torch.opencl.memory_allocated()
    (F.batch_norm(x, None, None, w, None, training=True).sum()
     + F.group_norm(x, 4, w).sum()).backward()
    x.grad = w.grad = None
    torch.opencl.synchronize()
    assert torch.opencl.memory_allocated() == held


# Calls the native path leaves to the CPU kernel.
LEFT = {
    "float16_batch_norm": lambda to: F.batch_norm(to(torch.randn(2, 3, 4).half()), None, None,
                                                  training=True),
    "channels_last_group_norm": lambda to: F.group_norm(
        to(torch.randn(2, 4, 3, 3)).contiguous(memory_format=torch.channels_last), 2),
    "spatial_dimensions_that_do_not_merge": lambda to: F.batch_norm(
        to(torch.randn(2, 3, 4, 5)).transpose(2, 3), None, None, training=True),
}


@native_only
@pytest.mark.parametrize("name", LEFT.keys())
def test_calls_the_native_path_leaves_are_the_cpus(name):
    before = answered_natively()
    torch.manual_seed(0)
    try:
        expected = LEFT[name](lambda t: t)
    except RuntimeError as error:
        torch.manual_seed(0)
        with pytest.raises(RuntimeError) as device_error:
            LEFT[name](lambda t: t.to("opencl"))
        assert str(device_error.value).split("\n")[0] == str(error).split("\n")[0]
    else:
        torch.manual_seed(0)
        got = LEFT[name](lambda t: t.to("opencl"))
        torch.testing.assert_close(got.cpu(), expected, atol=1e-3, rtol=1e-3)
    assert answered_natively() == before


@native_only
@pytest.mark.parametrize("call", [
    lambda to: F.group_norm(to(torch.randn(2, 6, 3)), 4),  # groups do not divide the channels
    lambda to: F.batch_norm(to(torch.randn(2, 3, 4)), None, None, to(torch.ones(4)),
                            training=True),  # a weight of the wrong size
], ids=["groups", "weight_size"])
def test_bad_arguments_get_the_cpus_error(call):
    assert_the_cpus_error(call)
