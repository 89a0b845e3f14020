"""Matrix products on the native path (Note [Native matrix products] in
adapters/torch/native_blas.cc): mm, mm.out, bmm and addmm as one CLBlast call each, operands read
in place or copied, against the CPU; the calls the native path leaves give the CPU's values and
errors.

PoCL's devices take the host path by default, so these tests run in a subprocess with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, they run in this process.
"""
import pytest
import torch

import oclvm

from native_util import (copies, native_only, on_device_as, random_tensor as make,
                         run_file_natively)


def test_native_blas_in_a_subprocess():
    run_file_natively(__file__, staged_too=False)


def answered_natively():
    return oclvm._C.native_operator_calls()


with_clblast = pytest.mark.skipif(not oclvm._C.native_matrix_products(),
                                  reason="the module was built without CLBlast")


@native_only
@with_clblast
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_matrix_products_are_one_clblast_call_each(dtype):
    """mm, bmm and addmm: one native call, operands read in place when their rows or columns are
    contiguous and copied otherwise; values within the float rounding of another order of sums."""
    g = torch.Generator().manual_seed(12)
    a, b = make((9, 7), dtype, g), make((7, 5), dtype, g)
    x, y = make((3, 6, 4), dtype, g), make((3, 4, 5), dtype, g)
    bias, c = make((5,), dtype, g), make((9, 5), dtype, g)
    nan_bias = torch.full((9, 5), float("nan"), dtype=dtype)
    big_a, big_b = make((520, 300), dtype, g), make((260, 300), dtype, g)
    big_x, big_y = make((3, 100, 130), dtype, g), make((3, 130, 140), dtype, g)
    # (operator, its operands made with `to` from CPU tensors, keyword arguments, strided copies:
    # addmm's self into its result, and operands CLBlast cannot read in place)
    cases = [
        (torch.mm, lambda to: (to(a), to(b)), {}, 0),
        (torch.mm, lambda to: (to(a.t().contiguous()).t(), to(b)), {}, 0),
        (torch.mm, lambda to: (to(a), to(b.t().contiguous()).t()), {}, 0),
        (torch.mm, lambda to: (to(a)[1:8:3], to(b)), {}, 0),
        (torch.mm, lambda to: (to(a)[:1], to(b)), {}, 0),
        (torch.mm, lambda to: (to(a), to(b)[:, :1]), {}, 0),
        (torch.mm, lambda to: (to(a)[:, ::2], to(b)[::2]), {}, 1),  # a: no dimension of stride 1
        (torch.bmm, lambda to: (to(x), to(y)), {}, 0),
        (torch.bmm, lambda to: (to(x.transpose(1, 2).contiguous()).transpose(1, 2), to(y)), {}, 0),
        (torch.bmm, lambda to: (to(x), to(y[:1]).expand(3, 4, 5)), {}, 0),  # batch stride 0
        (torch.bmm, lambda to: (to(x.transpose(0, 1).contiguous()).transpose(0, 1), to(y)), {},
         0),  # batch stride below a matrix's extent
        (torch.bmm, lambda to: (to(x), to(y[:, :1]).expand(3, 4, 5)), {}, 1),  # row stride 0
        (torch.addmm, lambda to: (to(bias), to(a), to(b)), {}, 1),
        (torch.addmm, lambda to: (to(bias)[None], to(a), to(b)), {"beta": 2, "alpha": 3}, 1),
        (torch.addmm, lambda to: (to(c), to(a.t().contiguous()).t(), to(b)), {"alpha": -0.5}, 1),
        (torch.addmm, lambda to: (to(nan_bias), to(a), to(b)), {"beta": 0}, 0),  # self ignored
        # large enough for CLBlast's indirect kernels (padding, scratch buffers), batched too
        (torch.mm, lambda to: (to(big_a), to(big_b).t()), {}, 0),
        (torch.bmm, lambda to: (to(big_x), to(big_y)), {}, 0),
    ]
    torch.opencl.reset_fallback_counts()
    for op, operands, kwargs, strided_copies in cases:
        before, before_copies = answered_natively(), copies()
        got, expected = op(*operands(on_device_as), **kwargs), op(*operands(lambda t: t), **kwargs)
        assert answered_natively() == before + 1, op
        assert copies() == before_copies + strided_copies, op
        assert got.device.type == "opencl" and got.stride() == expected.stride()
        # float32 sums of k products in another order: within k ulps of the terms' size
        tolerance = dict(rtol=1e-4, atol=1e-4) if got.shape[-1] > 100 else {}
        torch.testing.assert_close(got.cpu(), expected, **tolerance)
    assert torch.opencl.fallback_counts() == {}
    # beta 0: CLBlast does not use the result's old contents, NaN included (the allocator hands a
    # freed block of the same size straight back)
    for left, right in [(a, b), (big_a, big_b.t())]:
        left, right = left.to("opencl"), on_device_as(right)
        stale = torch.full((left.shape[0], right.shape[1]), float("nan"), dtype=dtype,
                           device="opencl")
        address = stale.data_ptr()
        del stale
        got = torch.mm(left, right)
        assert got.data_ptr() == address
        assert not torch.isnan(got.cpu()).any()


