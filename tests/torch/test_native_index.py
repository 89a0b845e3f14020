"""Native kernels that read indices, against the CPU: index_select (Note [Native index_select] in
adapters/torch/native_index.cc: embedding's rows), advanced indexing by one index tensor (Note
[Native advanced indexing], the same file), embedding's backward (Note [Native embedding
backward], the same file) and nll_loss with its backward (Note [Native nll_loss] in
adapters/torch/native_loss.cc: cross_entropy's targets). Indices out of range are found on the
device and thrown by the next sync point (Note [Errors found on the device] in
adapters/torch/native_launches.cc), or by the operator with OCLVM_LAUNCH_BLOCKING=1.

PoCL's devices take the host path by default, so these tests run in a subprocess with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, they run in this process.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import oclvm  # noqa: F401  (the opencl device)

from native_util import launches, native_only, random_tensor as make, run_file_natively

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
          torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


def test_native_index_in_a_subprocess():
    run_file_natively(__file__)


@native_only
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
def test_index_select_gathers_as_the_cpu_in_one_launch(dtype, index_dtype):
    g = torch.Generator().manual_seed(0)
    x = make((5, 6, 7), dtype, g)
    for dim in (0, 1, 2, -1):
        index = torch.randint(0, x.size(dim), (9,), generator=g, dtype=index_dtype)
        before = launches()
        out = x.to("opencl").index_select(dim, index.to("opencl"))
        assert launches() == before + 1
        expected = x.index_select(dim, index)
        assert out.shape == expected.shape and out.is_contiguous()
        assert torch.equal(out.cpu(), expected), (dim,)


@native_only
def test_index_select_takes_views_whose_outer_and_inner_dimensions_step_as_one():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(4, 8, 6, generator=g)
    device = base.to("opencl")
    views = {
        "a column slice": lambda t: t[:, :, 1:5],        # inner: one run of stride 1
        "every other row": lambda t: t[:, ::2],          # dim 1 strided
        "a transposed pair": lambda t: t.transpose(1, 2),  # inner (dim 2) of stride 6
        "the whole tensor": lambda t: t,
    }
    for name, view in views.items():
        for index in (torch.tensor([3, 0, 3, 2]), torch.tensor(3)):  # a vector, a number
            before = launches()
            out = view(device).index_select(1, index.to("opencl"))
            assert launches() == before + 1, name
            assert torch.equal(out.cpu(), view(base).index_select(1, index)), name


@native_only
def test_index_select_leaves_what_it_does_not_take_to_the_cpu_kernel():
    x = torch.randn(4, 5, 6)
    device = x.to("opencl")
    index = torch.tensor([1, 0])
    # Outer dimensions that do not step as one: the CPU kernel's values.
    before = launches()
    assert torch.equal(device.permute(1, 0, 2).index_select(2, index.to("opencl")).cpu(),
                       x.permute(1, 0, 2).index_select(2, index))
    # The CPU's errors, with its words.
    with pytest.raises(IndexError, match="Index is supposed to be a vector"):
        device.index_select(0, torch.tensor([[0]], device="opencl"))
    with pytest.raises(IndexError, match="out of range"):
        device.index_select(3, index.to("opencl"))
    with pytest.raises(RuntimeError, match="int32 or int64"):
        device.index_select(0, torch.tensor([0.0], device="opencl"))
    # An empty index, a zero-dimensional self, and a vector of a dtype the CPU refuses for one.
    assert device.index_select(1, torch.tensor([], dtype=torch.long, device="opencl")).shape == (
        4, 0, 6)
    scalar = torch.tensor(2.5)
    assert scalar.to("opencl").index_select(0, torch.tensor([0], device="opencl")).item() == 2.5
    with pytest.raises(NotImplementedError, match="UInt16"):
        torch.zeros(3, dtype=torch.uint16, device="opencl").index_select(
            0, torch.tensor([1], device="opencl"))
    assert launches() == before


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_forward_and_backward_are_native_and_the_cpus_bits(dtype, index_dtype,
                                                                      padding_idx):
    g = torch.Generator().manual_seed(2)
    for rows, shape in ((50, (3, 7)), (10, (200,)), (1000, (8, 64))):  # repeats sum in order
        weight = torch.randn(rows, 8, generator=g, dtype=dtype, requires_grad=True)
        ids = torch.randint(0, rows, shape, generator=g, dtype=index_dtype)
        device_weight = weight.detach().to("opencl").requires_grad_()
        torch.opencl.reset_fallback_counts()
        out = torch.nn.functional.embedding(ids.to("opencl"), device_weight,
                                            padding_idx=padding_idx)
        expected = torch.nn.functional.embedding(ids, weight, padding_idx=padding_idx)
        assert torch.equal(out.detach().cpu(), expected.detach())
        grad = torch.randn(expected.shape, generator=g, dtype=dtype)
        before = launches()
        out.backward(grad.to("opencl"))
        expected.backward(grad)
        assert launches() == before + 4  # count, starts, list, sum
        assert torch.opencl.fallback_counts() == {}
        assert torch.equal(device_weight.grad.cpu(), weight.grad)


@native_only
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
def test_embedding_backward_of_odd_operands_is_the_cpus(index_dtype):
    backward = torch.ops.aten.embedding_dense_backward
    # A strided gradient, indices not contiguous, and indices outside [0, num_weights), which add
    # nowhere as on the CPU (the forward raises first in a model: this calls the backward itself);
    # padding_idx 1.
    grad = torch.randn(6, 5).t()  # [5, 6]
    ids = torch.tensor([0, 9, 2, 9, -2, 9, 1, 9, 2, 9], dtype=index_dtype)[::2]
    expected = backward(grad, ids, 4, 1, False)
    before = launches()
    got = backward(grad.to("opencl"), ids.to("opencl"), 4, 1, False)
    assert torch.equal(got.cpu(), expected)
    assert launches() == before + 4
    # No indices: a gradient of zeros, as the CPU's (a fill); no rows, or no columns: nothing.
    assert torch.equal(backward(torch.empty(0, 6, device="opencl"),
                                torch.empty(0, dtype=index_dtype, device="opencl"), 3, -1,
                                False).cpu(), torch.zeros(3, 6))
    assert backward(grad.to("opencl"), ids.to("opencl"), 0, -1, False).shape == (0, 6)
    assert backward(torch.empty(5, 0, device="opencl"), ids.to("opencl"), 4, -1,
                    False).shape == (4, 0)
    assert launches() == before + 4
    # A gradient that is not one row per index: the CPU's error.
    with pytest.raises(RuntimeError):
        backward(torch.randn(4, 6).to("opencl"), ids.to("opencl"), 4, -1, False)
    assert launches() == before + 4


@native_only
def test_embedding_backward_scaled_by_frequency_is_left_to_the_cpu_kernel():
    weight = torch.randn(5, 4, requires_grad=True)
    ids = torch.tensor([1, 1, 3, 1])
    device_weight = weight.detach().to("opencl").requires_grad_()
    torch.opencl.reset_fallback_counts()
    torch.nn.functional.embedding(ids.to("opencl"), device_weight,
                                  scale_grad_by_freq=True).sum().backward()
    torch.nn.functional.embedding(ids, weight, scale_grad_by_freq=True).sum().backward()
    assert torch.opencl.fallback_counts() == {"aten::embedding_dense_backward": 1}
    assert torch.equal(device_weight.grad.cpu(), weight.grad)


# Advanced indexing: (the indices made with `to`, on a tensor `t` of 3 x 4 x 5).
ADVANCED = {
    "columns_from_the_end": lambda t, to: t[:, to(torch.tensor([-1, 0, 2]))],  # GPT-2's padding
    "a_matrix_of_rows": lambda t, to: t[to(torch.tensor([[2, -3], [0, 1]]))],
    "last_dimension_int32": lambda t, to: t[..., to(torch.tensor([4, 0, 4], dtype=torch.int32))],
    "one_element_index": lambda t, to: torch.ops.aten.index(t, [None, to(torch.tensor(2))]),
    "two_broadcast": lambda t, to: t[:, to(torch.tensor([[0], [1]])), to(torch.tensor([1, -2, 3]))],
    "three": lambda t, to: t[to(torch.tensor([2, 0])), to(torch.tensor([1, 3])),
                             to(torch.tensor([4, -5]))],
    "mask_function": lambda t, to: t[to(torch.arange(3).view(3, 1, 1, 1)),
                                     to(torch.arange(4).view(1, 1, 1, 4))],  # transformers'
}


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16],
                         ids=str)
@pytest.mark.parametrize("case", ADVANCED.values(), ids=ADVANCED.keys())
def test_advanced_indexing_is_one_launch(case, dtype):
    x = make((3, 4, 5), dtype, torch.Generator().manual_seed(2))
    before_calls, before = oclvm._C.native_operator_calls(), launches()
    got = case(x.to("opencl"), lambda i: i.to("opencl"))
    assert oclvm._C.native_operator_calls() == before_calls + 1
    assert launches() == before + 1  # the broadcast indices' copies are copies, not launches
    expected = case(x, lambda i: i)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert torch.equal(got.cpu(), expected)


@native_only
def test_advanced_indexing_of_a_contiguous_self_with_an_odd_stride_of_one():
    """[3, 1, 4, 5] with strides (20, 60, 5, 1) is contiguous: its elements lie in row-major order
    whatever the stride of its size-1 dimension, which the kernel must not step by."""
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(4))

    def index(t, to):
        view = t.reshape(1, 3, 4, 5).transpose(0, 1)
        assert view.is_contiguous() and view.stride() == (20, 60, 5, 1)
        return view[:, :, to(torch.tensor([1, 3])), to(torch.tensor([0, -1]))]

    before = oclvm._C.native_operator_calls()
    got = index(x.to("opencl"), lambda i: i.to("opencl"))
    assert oclvm._C.native_operator_calls() == before + 1
    expected = index(x, lambda i: i)
    assert got.shape == expected.shape and got.is_contiguous() and expected.is_contiguous()
    assert torch.equal(got.cpu(), expected)


@native_only
@pytest.mark.parametrize("case", [
    lambda t, to: t[to(torch.tensor([0, 2])), :, to(torch.tensor([1, 3]))],  # not consecutive
    lambda t, to: t[to(torch.tensor([True, False, True]))],               # a mask
    lambda t, to: t.transpose(0, 2)[:, to(torch.tensor([1, 1]))],         # a transposed self
    lambda t, to: t[:, to(torch.tensor([], dtype=torch.long))],          # an empty index
    lambda t, to: t[to(torch.tensor([[0, 1, 2], [2, 1, 0]])).t()],      # a transposed index
], ids=["apart", "mask", "transposed_self", "empty_index", "transposed_index"])
def test_advanced_indexing_the_native_path_leaves_is_the_cpus(case):
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(3))
    before = oclvm._C.native_operator_calls()
    got = case(x.to("opencl"), lambda i: i.to("opencl"))
    assert oclvm._C.native_operator_calls() == before
    expected = case(x, lambda i: i)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert torch.equal(got.cpu(), expected)


@native_only
@pytest.mark.parametrize("bad", [7, -9])
@pytest.mark.parametrize("second", [False, True], ids=["one_index", "second_of_two"])
def test_an_advanced_index_out_of_range_is_the_cpus_index_error(bad, second):
    x = torch.randn(3, 4, 5)

    def index(t, to):
        if second:  # the CPU numbers the dimension among the index tensors
            return t[:, to(torch.tensor([0, 1])), to(torch.tensor([1, bad]))]
        return t[:, :, to(torch.tensor([1, bad]))]

    words = f"index {bad} is out of bounds for dimension {int(second)} with size 5"
    with pytest.raises(IndexError, match=words):
        index(x, lambda i: i)
    torch.opencl.synchronize()
    out = index(x.to("opencl"), lambda i: i.to("opencl"))  # returns: no error yet
    with pytest.raises(IndexError, match=words):
        out.cpu()
    torch.opencl.synchronize()


@native_only
@pytest.mark.parametrize("sync", ["cpu", "item", "synchronize"])
@pytest.mark.parametrize("bad", [10, -1])
def test_an_index_out_of_range_is_thrown_by_the_next_sync_point(sync, bad):
    torch.opencl.synchronize()
    x = torch.arange(10.0, device="opencl")
    out = x.index_select(0, torch.tensor([2, bad, 3], device="opencl"))  # returns: no error yet
    with pytest.raises(IndexError, match=rf"index out of range in self: index {bad} of a "
                                         r"dimension of size 10"):
        if sync == "cpu":
            out.cpu()
        elif sync == "item":
            out[0].item()
        else:
            torch.opencl.synchronize()
    # Thrown once: the error word is clear again, and the device goes on.
    torch.opencl.synchronize()
    assert x.index_select(0, torch.tensor([9, 0], device="opencl")).tolist() == [9.0, 0.0]


@native_only
def test_a_bad_index_along_dim_1_of_a_matrix_is_the_cpus_runtime_error():
    # The CPU's kernel for dim 1 of two or more dimensions words it so, as a RuntimeError.
    x = torch.arange(12.0).view(3, 4)
    words = "INDICES element is out of DATA bounds, id=7 axis_dim=4"
    with pytest.raises(RuntimeError, match=words):
        x.index_select(1, torch.tensor([7]))
    out = x.to("opencl").index_select(1, torch.tensor([1, 7], device="opencl"))
    with pytest.raises(RuntimeError, match=words):
        out.cpu()
    torch.opencl.synchronize()


@native_only
def test_the_error_names_the_first_bad_index_a_work_item_found_and_reads_nothing_out_of_range():
    x = torch.arange(4.0, device="opencl")
    out = x.index_select(0, torch.tensor([7, 1, 7], device="opencl"))
    with pytest.raises(IndexError, match="index 7 of a dimension of size 4"):
        out.cpu()
    # The work-items with good indices wrote their elements; the others wrote zero.
    assert out.cpu().tolist() == [0.0, 1.0, 0.0]


@native_only
def test_a_host_section_after_a_bad_index_throws_before_its_cpu_kernel_reads_the_result():
    x = torch.arange(6.0, device="opencl")
    out = x.index_select(0, torch.tensor([6], device="opencl"))
    with pytest.raises(IndexError, match="index 6 of a dimension of size 6"):
        out.atan()  # no native kernel: a host section, whose entry is a sync point
    torch.opencl.synchronize()


@pytest.mark.skipif(torch.opencl.device_count() < 2, reason="needs two devices")
@native_only
def test_each_device_keeps_its_own_errors():
    x1 = torch.arange(5.0, device="opencl:1")
    x1.index_select(0, torch.tensor([5], device="opencl:1"))
    x0 = torch.arange(5.0, device="opencl:0")
    assert x0.index_select(0, torch.tensor([4], device="opencl:0")).cpu().tolist() == [4.0]
    torch.opencl.synchronize(0)  # device 0's sync point: device 1's error stays
    with pytest.raises(IndexError, match="on opencl:1"):
        torch.opencl.synchronize(1)
    torch.opencl.synchronize()


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nll_loss_and_its_gradient_are_the_cpus_bits_in_one_launch_each(dtype, reduction,
                                                                         weighted):
    g = torch.Generator().manual_seed(3)
    # 4,100 rows cross the CPU's cascade of partial sums several times; 2 is ignore_index.
    for rows, ignore_index in ((1, -100), (17, -100), (4100, 2)):
        x = torch.randn(rows, 7, generator=g, dtype=dtype).log_softmax(1).requires_grad_()
        target = torch.randint(0, 7, (rows,), generator=g)
        weight = torch.rand(7, generator=g, dtype=dtype) if weighted else None
        device_x = x.detach().to("opencl").requires_grad_()
        before = launches()
        out = torch.nn.functional.nll_loss(
            device_x, target.to("opencl"), weight=None if weight is None else weight.to("opencl"),
            reduction=reduction, ignore_index=ignore_index)
        assert launches() == before + 1
        expected = torch.nn.functional.nll_loss(x, target, weight=weight, reduction=reduction,
                                                ignore_index=ignore_index)
        grad = torch.randn(expected.shape, generator=g, dtype=dtype)
        out.backward(grad.to("opencl"))
        expected.backward(grad)
        assert launches() == before + 2
        assert torch.equal(out.detach().cpu(), expected.detach()), rows
        assert torch.equal(device_x.grad.cpu(), x.grad), rows


@native_only
def test_nll_loss_reads_strided_operands_as_the_cpu():
    g = torch.Generator().manual_seed(4)
    base = torch.randn(7, 9, generator=g, dtype=torch.float64).log_softmax(0)
    targets = torch.randint(0, 7, (18,), generator=g)
    weights = torch.rand(14, generator=g, dtype=torch.float64)
    # x transposed (strides 1, 9), every other target and weight (stride 2), on the device.
    x, target, weight = base.t(), targets[::2], weights[1::2]
    device_x = base.to("opencl").t().requires_grad_()
    device_target, device_weight = targets.to("opencl")[::2], weights.to("opencl")[1::2]
    assert device_x.stride() == (1, 9) and device_target.stride() == (2,)
    expected_x = x.clone().requires_grad_()
    for reduction in ("mean", "sum", "none"):
        before = launches()
        out = torch.nn.functional.nll_loss(device_x, device_target, weight=device_weight,
                                           reduction=reduction)
        expected = torch.nn.functional.nll_loss(expected_x, target, weight=weight,
                                                reduction=reduction)
        # The gradient of the output expanded from one number (stride 0 for 'none''s rows).
        device_grad = torch.tensor(0.5, dtype=torch.float64, device="opencl").expand(out.shape)
        (device_x_grad,) = torch.autograd.grad(out, device_x, device_grad)
        (expected_grad,) = torch.autograd.grad(
            expected, expected_x, torch.tensor(0.5, dtype=torch.float64).expand(expected.shape))
        assert launches() == before + 2, reduction
        assert torch.equal(out.detach().cpu(), expected.detach()), reduction
        assert torch.equal(device_x_grad.cpu(), expected_grad), reduction


@native_only
def test_nll_loss_of_one_sample_and_cross_entropy_train_natively():
    x = torch.randn(7).log_softmax(0)
    assert torch.equal(torch.nn.functional.nll_loss(x.to("opencl"), torch.tensor(3, device="opencl")
                                                    ).cpu(),
                       torch.nn.functional.nll_loss(x, torch.tensor(3)))
    logits = torch.randn(6, 5, requires_grad=True)
    target = torch.tensor([0, 4, 1, 1, 3, 2])
    device_logits = logits.detach().to("opencl").requires_grad_()
    torch.opencl.reset_fallback_counts()
    loss = torch.nn.functional.cross_entropy(device_logits, target.to("opencl"))
    loss.backward()
    assert not {"aten::nll_loss_forward", "aten::nll_loss_backward"} & set(
        torch.opencl.fallback_counts())
    expected = torch.nn.functional.cross_entropy(logits, target)
    expected.backward()
    torch.testing.assert_close(loss.detach().cpu(), expected.detach())
    torch.testing.assert_close(device_logits.grad.cpu(), logits.grad)


@native_only
def test_nll_loss_leaves_other_dtypes_and_targets_to_the_cpu_kernel():
    x = torch.randn(4, 3).log_softmax(1)
    before = launches()
    got = torch.nn.functional.nll_loss(x.to(torch.bfloat16).to("opencl"),
                                       torch.tensor([0, 2, 1, 1], device="opencl"))
    assert torch.equal(got.cpu(), torch.nn.functional.nll_loss(x.to(torch.bfloat16),
                                                               torch.tensor([0, 2, 1, 1])))
    got = torch.nn.functional.nll_loss(x.to("opencl"),
                                       torch.tensor([0, 2, 1, 1], dtype=torch.uint8,
                                                    device="opencl"))
    assert torch.equal(got.cpu(), torch.nn.functional.nll_loss(
        x, torch.tensor([0, 2, 1, 1], dtype=torch.uint8)))
    with pytest.raises(RuntimeError, match="size mismatch"):  # the CPU's check, below Python's
        torch.ops.aten.nll_loss_forward(x.to("opencl"), torch.tensor([0, 1], device="opencl"),
                                        None, 1, -100)
    assert launches() == before


@native_only
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_a_target_out_of_range_is_thrown_by_the_next_sync_point(reduction):
    x = torch.randn(3, 4).log_softmax(1).to("opencl")
    loss = torch.nn.functional.nll_loss(x, torch.tensor([0, 4, -3], device="opencl"),
                                        reduction=reduction)
    with pytest.raises(IndexError, match=r"Target (4|-3) is out of bounds\. \(4 classes"):
        loss.cpu()
    torch.opencl.synchronize()  # thrown once
    good = torch.nn.functional.nll_loss(x, torch.tensor([0, 3, 1], device="opencl"))
    assert torch.isfinite(good.cpu())


def test_a_devices_first_checked_kernel_allocates_its_error_word_once():
    script = """
        import gc, torch, oclvm
        x = torch.arange(8.0, device="opencl")
        index = torch.tensor([1], device="opencl")
        gc.collect()
        before = torch.opencl.memory_allocated()
        for _ in range(3):
            x.index_select(0, index)
        gc.collect()
        print("kept:", torch.opencl.memory_allocated() - before)
    """
    env = dict(os.environ, OCLVM_KERNELS="native", PYTHONPATH=os.pathsep.join(sys.path))
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "kept: 512" in completed.stdout, completed.stdout  # one block, whatever the calls


def test_with_launch_blocking_the_operator_throws_its_bad_index():
    script = """
        import torch, oclvm
        x = torch.arange(3.0, device="opencl")
        try:
            x.index_select(0, torch.tensor([0, 3], device="opencl"))
        except IndexError as e:
            print("raised by the operator:", e)
        print(x.index_select(0, torch.tensor([2], device="opencl")).tolist())
        try:
            torch.nn.functional.nll_loss(x.view(1, 3), torch.tensor([5], device="opencl"))
        except IndexError as e:
            print("raised by the loss:", e)
    """
    env = dict(os.environ, OCLVM_KERNELS="native", OCLVM_LAUNCH_BLOCKING="1",
               PYTHONPATH=os.pathsep.join(sys.path))
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "raised by the operator: index out of range in self: index 3 of a dimension of size 3" \
        in completed.stdout, completed.stdout
    assert "[2.0]" in completed.stdout, completed.stdout
    assert "raised by the loss: Target 5 is out of bounds." in completed.stdout, completed.stdout
