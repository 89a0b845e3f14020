"""Streams and events of the `opencl` device, checked the way PyTorch's OpenReg backend tests check
a PrivateUse1 backend (its test_streams.py and test_event.py), rewritten for our device, plus the
classes torch.opencl.Stream and torch.opencl.Event.

What is checked: creating streams (device forms, by id), the stream as a context manager,
switching the current stream, query / synchronize / wait_stream / wait_event / record_event,
events (ids, device, query before and after recording, synchronize, elapsed_time with and without
timing, reuse, several streams waiting on one event, events on two devices), and that
torch.opencl.Stream instances are torch.Stream instances every torch API takes, and that
torch.opencl.Event instances can be timed against each other (Note [Event instances are
torch.Event] in python/oclvm/streams.py: torch 2.13 refuses Python subclasses of torch.Event as
the argument of elapsed_time and of Stream.record_event).
"""
import pytest
import torch

DEV = "opencl"

pytestmark = pytest.mark.usefixtures("nothing_leaks", "device_zero_and_default_streams")


def matmul_work(device=DEV):
    x = torch.randn(64, 64, device=device)
    return x @ x


# ---------------------------------------------------------------------------------------------
# torch.Stream on the device (OpenReg's test_streams.py)


def test_stream_create():
    stream = torch.Stream(device=DEV)
    assert stream.device_index == torch.opencl.current_device()
    assert stream.device.type == DEV
    same = torch.Stream(stream_id=stream.stream_id, device_type=stream.device_type,
                        device_index=stream.device_index)
    assert same == stream
    assert hash(same) == hash(stream)
    assert torch.Stream(0).device == torch.device(DEV, 0)  # an int names an accelerator index


@pytest.mark.two_devices
def test_stream_create_on_the_second_device():
    for stream in (torch.Stream(device=f"{DEV}:1"), torch.Stream(1)):
        assert stream.device.type == DEV
        assert stream.device_index == 1


def test_stream_context():
    with torch.Stream(device=DEV) as stream:
        assert torch.accelerator.current_stream() == stream
    assert torch.accelerator.current_stream().stream_id == 0


def test_stream_switch():
    s1 = torch.Stream(device=f"{DEV}:0")
    torch.accelerator.set_stream(s1)
    assert torch.accelerator.current_stream() == s1
    s2 = torch.Stream(device=f"{DEV}:0")
    torch.accelerator.set_stream(s2)
    assert torch.accelerator.current_stream() == s2


@pytest.mark.two_devices
def test_stream_switch_across_devices():
    s1 = torch.Stream(device=f"{DEV}:1")
    torch.accelerator.set_stream(s1)
    assert torch.accelerator.current_stream() == s1
    assert torch.accelerator.current_device_index() == 1


def test_stream_query_and_synchronize():
    stream = torch.Stream(device=DEV)
    assert stream.query()
    event = torch.Event()
    event.record(stream)
    stream.synchronize()
    assert stream.query()


def test_stream_repr():
    stream = torch.Stream(device=DEV)
    assert f"torch.Stream device_type={DEV}, device_index=0" in repr(stream)


def test_stream_wait_stream_and_wait_event():
    s1 = torch.Stream(device=DEV)
    s2 = torch.Stream(device=DEV)
    s2.wait_stream(s1)
    event = s1.record_event()
    s2.wait_event(event)
    s2.synchronize()
    assert event.query()


@pytest.mark.two_devices
def test_stream_waits_on_a_stream_of_another_device():
    s0 = torch.Stream(device=f"{DEV}:0")
    s1 = torch.Stream(device=f"{DEV}:1")
    with s0:
        x = matmul_work(f"{DEV}:0")
    s1.wait_stream(s0)
    with s1:
        y = x.to(f"{DEV}:1") * 2
    torch.testing.assert_close(y.cpu(), x.cpu() * 2)


# ---------------------------------------------------------------------------------------------
# torch.Event on the device (OpenReg's test_event.py)


def test_event_create():
    for event in (torch.Event(device=DEV), torch.Event(device=f"{DEV}:0"), torch.Event()):
        assert event.device.type == DEV
        assert event.device.index is None  # no device until recorded
        assert event.event_id == 0
    event = torch.Stream(device=DEV).record_event()
    assert event.device == torch.device(DEV, 0)
    assert event.event_id != 0


def test_event_query_and_synchronize():
    event = torch.Event(device=DEV)
    assert event.query(), "an event never recorded counts as complete"
    stream = torch.Stream(device=DEV)
    event.record(stream)
    event.synchronize()
    assert event.query()
    recorded = stream.record_event()
    recorded.synchronize()
    assert recorded.query()


