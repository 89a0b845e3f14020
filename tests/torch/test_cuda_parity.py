"""What CUDA does that the device must do too, found by running other projects' code on both:
dtypes the CPU kernels lack (Note [Dtypes the CPU kernels lack] in adapters/torch/operator_facts.h),
the device checks of CUDA's kernels (Note [Device checks as on CUDA]), and uninitialised memory
under deterministic algorithms (Note [Uninitialized memory under deterministic algorithms] in
adapters/torch/ops.cc)."""
import pytest
import torch

import oclvm  # noqa: F401  (registers the device)

DEV = "opencl"
SAME_DEVICE = "Expected all tensors to be on the same device"
# Operators whose extra CUDA dtypes come from CUDA's own libraries (cuFFT, cuSPARSE, the fused
# attention kernels): left refused on the device, with the CPU's error.
CUDA_LIBRARIES_ONLY = ("fft.", "stft", "istft", "sparse.", "torch.ops.aten._flash",
                       "torch.ops.aten._efficient")


# ---------------------------------------------------------------------------------------------
# Dtypes the CPU kernels lack: the device answers as CUDA does.

@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32,
                                   torch.int64])
def test_histc_of_integers(dtype):
    # The CPU refuses: "histogram_cpu" not implemented for 'Int'. CUDA counts in the input's type.
    values = torch.tensor([0, 1, 1, 2, 3, 3, 3, 7, 9, 100], dtype=dtype)
    with pytest.raises(NotImplementedError):
        torch.histc(values, bins=4, min=0, max=8)
    got = torch.histc(values.to(DEV), bins=4, min=0, max=8)
    assert got.device.type == DEV and got.dtype == dtype
    expected = torch.histc(values.double(), bins=4, min=0, max=8).to(dtype)
    assert got.cpu().tolist() == expected.tolist() == [3, 4, 0, 1]
    out = torch.empty(0, dtype=dtype, device=DEV)
    returned = torch.histc(values.to(DEV), bins=4, min=0, max=8, out=out)
    assert returned is out and out.cpu().tolist() == [3, 4, 0, 1]


def test_mixtral_load_balancing_loss_counts_experts_with_histc():
    # transformers' router loss, unchanged: on every device but the CPU and MPS it calls
    # torch.histc on int32 expert indices (Mixtral, Qwen3-MoE, DBRX, Jamba, JetMoE ...).
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    torch.manual_seed(0)
    gates = tuple(torch.randn(6, 8) for _ in range(3))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    for attention_mask in (None, mask):
        expected = load_balancing_loss_func(gates, num_experts=8, top_k=2,
                                            attention_mask=attention_mask)
        got = load_balancing_loss_func(tuple(g.to(DEV) for g in gates), num_experts=8, top_k=2,
                                       attention_mask=None if attention_mask is None
                                       else attention_mask.to(DEV))
        assert got.device.type == DEV
        torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_operators_the_cpu_lacks(dtype):
    torch.manual_seed(0)
    x = torch.randn(1, 2, 4, 4, 4)
    got = torch.nn.functional.avg_pool3d(x.to(dtype).to(DEV), 2)
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu(), torch.nn.functional.avg_pool3d(x.to(dtype).float(),
                                                                          2).to(dtype))
    # and its backward, through autograd
    leaf = x.to(dtype).to(DEV).requires_grad_()
    torch.nn.functional.avg_pool3d(leaf, 2).sum().backward()
    assert leaf.grad.dtype == dtype
    torch.testing.assert_close(leaf.grad.cpu(), torch.full_like(x, 0.125).to(dtype))
    scores, target = torch.randn(3, 5), torch.tensor([0, 4, 2])
    got = torch.nn.functional.multi_margin_loss(scores.to(dtype).to(DEV), target.to(DEV))
    expected = torch.nn.functional.multi_margin_loss(scores.to(dtype).float(), target)
    torch.testing.assert_close(got.cpu(), expected.to(dtype))
    y = torch.tensor([0.1, 1.25, -2.5])
    torch.testing.assert_close(torch.polygamma(1, y.to(dtype).to(DEV)).cpu(),
                               torch.polygamma(1, y.to(dtype).float()).to(dtype))
    torch.testing.assert_close(torch.round(y.to(dtype).to(DEV), decimals=1).cpu(),
                               torch.round(y.to(dtype).float(), decimals=1).to(dtype))


def test_bool_operators_the_cpu_lacks():
    flags = torch.tensor([[True, False], [False, True]])
    got = torch.abs(flags.to(DEV))
    assert got.dtype == torch.bool and got.cpu().tolist() == flags.tolist()
    trace = torch.trace(flags.to(DEV))
    assert trace.dtype == torch.int64 and trace.item() == 2
    soft = torch.nn.functional.softsign(flags.to(DEV))
    assert soft.cpu().tolist() == [[0.5, 0.0], [0.0, 0.5]]


