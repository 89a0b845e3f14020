"""Smoke tests of the `opencl` PyTorch device on oclvm (real PoCL devices, no mocks).

Covers: tensor creation at several sizes and dtypes, host<->device round trips, clone,
non-contiguous copies in both directions, dtype conversion, operators through the CPU fallback,
exact memory statistics (allocated bytes up by exactly the rounded size, back to the start after
del), empty_cache, views sharing memory (data_ptr == base + offset), resize_ keeping data, fill_
and zero_, item(), out-of-memory as torch.OutOfMemoryError, and the torch.opencl module surface.
"""
import gc
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import oclvm

DEV = "opencl"
ROUND = 512  # oclvm's allocators round block sizes up to multiples of 512 bytes


def rounded(nbytes: int) -> int:
    return (nbytes + ROUND - 1) // ROUND * ROUND


@pytest.fixture(autouse=True)
def nothing_leaks():
    gc.collect()
    blocks_before = oclvm._C.live_blocks()
    allocated_before = torch.opencl.memory_allocated()
    yield
    gc.collect()
    assert oclvm._C.live_blocks() == blocks_before
    assert torch.opencl.memory_allocated() == allocated_before


def test_device_module_surface():
    assert torch.device(DEV).type == "opencl"
    assert torch.device(DEV) == torch.device("privateuseone")
    assert torch.opencl.is_available()
    assert torch.opencl.device_count() >= 1
    assert torch.opencl.current_device() == 0
    torch.opencl.set_device(0)
    torch.opencl.synchronize()
    assert torch.accelerator.current_accelerator().type == "opencl"
    with pytest.raises(IndexError):
        torch.opencl.set_device(torch.opencl.device_count())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool,
                                   torch.complex64])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 3, 4), (1 << 18,)])
def test_empty_and_round_trip(dtype, shape):
    x = torch.empty(shape, dtype=dtype, device=DEV)
    assert x.device == torch.device(DEV, 0)
    assert x.shape == torch.Size(shape) and x.dtype == dtype
    numel = x.numel()
    host = (torch.arange(numel) % 100).reshape(shape).to(dtype)
    d = host.to(DEV)
    assert d.device.type == DEV
    back = d.cpu()
    assert back.dtype == dtype and back.shape == host.shape
    assert torch.equal(back, host)


def test_clone_is_a_separate_copy():
    host = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    d = host.to(DEV)
    c = d.clone()
    assert c.data_ptr() != d.data_ptr()
    d.zero_()
    assert torch.equal(c.cpu(), host)
    assert torch.equal(d.cpu(), torch.zeros(4, 6))


