"""Streams and events on torch.opencl, as torch.cuda.streams: Stream and Event (classes:
``isinstance`` works), current_stream, default_stream, set_stream, stream and StreamContext, and
the sync-debug mode and graph-capture queries that have one answer here. A stream is a VM stream
with its own OpenCL queue; an event is a marker of one (Note [Event instances are torch.Event]).
"""
import torch

from . import BACKEND, _C
from ._device import _index


class Stream(torch.Stream):
    """A stream of an opencl device: a VM stream with its own in-order OpenCL queue. Like
    torch.cuda.Stream: ``Stream(device=None, priority=0)`` makes a new stream of the device
    (None: the current one); ``Stream(stream_id=..., device_index=..., device_type=...)`` names an
    existing one. OpenCL queues have no priorities: `priority` is accepted and has no effect.
    Every torch API taking a torch.Stream takes it (checked for torch 2.13)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if kwargs:
            made = super().__new__(cls, priority=priority, **kwargs)
        else:
            made = super().__new__(cls, device=torch.device(BACKEND, _index(device)),
                                   priority=priority)
        if made.device.type != BACKEND:
            raise ValueError(f"Expected a stream of an {BACKEND} device, but got one of "
                             f"{made.device}")
        return made


def _as_stream(plain: torch.Stream) -> Stream:
    return Stream(stream_id=plain.stream_id, device_index=plain.device_index,
                  device_type=plain.device_type)


# Note [Event instances are torch.Event]
# torch 2.13 accepts only objects whose type is exactly torch.Event in two places: the argument
# of Event.elapsed_time ("expected other to be a torch.Event object") and the event given to
# Stream.record_event. Instances of a Python subclass could never be timed against each other.
# So calling torch.opencl.Event makes a plain torch.Event of the opencl device, and the class's
# metaclass makes isinstance(x, torch.opencl.Event) true for every torch.Event of an opencl device
# (also those that Stream.record_event() returns). issubclass(torch.opencl.Event, torch.Event)
# holds; type(torch.opencl.Event()) is torch.Event.
class _EventType(type):
    def __instancecheck__(cls, instance) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        return type(instance) is torch.Event and instance.device.type == BACKEND


class Event(torch.Event, metaclass=_EventType):
    """An event of the opencl device: a marker of the stream it is recorded on (torch.cuda.Event's
    signature). With enable_timing, elapsed_time() gives the milliseconds between two recorded
    events (host time at which the recorded work had completed). Makes a torch.Event: see Note
    [Event instances are torch.Event]. `blocking` has no effect (synchronize() always waits on
    the host); interprocess events are refused."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False):
        if interprocess:
            raise ValueError("Expected interprocess=False: opencl events cannot be shared "
                             "between processes")
        return torch.Event(device=BACKEND, enable_timing=enable_timing, blocking=blocking)


def current_stream(device=None) -> Stream:
    """This thread's current stream of the device (its default stream until set)."""
    return _as_stream(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None) -> Stream:
    """The device's default stream (oclvm's compute stream of that device)."""
    index = _index(device)
    # Stream id 0 is the default stream of every opencl device (adapters/torch/streams.h).
    return Stream(stream_id=0, device_index=index,
                  device_type=torch.accelerator.current_stream(index).device_type)


def set_stream(stream: torch.Stream) -> None:
    """Makes `stream` this thread's current stream of its device, and its device the current
    device (as torch.accelerator.set_stream and torch.cuda.set_stream do)."""
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager running the block's operators on `stream` (None: no change), like
    torch.cuda.StreamContext: inside, the stream's device is the current device and the stream its
    current stream; after, the previous current device and that device's previous stream are
    restored. Entering returns the stream."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.previous_stream = None
        self.previous_device = -1

    def __enter__(self):
        if self.stream is not None:
            self.previous_device = _C.current_device()
            self.previous_stream = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc) -> bool:
        if self.stream is not None:
            set_stream(self.previous_stream)
            _C.set_device(self.previous_device)
        return False


def stream(stream) -> StreamContext:
    """StreamContext(stream), as torch.cuda.stream: ``with torch.opencl.stream(s): ...``."""
    return StreamContext(stream)


def is_current_stream_capturing() -> bool:
    """False: the device has no graph capture (torch.cuda's CUDA graphs), so no stream is ever
    capturing."""
    return False


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def get_sync_debug_mode() -> int:
    """0 ("default"): the device neither warns nor fails on operators that synchronise with the
    host, and has no other mode."""
    return 0


def set_sync_debug_mode(debug_mode) -> None:
    """Accepts "default" / 0, the only mode the device has; "warn" / 1 and "error" / 2 raise
    NotImplementedError (oclvm does not report which operators synchronise), anything else
    ValueError."""
    mode = _SYNC_DEBUG_MODES.get(debug_mode) if isinstance(debug_mode, str) else debug_mode
    if not isinstance(mode, int) or isinstance(mode, bool) or mode not in (0, 1, 2):
        raise ValueError(f"Expected a debug mode of 'default', 'warn', 'error', 0, 1 or 2, but got "
                         f"{debug_mode!r}")
    if mode != 0:
        raise NotImplementedError(f"Expected sync debug mode 'default' (0) on {BACKEND}, but got "
                                  f"{debug_mode!r}: oclvm does not report the operators that "
                                  "synchronise with the host")
