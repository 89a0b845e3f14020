"""The command of oclvm.viz: load() reads a pickled snapshot (plain data only) and main() draws
it, ``python -m oclvm.viz SNAPSHOT.pickle [-o OUT.svg] [--view V] [--device N]``."""
import argparse
import io
import os
import pickle
import sys

from ._common import DEFAULT_MAX_ENTRIES, _NoTrace, _as_snapshot
from .combined import snapshot_svg
from .segments import segments_svg
from .timeline import timeline_svg


# ------------------------------------------------------------------------------------------------
# The command


class _NotPlainData(pickle.UnpicklingError):
    pass


class _PlainData(pickle.Unpickler):
    """Unpickles dicts, lists, tuples, strings and numbers only: a snapshot holds nothing else,
    and refusing classes means opening a file runs none of its code."""

    def find_class(self, module, name):
        raise _NotPlainData(f"it holds a {module}.{name} object, and a memory snapshot holds "
                            f"plain data only")


def load(path) -> dict:
    """The snapshot pickled in `path` (as torch.cuda.memory._dump_snapshot writes it). Raises
    OSError when it cannot be read and ValueError when it is not a snapshot."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        snapshot = _PlainData(io.BytesIO(data)).load()
    except _NotPlainData as e:
        raise ValueError(f"{path} is not a memory snapshot: {e}") from None
    except Exception as e:  # a truncated or foreign file fails in many ways
        raise ValueError(f"{path} is not a memory snapshot pickle "
                         f"({type(e).__name__}: {e})") from None
    try:
        return _as_snapshot(snapshot)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _default_device(snapshot: dict) -> int:
    # A trace of only `snapshot` markers (taking a snapshot marks every device) has nothing to
    # draw; the device that allocated is the one meant.
    with_events = [i for i, trace in enumerate(snapshot["device_traces"])
                   if any(e.get("action") != "snapshot" for e in trace)]
    if len(with_events) > 1:
        raise ValueError(f"Devices {', '.join(map(str, with_events))} have traces: "
                         f"choose one with --device")
    return with_events[0] if with_events else 0


def main(argv=None) -> int:
    """``python -m oclvm.viz SNAPSHOT.pickle [-o OUT.svg] [--view V] [--device N]``: writes the
    picture and prints where. Returns 0; raises SystemExit with a message on an error."""
    parser = argparse.ArgumentParser(
        prog="python -m oclvm.viz",
        description="Draw a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) as a "
                    "self-contained SVG: the allocation timeline and the segment map.")
    parser.add_argument("snapshot", help="the pickled snapshot")
    parser.add_argument("-o", "--output",
                        help="the SVG to write ('-': standard output; default: the snapshot's "
                             "name with .svg)")
    parser.add_argument("--view", choices=("timeline", "segments", "both"), default="both")
    parser.add_argument("--device", type=int, default=None,
                        help="the device (default: the only one with a trace; the segments "
                             "view alone shows every device)")
    parser.add_argument("--max-entries", type=int, default=None,
                        help=f"allocations drawn as bands of their own (default "
                             f"{DEFAULT_MAX_ENTRIES}); the smaller ones are one band")
    args = parser.parse_args(argv)
    if args.max_entries is not None and args.max_entries < 0:
        parser.error("--max-entries must be >= 0")

    def fail(message):
        raise SystemExit(f"oclvm.viz: error: {message}")

    try:
        snapshot = load(args.snapshot)
    except FileNotFoundError:
        fail(f"{args.snapshot}: no such file")
    except OSError as e:
        fail(f"{args.snapshot}: {e.strerror or e}")
    except ValueError as e:
        fail(str(e))
    try:
        if args.view == "segments":
            svg = segments_svg(snapshot, args.device)
        else:
            device = _default_device(snapshot) if args.device is None else args.device
            if args.view == "timeline":
                svg = timeline_svg(snapshot, device, args.max_entries)
            else:
                svg = snapshot_svg(snapshot, device, args.max_entries)
    except _NoTrace as e:
        fail(f"{args.snapshot}: {e} (--view segments draws the segment map alone)")
    except ValueError as e:
        fail(f"{args.snapshot}: {e}")
    output = args.output or os.path.splitext(args.snapshot)[0] + ".svg"
    if output == "-":
        sys.stdout.write(svg)
        return 0
    try:
        with open(output, "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as e:
        fail(f"{output}: {e.strerror or e}")
    print(f"wrote {output} ({args.view}, {len(svg):,} bytes)")
    return 0
