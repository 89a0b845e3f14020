"""Nested tensors (torch.nested) on the device: made, moved, computed with, and the Transformer
encoder's fast path, which builds them on the device.

Before adapters/torch/nested.cc, torch had no kernel for NestedTensorPrivateUse1:
`torch.nested.nested_tensor(..., device="opencl")` failed, and nn.TransformerEncoder in eval mode
with a padding mask raised "Could not run 'aten::_to_copy' with arguments from the
'NestedTensoropencl' backend" (issue 33). Each case below runs the same steps on the CPU and
compares; results stay on the device, as on CUDA; device memory returns to its start. Autograd
through both layouts gives the CPU's gradients.
"""
import warnings

import pytest
import torch

DEVICE = "opencl"
pytestmark = [pytest.mark.usefixtures("nothing_leaks"),
              pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")]


def _components():
    torch.manual_seed(0)
    return [torch.randn(2, 4), torch.randn(3, 4)]


def _assert_same(device_nested, cpu_nested, **tolerance):
    assert device_nested.is_nested and device_nested.device.type == DEVICE
    got = [t.cpu() for t in device_nested.unbind()]
    want = list(cpu_nested.unbind())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tolerance)


def test_nested_tensor_made_on_the_device():
    parts = _components()
    nt = torch.nested.nested_tensor(parts, device=DEVICE)
    assert nt.is_nested and nt.device.type == DEVICE
    assert all(t.device.type == DEVICE for t in nt.unbind())
    _assert_same(nt, torch.nested.nested_tensor(parts))


def test_as_nested_tensor_of_device_tensors():
    parts = _components()
    nt = torch.nested.as_nested_tensor([p.to(DEVICE) for p in parts])
    _assert_same(nt, torch.nested.as_nested_tensor(parts))


def test_nested_to_and_from_the_device():
    cpu = torch.nested.nested_tensor(_components())
    dev = cpu.to(DEVICE)
    _assert_same(dev, cpu)
    back = dev.cpu()
    assert back.is_nested and back.device.type == "cpu"
    for g, w in zip(back.unbind(), cpu.unbind()):
        assert torch.equal(g, w)
    half = dev.to(torch.float64)
    assert half.dtype == torch.float64 and half.device.type == DEVICE
    _assert_same(half, cpu.to(torch.float64))


def test_views_stay_views_of_the_device_buffer():
    cpu = torch.nested.nested_tensor(_components())
    dev = cpu.to(DEVICE)
    first = dev.unbind()[0]
    first.mul_(0)
    assert torch.equal(dev.unbind()[0].cpu(), torch.zeros(2, 4))
    second = dev.select(0, 1)
    assert second.device.type == DEVICE and torch.equal(second.cpu(), cpu.unbind()[1])
    second.fill_(1)
    assert torch.equal(dev.unbind()[1].cpu(), torch.ones(3, 4))
    narrowed = dev.narrow(0, 1, 1)
    assert narrowed.is_nested and narrowed.device.type == DEVICE
    assert torch.equal(narrowed.unbind()[0].cpu(), torch.ones(3, 4))
    pieces = dev.chunk(2, -1)
    assert [p.device.type for p in pieces] == [DEVICE, DEVICE]
    assert torch.equal(pieces[1].unbind()[1].cpu(), torch.ones(3, 2))


def test_to_padded_tensor():
    cpu = torch.nested.nested_tensor(_components())
    padded = cpu.to(DEVICE).to_padded_tensor(0.5)
    assert padded.device.type == DEVICE and not padded.is_nested
    assert torch.equal(padded.cpu(), cpu.to_padded_tensor(0.5))


