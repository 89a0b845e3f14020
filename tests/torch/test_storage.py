"""Storage-level behaviour of the `opencl` PyTorch device (real PoCL devices, no mocks).

Covers what PyTorch's OpenReg backend tests check for tensors and storages, beyond test_smoke.py:
freeing and reallocating the same size reuses the cached block (memory_reserved unchanged), every
kind of view (view, reshape, slicing, transpose, narrow, select, unfold) sharing the base's memory
at base + offset * itemsize, in-place operators keeping data_ptr, resize_ smaller and larger,
UntypedStorage.resize_, torch.save / torch.load of device tensors (map_location cpu and opencl),
50 MB tensors, non-contiguous copies both ways and clone of a non-contiguous tensor.
"""
import gc
import io
import sys

import pytest
import torch

import oclvm

DEV = "opencl"
ROUND = 512  # oclvm's allocators round block sizes up to multiples of 512 bytes


def rounded(nbytes: int) -> int:
    return (nbytes + ROUND - 1) // ROUND * ROUND


# Device memory after each passing test equals before (tests/torch/conftest.py).
pytestmark = pytest.mark.usefixtures("nothing_leaks")


def bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    """The bytes of a device storage, copied to the host."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage).cpu()


def test_free_and_reallocate_same_size_reuses_memory():
    gc.collect()
    x = torch.empty(1000, dtype=torch.float32, device=DEV)
    ptr = x.data_ptr()
    reserved = torch.opencl.memory_reserved()
    allocated = torch.opencl.memory_allocated()
    device_allocs = torch.opencl.memory_stats()["num_device_alloc"]
    del x
    assert torch.opencl.memory_allocated() == allocated - rounded(4000)
    assert torch.opencl.memory_reserved() == reserved          # the block stays cached
    y = torch.empty(1000, dtype=torch.float32, device=DEV)
    assert y.data_ptr() == ptr                                 # the same block comes back
    assert torch.opencl.memory_reserved() == reserved
    assert torch.opencl.memory_allocated() == allocated
    assert torch.opencl.memory_stats()["num_device_alloc"] == device_allocs
    for _ in range(50):                                        # churn never grows the cache
        del y
        y = torch.empty(1000, dtype=torch.float32, device=DEV)
    assert torch.opencl.memory_reserved() == reserved
    assert torch.opencl.memory_stats()["num_device_alloc"] == device_allocs


def test_views_share_memory_at_base_plus_offset():
    base = torch.arange(120, dtype=torch.float64, device=DEV)
    p, item = base.data_ptr(), base.element_size()
    assert item == 8
    m = base.view(10, 12)
    assert m.data_ptr() == p
    assert base.reshape(4, 30).data_ptr() == p               # reshape of contiguous: a view
    assert m[3].data_ptr() == p + 3 * 12 * item
    assert m[2:5, 4:].data_ptr() == p + (2 * 12 + 4) * item
    assert m[:, 7].data_ptr() == p + 7 * item
    t = m.t()
    assert t.data_ptr() == p and t.stride() == (1, 12)
    assert t[5].data_ptr() == p + 5 * item
    assert m.narrow(0, 6, 2).data_ptr() == p + 6 * 12 * item
    assert base[7:].view(-1, 1)[0].data_ptr() == p + 7 * item
    assert base[::5].storage_offset() == 0 and base[3::5].data_ptr() == p + 3 * item
    sliced = base[17:]
    assert sliced.untyped_storage().data_ptr() == p
    assert sliced.untyped_storage().nbytes() == 120 * item
    # a write through a view is seen by the base
    m[2:5, 4:6].fill_(-1)
    expected = torch.arange(120, dtype=torch.float64).view(10, 12)
    expected[2:5, 4:6] = -1
    assert torch.equal(base.cpu().view(10, 12), expected)


_VIEW_OPS = {
    "unfold": lambda x: x.unfold(1, 2, 2),
    "diagonal": lambda x: x.diagonal(),
    "as_strided": lambda x: x.as_strided((2, 2), (1, 6), 1),
    "expand": lambda x: x[:1].expand(3, 6),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "select": lambda x: x.select(1, 2),
    "split": lambda x: x.split(2)[1],
    "unbind": lambda x: x.unbind()[2],
    "movedim": lambda x: x.movedim(0, 1),
    "view_dtype": lambda x: x.view(torch.int32),
    "unflatten": lambda x: x.unflatten(1, (2, 3)),
    "view_as_complex": lambda x: torch.view_as_complex(x.view(4, 3, 2)),
    "view_as_real": lambda x: torch.view_as_real(torch.view_as_complex(x.view(4, 3, 2))),
    "complex_real": lambda x: torch.view_as_complex(x.view(4, 3, 2)).real,
    "complex_imag": lambda x: torch.view_as_complex(x.view(4, 3, 2)).imag,
}


@pytest.mark.parametrize("name", list(_VIEW_OPS))
def test_view_op_shares_storage_and_sees_writes(name):
    """Every view operator must alias the base (the CPU fallback would silently copy)."""
    base = torch.arange(24.0, device=DEV).view(4, 6)
    v = _VIEW_OPS[name](base)
    ref = _VIEW_OPS[name](torch.arange(24.0).view(4, 6))
    assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), name
    assert v.data_ptr() == base.data_ptr() + ref.storage_offset() * ref.element_size()
    assert v.stride() == ref.stride() and v.shape == ref.shape
    base.add_(100)                                   # in place on the base, seen through the view
    assert torch.equal(v.cpu(), _VIEW_OPS[name](torch.arange(24.0).view(4, 6) + 100))


def test_reshape_of_non_contiguous_copies():
    base = torch.arange(12.0, device=DEV).view(3, 4)
    r = base.t().reshape(12)
    assert r.data_ptr() != base.data_ptr()
    assert torch.equal(r.cpu(), torch.arange(12.0).view(3, 4).t().reshape(12))


@pytest.mark.parametrize("op", ["add_", "mul_", "sub_", "div_", "zero_", "fill_", "copy_",
                                "clamp_", "neg_"])
def test_in_place_ops_keep_data_ptr(op):
    host = torch.arange(1.0, 13.0).view(3, 4)
    d = host.to(DEV)
    ptr = d.data_ptr()
    allocated = torch.opencl.memory_allocated()
    expected = host.clone()
    args = {"add_": (2,), "mul_": (3,), "sub_": (1.5,), "div_": (4,), "zero_": (),
            "fill_": (7,), "copy_": (None,), "clamp_": (3, 8), "neg_": ()}[op]
    if op == "copy_":
        src = torch.arange(100.0, 112.0).view(3, 4)
        d.copy_(src)
        expected.copy_(src)
    else:
        getattr(d, op)(*args)
        getattr(expected, op)(*args)
    assert d.data_ptr() == ptr
    assert torch.equal(d.cpu(), expected)
    del args
    gc.collect()
    assert torch.opencl.memory_allocated() == allocated


def test_in_place_through_a_view_keeps_pointers():
    d = torch.zeros(4, 6, device=DEV)
    v = d[:, 1::2]
    p, vp = d.data_ptr(), v.data_ptr()
    v.add_(torch.ones(4, 3, device=DEV))
    v.mul_(5)
    assert d.data_ptr() == p and v.data_ptr() == vp == p + 4
    expected = torch.zeros(4, 6)
    expected[:, 1::2] = 5
    assert torch.equal(d.cpu(), expected)


def test_resize_smaller_then_larger_keeps_contents():
    host = torch.arange(1000, dtype=torch.int32)
    d = host.to(DEV)
    ptr = d.data_ptr()
    allocated = torch.opencl.memory_allocated()
    d.resize_(10)
    assert d.shape == (10,) and d.data_ptr() == ptr              # shrinking never reallocates
    assert d.untyped_storage().nbytes() == 4000
    assert torch.opencl.memory_allocated() == allocated
    assert torch.equal(d.cpu(), host[:10])
    d.resize_(1000)                                              # back within the storage
    assert d.data_ptr() == ptr and torch.equal(d.cpu(), host)
    d.resize_(50, 100)                                           # larger: a new block
    assert d.untyped_storage().nbytes() == 5000 * 4
    assert torch.opencl.memory_allocated() == allocated - rounded(4000) + rounded(20000)
    assert torch.equal(d.cpu().flatten()[:1000], host)
    d.resize_(0)
    assert d.numel() == 0 and d.untyped_storage().nbytes() == 20000


def test_untyped_storage_resize_keeps_prefix():
    s = torch.UntypedStorage(16, device=DEV)
    torch.empty(0, dtype=torch.uint8, device=DEV).set_(s).copy_(torch.arange(16, dtype=torch.uint8))
    allocated = torch.opencl.memory_allocated()
    s.resize_(3000)
    assert s.size() == 3000 and s.nbytes() == 3000 and s.device.type == DEV
    assert torch.equal(bytes_of(s)[:16], torch.arange(16, dtype=torch.uint8))
    assert torch.opencl.memory_allocated() == allocated - rounded(16) + rounded(3000)
    s.resize_(8)
    assert s.size() == 8
    assert torch.equal(bytes_of(s), torch.arange(8, dtype=torch.uint8))
    assert torch.opencl.memory_allocated() == allocated - rounded(16) + rounded(8)
    s.resize_(0)
    assert s.size() == 0
    assert torch.opencl.memory_allocated() == allocated - rounded(16)


def test_untyped_storage_copy_and_fill():
    s = torch.UntypedStorage(10, device=DEV)
    s.fill_(9)
    assert torch.equal(bytes_of(s), torch.full((10,), 9, dtype=torch.uint8))
    h = torch.UntypedStorage(10)
    h.copy_(s)
    assert list(h) == [9] * 10
    c = s.clone()
    assert c.device.type == DEV and c.data_ptr() != s.data_ptr()
    assert torch.equal(bytes_of(c), bytes_of(s))
    assert s.cpu().tolist() == [9] * 10


def _saved(obj) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_save_and_load_to_cpu():
    x = torch.arange(10.0, device=DEV)
    buf = _saved({"x": x, "v": x[2:5], "t": x.view(2, 5).t()})
    d = torch.load(buf, map_location="cpu")
    assert d["x"].device.type == "cpu"
    assert torch.equal(d["x"], torch.arange(10.0))
    assert torch.equal(d["v"], torch.arange(2.0, 5.0))
    assert d["v"].storage_offset() == 2
    assert d["v"].untyped_storage().data_ptr() == d["x"].untyped_storage().data_ptr()
    assert torch.equal(d["t"], torch.arange(10.0).view(2, 5).t())


@pytest.mark.parametrize("map_location", ["opencl", "opencl:0", None])
def test_save_and_load_to_device(map_location):
    x = torch.arange(10.0, device=DEV)
    buf = _saved({"x": x, "v": x[2:5]})
    del x
    allocated = torch.opencl.memory_allocated()
    d = torch.load(buf, map_location=map_location)
    assert d["x"].device == torch.device(DEV, 0)
    assert d["v"].device == torch.device(DEV, 0)
    assert torch.equal(d["x"].cpu(), torch.arange(10.0))
    assert torch.equal(d["v"].cpu(), torch.arange(2.0, 5.0))
    assert d["v"].data_ptr() == d["x"].data_ptr() + 2 * 4          # still one storage
    assert torch.opencl.memory_allocated() == allocated + rounded(40)


def test_load_cpu_checkpoint_onto_device():
    model = torch.nn.Linear(3, 2)
    buf = _saved(model.state_dict())
    sd = torch.load(buf, map_location=DEV)
    assert all(v.device.type == DEV for v in sd.values())
    for k, v in model.state_dict().items():
        assert torch.equal(sd[k].cpu(), v)


def test_fifty_megabyte_round_trip():
    n = 50 * (1 << 20) // 4
    gen = torch.Generator().manual_seed(1)
    host = torch.randint(-(1 << 30), 1 << 30, (n,), dtype=torch.int32, generator=gen)
    checksum = int(host.long().sum())
    allocated = torch.opencl.memory_allocated()
    d = host.to(DEV)
    assert torch.opencl.memory_allocated() == allocated + rounded(50 << 20)
    back = d.cpu()
    assert int(back.long().sum()) == checksum
    assert torch.equal(back, host)
    e = d.clone()                                                 # device -> device, 50 MB
    assert torch.equal(e[-1000:].cpu(), host[-1000:])
    assert int(e.cpu().long().sum()) == checksum
    assert torch.equal(d[1::2].cpu(), host[1::2])                 # strided, 25 MB


def test_non_contiguous_copies_both_ways_3d():
    host = torch.arange(2 * 3 * 4, dtype=torch.int64).view(2, 3, 4)
    d = host.to(DEV)
    perm = d.permute(2, 0, 1)
    assert not perm.is_contiguous()
    assert torch.equal(perm.cpu(), host.permute(2, 0, 1))          # device strided -> host
    dst = torch.full((4, 5, 6), -1, dtype=torch.int64, device=DEV)
    src = host.permute(2, 0, 1)[::2, :, 1:]                        # shape (2, 2, 2), strided
    dst[1::2, 1:3, ::3] = src                                      # host strided -> device strided
    expected = torch.full((4, 5, 6), -1, dtype=torch.int64)
    expected[1::2, 1:3, ::3] = src
    assert torch.equal(dst.cpu(), expected)
    dst[::2, 3:5, 1::3] = perm[1::2, :, 1:]                        # device strided -> device strided
    expected[::2, 3:5, 1::3] = host.permute(2, 0, 1)[1::2, :, 1:]
    assert torch.equal(dst.cpu(), expected)
    hdst = torch.zeros(3, 8, dtype=torch.int64)
    hdst[:, ::2].copy_(d[1])                                       # device -> host strided
    assert torch.equal(hdst[:, ::2], host[1])
    assert torch.equal(hdst[:, 1::2], torch.zeros(3, 4, dtype=torch.int64))


_STRIDED = {
    "columns": lambda x: x[:, 1::2],
    "transpose": lambda x: x.t(),
    "column": lambda x: x[:, 5],
    "block": lambda x: x[1:3, 2:5],
}


@pytest.mark.parametrize("layout", list(_STRIDED))
@pytest.mark.parametrize("op", ["add_scalar", "add_tensor", "mul_", "relu_", "out="])
def test_in_place_on_non_contiguous_view(layout, op):
    """Operators running through the CPU fallback must write back into the view's strides."""
    host = torch.arange(-12.0, 12.0).view(4, 6)
    d = host.to(DEV)
    v, hv = _STRIDED[layout](d), _STRIDED[layout](host)
    stride, ptr = v.stride(), v.data_ptr()
    if op == "add_scalar":
        v.add_(100); hv.add_(100)
    elif op == "add_tensor":
        other = torch.arange(float(hv.numel())).view(hv.shape)
        v.add_(other.to(DEV)); hv.add_(other)
    elif op == "mul_":
        v.mul_(3); hv.mul_(3)
    elif op == "relu_":
        v.relu_(); hv.relu_()
    else:
        src = torch.full(hv.shape, 0.5)
        torch.add(src.to(DEV), 1, out=v); torch.add(src, 1, out=hv)
    assert v.stride() == stride and v.data_ptr() == ptr             # the view keeps its layout
    assert torch.equal(d.cpu(), host)                               # gaps untouched, view updated


