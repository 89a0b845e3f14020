"""Memory statistics, caching and leak checks of the `opencl` PyTorch device (real PoCL devices).

Covers, beyond test_smoke.py: exact memory_stats after known allocations (allocated, requested,
allocation counts, peaks, back to the start after free), reset_peak_memory_stats setting the peak
to the current value, empty_cache returning memory_reserved to 0, the same numbers through
torch.accelerator, leak loops (1000 iterations of allocate + copy + view + a tiny backward leave
memory_allocated, live blocks and the cache unchanged), out of memory under OCLVM_MEMORY_LIMIT
(torch.OutOfMemoryError, num_ooms, the cache flushed before giving up, the device still working)
and isolation of two devices.
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


# Device memory after each passing test equals before (tests/torch/conftest.py).
pytestmark = pytest.mark.usefixtures("nothing_leaks")


@pytest.fixture
def clean_device():
    """Nothing live and nothing cached on device 0, peaks reset: statistics start from zero."""
    gc.collect()
    if oclvm._C.live_blocks() != 0:
        pytest.skip("another test left device memory alive")
    torch.opencl.empty_cache()
    torch.opencl.reset_peak_memory_stats()
    assert torch.opencl.memory_allocated() == 0
    assert torch.opencl.memory_reserved() == 0


def test_memory_stats_exact_after_three_allocations(clean_device):
    sizes = [1000, 4096, (3 << 20) + 1]                   # bytes: small, exact, large + 1
    before = torch.opencl.memory_stats()
    tensors = [torch.empty(n, dtype=torch.uint8, device=DEV) for n in sizes]
    s = torch.opencl.memory_stats()
    total = sum(rounded(n) for n in sizes)
    assert total == 1024 + 4096 + (3 << 20) + 512
    assert s["allocated_bytes.all.current"] == total
    assert s["allocated_bytes.all.peak"] == total
    assert s["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"] == total
    assert s["requested_bytes.all.current"] == sum(sizes)
    assert s["allocation.all.current"] == 3
    assert s["allocation.all.peak"] == 3
    assert s["allocation.all.allocated"] - before["allocation.all.allocated"] == 3
    assert s["active.all.current"] == 3
    assert s["active_bytes.all.current"] == total
    assert (s["allocated_bytes.small_pool.current"] + s["allocated_bytes.large_pool.current"]
            == total)
    assert s["reserved_bytes.all.current"] >= total
    assert s["reserved_bytes.all.current"] == torch.opencl.memory_reserved()
    assert torch.opencl.memory_allocated() == total
    assert torch.opencl.max_memory_allocated() == total
    assert s["num_ooms"] == before["num_ooms"]
    assert "num_alloc_retries" in s and "num_ooms" in s

    del tensors[2]                                         # free the large one
    s = torch.opencl.memory_stats()
    assert s["allocated_bytes.all.current"] == 1024 + 4096
    assert s["allocated_bytes.all.peak"] == total          # the peak stays
    assert s["allocation.all.current"] == 2
    assert s["allocated_bytes.all.freed"] - before["allocated_bytes.all.freed"] == (3 << 20) + 512
    assert s["requested_bytes.all.current"] == 1000 + 4096
    torch.opencl.reset_peak_memory_stats()                 # peak := current
    s = torch.opencl.memory_stats()
    assert s["allocated_bytes.all.peak"] == 1024 + 4096
    assert s["allocation.all.peak"] == 2
    assert torch.opencl.max_memory_allocated() == 1024 + 4096
    assert torch.opencl.max_memory_reserved() == torch.opencl.memory_reserved()

    del tensors
    s = torch.opencl.memory_stats()
    assert s["allocated_bytes.all.current"] == 0
    assert s["allocation.all.current"] == 0
    assert s["requested_bytes.all.current"] == 0
    assert s["allocated_bytes.all.peak"] == 1024 + 4096
    assert torch.opencl.memory_reserved() > 0              # still cached
    torch.opencl.empty_cache()
    assert torch.opencl.memory_reserved() == 0
    assert torch.opencl.memory_stats()["segment.all.current"] == 0


def test_reset_accumulated_memory_stats(clean_device):
    x = torch.empty(2048, dtype=torch.uint8, device=DEV)
    torch.opencl.reset_accumulated_memory_stats()
    s = torch.opencl.memory_stats()
    assert s["allocated_bytes.all.allocated"] == 0
    assert s["allocated_bytes.all.freed"] == 0
    assert s["allocated_bytes.all.current"] == 2048         # current values are not history
    del x
    s = torch.opencl.memory_stats()
    assert s["allocated_bytes.all.freed"] == 2048
    assert s["allocated_bytes.all.current"] == 0


def test_accelerator_api_sees_the_same_numbers(clean_device):
    assert torch.accelerator.current_accelerator() == torch.device(DEV)
    x = torch.empty(700, dtype=torch.float32, device=DEV)   # 2800 B -> 3072
    assert torch.accelerator.memory_allocated() == 3072
    assert torch.accelerator.memory_allocated(0) == 3072
    assert torch.accelerator.max_memory_allocated() == 3072
    assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == 3072
    assert torch.accelerator.memory_stats() == torch.opencl.memory_stats()
    assert torch.accelerator.memory_reserved() == torch.opencl.memory_reserved() > 0
    del x
    assert torch.accelerator.memory_allocated() == 0
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == 0
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() == 0
    free, total = torch.accelerator.get_memory_info()
    assert free == total > 0
    torch.accelerator.synchronize()


def test_empty_cache_keeps_live_blocks(clean_device):
    x = torch.arange(1000.0, device=DEV)
    y = torch.empty(1 << 20, device=DEV)
    del y
    reserved = torch.opencl.memory_reserved()
    torch.opencl.empty_cache()
    assert reserved == (2 << 20) + (4 << 20)               # a small-pool segment + y's block
    assert torch.opencl.memory_reserved() == 2 << 20       # x's segment stays
    assert torch.opencl.memory_allocated() == rounded(4000)
    assert torch.equal(x.cpu(), torch.arange(1000.0))      # x is intact
    free, total = torch.opencl.mem_get_info()
    assert free == total - torch.opencl.memory_reserved()


def _leak_iteration():
    a = torch.randn(64, 8)
    d = a.to(DEV)
    v = d.view(8, 64)[2:5].t()
    w = v.contiguous().cpu()
    p = torch.ones(8, requires_grad=True, device=DEV)
    loss = (d * p).sum()
    loss.backward()
    g = p.grad.cpu()
    assert w.shape == (64, 3) and g.shape == (8,)


def test_leak_loop_allocate_copy_view_backward():
    _leak_iteration()                                       # warm the cache
    gc.collect()
    allocated = torch.opencl.memory_allocated()
    blocks = oclvm._C.live_blocks()
    reserved = torch.opencl.memory_reserved()
    device_allocs = torch.opencl.memory_stats()["num_device_alloc"]
    for _ in range(1000):
        _leak_iteration()
    gc.collect()
    assert torch.opencl.memory_allocated() == allocated
    assert oclvm._C.live_blocks() == blocks
    assert torch.opencl.memory_reserved() == reserved       # all served from the cache
    assert torch.opencl.memory_stats()["num_device_alloc"] == device_allocs


def test_leak_loop_without_gc_returns_memory_immediately():
    """Reference counting alone frees device memory: no gc.collect() inside the loop."""
    allocated = torch.opencl.memory_allocated()
    for i in range(1000):
        x = torch.full((256,), float(i), device=DEV)
        y = x[::2] + 1
        assert torch.opencl.memory_allocated() == allocated + 1024 + 512
        del x, y
        assert torch.opencl.memory_allocated() == allocated


def _run(script: str, limit: str = "64M", **env) -> subprocess.CompletedProcess:
    env = dict(os.environ, OCLVM_MEMORY_LIMIT=limit, PYTHONPATH=os.pathsep.join(sys.path), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=180)


def test_pytorch_alloc_conf_reaches_the_device_allocator():
    """PYTORCH_ALLOC_CONF's max_split_size_mb, as on CUDA: a 30 MiB tensor is an oversize
    allocation in a segment of its own, and a 15 MiB one made after it is freed does not carve
    it up (without the setting it would: one inactive split)."""
    script = """
        import torch
        x = torch.empty(30 << 20, dtype=torch.uint8, device="opencl")
        s = torch.opencl.memory_stats()
        print(s["oversize_allocations.current"], s["oversize_segments.current"])
        del x
        y = torch.empty(15 << 20, dtype=torch.uint8, device="opencl")
        s = torch.opencl.memory_stats()
        print(s["oversize_allocations.current"], s["inactive_split.all.current"])
    """
    out = _run(script, limit="0", PYTORCH_ALLOC_CONF="max_split_size_mb:21")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["1 1", "0 0"], out.stdout + out.stderr
    plain = _run(script, limit="0")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split("\n")[:2] == ["0 0", "0 1"], plain.stdout + plain.stderr


def test_out_of_memory_counts_and_device_keeps_working():
    out = _run("""
        import torch, oclvm
        MB = 1 << 20
        a = torch.ones(40 * MB, dtype=torch.uint8, device="opencl")
        s = torch.opencl.memory_stats()
        assert s["num_ooms"] == 0, s["num_ooms"]
        for attempt in (1, 2):
            try:
                torch.empty(30 * MB, dtype=torch.uint8, device="opencl")
                raise SystemExit("no OutOfMemoryError")
            except torch.OutOfMemoryError as e:
                assert isinstance(e, RuntimeError)
                assert str(e).startswith("OpenCL out of memory. opencl:0: tried to allocate "
                                         "30.00 MiB (31457280 bytes); limit 64.00 MiB, "), str(e)
            s = torch.opencl.memory_stats()
            assert s["num_ooms"] == attempt, s["num_ooms"]
            assert s["allocated_bytes.all.current"] == 40 * MB, s["allocated_bytes.all.current"]
            assert s["allocation.all.current"] == 1, s["allocation.all.current"]
            assert oclvm._C.live_blocks() == 1, oclvm._C.live_blocks()
        # the device keeps working: small allocations, copies and ops
        b = torch.arange(1000.0, device="opencl")
        assert (b * 2).sum().item() == 999000.0
        assert a[:10].cpu().tolist() == [1] * 10
        del a, b
        # with the 40 MB block only cached, a 50 MB request flushes the cache and succeeds
        assert torch.opencl.memory_allocated() == 0
        assert torch.opencl.memory_reserved() == 42 * MB, torch.opencl.memory_reserved()  # 40 MB + a 2 MB small-pool segment
        c = torch.empty(50 * MB, dtype=torch.uint8, device="opencl")
        s = torch.opencl.memory_stats()
        assert s["num_ooms"] == 2, s["num_ooms"]
        assert s["allocated_bytes.all.current"] == 50 * MB
        assert torch.opencl.memory_reserved() <= 64 * MB
        free, total = torch.opencl.mem_get_info()
        assert total == 64 * MB, total
        assert free == total - torch.opencl.memory_reserved(), (free, total)
        del c
        torch.opencl.empty_cache()
        assert torch.opencl.memory_reserved() == 0
        print("OOM-OK")
    """)
    assert out.returncode == 0 and "OOM-OK" in out.stdout, out.stdout + out.stderr


def test_accelerate_shrinks_the_batch_on_the_devices_out_of_memory():
    """accelerate's find_executable_batch_size, unchanged, recognises the device's out-of-memory
    error by CUDA's words (" out of memory.") and shrinks the batch (by 0.9 each time) until it
    fits. Before the message took them (issue 33), the first error escaped the search."""
    out = _run("""
        import torch, oclvm
        from accelerate.utils import find_executable_batch_size
        MB = 1 << 20
        tried = []

        @find_executable_batch_size(starting_batch_size=256)
        def step(batch_size):
            tried.append(batch_size)
            x = torch.ones(batch_size, MB // 4, device="opencl")  # batch_size MiB, limit 64 MiB
            return batch_size, int(x[-1, -1].item())  # read in place: no second allocation

        print(*step(), *tried)
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    fitted, total, *tried = map(int, out.stdout.split())
    assert tried[0] == 256 and tried[-1] == fitted <= 64 < tried[-2], tried
    assert all(b == int(a * 0.9) for a, b in zip(tried, tried[1:])), tried
    assert total == 1


def test_out_of_memory_inside_an_operator():
    """An OOM raised while the CPU fallback copies a result back leaves nothing behind."""
    out = _run("""
        import torch, oclvm
        MB = 1 << 20
        a = torch.zeros(12 * MB, dtype=torch.float32, device="opencl")   # 48 MB
        try:
            b = a + 1                                                     # needs another 48 MB
            raise SystemExit("no OutOfMemoryError")
        except torch.OutOfMemoryError:
            pass
        assert torch.opencl.memory_allocated() == 48 * MB, torch.opencl.memory_allocated()
        assert oclvm._C.live_blocks() == 1, oclvm._C.live_blocks()
        assert torch.opencl.memory_stats()["num_ooms"] >= 1
        a.add_(1)                                                         # in place still works
        assert a[-3:].cpu().tolist() == [1.0, 1.0, 1.0]
        print("OOM-OP-OK")
    """)
    assert out.returncode == 0 and "OOM-OP-OK" in out.stdout, out.stdout + out.stderr


@pytest.mark.two_devices
def test_two_devices_are_isolated():
    gc.collect()
    before0, before1 = torch.opencl.memory_allocated(0), torch.opencl.memory_allocated(1)
    x1 = torch.arange(1000.0, device="opencl:1")
    assert x1.device == torch.device(DEV, 1)
    assert torch.opencl.memory_allocated(0) == before0
    assert torch.opencl.memory_allocated(1) == before1 + rounded(4000)
    y1 = x1 * 3                                             # result stays on device 1
    assert y1.device == torch.device(DEV, 1)
    assert torch.opencl.memory_allocated(0) == before0
    x0 = x1.to("opencl:0")                                  # device 1 -> device 0
    assert x0.device == torch.device(DEV, 0)
    assert torch.equal(x0.cpu(), torch.arange(1000.0))
    assert torch.opencl.memory_allocated(0) == before0 + rounded(4000)
    back = (x0 + 1).to("opencl:1")                          # device 0 -> device 1
    assert back.device == torch.device(DEV, 1)
    assert torch.equal(back.cpu(), torch.arange(1000.0) + 1)
    strided = x1.view(10, 100).t().to("opencl:0")           # non-contiguous across devices
    assert torch.equal(strided.cpu(), torch.arange(1000.0).view(10, 100).t())
    dst = torch.zeros(10, 100, device="opencl:0")
    dst.copy_(y1.view(10, 100))                             # copy_ across devices
    assert torch.equal(dst.cpu(), (torch.arange(1000.0) * 3).view(10, 100))
    with pytest.raises(RuntimeError, match="device"):
        x0 + x1                                             # mixing devices is an error
    s1 = torch.opencl.memory_stats(1)
    assert s1["allocated_bytes.all.current"] == torch.opencl.memory_allocated(1)
    del x1, y1, back
    assert torch.opencl.memory_allocated(1) == before1
    assert torch.opencl.memory_allocated(0) == before0 + rounded(4000) * 3
    torch.opencl.set_device(1)
    try:
        z = torch.empty(10, device=DEV)
        assert z.device == torch.device(DEV, 1)
        assert torch.opencl.memory_allocated() == torch.opencl.memory_allocated(1) == before1 + 512
        del z
    finally:
        torch.opencl.set_device(0)


@pytest.mark.two_devices
def test_reset_and_empty_cache_per_device():
    gc.collect()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="opencl:1")
    del x
    assert torch.opencl.memory_reserved(1) > 0
    torch.opencl.empty_cache()                              # releases every device's cache
    assert torch.opencl.memory_reserved(1) == 0
    torch.opencl.reset_peak_memory_stats(1)
    assert torch.opencl.max_memory_allocated(1) == torch.opencl.memory_allocated(1)


# ---------------------------------------------------------------------------------------------
# Pinned (host) memory: pin_memory() through the PrivateUse1 host allocator.


def test_pinned_memory_is_tracked_and_released():
    before = torch.opencl.host_memory_stats()
    x = torch.arange(1000, dtype=torch.float32)
    assert not x.is_pinned()
    pinned = x.pin_memory()
    assert pinned.is_pinned()
    assert torch.equal(pinned, x)
    during = torch.opencl.host_memory_stats()
    assert during["active_requests.current"] == before["active_requests.current"] + 1
    assert during["active_bytes.current"] == before["active_bytes.current"] + 4000
    assert during["num_host_alloc"] == before["num_host_alloc"] + 1
    assert during["allocated_bytes.current"] == during["active_bytes.current"]
    on_device = pinned.to(DEV, non_blocking=True)
    assert torch.equal(on_device.cpu(), x)
    del pinned
    gc.collect()
    after = torch.opencl.host_memory_stats()
    assert after["active_bytes.current"] == before["active_bytes.current"]
    assert after["num_host_free"] == before["num_host_free"] + 1
    assert after["active_bytes.peak"] >= 4000
    torch.accelerator.empty_host_cache()  # nothing cached: a no-op that must not fail
