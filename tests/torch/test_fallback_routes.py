"""The operators the device routes to the CPU fallback although they have a composite kernel.

ops.cc (Note [Composite kernels the CPU does not use]) registers the CPU fallback for every aten
operator that has both a CPU kernel and a CompositeExplicitAutograd kernel, so the device computes
what the CPU computes instead of the composite's different route (LayerNorm through batch norm
gave last-bit differences that AdamW amplified). This recomputes that set from the dispatcher of
the installed torch, so a torch that adds such an operator fails here instead of silently
diverging, and checks LayerNorm and GroupNorm agree with the CPU bit for bit.
"""
import torch

KEY = "CompositeExplicitAutograd"


def _ops_with_cpu_and_composite():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return {name for name in torch._C._dispatch_get_all_op_names()
            if name.startswith("aten::") and has(name, "CPU") and has(name, KEY)}


def test_every_cpu_kernel_over_a_composite_is_routed_to_the_fallback():
    unrouted = sorted(name for name in _ops_with_cpu_and_composite()
                      if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"))
    assert unrouted == [], (
        f"Expected every operator with a CPU and a {KEY} kernel to have an opencl kernel "
        f"(ops.cc kCpuKernelsOverComposites), but these have none: {unrouted}")


def test_layer_norm_and_group_norm_equal_the_cpu_bit_for_bit():
    torch.manual_seed(0)
    x = torch.randn(4, 12, 32)
    for module in (torch.nn.LayerNorm(32), torch.nn.GroupNorm(4, 12)):
        on_cpu = module(x)
        on_device = module.to("opencl")(x.to("opencl")).cpu()
        module.to("cpu")
        assert torch.equal(on_cpu, on_device), f"{module}: differs from the CPU"
