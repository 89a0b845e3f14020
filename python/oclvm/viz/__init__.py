"""Pictures of a PyTorch memory snapshot as self-contained SVG: the allocation timeline and the
segment map, drawn without a network and with nothing but the standard library.

PyTorch's own viewer (``python -m torch.cuda._memory_viz trace_plot`` / ``segment_plot``) writes
an HTML page whose script comes from a CDN, so on a machine without a network it shows nothing.
This module draws the two views a user needs from the same snapshot, the dictionary that
``torch.cuda.memory._snapshot()`` returns and ``_dump_snapshot(path)`` pickles (``segments`` and
``device_traces``):

- ``timeline_svg(snapshot, device=0, max_entries=None)``, the "Active Memory Timeline": x is the
  index of the event in ``device_traces[device]``, y is live bytes. Every allocation is a band,
  stacked in the order the allocations were made; a band keeps its place while it lives, and when
  it is freed it ends and the bands above it slide down by its size over the next event. The
  band ends at ``free_completed`` (a ``free_requested`` before it changes nothing: the memory is
  held until the free completes). A block freed without an ``alloc`` in the trace (allocated
  before recording began, or before the trace's ring buffer wrapped), and a block the snapshot's
  segments hold at the end (``active_allocated`` or ``active_pending_free``) with no ``alloc``,
  were live from the start: they sit at the bottom, drawn lighter, the ones freed last lowest.
  ``oom`` events are red markers, ``snapshot`` events grey ones. Only the `max_entries` largest
  allocations (default ``DEFAULT_MAX_ENTRIES``) are drawn as bands, as PyTorch's viewer does;
  the others are one grey band "other (N allocations)" on top of the stack, and the picture says
  so. Allocations of the size at the cut are drawn all or none (so that every step of a training
  loop looks alike), unless that would draw fewer than half of `max_entries`: then the earliest.
  Each band's ``<title>`` tooltip gives its size, address, stream, the events that made and
  freed it and its top frames (the Python ones when there are any). Colours follow the order in
  which the allocations were made.
- ``segments_svg(snapshot, device=None)``, the segment map: every segment of the device (None:
  of every device, one section each) is a bar whose width is proportional to its size, on one
  scale for the whole picture, laid out in rows that wrap. Its blocks are drawn by state
  (``active_allocated``, ``active_pending_free``, ``inactive``), each with a tooltip giving its
  address, size, requested size and frames; blocks narrower than a pixel are drawn together as
  one mark whose tooltip counts them.
- ``snapshot_svg(snapshot, device=0)``: the timeline above the segment map of `device`, in one
  document.
- ``main(argv)``: ``python -m oclvm.viz SNAPSHOT.pickle [-o OUT.svg] [--view
  timeline|segments|both] [--device N] [--max-entries N]``.

Promises: the functions only read the snapshot and return the SVG as a string; the same snapshot
gives the same bytes. The SVG has no script, no stylesheet and no external reference, so any
browser opens it offline; every picture has a title, axes with byte units, a legend, and says what
it left out. Bands are capped and polygon points merged to half a pixel (to wider columns past
_POINT_BUDGET points), so a trace of a million events gives a picture of a few MB at most, in
seconds. An empty trace gives a picture that says "no allocations recorded". A snapshot that is
not PyTorch's structure, or a device with no trace, raises ValueError naming what is wrong; the
command turns that, a missing file or a pickle that is not a snapshot into a one-line message and
exit status 1 (2 for a usage error). Without --device it draws the only device with a trace (and
asks for --device when there are several). Its reader unpickles plain data only (dicts, lists,
strings, numbers): a pickle that names a class is refused, so opening a file runs none of its code.

Pure functions, thread-safe. The modules: _common (formatting, reading the snapshot, the SVG
parts every picture has), timeline, segments, combined (both views in one document) and _cli (the
command). They need neither torch nor the native module: they import nothing from the rest of
the package, and ``python python/oclvm/viz ...`` runs the same command from a source tree.
``python -m oclvm.viz`` imports the installed ``oclvm`` package first (Python does, for ``-m``),
which loads torch and the devices.
"""
from ._cli import load, main
from ._common import DEFAULT_MAX_ENTRIES, format_bytes
from .combined import snapshot_svg
from .segments import segments_svg
from .timeline import timeline_svg

__all__ = ["DEFAULT_MAX_ENTRIES", "format_bytes", "timeline_svg", "segments_svg", "snapshot_svg",
           "load", "main"]