def test_resize_to_the_same_size_keeps_strides():
    t = torch.zeros(4, 6, device=DEV).t()
    assert t.stride() == (1, 6)
    t.resize_(6, 4)                       # PyTorch: same sizes, no memory format -> no change
    assert t.stride() == (1, 6)
    assert t.stride() == torch.zeros(4, 6).t().resize_(6, 4).stride()


def test_clone_of_non_contiguous():
    host = torch.arange(30.0).view(5, 6)
    d = host.to(DEV)
    for view, ref in [(d.t(), host.t()), (d[:, ::2], host[:, ::2]), (d[1:4, 2:5], host[1:4, 2:5])]:
        c = view.clone()
        assert c.device.type == DEV
        assert c.data_ptr() != d.data_ptr()
        assert c.stride() == ref.clone().stride()                  # preserve_format semantics
        assert torch.equal(c.cpu(), ref)
        cc = view.clone(memory_format=torch.contiguous_format)
        assert cc.is_contiguous() and torch.equal(cc.cpu(), ref)
    c = d.t().clone()
    d.zero_()
    assert torch.equal(c.cpu(), host.t())                          # independent of the source


def test_untyped_storage_to_device_and_back():
    """UntypedStorage.to (what torch.load uses) enters `torch.opencl.device(...)`."""
    host = torch.UntypedStorage(10)
    host.copy_(torch.arange(10, dtype=torch.uint8).untyped_storage())
    d = host.to(device=DEV)
    assert d.device == torch.device(DEV, 0) and d.nbytes() == 10
    assert torch.equal(bytes_of(d), torch.arange(10, dtype=torch.uint8))
    back = d.to(device="cpu")
    assert back.device.type == "cpu" and list(back) == list(range(10))
    with torch.opencl.device(0):
        assert torch.opencl.current_device() == 0