CASES = {
    "add": lambda a: a + a,
    "mul_scalar": lambda a: a * 3,
    "relu": torch.relu,
    "neg": torch.neg,
    "softmax": lambda a: torch.softmax(a, -1),
    "transpose": lambda a: a.transpose(1, 2).contiguous(),
    "matmul": lambda a: torch.matmul(a, a.transpose(1, 2)),
    "layer_norm": lambda a: torch.nn.functional.layer_norm(
        a, (4,), torch.linspace(0.5, 2, 4, device=a.device), torch.linspace(-1, 1, 4, device=a.device)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operators_on_nested(name):
    cpu = torch.nested.nested_tensor(_components())
    got = CASES[name](cpu.to(DEVICE))
    _assert_same(got, CASES[name](cpu))


def test_every_nested_cpu_kernel_over_a_composite_is_routed():
    # `matmul` ran its CompositeImplicitAutograd kernel on the device and raised
    # "NestedTensorImpl doesn't support sizes".
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    keys = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
            "CompositeExplicitAutogradNonFunctional")
    names = [n for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("aten::") and has(n, "NestedTensorCPU") and any(has(n, k) for k in keys)]
    assert "aten::matmul" in names
    unrouted = sorted(n for n in names if not has(n, "NestedTensorPrivateUse1"))
    assert unrouted == [], f"operators left to their composite: {unrouted}"


def test_a_cpu_nested_argument_is_refused_as_on_cuda():
    cpu = torch.nested.nested_tensor(_components())
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        cpu.to(DEVICE) + cpu


def test_in_place_operators_write_the_device_tensor():
    cpu = torch.nested.nested_tensor(_components())
    dev = cpu.to(DEVICE)
    out = dev.mul_(2.0)
    assert out is dev
    dev.add_(dev)
    _assert_same(dev, cpu * 4)


def test_jagged_layout():
    # A Python subclass over dense device tensors: it worked before nested.cc too, and guards that
    # the NestedTensorPrivateUse1 kernels leave it alone.
    parts = _components()
    nt = torch.nested.nested_tensor(parts, layout=torch.jagged, device=DEVICE)
    assert nt.device.type == DEVICE
    got = torch.relu(nt + 1)
    want = torch.relu(torch.nested.nested_tensor(parts, layout=torch.jagged) + 1)
    for g, w in zip(got.unbind(), want.unbind()):
        torch.testing.assert_close(g.cpu(), w)


def _gradients_through_nested(device, layout):
    """Leaves on `device` made into a nested tensor of `layout` with autograd kept
    (as_nested_tensor), a linear layer, an activation and softmax over it, and a loss of its
    values: the leaves' and the weight's gradients, on the CPU."""
    torch.manual_seed(0)
    leaves = [torch.randn(2, 3).to(device).requires_grad_(),
              torch.randn(4, 3).to(device).requires_grad_()]
    weight = torch.randn(5, 3).to(device).requires_grad_()
    nested = torch.nested.as_nested_tensor(leaves, layout=layout)
    if layout == torch.jagged:
        out = torch.nn.functional.linear(nested.sin(), weight).softmax(dim=-1) * 3
        loss = (out.values() ** 2).sum()
    else:
        out = torch.nn.functional.softmax(torch.nn.functional.linear(nested, weight).relu() * 2,
                                          dim=-1)
        loss = (out.to_padded_tensor(0.0) ** 2).sum()
    loss.backward()
    assert all(t.grad.device.type == torch.device(device).type for t in [*leaves, weight])
    return [t.grad.cpu() for t in [*leaves, weight]]


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=["strided", "jagged"])
def test_autograd_through_nested_tensors(layout):
    got = _gradients_through_nested(DEVICE, layout)
    want = _gradients_through_nested("cpu", layout)
    assert any(bool(g.abs().sum() > 0) for g in want)  # the loss depends on every leaf
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_transformer_encoder_fast_path_matches_the_cpu():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,
                                             batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True).eval()
    src = torch.randn(3, 5, 8)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 2 + [True] * 3])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = encoder(src, src_key_padding_mask=mask)
        encoder.to(DEVICE)
        got = encoder(src.to(DEVICE), src_key_padding_mask=mask.to(DEVICE))
    assert got.device.type == DEVICE and not got.is_nested
    assert got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
