"""The operators the device routes to the CPU fallback although they have a composite kernel.

ops.cc (Note [Composite kernels the CPU does not use]) routes to the CPU fallback every aten
operator that has both a CPU kernel and an explicit composite kernel, so the device computes what
the CPU computes instead of the composite's different route (LayerNorm through batch norm gave
last-bit differences that AdamW amplified; mse_loss warned about a resized output). This recomputes
that set from the dispatcher and checks each has an opencl kernel, and checks LayerNorm, GroupNorm
and mse_loss agree with the CPU bit for bit, without warnings.
"""
import torch

import warnings

import pytest

KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def _ops_with_cpu_and_composite():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return {name for name in torch._C._dispatch_get_all_op_names()
            if name.startswith("aten::") and has(name, "CPU")
            and any(has(name, key) for key in KEYS)}


def test_every_cpu_kernel_over_a_composite_is_routed_to_the_fallback():
    unrouted = sorted(name for name in _ops_with_cpu_and_composite()
                      if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"))
    assert unrouted == [], (
        f"Expected every operator with a CPU and an explicit composite kernel to have an opencl "
        f"kernel (ops.cc route_cpu_kernels_over_composites), but these have none: {unrouted}")


def test_the_routed_set_is_large_and_holds_arithmetic():
    routed = _ops_with_cpu_and_composite()
    assert {"aten::add.Tensor", "aten::native_layer_norm", "aten::mse_loss"} <= routed
    assert len(routed) > 300


def test_layer_norm_and_group_norm_equal_the_cpu_bit_for_bit():
    torch.manual_seed(0)
    x = torch.randn(4, 12, 32)
    for module in (torch.nn.LayerNorm(32), torch.nn.GroupNorm(4, 12)):
        on_cpu = module(x)
        on_device = module.to("opencl")(x.to("opencl")).cpu()
        module.to("cpu")
        assert torch.equal(on_cpu, on_device), f"{module}: differs from the CPU"


def test_mse_loss_equals_the_cpu_without_warnings():
    a, b = torch.randn(8, 5), torch.randn(8, 5)
    for reduction in ("mean", "sum", "none"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = torch.nn.functional.mse_loss(a.to("opencl"), b.to("opencl"),
                                               reduction=reduction).cpu()
        assert torch.equal(got, torch.nn.functional.mse_loss(a, b, reduction=reduction))


def test_attention_chooses_the_cpus_kernel_and_equals_it_bit_for_bit():
    """attention.cc registers the CPU's kernel choice for the device (the math decomposition
    differed from the CPU's flash kernel in the last bits); forward and gradients match."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        q, k, v = (torch.randn(2, 4, 8, 16, dtype=dtype) for _ in range(3))
        for causal in (False, True):
            expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            got = torch.nn.functional.scaled_dot_product_attention(
                q.to("opencl"), k.to("opencl"), v.to("opencl"), is_causal=causal).cpu()
            assert torch.equal(got, expected), (dtype, causal)
    leaves = [torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3)]
    on_device = [t.detach().to("opencl").requires_grad_() for t in leaves]
    torch.nn.functional.scaled_dot_product_attention(*leaves).sum().backward()
    torch.nn.functional.scaled_dot_product_attention(*on_device).sum().backward()
    for cpu_leaf, device_leaf in zip(leaves, on_device):
        assert torch.equal(cpu_leaf.grad, device_leaf.grad.cpu())


def test_routed_operators_still_refuse_tensors_of_another_device():
    """The composites checked that every tensor is on one device; routed to the fallback, the
    check stays (cpu_fallback_on_one_device): `opencl + cpu` raises as on CUDA, a CPU scalar
    tensor is still welcome."""
    x = torch.arange(4.0, device="opencl")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + torch.ones(4)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mul(torch.ones(4), x)
    assert torch.equal((x + torch.tensor(2.0)).cpu(), torch.arange(4.0) + 2)
