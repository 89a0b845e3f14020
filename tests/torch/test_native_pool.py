"""Pooling on the native path (adapters/torch/native_pool.cc, Note [Native pooling]):
max_pool2d with indices, avg_pool2d and adaptive_avg_pool2d, forward and backward, against the
CPU, in both layouts and with the options CNNs use; their errors stay the CPU's.

PoCL's devices take the host path by default, so these tests run in a subprocess with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, they run in this process.
"""
import pytest
import torch
import torch.nn.functional as F

from native_util import native_only, run_file_natively

DEV = "opencl"
POOLS = {
    "max_3x3_s2_p1": lambda x: F.max_pool2d(x, 3, 2, 1),
    "max_2x2_ceil": lambda x: F.max_pool2d(x, 2, ceil_mode=True),
    "max_dilated": lambda x: F.max_pool2d(x, (3, 2), (1, 2), (1, 1), dilation=(2, 2)),
    "max_overlapping": lambda x: F.max_pool2d(x, 3, 1),
    "max_stride_past_kernel": lambda x: F.max_pool2d(x, 2, 3),
    "avg_2x2": lambda x: F.avg_pool2d(x, 2),
    "avg_3x3_pad_counted": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg_3x3_pad_no_count": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    "avg_ceil_clipped": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
    "avg_ceil_divisor": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=4),
    "avg_stride_past_kernel": lambda x: F.avg_pool2d(x, (2, 1), (3, 4)),
    "adaptive_avg_3x5": lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
    "adaptive_avg_1x1": lambda x: F.adaptive_avg_pool2d(x, 1),
    "adaptive_avg_up": lambda x: F.adaptive_avg_pool2d(x, (14, 17)),
}


def test_native_pool_in_a_subprocess():
    run_file_natively(__file__, staged_too=False)


def both(pool, x, grad_seed=1):
    """`pool` of `x` on the CPU and on the device with a backward: each side's output and input
    gradient (the output's gradient drawn from one CPU generator, laid out as the output)."""
    results = []
    for device in ("cpu", DEV):
        leaf = x.to(device).detach().requires_grad_()
        out = pool(leaf)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed),
                        dtype=x.dtype)
        out.backward(torch.empty_like(out).copy_(g.to(device)))
        results.append((out, leaf.grad))
    return results


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "3d"])
@pytest.mark.parametrize("name", sorted(POOLS))
def test_pool_matches_the_cpu(name, layout, dtype):
    # 20 channels: channels-last CPU kernels take both their vector and their scalar loops
    x = torch.randn(2, 20, 10, 12, generator=torch.Generator().manual_seed(0), dtype=dtype)
    x[0, 1, 2, 3] = float("nan")  # a NaN window in the max pools, NaN gradients through it
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "3d":
        x = x[0]
    torch.opencl.reset_fallback_counts()
    (cpu_out, cpu_grad), (dev_out, dev_grad) = both(POOLS[name], x)
    assert not torch.opencl.fallback_counts(), torch.opencl.fallback_counts()
    # The same sums in the same order: the CPU's bits. Not where the CPU itself computes
    # otherwise: a 1 x 1 adaptive pool is torch's mean over the plane, whose native sum adds in
    # another order than the CPU's vectorised one; and the CPU's channels-last adaptive pool
    # divides its vector lanes once by kh * kw where its scalar loops (and these kernels) divide
    # by kh, then kw: one rounding apart.
    adaptive_last = name.startswith("adaptive") and layout == "channels_last"
    exact = dict(rtol=0, atol=0) if name != "adaptive_avg_1x1" and not adaptive_last else {}
    for what, d, c in (("output", dev_out, cpu_out), ("gradient", dev_grad, cpu_grad)):
        assert d.shape == c.shape and d.stride() == c.stride(), (what, d.stride(), c.stride())
        torch.testing.assert_close(d.cpu(), c, **exact, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")


@native_only
def test_max_pool_indices_and_nan_are_the_cpus():
    x = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(2))
    x[0, 0, 1, 1] = float("nan")
    x[0, 1, :3, :3] = 5.0  # ties: the first maximum's index
    for device_x in (x.to(DEV), x.to(DEV).contiguous(memory_format=torch.channels_last)):
        out, idx = F.max_pool2d(device_x, 3, 3, return_indices=True)
        cpu_out, cpu_idx = F.max_pool2d(x, 3, 3, return_indices=True)
        assert torch.equal(idx.cpu(), cpu_idx)
        torch.testing.assert_close(out.cpu(), cpu_out, rtol=0, atol=0, equal_nan=True)


@native_only
def test_bad_pools_get_the_cpus_errors():
    x = torch.randn(1, 1, 4, 4, device=DEV)
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(x, 2, 2, 2)
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        F.avg_pool2d(x, 2, divisor_override=0)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.max_pool2d(x, 5)


@native_only
def test_a_cnn_with_pools_trains_on_native_kernels():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AvgPool2d(2),
        torch.nn.AdaptiveAvgPool2d((1, 1)), torch.nn.Flatten(), torch.nn.Linear(8, 4)).to(DEV)
    x = torch.randn(4, 3, 16, 16)
    torch.opencl.reset_fallback_counts()
    model(x.to(DEV)).square().sum().backward()
    assert not torch.opencl.fallback_counts(), torch.opencl.fallback_counts()