def test_events_recorded_have_distinct_ids():
    stream = torch.Stream(device=DEV)
    first = stream.record_event()
    second = stream.record_event()
    assert 0 != first.event_id != second.event_id != 0


def test_event_elapsed_time():
    stream = torch.Stream(device=DEV)
    start = torch.Event(device=DEV, enable_timing=True)
    end = torch.Event(device=DEV, enable_timing=True)
    start.record(stream)
    end.record(stream)
    stream.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) > 0


def test_event_timing_disabled():
    stream = torch.Stream(device=DEV)
    plain = [torch.Event(device=DEV, enable_timing=False) for _ in range(2)]
    for event in plain:
        event.record(stream)
    stream.synchronize()
    with pytest.raises(ValueError, match="Both events must be created with argument "
                                         "'enable_timing=True'"):
        plain[0].elapsed_time(plain[1])


def test_blocking_and_non_blocking_waits():
    stream = torch.Stream(device=DEV)
    event = torch.Event(device=DEV)
    assert event.query() and event.event_id == 0 and event.device.index is None
    event.record(stream)
    assert event.event_id != 0
    with stream:
        matmul_work()
    event.query()  # does not wait
    event.synchronize()
    assert event.query()
    assert event.device.index == 0
    again = stream.record_event()
    for _ in range(4):
        again.query()
    again.synchronize()
    assert again.query()


def test_interleaved_work_and_events():
    stream = torch.Stream(device=DEV)
    x = torch.randn(50, 50, device=DEV)
    y = torch.randn(50, 50, device=DEV)
    first = stream.record_event()
    with stream:
        z = x @ y
    second = stream.record_event()
    assert first.event_id != second.event_id
    with stream:
        w = z @ x
    stream.synchronize()
    assert first.query() and second.query()
    torch.testing.assert_close(w.cpu(), (x.cpu() @ y.cpu()) @ x.cpu(), rtol=1e-4, atol=1e-4)


def test_several_streams_wait_for_one_event():
    streams = [torch.Stream(device=DEV) for _ in range(3)]
    assert len({s.stream_id for s in streams}) == 3
    x = torch.randn(30, 30, device=DEV)
    y = torch.randn(30, 30, device=DEV)
    event = streams[0].record_event()
    streams[1].wait_event(event)
    streams[2].wait_event(event)
    with streams[1]:
        z1 = x @ y
    with streams[2]:
        z2 = x @ y
    torch.accelerator.synchronize()
    assert event.query()
    assert torch.equal(z1.cpu(), z2.cpu())


def test_event_reuse():
    stream = torch.Stream(device=DEV)
    event = torch.Event(device=DEV)
    for _ in range(2):
        event.record(stream)
        stream.synchronize()
        assert event.query()
    events = [torch.Event(device=DEV) for _ in range(2)]
    for e in events:
        e.record(stream)
    stream.synchronize()
    assert all(e.query() for e in events)


def test_generic_stream_and_event():
    stream = torch.Stream(DEV)
    assert stream.device_index == torch.accelerator.current_device_index()
    start = torch.Event(DEV, enable_timing=True)
    end = torch.Event(DEV, enable_timing=True)
    a = torch.randn(1000, device=DEV)
    b = torch.randn(1000, device=DEV)
    with torch.accelerator.device_index(stream.device_index):
        a + b
        start.record(stream)
        start.synchronize()
        end.record()  # on the current stream
        end.synchronize()
        assert start.elapsed_time(end) > 0


@pytest.mark.two_devices
def test_events_on_two_devices():
    e0 = torch.Event(device=f"{DEV}:0")
    e1 = torch.Event(device=f"{DEV}:1")
    e0.record(torch.Stream(device=f"{DEV}:0"))
    e1.record(torch.Stream(device=f"{DEV}:1"))
    assert e0.device.index == 0
    assert e1.device.index == 1
    e1.synchronize()
    torch.Stream(device=f"{DEV}:0").wait_event(e1)  # a host wait across devices


@pytest.mark.two_devices
def test_device_synchronize_keeps_the_current_device():
    torch.accelerator.set_device_index(1)
    z = matmul_work()
    torch.accelerator.synchronize()
    assert torch.accelerator.current_device_index() == 1
    assert z.sum().device == torch.device(DEV, 1)


# ---------------------------------------------------------------------------------------------
# torch.opencl.Stream and torch.opencl.Event