@native_only
@with_clblast
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_products_are_computed_in_float_and_rounded_once(dtype):
    """mm, bmm, addmm, mm.out and linear of float16 and bfloat16: each operand converted to a
    float32 copy on the device, one float32 CLBlast call, the result rounded once: the values of
    the float32 product rounded to the dtype, which the CPU's (float accumulation) equal but for
    a sum that lands within float rounding of a halfway point."""
    g = torch.Generator().manual_seed(14)
    a, b = make((33, 70), dtype, g), make((70, 19), dtype, g)
    x, y = make((3, 6, 40), dtype, g), make((3, 40, 5), dtype, g)
    bias = make((19,), dtype, g)
    cases = [  # (operator, operands, keyword arguments)
        (torch.mm, (a, b), {}),
        (torch.mm, (b.t(), a.t()), {}),
        (torch.bmm, (x, y), {}),
        (torch.addmm, (bias, a, b), {"beta": 0.5, "alpha": 2}),
        (torch.nn.functional.linear, (a, b.t(), bias), {}),
    ]
    torch.opencl.reset_fallback_counts()
    for op, operands, kwargs in cases:
        on_device = [t.to("opencl") if t.is_contiguous() else on_device_as(t) for t in operands]
        before = answered_natively()
        got = op(*on_device, **kwargs)
        assert answered_natively() == before + 1, op
        assert got.dtype == dtype and got.device.type == "opencl"
        one_rounding = op(*[t.float() for t in operands], **kwargs).to(dtype)
        torch.testing.assert_close(got.cpu(), one_rounding, rtol=0, atol=0)
        expected = op(*operands, **kwargs)
        assert ((got.cpu().float() - expected.float()).abs() <=
                torch.finfo(dtype).eps * expected.float().abs()).all()
    out = torch.zeros(40, 20, dtype=dtype, device="opencl")
    torch.mm(a.to("opencl"), b.to("opencl"), out=out[:33, 1:])  # a strided out
    torch.testing.assert_close(out[:33, 1:].cpu(), (a.float() @ b.float()).to(dtype), rtol=0,
                               atol=0)
    assert not out.cpu()[:, 0].any() and not out.cpu()[33:].any()  # the rest untouched
    assert torch.opencl.fallback_counts() == {}


