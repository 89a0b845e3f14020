"""Convolutions on the native path (Note [Native convolutions] in adapters/torch/native_conv.cc):
conv1d and conv2d forward and backward as im2col, col2im and CLBlast products, against the CPU;
the calls the native path leaves give the CPU's values and errors.

PoCL's devices take the host path by default, so these tests run in a subprocess with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, they run in this process.
"""
import pytest
import torch
import torch.nn.functional as F

import oclvm

from native_util import assert_the_cpus_error, launches, native_only, run_file_natively

with_clblast = pytest.mark.skipif(not oclvm._C.native_matrix_products(),
                                  reason="the module was built without CLBlast")


def test_native_conv_in_a_subprocess():
    run_file_natively(__file__, staged_too=False)


def answered_natively():
    return oclvm._C.native_operator_calls()


# (input shape, out channels, kernel size, stride, padding, dilation, groups, bias)
CASES = {
    "3x3": ((2, 3, 8, 8), 4, 3, 1, 1, 1, 1, True),
    "stride_2_groups_2": ((2, 4, 9, 7), 6, 3, 2, 0, 1, 2, True),
    "dilated_depthwise": ((3, 4, 10, 10), 4, 3, 1, 2, 2, 4, False),
    "rectangular": ((2, 3, 7, 9), 5, (2, 4), (2, 1), (1, 0), (1, 2), 1, True),
    "1x1_direct": ((2, 8, 5, 5), 16, 1, 1, 0, 1, 1, True),  # the input is its own columns
    "1x1_strided": ((2, 8, 5, 5), 16, 1, 2, 0, 1, 1, True),
    "conv1d": ((2, 3, 20), 4, 5, 2, 1, 1, 1, True),
    "conv1d_groups": ((2, 6, 17), 9, 3, 1, 2, 3, 3, False),
    "chunked": ((10, 256, 40, 40), 4, 3, 1, 1, 1, 1, True),  # 9 samples' columns per chunk
}