def test_opencl_stream_is_a_torch_stream_class():
    assert isinstance(torch.opencl.Stream, type) and issubclass(torch.opencl.Stream, torch.Stream)
    made = [torch.opencl.Stream(), torch.opencl.Stream(device=0),
            torch.opencl.Stream(device=f"{DEV}:0", priority=-1), torch.opencl.Stream(priority=1)]
    for s in made:
        assert isinstance(s, torch.opencl.Stream) and isinstance(s, torch.Stream)
        assert s.device == torch.device(DEV, 0) and s.stream_id != 0
    assert len({s.stream_id for s in made}) == len(made)
    named = torch.opencl.Stream(stream_id=made[0].stream_id, device_index=0,
                                device_type=made[0].device_type)
    assert named == made[0] and isinstance(named, torch.opencl.Stream)
    with pytest.raises(ValueError, match="opencl device"):
        torch.opencl.Stream(device="cpu")


def test_current_and_default_streams_are_opencl_streams():
    for s in (torch.opencl.current_stream(), torch.opencl.default_stream(),
              torch.opencl.current_stream(0), torch.opencl.default_stream(torch.device(DEV, 0))):
        assert type(s) is torch.opencl.Stream
        assert s.stream_id == 0
    assert torch.opencl.current_stream() == torch.accelerator.current_stream()


def test_torch_apis_take_opencl_streams():
    s1 = torch.opencl.Stream()
    s2 = torch.opencl.Stream()
    with torch.opencl.stream(s1):
        assert torch.opencl.current_stream() == s1
        x = matmul_work()
    s2.wait_stream(s1)
    torch.Stream(device=DEV).wait_stream(s1)
    e = s1.record_event()
    assert isinstance(e, torch.opencl.Event)
    s2.wait_event(e)
    with s2:  # torch.Stream's own context manager
        assert torch.accelerator.current_stream() == s2
        y = x + 1
    y.record_stream(s1)
    torch.accelerator.set_stream(s1)
    assert torch.accelerator.current_stream() == s1
    torch.opencl.set_stream(torch.opencl.default_stream())
    s1.synchronize()
    assert s1.query() and s2.query()
    torch.testing.assert_close(y.cpu(), x.cpu() + 1)


def test_opencl_event_is_a_torch_event_class():
    assert isinstance(torch.opencl.Event, type) and issubclass(torch.opencl.Event, torch.Event)
    e = torch.opencl.Event(enable_timing=True)
    assert isinstance(e, torch.opencl.Event) and isinstance(e, torch.Event)
    assert isinstance(torch.Event(device=DEV), torch.opencl.Event)
    assert isinstance(torch.opencl.Stream().record_event(), torch.opencl.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.opencl.Event)
    assert not isinstance(torch.opencl.Stream(), torch.opencl.Event)
    with pytest.raises(ValueError, match="interprocess"):
        torch.opencl.Event(interprocess=True)


def test_opencl_events_time_each_other_and_torch_events():
    stream = torch.opencl.Stream()
    start = torch.opencl.Event(enable_timing=True)
    end = torch.opencl.Event(enable_timing=True)
    generic = torch.Event(device=DEV, enable_timing=True)
    start.record(stream)
    with torch.opencl.stream(stream):
        matmul_work()
    end.record(stream)
    generic.record(stream)
    end.synchronize()
    assert start.elapsed_time(end) > 0
    assert start.elapsed_time(generic) >= start.elapsed_time(end)
    assert generic.elapsed_time(start) < 0
    returned = stream.record_event(torch.opencl.Event())  # the event given is recorded
    assert returned.event_id != 0
    returned.wait(torch.opencl.Stream())
    returned.wait()
    assert returned.query()


def test_plain_opencl_events_cannot_be_timed():
    a = torch.opencl.Event()
    b = torch.opencl.Event()
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)
    timed = torch.opencl.Event(enable_timing=True)
    never = torch.opencl.Event(enable_timing=True)
    timed.record()
    with pytest.raises(ValueError, match="recorded"):
        timed.elapsed_time(never)


@pytest.mark.two_devices
def test_opencl_streams_of_the_second_device():
    s = torch.opencl.Stream(device=1)
    assert isinstance(s, torch.opencl.Stream) and s.device == torch.device(DEV, 1)
    assert torch.opencl.current_stream(1).device_index == 1
    assert torch.opencl.default_stream(f"{DEV}:1").device == torch.device(DEV, 1)
    with torch.opencl.stream(s):
        assert torch.opencl.current_device() == 1
        e = torch.opencl.Event()
        e.record()
        x = torch.ones(4, device=DEV)
    assert e.device == torch.device(DEV, 1)
    assert x.device == torch.device(DEV, 1)
    assert torch.opencl.current_device() == 0