def test_dtypes_cuda_has_and_the_cpu_lacks_are_answered():
    """Every (operator, dtype) that PyTorch's OpInfo database lists for CUDA and not for the CPU
    is answered on the device, except the kinds left refused on purpose: complex32, and what
    only CUDA's libraries give (cuFFT's half-precision FFTs and stft, for power-of-two sizes
    only; cuSPARSE's half-precision sampled_addmm; the fused attention kernels)."""
    from torch.testing._internal.common_methods_invocations import op_db

    left_refused = {torch.complex32}
    unanswered = []
    for op in op_db:
        extra = set(op.supported_dtypes("cuda")) - set(op.supported_dtypes("cpu")) - left_refused
        if (not extra or op.name.startswith(CUDA_LIBRARIES_ONLY)
                or op.variant_test_name == "without_cudnn"):
            continue
        for dtype in sorted(extra, key=str):
            sample = next(iter(op.sample_inputs("cpu", dtype)), None)
            if sample is None:
                continue
            moved = sample.transform(lambda t: t.to(DEV) if isinstance(t, torch.Tensor) else t)
            try:
                result = op(moved.input, *moved.args, **moved.kwargs)
            except Exception as e:  # noqa: BLE001 (collected and reported below)
                unanswered.append(f"{op.name} {dtype}: {type(e).__name__}: {str(e)[:120]}")
                continue
            results = result if isinstance(result, (tuple, list)) else (result,)
            assert all(r.device.type == DEV for r in results if isinstance(r, torch.Tensor)), op
    assert unanswered == [], "\n".join(unanswered)


# ---------------------------------------------------------------------------------------------
# The device checks of CUDA's kernels.

@pytest.mark.parametrize("call", [
    lambda d, c: torch.cat([d, c]),
    lambda d, c: torch.stack([d, c]),
    lambda d, c: torch.where(d > 0, d, c),
    lambda d, c: torch.nn.functional.embedding(c.long().abs() % 3, d.view(3, 1)),
    lambda d, c: torch.index_select(d, 0, c.long().abs() % 3),
    lambda d, c: d + c,
    lambda d, c: torch.maximum(d, c),
    lambda d, c: torch.addcmul(d, d, c),
    lambda d, c: torch.lerp(d, c, 0.5),
    lambda d, c: torch.cross(d.view(1, 3), c.view(1, 3), dim=1),
], ids=["cat", "stack", "where", "embedding", "index_select", "add", "maximum", "addcmul",
        "lerp", "cross"])
def test_mixed_devices_are_refused_as_on_cuda(call):
    cpu = torch.tensor([1.0, -2.0, 3.0])
    device = torch.tensor([4.0, 5.0, -6.0], device=DEV)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        call(device, cpu)


def test_cpu_scalars_and_cpu_indices_stay_allowed_as_on_cuda():
    x = torch.tensor([1.0, -2.0, 3.0], device=DEV)
    scalar = torch.tensor(2.0)
    assert (x + scalar).cpu().tolist() == [3.0, 0.0, 5.0]
    assert torch.where(x > 0, x, scalar).cpu().tolist() == [1.0, 2.0, 3.0]
    assert torch.maximum(x, scalar).cpu().tolist() == [2.0, 2.0, 3.0]
    index = torch.tensor([2, 0])
    assert x[index].cpu().tolist() == [3.0, 1.0]
    y = x.clone()
    y[index] = torch.tensor([7.0, 8.0], device=DEV)
    assert y.cpu().tolist() == [8.0, -2.0, 7.0]
    y.index_put_((index,), torch.tensor(0.0))
    assert y.cpu().tolist() == [0.0, -2.0, 0.0]
    # copies between devices are what copies are for
    assert x.copy_(torch.tensor([4.0, 5.0, 6.0])).cpu().tolist() == [4.0, 5.0, 6.0]


def test_mixed_devices_leave_out_arguments_alone():
    out = torch.full((4,), 9.0, device=DEV)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.cat([torch.ones(2, device=DEV), torch.zeros(2)], out=out)
    assert out.cpu().tolist() == [9.0] * 4


# ---------------------------------------------------------------------------------------------
# Deterministic algorithms: uninitialised memory filled as on the CPU and CUDA.

@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def _garbage(dtype):
    # Leave recognisable bytes in the cache, so that a later empty() of the same size reuses them.
    torch.full((64,), 3, dtype=dtype, device=DEV)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.complex64, torch.int32,
                                   torch.int64, torch.uint8, torch.bool])
def test_empty_is_filled_under_deterministic_algorithms(deterministic, dtype):
    if dtype.is_floating_point or dtype.is_complex:
        def filled(t):
            return bool(torch.isnan(t.cpu()).all())
    elif dtype == torch.bool:
        def filled(t):
            return bool(t.cpu().all())
    else:
        def filled(t):
            return bool((t.cpu() == torch.iinfo(dtype).max).all())
    makers = {
        "empty": lambda: torch.empty(64, dtype=dtype, device=DEV),
        "empty_like": lambda: torch.empty_like(torch.zeros(64, dtype=dtype, device=DEV)),
        "new_empty": lambda: torch.zeros(1, dtype=dtype, device=DEV).new_empty(64),
        "empty_strided": lambda: torch.empty_strided((8, 8), (1, 8), dtype=dtype, device=DEV),
    }
    for name, make in makers.items():
        _garbage(dtype)
        t = make()
        assert filled(t), (name, t.cpu())


def test_resize_fills_only_the_new_elements_under_deterministic_algorithms(deterministic):
    x = torch.tensor([1.0, 2.0], device=DEV)
    x.resize_(5)
    values = x.cpu()
    assert values[:2].tolist() == [1.0, 2.0]
    assert torch.isnan(values[2:]).all()


def test_empty_is_left_alone_without_the_fill(deterministic):
    from torch.utils import deterministic as settings

    before = settings.fill_uninitialized_memory
    settings.fill_uninitialized_memory = False
    try:
        _garbage(torch.float32)
        t = torch.empty(64, device=DEV)
        assert not torch.isnan(t.cpu()).any()
    finally:
        settings.fill_uninitialized_memory = before
