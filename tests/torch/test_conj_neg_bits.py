"""Lazily conjugated and negated device tensors: copies resolve the bits, nothing recurses.

Regression for the process death seen with PyTorch's OpInfo corpus (conj, H, mH, svd, pinv, cov,
the hfft family, ...): the Conjugate fallback cloned through _copy_from, which it intercepted
again, until the stack overflowed (Note [Conjugate and negative bits in copies] in
adapters/torch/host_view.cc). Each case compares with the same steps on the CPU.
"""
import pytest
import torch

DEVICE = "opencl"


@pytest.fixture
def pair():
    torch.manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.complex64)
    return x, x.to(DEVICE)


CASES = {
    "cpu": lambda t: t.conj().cpu(),
    "clone": lambda t: t.conj().clone(),
    "resolve_conj": lambda t: t.conj().resolve_conj(),
    "arithmetic": lambda t: t.conj() * 2 + 1,
    "transposed": lambda t: t.mH.contiguous(),
    "strided_view": lambda t: t.conj()[:, ::2].clone(),
    "neg_view": lambda t: torch._neg_view(t).clone(),
    "conj_neg": lambda t: torch._neg_view(t.conj()).resolve_neg().resolve_conj(),
    "to_dtype": lambda t: t.conj().to(torch.complex128),
    "item": lambda t: torch.tensor(t.conj()[1, 2].item()),
    "matmul": lambda t: t.conj() @ t.mT,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_conjugate_views_equal_the_cpu(pair, name):
    x, xd = pair
    expected = CASES[name](x)
    got = CASES[name](xd).cpu()
    torch.testing.assert_close(got, expected)


def test_copy_into_a_conjugate_destination(pair):
    x, xd = pair
    dst_cpu = torch.zeros_like(x).conj()
    dst_dev = torch.zeros_like(xd).conj()
    dst_cpu.copy_(x)
    dst_dev.copy_(xd)
    # The destination reads as x; its storage holds conj(x), as on the CPU.
    torch.testing.assert_close(dst_dev.cpu(), dst_cpu)
    torch.testing.assert_close(dst_dev.conj().resolve_conj().cpu(), x.conj())


def test_fill_of_a_conjugate_view():
    value = complex(1.0, 2.0)
    on_cpu = torch.zeros(5, dtype=torch.complex64).conj().fill_(value)
    on_dev = torch.zeros(5, dtype=torch.complex64, device=DEVICE).conj().fill_(value)
    torch.testing.assert_close(on_dev.cpu(), on_cpu)
    torch.testing.assert_close(on_dev.conj().resolve_conj().cpu(), on_cpu.conj().resolve_conj())


def test_linalg_on_conjugates_runs():
    torch.manual_seed(1)
    a = torch.randn(4, 4, dtype=torch.complex64)
    got = torch.linalg.pinv(a.to(DEVICE).conj()).cpu()
    torch.testing.assert_close(got, torch.linalg.pinv(a.conj()), rtol=1e-4, atol=1e-4)