def convolve_both(shape, out_channels, kernel, stride, padding, dilation, groups, bias, dtype,
                  layout=None, seed=0):
    """conv1d or conv2d of the same values on the CPU and the device, with a backward of the same
    gradient: the CPU's and the device's (output, grad_input, grad_weight, grad_bias)."""
    g = torch.Generator().manual_seed(seed)
    spatial = len(shape) - 2
    kernel = (kernel,) * spatial if isinstance(kernel, int) else kernel
    x = torch.randn(shape, generator=g, dtype=dtype)
    w = torch.randn((out_channels, shape[1] // groups) + tuple(kernel), generator=g, dtype=dtype)
    b = torch.randn(out_channels, generator=g, dtype=dtype) if bias else None
    conv = F.conv1d if spatial == 1 else F.conv2d
    results = []
    for device in ("cpu", "opencl"):
        xs = x.to(device)
        if layout is not None:
            xs = layout(xs)
        xs = xs.detach().requires_grad_()
        ws = w.to(device).detach().requires_grad_()
        bs = b.to(device).detach().requires_grad_() if bias else None
        y = conv(xs, ws, bs, stride, padding, dilation, groups)
        grad = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=dtype)
        y.backward(grad.to(device))
        results.append((y, xs.grad, ws.grad, bs.grad if bias else None))
    return results


def assert_all_close(got, expected, dtype, terms):
    """Within the rounding of sums of `terms` products in another order."""
    atol = (1e-6 if dtype == torch.float32 else 1e-14) * max(terms, 1) ** 0.5 * 10
    rtol = 1e-4 if dtype == torch.float32 else 1e-10
    for name, a, e in zip(("output", "grad_input", "grad_weight", "grad_bias"), got, expected):
        if e is None:
            assert a is None
            continue
        assert a.device.type == "opencl", name
        assert a.shape == e.shape and a.stride() == e.stride() or not e.is_contiguous(), name
        torch.testing.assert_close(a.cpu(), e, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")


@native_only
@with_clblast
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_convolutions_run_natively_and_match_the_cpu(case, dtype):
    if case == CASES["chunked"] and dtype == torch.float64:
        pytest.skip("one dtype is enough to walk the chunks")
    before_calls, before_launches = answered_natively(), launches()
    expected, got = convolve_both(*case, dtype)
    fallbacks = torch.opencl.fallback_counts()
    assert not any("convolution" in name for name in fallbacks), fallbacks
    assert answered_natively() - before_calls >= 2  # the forward and the backward
    assert launches() > before_launches
    shape, out_channels, kernel, *_ = case
    batch_terms = shape[0] * (shape[-1] * (shape[-2] if len(shape) == 4 else 1))
    assert_all_close(got, expected, dtype, terms=max(batch_terms, shape[1] * 9))


@native_only
@with_clblast
def test_layouts_of_the_input_and_the_results():
    """A channels-last input, and a transposed (non-contiguous) one: the results have the layout
    the device's convolution backend names for them, as FakeTensor predicts."""
    case = CASES["3x3"]
    for layout in (lambda t: t.contiguous(memory_format=torch.channels_last),
                   lambda t: t.transpose(2, 3).contiguous().transpose(2, 3)):
        expected, got = convolve_both(*case, torch.float32, layout=layout)
        for a, e in zip(got, expected):
            torch.testing.assert_close(a.cpu(), e, atol=1e-4, rtol=1e-4)
        assert got[0].is_contiguous()


@native_only
@with_clblast
@pytest.mark.parametrize("mask", [(True, False, False), (False, True, False),
                                  (False, False, True), (True, True, True)], ids=str)
def test_backward_computes_what_the_mask_asks(mask):
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(2, 4, 6, 6, generator=g), torch.randn(6, 2, 3, 3, generator=g)
    grad = torch.randn(2, 6, 3, 3, generator=g)
    args = ([2], [1], [1], False, [0], 2, list(mask))  # stride, padding, dilation, ..., groups

    def backward(device):
        return torch.ops.aten.convolution_backward(grad.to(device), x.to(device), w.to(device),
                                                   [6], *args)

    before = answered_natively()
    got, expected = backward("opencl"), backward("cpu")
    assert answered_natively() > before  # grad_bias is the native sum: a second call
    for wanted, a, e in zip(mask, got, expected):
        assert (a is not None) == wanted
        if wanted:
            torch.testing.assert_close(a.cpu(), e, atol=1e-4, rtol=1e-4)


@native_only
@with_clblast
def test_temporaries_return_to_the_cache():
    """The columns and the gradient's copy are freed after the call: once the results go, the
    bytes in use are what they were before."""
    x = torch.randn(4, 8, 16, 16, device="opencl", requires_grad=True)
    w = torch.randn(8, 8, 3, 3, device="opencl", requires_grad=True)
    torch.opencl.synchronize()
    held = torch.opencl.memory_allocated()
    y = F.conv2d(x, w, padding=1)
    y.sum().backward()
    torch.opencl.synchronize()
    assert torch.opencl.max_memory_allocated() > torch.opencl.memory_allocated() > held
    del y
    x.grad = w.grad = None
    torch.opencl.synchronize()
    assert torch.opencl.memory_allocated() == held


# Calls the native path leaves to the CPU kernel: (name, the call on `to`-made operands).
LEFT = {
    "transposed": lambda to: F.conv_transpose2d(to(torch.randn(1, 2, 4, 4)),
                                                to(torch.randn(2, 3, 3, 3))),
    "conv3d": lambda to: F.conv3d(to(torch.randn(1, 2, 4, 4, 4)), to(torch.randn(3, 2, 2, 2, 2))),
    "float16": lambda to: F.conv2d(to(torch.randn(1, 2, 4, 4).half()),
                                   to(torch.randn(3, 2, 2, 2).half())),
    # past the kernels' int arguments: the output is all padding (zeros), one element wide
    "padding_past_int": lambda to: F.conv1d(to(torch.randn(1, 1, 3)), to(torch.randn(1, 1, 1)),
                                            stride=2 ** 34, padding=2 ** 32),
}


@native_only
@with_clblast
@pytest.mark.parametrize("name", LEFT.keys())
def test_calls_the_native_path_leaves_are_the_cpus(name):
    before = answered_natively()
    torch.manual_seed(0)
    expected = LEFT[name](lambda t: t)
    torch.manual_seed(0)
    got = LEFT[name](lambda t: t.to("opencl"))
    assert answered_natively() == before
    torch.testing.assert_close(got.cpu(), expected, atol=1e-3, rtol=1e-3)


@native_only
@with_clblast
@pytest.mark.parametrize("call", [
    lambda to: F.conv2d(to(torch.randn(1, 3, 5, 5)), to(torch.randn(4, 2, 3, 3))),  # channels
    lambda to: F.conv2d(to(torch.randn(1, 2, 2, 2)), to(torch.randn(4, 2, 3, 3))),  # too small
    lambda to: F.conv2d(to(torch.randn(1, 4, 5, 5)), to(torch.randn(4, 2, 3, 3)), groups=3),
    lambda to: F.conv2d(to(torch.randn(1, 2, 5, 5)), to(torch.randn(4, 2, 3, 3)), stride=0),
], ids=["channels", "kernel_past_input", "groups", "stride_0"])
def test_bad_arguments_get_the_cpus_error(call):
    assert_the_cpus_error(call)


@native_only
@with_clblast
def test_a_convolution_on_the_second_device():
    if torch.opencl.device_count() < 2:
        pytest.skip("one device")
    g = torch.Generator().manual_seed(4)
    x, w, b = torch.randn(2, 3, 6, 6, generator=g), torch.randn(4, 3, 3, 3, generator=g), None
    before = answered_natively()
    got = F.conv2d(x.to("opencl:1"), w.to("opencl:1"), b, padding=1)
    assert got.device == torch.device("opencl:1")
    assert answered_natively() == before + 1
    torch.testing.assert_close(got.cpu(), F.conv2d(x, w, b, padding=1), atol=1e-4, rtol=1e-4)
