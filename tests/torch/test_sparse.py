"""Sparse tensors (COO and CSR) on the device: made, inspected, computed with, differentiated.

Before adapters/torch/sparse.cc, the first `to_sparse()` of a device tensor raised
NotImplementedError (found by PyTorch's OpInfo database: to_sparse, sparse.sampled_addmm,
sparse.mm.reduce), and once sparse tensors existed, sparse.mm's amax backward killed the process:
the CPU kernel records the argmax only when an input requires grad, and the fallback's host copies
had lost the flag (Note [Kernels that ask whether an input requires grad] in fallback.cc). Each
case below runs the same steps on the CPU and compares; device memory returns to its start.
"""
import pytest
import torch

DEVICE = "opencl"
pytestmark = pytest.mark.usefixtures("nothing_leaks")

KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


@pytest.mark.parametrize("cpu_key, device_key", [("SparseCPU", "SparsePrivateUse1"),
                                                 ("SparseCsrCPU", "SparseCsrPrivateUse1")])
def test_every_sparse_cpu_kernel_over_a_composite_is_routed(cpu_key, device_key):
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = [n for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("aten::") and has(n, cpu_key) and any(has(n, k) for k in KEYS)]
    assert "aten::mm" in names
    unrouted = sorted(n for n in names if not has(n, device_key))
    assert unrouted == [], f"operators left to their composite on {device_key}: {unrouted}"


def _dense():
    torch.manual_seed(0)
    x = torch.randn(5, 4)
    return x * (torch.rand(5, 4) > 0.5)


def test_coo_structure_lives_on_the_device():
    x = _dense()
    s = x.to(DEVICE).to_sparse()
    assert (s.layout, s.device.type) == (torch.sparse_coo, DEVICE)
    assert s.indices().device.type == DEVICE and s.values().device.type == DEVICE
    assert s._nnz() == int((x != 0).sum())
    assert (s.sparse_dim(), s.dense_dim(), s.is_coalesced()) == (2, 0, True)
    assert torch.equal(s.to_dense().cpu(), x)
    assert torch.equal(s.cpu().to_dense(), x)
    assert torch.equal(x.to_sparse().to(DEVICE).to_dense().cpu(), x)


COO_CASES = {
    "add": lambda s, d: (s + s).to_dense(),
    "mul_scalar": lambda s, d: (s * 3).to_dense(),
    "sum": lambda s, d: torch.sparse.sum(s),
    "mm_dense": lambda s, d: torch.mm(s, d.t()),
    "addmm": lambda s, d: torch.addmm(d @ d.t(), s, d.t()),
    "coalesce_uncoalesced": lambda s, d: torch.sparse_coo_tensor(
        torch.cat([s.indices(), s.indices()], 1), torch.cat([s.values(), s.values()]),
        s.shape).coalesce().to_dense(),
    "transpose": lambda s, d: s.t().to_dense(),
    "clone": lambda s, d: s.clone().to_dense(),
}


@pytest.mark.parametrize("name", sorted(COO_CASES))
def test_coo_operators_equal_the_cpu(name):
    x, other = _dense(), torch.randn(5, 4)
    expected = COO_CASES[name](x.to_sparse(), other)
    got = COO_CASES[name](x.to(DEVICE).to_sparse(), other.to(DEVICE))
    assert got.device.type == DEVICE
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def test_coo_gradients_equal_the_cpu():
    def step(device):
        s = _dense().to(device).to_sparse().requires_grad_()
        weight = torch.randn(4, 3).to(device).requires_grad_()
        loss = torch.sparse.mm(s, weight).square().sum()
        loss.backward()
        return loss.detach().cpu(), weight.grad.cpu(), s.grad.to_dense().cpu()
    for got, expected in zip(step(DEVICE), step("cpu")):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_csr_structure_and_sampled_addmm_with_gradients_equal_the_cpu():
    def run(device):
        mask = _dense().to(device).to_sparse_csr().requires_grad_()
        a = torch.randn(5, 3).to(device).requires_grad_()
        b = torch.randn(3, 4).to(device).requires_grad_()
        out = torch.sparse.sampled_addmm(mask, a, b, beta=0.5, alpha=2.0)
        grads = torch.autograd.grad(out.values().sum(), [a, b])
        assert out.crow_indices().device.type == torch.device(device).type
        return [out.to_dense().detach().cpu()] + [g.cpu() for g in grads]
    for got, expected in zip(run(DEVICE), run("cpu")):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_sparse_mm_reductions_differentiate_as_on_the_cpu(reduce):
    def run(device):
        s = _dense().to(device).to_sparse_csr().requires_grad_()
        d = torch.randn(4, 3).to(device).requires_grad_()
        out = torch.sparse.mm(s, d, reduce)
        grads = torch.autograd.grad(out.sum(), [s, d])
        return [out.detach().cpu(), grads[0].to_dense().cpu(), grads[1].cpu()]
    for got, expected in zip(run(DEVICE), run("cpu")):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_sparse_out_argument_is_written_and_returned():
    x = _dense()
    s = x.to(DEVICE).to_sparse()
    out = torch.zeros(5, 4, device=DEVICE).to_sparse()
    returned = torch.add(s, s, out=out)
    assert returned is out
    assert torch.equal(out.to_dense().cpu(), 2 * x)


def test_mixing_devices_raises_and_changes_nothing():
    s = _dense().to(DEVICE).to_sparse()
    before = s.to_dense().cpu()
    with pytest.raises(RuntimeError, match="same device|device"):
        torch.mm(s, torch.randn(4, 2))
    assert torch.equal(s.to_dense().cpu(), before)