@native_only
@with_clblast
def test_matrix_products_the_native_path_leaves_give_the_cpus_values_and_errors():
    g = torch.Generator().manual_seed(13)
    a, b = make((4, 3), torch.float32, g), make((3, 2), torch.float32, g)
    da, db = a.to("opencl"), b.to("opencl")
    before = answered_natively()
    assert torch.equal(torch.mm(da.long(), db.long()).cpu(), a.long() @ b.long())  # integers
    assert torch.equal(torch.mm(da[:, :0], db[:0]).cpu(), torch.zeros(4, 2))  # k = 0
    assert torch.mm(da[:0], db).shape == (0, 2)
    assert answered_natively() == before
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(da, da)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(da, db.double())
    with pytest.raises(RuntimeError, match="Expected size for first two dimensions of batch2"):
        torch.bmm(da[None].expand(2, 4, 3), db[None])
    with pytest.raises(RuntimeError, match="expand"):
        torch.addmm(torch.ones(3, device="opencl"), da, db)
    with pytest.raises(RuntimeError, match="device"):
        torch.mm(da, b)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.addmm(db[0], da, db, alpha=1e39)
    assert torch.equal(da.cpu(), a) and torch.equal(db.cpu(), b)
    if torch.opencl.device_count() > 1:
        got = torch.mm(a.to("opencl:1"), b.to("opencl:1"))
        assert got.device == torch.device("opencl:1")
        torch.testing.assert_close(got.cpu(), a @ b)
        with pytest.raises(RuntimeError, match="device"):
            torch.mm(da, b.to("opencl:1"))


@native_only
@with_clblast
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_mm_out_writes_a_slice_of_a_larger_matrix_in_one_call(dtype):
    """A grouped product's loop (transformers' mixture of experts without torch._grouped_mm):
    torch.mm(x[start:end], w[i], out=y[start:end]) for each group, forward and backward."""
    g = torch.Generator().manual_seed(14)
    x, w = make((12, 6), dtype, g), make((3, 6, 5), dtype, g)
    starts = [0, 5, 5, 12]  # the second group is empty
    y = torch.full((12, 5), float("nan"), dtype=dtype, device="opencl")
    d_x, d_w = x.to("opencl"), w.to("opencl")
    torch.opencl.reset_fallback_counts()
    before = answered_natively()
    for i in range(3):
        torch.mm(d_x[starts[i]:starts[i + 1]], d_w[i], out=y[starts[i]:starts[i + 1]])
    assert answered_natively() == before + 2  # the empty group's product is the CPU's
    expected = torch.cat([x[starts[i]:starts[i + 1]] @ w[i] for i in range(3)])
    torch.testing.assert_close(y.cpu(), expected)
    # a transposed out: the product, then one strided copy into it (counted as the operator's)
    out = torch.empty(5, 12, dtype=dtype, device="opencl").t()
    columns = d_w[0].t().contiguous().t()  # read in place, as the transpose of a row-major matrix
    before, before_copies = answered_natively(), copies()
    torch.mm(d_x, columns, out=out)
    assert answered_natively() == before + 1 and copies() == before_copies
    torch.testing.assert_close(out.cpu(), x @ w[0])
    assert out.stride() == (1, 12)


@native_only
@with_clblast
def test_mm_out_the_native_path_leaves_is_the_cpus():
    a, b = torch.randn(4, 3), torch.randn(3, 2)
    da, db = a.to("opencl"), b.to("opencl")
    before = answered_natively()
    resized = torch.empty(0, device="opencl")
    torch.mm(da, db, out=resized)  # an out of another shape: the CPU resizes it
    assert resized.shape == (4, 2)
    torch.testing.assert_close(resized.cpu(), a @ b)
    d_square = torch.randn(3, 3).to("opencl")  # made on the CPU: no native launch
    torch.mm(d_square, d_square, out=d_square)  # out is an operand: the CPU's call, its values
    # whatever the CPU's BLAS makes of the overlap (so not compared)
    with pytest.raises(RuntimeError, match="dtype"):
        torch.mm(da, db, out=torch.empty(4, 2, dtype=torch.float64, device="opencl"))
    assert answered_natively() == before
