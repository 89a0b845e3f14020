"""Scaled dot-product attention on the native path (adapters/torch/attention.cc): every floating
dtype takes the math decomposition, whose operators all run natively, forward and backward
(float16 and bfloat16 in float32, rounded once); inside sdpa_kernel without the math backend, the
CPU's choice (its flash kernel, through the fallback).

PoCL's devices take the host path by default, so these tests run in a subprocess with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, they run in this process.
"""
import pytest
import torch
import torch.nn.functional as F

from native_util import native_only, run_file_natively

FLASH = {"aten::_scaled_dot_product_flash_attention_for_cpu",
         "aten::_scaled_dot_product_flash_attention_for_cpu_backward"}


def test_native_attention_in_a_subprocess():
    run_file_natively(__file__, staged_too=False)


def attend_both(dtype, **kwargs):
    """sdpa of the same q, k, v on the CPU and the device, with a backward: each side's output and
    gradients."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 6, 8, generator=g, dtype=dtype) for _ in range(3))
    grad = torch.randn(2, 4, 6, 8, generator=g, dtype=dtype)
    mask = kwargs.pop("mask", None)
    results = []
    for device in ("cpu", "opencl"):
        leaves = [t.to(device).detach().requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(
            *leaves, attn_mask=mask.to(device) if mask is not None else None, **kwargs)
        out.backward(grad.to(device))
        results.append([out] + [t.grad for t in leaves])
    return results


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"scale": 0.5},
                                    {"mask": torch.rand(6, 6) > 0.3}, {"enable_gqa": False}],
                         ids=["plain", "causal", "scale", "bool_mask", "gqa_flag"])
def test_float_attention_is_the_math_path_on_native_kernels(dtype, kwargs):
    torch.opencl.reset_fallback_counts()
    expected, got = attend_both(dtype, **kwargs)
    counts = torch.opencl.fallback_counts()
    assert not FLASH & set(counts), counts
    assert not counts, counts  # every operator of the decomposition ran natively
    # op_db's own tolerance for sdpa against another implementation (TestCommon, float32)
    tolerance = dict(atol=5e-5, rtol=5e-6) if dtype == torch.float32 else dict(atol=1e-12,
                                                                              rtol=1e-12)
    for name, a, e in zip(("out", "dq", "dk", "dv"), got, expected):
        torch.testing.assert_close(a.cpu(), e, **tolerance, msg=lambda m: f"{name}: {m}")


@native_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_attention_is_the_math_path_in_float(dtype):
    """The decomposition converts q, k and v to float32 and rounds each result once, all on the
    device; the CPU's flash kernel accumulates in float too, rounding some steps to the dtype:
    the two agree within a few units in the last place of the largest value."""
    torch.opencl.reset_fallback_counts()
    expected, got = attend_both(dtype, is_causal=True)
    assert not torch.opencl.fallback_counts()
    eps = torch.finfo(dtype).eps
    for name, a, e in zip(("out", "dq", "dk", "dv"), got, expected):
        assert a.dtype == dtype
        assert (a.cpu().float() - e.float()).abs().max() <= 4 * eps * e.float().abs().amax(), name


@native_only
def test_the_users_backend_choice_is_kept():
    """Inside sdpa_kernel(FLASH_ATTENTION) the math backend is off: the CPU's choice, flash."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.opencl.reset_fallback_counts()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        expected, got = attend_both(torch.float32)
    assert FLASH <= set(torch.opencl.fallback_counts())
    for a, e in zip(got, expected):
        assert torch.equal(a.cpu(), e)