def test_non_contiguous_copies():
    host = torch.arange(12.0).reshape(3, 4)
    d = host.to(DEV)
    t = d.t()
    assert not t.is_contiguous()
    assert torch.equal(t.cpu(), host.t())                 # device -> host, strided
    assert torch.equal(t.contiguous().cpu(), host.t())    # device -> device, strided
    assert torch.equal(t.clone().cpu(), host.t())
    dst = torch.zeros(4, 6, device=DEV)
    dst[:, ::2] = torch.ones(4, 3)                        # host -> strided device view
    expected = torch.zeros(4, 6)
    expected[:, ::2] = 1
    assert torch.equal(dst.cpu(), expected)               # the gaps kept their zeros
    dst[1, 1:5] = d[0]                                    # device -> device, into a row view
    expected[1, 1:5] = host[0]
    assert torch.equal(dst.cpu(), expected)
    perm = torch.empty_strided((4, 3), (1, 4), device=DEV)  # gapless, transposed layout
    assert not perm.is_contiguous() and perm.stride() == (1, 4)
    perm.copy_(host.t())                                  # host -> permuted dense device
    assert torch.equal(perm.cpu(), host.t())
    nchw = torch.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)
    cl = nchw.to(DEV, memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(cl.cpu(), nchw)
    col = torch.empty(3, 2, device=DEV)
    col[:, 1] = d[:, 2]                                   # strided device -> strided device
    assert torch.equal(col.cpu()[:, 1], host[:, 2])


def test_dtype_conversion_in_copies():
    ints = torch.arange(10, dtype=torch.int32)
    d = torch.empty(10, dtype=torch.float64, device=DEV)
    d.copy_(ints)                                          # host -> device with conversion
    assert torch.equal(d.cpu(), ints.double())
    h = d.to(torch.int16)                                  # device -> device with conversion
    assert h.device.type == DEV and h.dtype == torch.int16
    assert torch.equal(h.cpu(), ints.short())
    out = torch.empty(10, dtype=torch.float32)
    out.copy_(d)                                           # device -> host with conversion
    assert torch.equal(out, ints.float())


def test_ops_through_the_cpu_fallback():
    x = torch.arange(6.0, device=DEV)
    y = x + 1
    assert y.device.type == DEV
    assert torch.equal(y.cpu(), torch.arange(6.0) + 1)
    z = (x * y).sum()
    assert z.device.type == DEV
    assert z.item() == float((torch.arange(6.0) * (torch.arange(6.0) + 1)).sum())


def test_memory_allocated_is_exact_and_returns_to_start():
    gc.collect()
    start = torch.opencl.memory_allocated()
    a = torch.empty(1024, dtype=torch.float32, device=DEV)          # 4096 B
    assert torch.opencl.memory_allocated() == start + 4096
    b = torch.empty(100, dtype=torch.uint8, device=DEV)             # 100 B -> one 512 B block
    assert torch.opencl.memory_allocated() == start + 4096 + rounded(100)
    stats = torch.opencl.memory_stats()
    assert stats["allocated_bytes.all.current"] == start + 4096 + rounded(100)
    assert stats["requested_bytes.all.current"] >= 4096 + 100
    assert torch.opencl.max_memory_allocated() >= start + 4096 + rounded(100)
    assert torch.opencl.memory_reserved() >= torch.opencl.memory_allocated()
    del a
    assert torch.opencl.memory_allocated() == start + rounded(100)
    del b
    assert torch.opencl.memory_allocated() == start
    torch.opencl.reset_peak_memory_stats()
    assert torch.opencl.max_memory_allocated() == start


def test_memory_stats_keys_match_cuda_names():
    stats = torch.opencl.memory_stats()
    for key in ["allocated_bytes.all.current", "allocated_bytes.all.peak",
                "reserved_bytes.all.current", "active_bytes.large_pool.current",
                "requested_bytes.small_pool.allocated", "num_ooms", "num_alloc_retries",
                "num_device_alloc", "num_device_free"]:
        assert key in stats, key


def test_empty_cache_releases_everything_when_nothing_is_live():
    x = torch.empty(1 << 20, device=DEV)
    del x
    gc.collect()
    assert oclvm._C.live_blocks() == 0
    torch.opencl.empty_cache()
    assert torch.opencl.memory_reserved() == 0
    free, total = torch.opencl.mem_get_info()
    assert 0 < free == total


def test_view_data_ptr_is_base_plus_offset():
    x = torch.empty(100, dtype=torch.float32, device=DEV)
    v = x[10:]
    assert v.data_ptr() == x.data_ptr() + 40
    assert x.view(10, 10)[3].data_ptr() == x.data_ptr() + 3 * 10 * 4
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert oclvm._C.device_of_address(v.data_ptr()) == 0      # hooks' getDeviceFromPtr
    with pytest.raises(RuntimeError, match="opencl memory"):
        oclvm._C.device_of_address(torch.empty(4).data_ptr())  # host memory


def test_resize_larger_keeps_data():
    host = torch.arange(8.0)
    d = host.to(DEV)
    d.resize_(4, 4)
    assert d.shape == (4, 4)
    assert torch.equal(d.cpu().flatten()[:8], host)
    s = torch.UntypedStorage(16, device=DEV)
    s.resize_(64)
    assert s.size() == 64 and s.device.type == DEV


def test_fill_and_zero():
    d = torch.full((5, 3), 3.5, device=DEV)
    assert torch.equal(d.cpu(), torch.full((5, 3), 3.5))
    d[:, 1].fill_(7)                                       # strided: read-modify-write
    expected = torch.full((5, 3), 3.5)
    expected[:, 1] = 7
    assert torch.equal(d.cpu(), expected)
    d.zero_()
    assert torch.equal(d.cpu(), torch.zeros(5, 3))
    for dtype in [torch.int8, torch.float16, torch.int64, torch.bool, torch.complex128]:
        x = torch.empty(9, dtype=dtype, device=DEV).fill_(1)
        assert torch.equal(x.cpu(), torch.ones(9, dtype=dtype)), dtype


def test_item_reads_one_element():
    d = torch.arange(10, dtype=torch.int64, device=DEV)
    assert d[7].item() == 7
    assert torch.tensor(2.5, device=DEV).item() == 2.5


def test_generated_methods():
    t = torch.ones(3).opencl()
    assert t.is_opencl and t.device.type == DEV
    assert torch.ones(3).untyped_storage().opencl().device.type == DEV


def test_out_of_memory_is_torch_out_of_memory_error():
    script = textwrap.dedent("""
        import torch, oclvm
        before = torch.opencl.memory_allocated()
        try:
            torch.empty(100 << 20, dtype=torch.uint8, device="opencl")
        except torch.OutOfMemoryError as e:
            assert "memory" in str(e).lower(), str(e)
            assert torch.opencl.memory_allocated() == before
            assert oclvm._C.live_blocks() == 0
            print("OOM-OK")
    """)
    env = dict(os.environ, OCLVM_MEMORY_LIMIT="64M", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert "OOM-OK" in out.stdout, out.stdout + out.stderr


@pytest.mark.skipif(torch.opencl.device_count() < 2, reason="needs two opencl devices "
                    "(POCL_DEVICES='pthread pthread')")
def test_two_devices():
    host = torch.arange(100.0)
    a = host.to("opencl:1")
    assert a.device == torch.device(DEV, 1)
    assert oclvm._C.device_of_address(a.data_ptr() + 4) == 1
    before0 = torch.opencl.memory_allocated(0)
    b = a.to("opencl:0")                                   # across devices: staged by the VM
    assert b.device == torch.device(DEV, 0)
    assert torch.equal(b.cpu(), host)
    assert torch.opencl.memory_allocated(0) == before0 + rounded(400)
    assert torch.opencl.memory_allocated(1) >= rounded(400)
    with torch.device("opencl:1"):
        c = torch.empty(3)
    assert c.device == torch.device(DEV, 1)
    assert torch.equal((a + 1).cpu(), host + 1)


def test_autoload_when_installed():
    """With the package installed, `import torch` alone makes the device usable (entry point)."""
    from importlib.metadata import entry_points
    if not any(ep.name == "oclvm" for ep in entry_points(group="torch.backends")):
        pytest.skip("oclvm is not installed (no torch.backends entry point)")
    script = 'import torch; x = torch.ones(2, device="opencl"); print(x.device, x.cpu().sum().item())'
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.stdout.strip() == "opencl:0 2.0", out.stdout + out.stderr


def test_small_training_step_matches_cpu():
    """Forward, backward and an optimizer step of a small MLP, all through the CPU fallback."""
    torch.manual_seed(0)
    make = lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 2))
    ref = make()
    model = make()
    model.load_state_dict(ref.state_dict())
    model = model.opencl()
    assert all(p.device.type == DEV for p in model.parameters())
    x = torch.randn(4, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        loss = model(x.opencl()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_ref = ref(x).pow(2).mean()
        opt_ref.zero_grad()
        loss_ref.backward()
        opt_ref.step()
    assert loss.item() == pytest.approx(loss_ref.item(), rel=1e-6)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.cpu(), q)
    del model, opt, loss, p
