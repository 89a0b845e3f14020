"""Streams, events, record_stream and the memory fraction of the `opencl` device (real PoCL).

A torch stream of the opencl device is a VM stream with its own OpenCL queue; events are queue
markers recorded through RecordEvent / WaitEvent instructions (adapters/torch/streams.cc). Covers:
the default and current streams, new and pooled streams, the stream context manager (per thread,
restored after), operators inside a stream context giving the same results, events (query,
synchronize, wait, elapsed_time with and without timing), wait_stream, record_stream (memory
still freed exactly once), bad stream ids, and set_per_process_memory_fraction /
get_per_process_memory_fraction (limit, mem_get_info, out of memory, bad fractions change nothing).
"""
import gc
import threading

import pytest
import torch

import oclvm

DEV = "opencl"

pytestmark = pytest.mark.usefixtures("nothing_leaks")


def test_default_and_current_stream():
    default = torch.opencl.default_stream()
    assert default.stream_id == 0
    assert default.device == torch.device(DEV, 0)
    assert torch.opencl.current_stream() == default
    assert torch.accelerator.current_stream() == default


def test_new_streams_are_distinct_and_pool_streams_repeat():
    a = torch.opencl.Stream()
    b = torch.Stream(device=DEV)
    assert a.stream_id not in (0, b.stream_id)
    assert a.device_type == b.device_type
    # c10's getStreamFromGlobalPool serves a fixed pool round robin (adapters/torch/streams.cc).
    assert torch.opencl.Stream(priority=-1).stream_id != 0  # priorities are accepted


def test_stream_context_sets_and_restores_the_current_stream():
    s = torch.opencl.Stream()
    with torch.opencl.stream(s) as entered:
        assert entered is s
        assert torch.opencl.current_stream() == s
        x = torch.arange(1000, dtype=torch.float32, device=DEV)
        y = (x * 3 + 1).sum()
    assert torch.opencl.current_stream() == torch.opencl.default_stream()
    assert y.item() == pytest.approx(sum(3 * i + 1 for i in range(1000)))
    with torch.opencl.stream(None):
        assert torch.opencl.current_stream() == torch.opencl.default_stream()


def test_torch_stream_as_context_manager():
    s = torch.Stream(device=DEV)
    with s:
        assert torch.accelerator.current_stream() == s
        t = torch.full((64,), 7, device=DEV)
    assert torch.accelerator.current_stream().stream_id == 0
    assert t.cpu().eq(7).all()


def test_work_on_two_streams_ordered_by_an_event():
    s1 = torch.opencl.Stream()
    s2 = torch.opencl.Stream()
    done = torch.opencl.Event()
    with torch.opencl.stream(s1):
        x = torch.ones(1 << 20, device=DEV)
        x.mul_(5)
        done.record()
    s2.wait_event(done)
    with torch.opencl.stream(s2):
        total = x.sum()
    assert total.item() == 5 * (1 << 20)
    assert done.query()
    done.synchronize()


def test_wait_stream_and_synchronize():
    s1 = torch.opencl.Stream()
    s2 = torch.opencl.Stream()
    with torch.opencl.stream(s1):
        x = torch.randn(256, 256, device=DEV)
    s2.wait_stream(s1)
    with torch.opencl.stream(s2):
        y = x @ x
    s1.synchronize()
    s2.synchronize()
    assert s1.query() and s2.query()
    torch.opencl.synchronize()
    torch.accelerator.synchronize()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())


def test_events_time_the_work_between_them():
    start = torch.opencl.Event(enable_timing=True)
    end = torch.opencl.Event(enable_timing=True)
    assert start.query(), "an event never recorded counts as complete"
    start.record()
    x = torch.randn(512, 512, device=DEV)
    (x @ x).sum().item()
    end.record()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0.0


def test_elapsed_time_needs_timing_and_recorded_events():
    plain_a = torch.opencl.Event()
    plain_b = torch.opencl.Event()
    plain_a.record()
    plain_b.record()
    with pytest.raises(ValueError, match="enable_timing"):  # torch's own check
        plain_a.elapsed_time(plain_b)
    timed = torch.opencl.Event(enable_timing=True)
    never = torch.opencl.Event(enable_timing=True)
    timed.record()
    with pytest.raises(ValueError, match="recorded"):
        timed.elapsed_time(never)
    with pytest.raises(ValueError, match="interprocess"):
        torch.opencl.Event(interprocess=True)


def test_event_recorded_again_moves_to_the_new_point():
    e = torch.opencl.Event(enable_timing=True)
    first = torch.opencl.Event(enable_timing=True)
    e.record()
    first.record()
    torch.ones(1 << 18, device=DEV).sum().item()
    e.record()  # now after the work
    e.synchronize()
    assert first.elapsed_time(e) >= 0.0


def test_record_stream_keeps_the_release_correct():
    before = torch.opencl.memory_allocated()
    s = torch.opencl.Stream()
    x = torch.ones(1 << 20, device=DEV)
    with torch.opencl.stream(s):
        y = x * 2
    x.record_stream(s)
    y.record_stream(torch.opencl.current_stream())  # its own allocating stream: nothing to do
    del x
    assert y.sum().item() == 2 * (1 << 20)
    del y
    gc.collect()
    assert torch.opencl.memory_allocated() == before


