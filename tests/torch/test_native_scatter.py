"""gather, scatter, scatter_add and index_add on the native path, against the CPU (Note [Native
gather and scatter] in adapters/torch/native_scatter.cc): values and sums are the CPU's bits, every
operand layout, in place and out of place, as gather's gradient; an index out of range is found on
the device and thrown by the next sync point with the CPU's words.

PoCL's devices take the host path by default, so these tests run in a subprocess with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, they run in this process.
"""
import pytest
import torch

import oclvm  # noqa: F401  (the opencl device)

from native_util import launches, native_only, random_tensor as make, run_file_natively

MOVED = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
         torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
ADDED = [torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
         torch.uint8]


def test_native_scatter_in_a_subprocess():
    run_file_natively(__file__)


def device(*tensors):
    return [t.to("opencl") for t in tensors]


@native_only
@pytest.mark.parametrize("dtype", MOVED, ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
def test_gather_moves_the_cpus_elements_in_one_launch(dtype, index_dtype):
    g = torch.Generator().manual_seed(0)
    x = make((4, 5, 6), dtype, g)
    for dim in (0, 1, 2, -1):
        index = torch.randint(0, x.size(dim), (3, 4, 5), generator=g, dtype=index_dtype)
        before = launches()
        out = x.to("opencl").gather(dim, index.to("opencl"))
        assert launches() == before + 1
        assert out.is_contiguous()
        assert torch.equal(out.cpu(), x.gather(dim, index)), dim


@native_only
@pytest.mark.parametrize("dtype", MOVED, ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
def test_scatter_of_a_tensor_and_of_a_value_keeps_the_cpus_last_write(dtype, index_dtype):
    g = torch.Generator().manual_seed(1)
    x = make((4, 5, 6), dtype, g)
    src = make((6, 5, 6), dtype, g)
    value = True if dtype == torch.bool else 3
    for dim in (0, 1, 2):
        # Twice as many indices as places along dim: most places are written more than once.
        sizes = [4, 5, 6]
        sizes[dim] *= 2
        sizes[dim] = min(sizes[dim], src.size(dim))
        index = torch.randint(0, x.size(dim), sizes, generator=g, dtype=index_dtype)
        d_x, d_index, d_src = device(x, index, src)
        before = launches()
        out = d_x.scatter(dim, d_index, d_src)
        assert launches() == before + 2  # the copy of self, then the scatter
        assert torch.equal(out.cpu(), x.scatter(dim, index, src)), dim
        assert torch.equal(d_x.scatter(dim, d_index, value).cpu(), x.scatter(dim, index, value))
        in_place = x.clone()
        d_in_place = in_place.to("opencl")
        before = launches()
        d_in_place.scatter_(dim, d_index, d_src)
        assert launches() == before + 1
        assert torch.equal(d_in_place.cpu(), in_place.scatter_(dim, index, src)), dim


@native_only
@pytest.mark.parametrize("dtype", ADDED, ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
def test_scatter_add_sums_are_the_cpus_bits(dtype, index_dtype):
    g = torch.Generator().manual_seed(2)
    x = make((5, 7), dtype, g)
    for dim in (0, 1):
        # Many indices per place, so each sum has many terms, added in the CPU's order.
        sizes = [5, 7]
        sizes[dim] = 300
        index = torch.randint(0, x.size(dim), sizes, generator=g, dtype=index_dtype)
        src = make(sizes, dtype, g)
        d_x, d_index, d_src = device(x, index, src)
        assert torch.equal(d_x.scatter_add(dim, d_index, d_src).cpu(),
                           x.scatter_add(dim, index, src)), dim
        d_x.scatter_add_(dim, d_index, d_src)
        assert torch.equal(d_x.cpu(), x.clone().scatter_add_(dim, index, src)), dim


@native_only
def test_scatter_add_of_an_expanded_index_is_the_cpus_bits():
    # A graph network's message passing: one index per row, expanded along the features. The
    # CPU's kernel takes its sorted path for this layout.
    g = torch.Generator().manual_seed(3)
    index = torch.randint(0, 50, (2000,), generator=g).unsqueeze(1).expand(-1, 16)
    src = torch.randn(2000, 16, generator=g)
    expected = torch.zeros(50, 16).scatter_add_(0, index, src)
    out = torch.zeros(50, 16, device="opencl").scatter_add_(0, index.to("opencl"),
                                                            src.to("opencl"))
    assert torch.equal(out.cpu(), expected)


@native_only
def test_gather_and_scatter_read_strided_views_as_the_cpu():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 8, 5, generator=g)
    index = torch.randint(0, 5, (8, 6, 3), generator=g).transpose(0, 1)  # not contiguous
    src = torch.randn(5, 6, 8, generator=g).permute(1, 2, 0)
    d_x, d_index, d_src = device(x, index, src)
    d_view = d_x[:, ::2].transpose(1, 2)  # a view with gaps
    view = x[:, ::2].transpose(1, 2)
    short_index = index[:, :5, :4] % 4
    d_short_index = d_index[:, :5, :4] % 4
    assert torch.equal(d_view.gather(2, d_short_index).cpu(), view.gather(2, short_index))
    assert torch.equal(d_x.scatter_add(2, d_index, d_src).cpu(), x.scatter_add(2, index, src))
    # In place into a view: only its elements change.
    d_view.scatter_(1, d_short_index, d_src)
    view.scatter_(1, short_index, src)
    assert torch.equal(d_x.cpu(), x)


@native_only
def test_gathers_gradient_is_a_native_scatter_add_with_the_cpus_bits():
    g = torch.Generator().manual_seed(5)
    w = torch.randn(6, 7, generator=g, requires_grad=True)
    index = torch.randint(0, 6, (40, 7), generator=g)
    d_w = w.detach().to("opencl").requires_grad_()
    d_w.gather(0, index.to("opencl")).square().sum().backward()
    w.gather(0, index).square().sum().backward()
    assert torch.equal(d_w.grad.cpu(), w.grad)
    # take_along_dim is gather, with its backward.
    d_w.grad = None
    order = d_w.detach().argsort(dim=1)
    torch.take_along_dim(d_w, order, dim=1).cumsum(1).sum().backward()
    w.grad = None
    torch.take_along_dim(w, order.cpu(), dim=1).cumsum(1).sum().backward()
    assert torch.equal(d_w.grad.cpu(), w.grad)


@native_only
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("shape, dim", [((7,), 0), ((5, 6), 0), ((5, 6), 1), ((4, 5, 6), -1)])
def test_index_add_is_a_native_scatter_add_with_the_cpus_bits(index_dtype, shape, dim):
    # A mixture of experts combines its experts' outputs so: index_add_ of rows into the tokens.
    g = torch.Generator().manual_seed(6)
    x = torch.randn(shape, generator=g)
    index = torch.randint(0, shape[dim], (40,), generator=g, dtype=index_dtype)
    sizes = list(shape)
    sizes[dim] = 40
    source = torch.randn(sizes, generator=g)
    d_x, d_index, d_source = device(x, index, source)
    before = launches()
    out = d_x.index_add(dim, d_index, d_source)
    assert launches() == before + 2  # the copy of self, then the additions
    assert torch.equal(out.cpu(), x.index_add(dim, index, source))
    before = launches()
    d_x.index_add_(dim, d_index, d_source)
    assert launches() == before + 1
    assert torch.equal(d_x.cpu(), x.index_add_(dim, index, source))


@native_only
def test_index_add_with_another_alpha_is_the_cpus_kernel():
    x = torch.randn(5, 3)
    index = torch.tensor([0, 4, 0, 2])
    source = torch.randn(4, 3)
    before = launches()
    out = x.to("opencl").index_add(0, index.to("opencl"), source.to("opencl"), alpha=0.3)
    assert launches() == before
    assert torch.equal(out.cpu(), x.index_add(0, index, source, alpha=0.3))


@native_only
def test_an_index_add_out_of_range_is_the_cpus_error_for_its_path():
    # The CPU adds through scatter_add_ (a RuntimeError naming the dimension) for an int64 index
    # along the first or last of two or more dimensions, and in its own loop (an IndexError)
    # otherwise: a vector, an int32 index, a middle dimension.
    named = "index 9 is out of bounds for dimension {} with size {}"
    cases = [((3,), 0, torch.int64, IndexError, "index out of range in self"),
             ((3, 4), 0, torch.int64, RuntimeError, named.format(0, 3)),
             ((3, 4), 1, torch.int64, RuntimeError, named.format(1, 4)),
             ((3, 4), 0, torch.int32, IndexError, "index out of range in self"),
             ((3, 4, 5), 1, torch.int64, IndexError, "index out of range in self")]
    for shape, dim, index_dtype, error, words in cases:
        sizes = list(shape)
        sizes[dim] = 1
        index, source = torch.tensor([9], dtype=index_dtype), torch.ones(sizes)
        with pytest.raises(error, match=words):
            torch.zeros(shape).index_add(dim, index, source)
        out = torch.zeros(shape, device="opencl").index_add(dim, index.to("opencl"),
                                                            source.to("opencl"))
        with pytest.raises(error, match=words):
            out.cpu()
    torch.opencl.synchronize()


@native_only
def test_index_add_with_a_complex_alpha_is_the_cpus():
    x = torch.randn(3, 2, dtype=torch.complex64)
    index, source = torch.tensor([0, 2]), torch.randn(2, 2, dtype=torch.complex64)
    got = x.to("opencl").index_add(0, index.to("opencl"), source.to("opencl"), alpha=2j)
    assert torch.equal(got.cpu(), x.index_add(0, index, source, alpha=2j))


@native_only
def test_what_the_native_path_does_not_take_is_the_cpus():
    x = torch.arange(12.0).view(3, 4)
    d_x = x.to("opencl")
    index = torch.tensor([[0, 1], [2, 0]])
    before = launches()
    # int16 indices, and a self of another rank: the CPU's errors.
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        d_x.gather(1, index.short().to("opencl"))
    with pytest.raises(RuntimeError, match="Index tensor must have the same number of "
                                           "dimensions"):
        d_x.gather(1, torch.tensor([0], device="opencl"))
    # src of another dtype, and an in-place self sharing memory with src.
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        d_x.scatter(0, index.to("opencl"), torch.ones(2, 2, dtype=torch.float64,
                                                           device="opencl"))
    # bool and float16 sums: the CPU's kernel, with its values.
    flags = torch.tensor([[True, False], [False, True]])
    assert torch.equal(flags.to("opencl").scatter_add(0, index.flip(1).to("opencl") % 2,
                                                      flags.to("opencl")).cpu(),
                       flags.scatter_add(0, index.flip(1) % 2, flags))
    half = torch.randn(3, 4).half()
    assert torch.equal(half.to("opencl").scatter_add(1, index.to("opencl"),
                                                     half[:2, :2].to("opencl")).cpu(),
                       half.scatter_add(1, index, half[:2, :2]))
    assert launches() == before


@native_only
@pytest.mark.parametrize("op", ["gather", "scatter", "scatter_add_"])
def test_an_index_out_of_bounds_is_thrown_by_the_next_sync_point_in_the_cpus_words(op):
    x = torch.arange(12.0).view(3, 4)
    bad = torch.tensor([[1, 4]])
    words = "index 4 is out of bounds for dimension 1 with size 4"
    cpu_call = {"gather": lambda t, i: t.gather(1, i),
                "scatter": lambda t, i: t.scatter(1, i, 5.0),
                "scatter_add_": lambda t, i: t.scatter_add_(1, i, torch.ones_like(i, dtype=t.dtype,
                                                                               device=t.device))}
    with pytest.raises(RuntimeError, match=words):
        cpu_call[op](x.clone(), bad)
    out = cpu_call[op](x.to("opencl"), bad.to("opencl"))  # returns: no error yet
    with pytest.raises(RuntimeError, match=words + r" \(found by a kernel on opencl:0"):
        out.cpu()
    # Thrown once; the device goes on.
    torch.opencl.synchronize()
    assert x.to("opencl").gather(1, torch.tensor([[3]], device="opencl")).item() == 3.0