def test_record_stream_of_an_empty_tensor_does_nothing():
    e = torch.empty(0, device=DEV)
    e.record_stream(torch.opencl.Stream())


def test_unknown_stream_ids_are_refused():
    device_type = torch.opencl.current_stream().device_type
    bogus = torch.Stream(stream_id=123456, device_index=0, device_type=device_type)
    with pytest.raises(RuntimeError, match="names none"):
        torch.accelerator.set_stream(bogus)
    assert torch.opencl.current_stream().stream_id == 0
    with pytest.raises(RuntimeError, match="names none"):
        bogus.synchronize()


def test_current_stream_is_per_thread():
    s = torch.opencl.Stream()
    seen = []

    def other_thread():
        seen.append(torch.opencl.current_stream().stream_id)
        x = torch.ones(100, device=DEV)
        seen.append(int(x.sum().item()))

    with torch.opencl.stream(s):
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        assert torch.opencl.current_stream() == s
    assert seen == [0, 100]


@pytest.mark.two_devices
def test_streams_belong_to_their_device():
    s1 = torch.opencl.Stream(device=1)
    assert s1.device == torch.device(DEV, 1)
    with torch.opencl.stream(s1):
        # A stream context makes the stream's device current too (as torch.cuda.stream does).
        assert torch.opencl.current_device() == 1
        assert torch.opencl.current_stream() == s1
        assert torch.opencl.current_stream(0).stream_id == 0
        x = torch.full((10,), 3.0, device=DEV)
    assert torch.opencl.current_device() == 0
    assert torch.opencl.current_stream(1).stream_id == 0
    assert x.device == torch.device(DEV, 1)
    assert x.sum().item() == 30.0
    torch.opencl.synchronize(1)
    e = torch.opencl.Event()
    with torch.opencl.device(1):
        e.record(s1)
    torch.opencl.default_stream(0).wait_event(e)  # waits on the host across devices
    assert e.query()


# ---------------------------------------------------------------------------------------------
# set_per_process_memory_fraction


@pytest.fixture
def no_limit_after():
    yield
    for i in range(torch.opencl.device_count()):
        torch.opencl.set_per_process_memory_fraction(1.0, i)


def test_fraction_sets_the_limit_and_mem_get_info(no_limit_after):
    assert torch.opencl.get_per_process_memory_fraction() == 1.0
    total = oclvm._C.global_memory(0)
    torch.opencl.set_per_process_memory_fraction(0.25)
    assert oclvm._C.memory_limit(0) == int(0.25 * total)
    assert torch.opencl.get_per_process_memory_fraction() == pytest.approx(0.25)
    free, limited_total = torch.opencl.mem_get_info()
    assert limited_total == int(0.25 * total)
    assert free == limited_total - torch.opencl.memory_reserved()
    torch.opencl.set_per_process_memory_fraction(1)
    assert oclvm._C.memory_limit(0) == 0
    assert torch.opencl.mem_get_info()[1] == total


def test_allocation_over_the_fraction_is_out_of_memory(no_limit_after):
    torch.opencl.empty_cache()
    kept = torch.ones(1024, device=DEV)
    ooms = torch.opencl.memory_stats()["num_ooms"]
    allocated = torch.opencl.memory_allocated()
    torch.opencl.set_per_process_memory_fraction(0.0)  # nothing new may be reserved
    assert oclvm._C.memory_limit(0) == 1
    with pytest.raises(torch.OutOfMemoryError, match="^OpenCL out of memory. opencl:0: "):
        torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
    stats = torch.opencl.memory_stats()
    assert stats["num_ooms"] == ooms + 1
    assert torch.opencl.memory_allocated() == allocated
    assert kept.sum().item() == 1024, "live tensors keep working under a lowered limit"
    torch.opencl.set_per_process_memory_fraction(1.0)
    big = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
    del big


def test_lowering_the_fraction_gives_the_cache_back(no_limit_after):
    x = torch.empty(8 << 20, dtype=torch.uint8, device=DEV)
    del x
    cached = torch.opencl.memory_reserved()
    assert cached >= 8 << 20
    torch.opencl.set_per_process_memory_fraction(0.0)
    # x's segment was wholly free: it went back to the driver with the limit.
    assert torch.opencl.memory_reserved() <= cached - (8 << 20)


@pytest.mark.parametrize("bad, error", [(-0.1, ValueError), (1.5, ValueError),
                                        ("half", TypeError), (True, TypeError)])
def test_bad_fractions_change_nothing(bad, error, no_limit_after):
    with pytest.raises(error):
        torch.opencl.set_per_process_memory_fraction(bad)
    assert oclvm._C.memory_limit(0) == 0
    with pytest.raises(ValueError, match="opencl device"):
        torch.opencl.set_per_process_memory_fraction(0.5, "cpu")
    with pytest.raises(IndexError):
        torch.opencl.set_per_process_memory_fraction(0.5, 99)
    assert oclvm._C.memory_limit(0) == 0


@pytest.mark.two_devices
def test_fraction_is_per_device(no_limit_after):
    torch.opencl.set_per_process_memory_fraction(0.0, 1)
    assert oclvm._C.memory_limit(1) == 1
    assert oclvm._C.memory_limit(0) == 0
    x = torch.empty(1 << 20, device=f"{DEV}:0")
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(1 << 20, device=f"{DEV}:1")
    del x
