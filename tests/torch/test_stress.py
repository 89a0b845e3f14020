"""Stress of the `opencl` PyTorch device: threads creating, copying, viewing and freeing tensors.

THREADS threads (OCLVM_TORCH_STRESS_THREADS, default 4) run for SECONDS seconds
(OCLVM_TORCH_STRESS_SECONDS, default 10; `make torch-stress` runs 60) a seeded random mix of
operations on real PoCL devices, every device tensor paired with a CPU shadow that receives the
same operations:

  create       torch.empty + fill_ / zeros / ones / full / upload of random values, random
               sizes (log-uniform, 0 to 2^17 elements), 1-D or 2-D, ten dtypes, on any device
  upload       host -> device: .to / .opencl() / copy_ into an empty tensor, non_blocking or not
  check        device -> host: .cpu() / .to(non_blocking) + stream sync / copy_ into a
               (transposed) host tensor, compared element for element with the shadow
  device_copy  device -> device: empty_like + copy_, .to(another device) (two devices)
  view         views (slices with steps, narrow, select, t(), diagonal, view, 0-d elements) of
               a tensor with an in-place op on them (fill_, zero_, add_, mul_, clamp_,
               logical_not_, copy_ from the host or from another device tensor, integer add_ of
               a tensor); the view is kept alive next to its base half the time
  clone        clone of a (possibly strided) tensor
  resize       resize_ to another size (storage growth: allocate + device copy)
  convert      .to(another dtype) (the converting copy through the host)
  item / unfold  _local_scalar_dense of one element; an unfold view read back
  stream       one of the above inside `with torch.opencl.stream(s)` on one of the thread's two
               streams of a device, record_stream(s) on the tensors it used
  event        work on stream s1, an Event recorded there, waited on by s2 or the current
               stream, synchronize / query / elapsed_time, wait_stream
  delete       dropping a tensor or a whole storage family
  handoff      a storage family given to another thread through a queue: allocated on one
               thread's streams, checked, changed and freed by another
  stats / empty_cache / synchronize  concurrently with the others

Every check compares bit for bit: arithmetic on the device takes the CPU fallback, so the shadow
computes exactly what the device should hold. At the end every thread checks all its tensors
and drops them; then memory_allocated is back to its start value on every device, oclvm's live
blocks too, and after empty_cache memory_reserved is 0 when nothing else was live at the start.
Any exception in any thread fails the test with the thread's seed and its last operations.

The seed is printed (run with -s to see it and the op counts); OCLVM_TORCH_STRESS_SEED replays a
run: each thread draws its choices from its own generator seeded by (seed, thread), so a thread's
sequence of operations is the same again (what arrives through handoffs depends on timing).

Streams are made once per thread: torch.opencl.Stream() makes a new VM stream on every call and
the VM allows 4096 in a process (design/torch.md).
"""
import collections
import gc
import os
import queue
import random
import threading
import time
import traceback

import pytest
import torch

import oclvm

DEV = "opencl"
SECONDS = float(os.environ.get("OCLVM_TORCH_STRESS_SECONDS", "10"))
THREADS = int(os.environ.get("OCLVM_TORCH_STRESS_THREADS", "4"))
SEED = int(os.environ.get("OCLVM_TORCH_STRESS_SEED", str(random.SystemRandom().randrange(1 << 31))))
MAX_FAMILIES = 12        # storage families a thread holds at once
MAX_FAMILY = 4           # tensors (a base and its views) sharing one storage
MAX_LOG2_ELEMENTS = 17   # sizes are log-uniform in [1, 2^17] elements (at most 1 MiB at 8 bytes)
JOIN_MARGIN = 120        # seconds past the end a thread may take before the run counts as hung

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}

# op name -> weight of the random mix (device_copy across devices only with two devices).
WEIGHTS = {
    "create": 14, "upload": 8, "check": 12, "device_copy": 8, "view": 18, "clone": 6,
    "resize": 5, "convert": 4, "item": 3, "unfold": 2, "stream": 8, "event": 4, "delete": 10,
    "handoff": 3, "stats": 2, "empty_cache": 1, "synchronize": 2,
}

pytestmark = pytest.mark.usefixtures("nothing_leaks")


class Entry:
    """A device tensor and its CPU shadow: every operation is applied to both."""
    __slots__ = ("dev", "ref")

    def __init__(self, dev: torch.Tensor, ref: torch.Tensor) -> None:
        self.dev = dev
        self.ref = ref


def assert_same(entry: Entry, got: torch.Tensor, what: str) -> None:
    """`got` (on the host) equals the shadow bit for bit (same dtype, shape, values)."""
    ref = entry.ref
    assert got.device.type == "cpu", what
    assert got.dtype == ref.dtype and got.shape == ref.shape, (
        f"{what}: expected {ref.dtype} {tuple(ref.shape)}, but got {got.dtype} {tuple(got.shape)}")
    if not torch.equal(got, ref):
        bad = (got != ref).nonzero()
        first = tuple(bad[0].tolist())
        raise AssertionError(f"{what}: {bad.shape[0]} of {ref.numel()} elements differ from the "
                             f"CPU shadow; first at {first}: got {got[first].item()}, expected "
                             f"{ref[first].item()} ({ref.dtype}, shape {tuple(ref.shape)}, "
                             f"strides {entry.dev.stride()}, offset {entry.dev.storage_offset()})")


class Worker:
    """One stress thread: its own generators, storage families, streams and op counts."""

    def __init__(self, index: int, devices: int, mailbox: queue.Queue, stop: threading.Event,
                 deadline: float) -> None:
        self.index = index
        self.seed = SEED * 1000 + index
        self.rng = random.Random(self.seed)
        self.gen = torch.Generator().manual_seed(self.seed)
        self.devices = devices
        self.mailbox = mailbox
        self.stop = stop
        self.deadline = deadline
        self.families: list[list[Entry]] = []   # each: tensors sharing one storage
        self.streams: list[list[torch.Stream]] = []
        self.counts: collections.Counter = collections.Counter()
        self.history: collections.deque = collections.deque(maxlen=24)
        self.error: str | None = None
        names = [n for n in WEIGHTS if n != "handoff" or THREADS > 1]
        self.names = names
        self.weights = [WEIGHTS[n] for n in names]

    # -- random choices --------------------------------------------------------------------

    def device(self) -> str:
        return f"{DEV}:{self.rng.randrange(self.devices)}"

    def dtype(self) -> torch.dtype:
        return self.rng.choice(DTYPES)

    def shape(self) -> tuple:
        if self.rng.random() < 0.03:
            return (0,) if self.rng.random() < 0.5 else (0, self.rng.randint(1, 5))
        n = int(2 ** self.rng.uniform(0, MAX_LOG2_ELEMENTS))
        if self.rng.random() < 0.5:
            return (n,)
        rows = self.rng.randint(1, max(1, int(n ** 0.5) * 2))
        return (rows, max(1, n // rows))

    def scalar(self, dtype: torch.dtype):
        if dtype == torch.bool:
            return self.rng.random() < 0.5
        if dtype == torch.uint8:
            return self.rng.randint(0, 255)
        return self.rng.randint(-100, 100)

    def values(self, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """Random host values of `dtype`, integers exact in every dtype used."""
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=self.gen).bool()
        low, high = (0, 256) if dtype == torch.uint8 else (-100, 101)
        return torch.randint(low, high, shape, generator=self.gen).to(dtype)

    def pick(self) -> tuple:
        """A random family and a random tensor of it (None, None when the thread holds none)."""
        if not self.families:
            return None, None
        family = self.rng.choice(self.families)
        return family, self.rng.choice(family)

    def other_device(self, dev: torch.Tensor) -> str:
        index = (dev.device.index + self.rng.randrange(1, self.devices)) % self.devices
        return f"{DEV}:{index}"

    def add_family(self, dev: torch.Tensor, ref: torch.Tensor) -> None:
        assert dev.device.type == DEV and ref.device.type == "cpu"
        self.families.append([Entry(dev, ref)])
        while len(self.families) > MAX_FAMILIES:
            self.families.pop(self.rng.randrange(len(self.families)))

    # -- operations ------------------------------------------------------------------------

    def op_create(self) -> None:
        shape, dtype, device = self.shape(), self.dtype(), self.device()
        kind = self.rng.choice(["empty", "zeros", "ones", "full", "upload"])
        self.history.append(f"create {kind} {shape} {dtype} {device}")
        if kind == "empty":
            k = self.scalar(dtype)
            dev = torch.empty(shape, dtype=dtype, device=device).fill_(k)
            ref = torch.full(shape, k, dtype=dtype)
        elif kind == "zeros":
            dev, ref = torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype)
        elif kind == "ones":
            dev, ref = torch.ones(shape, dtype=dtype, device=device), torch.ones(shape, dtype=dtype)
        elif kind == "full":
            k = self.scalar(dtype)
            dev = torch.full(shape, k, dtype=dtype, device=device)
            ref = torch.full(shape, k, dtype=dtype)
        else:
            ref = self.values(shape, dtype)
            dev = torch.tensor(ref.tolist(), dtype=dtype, device=device) if 0 < ref.numel() < 64 \
                else ref.to(device)
        self.add_family(dev, ref)

    def op_upload(self) -> None:
        shape, dtype, device = self.shape(), self.dtype(), self.device()
        ref = self.values(shape, dtype)
        kind = self.rng.choice(["to", "to_non_blocking", "copy_", "opencl", "transposed"])
        self.history.append(f"upload {kind} {shape} {dtype} {device}")
        if kind == "to":
            dev = ref.to(device)
        elif kind == "to_non_blocking":
            dev = ref.to(device, non_blocking=True)
        elif kind == "copy_":
            dev = torch.empty(shape, dtype=dtype, device=device).copy_(ref)
        elif kind == "opencl":
            dev = ref.opencl(torch.device(device))
        else:  # a strided host source into a strided device destination
            ref = ref.view(shape[0], -1).t() if ref.dim() == 1 and ref.numel() else ref.t()
            dev = torch.empty(ref.shape[::-1], dtype=dtype, device=device).t()
            dev.copy_(ref)
        ref = ref.clone()  # the shadow owns its memory (the source may still be read)
        self.add_family(dev, ref)

    def op_check(self) -> None:
        _, entry = self.pick()
        if entry is None:
            return self.op_create()
        kind = self.rng.choice(["cpu", "non_blocking", "copy_into", "copy_into_transposed"])
        self.history.append(f"check {kind} {tuple(entry.dev.shape)} {entry.dev.dtype}")
        if kind == "cpu":
            got = entry.dev.cpu()
        elif kind == "non_blocking":
            got = entry.dev.to("cpu", non_blocking=True)
            torch.opencl.current_stream(entry.dev.device).synchronize()
        elif kind == "copy_into" or entry.dev.dim() != 2:
            got = torch.empty(entry.dev.shape, dtype=entry.dev.dtype).copy_(entry.dev)
        else:
            got = torch.empty(entry.dev.shape[::-1], dtype=entry.dev.dtype).t().copy_(entry.dev)
        assert_same(entry, got, f"check {kind}")

    def op_device_copy(self) -> None:
        _, entry = self.pick()
        if entry is None:
            return self.op_create()
        across = self.devices > 1 and self.rng.random() < 0.5
        target = self.other_device(entry.dev) if across else str(entry.dev.device)
        kind = self.rng.choice(["copy_", "to"] if across else ["copy_", "empty_like"])
        self.history.append(f"device_copy {kind} {entry.dev.device}->{target} "
                            f"{tuple(entry.dev.shape)} {entry.dev.dtype}")
        if kind == "to":
            dev = entry.dev.to(target)
        elif kind == "copy_":  # into a contiguous tensor: so is the shadow
            dev = torch.empty(entry.dev.shape, dtype=entry.dev.dtype, device=target)
            dev.copy_(entry.dev)
            self.add_family(dev, torch.empty(entry.ref.shape, dtype=entry.ref.dtype)
                            .copy_(entry.ref))
            return
        else:
            dev = torch.empty_like(entry.dev).copy_(entry.dev)
        assert dev.device == torch.device(target)
        self.add_family(dev, entry.ref.clone())  # clone keeps strides as to / empty_like do

    def view_fn(self, t: torch.Tensor):
        """A random view maker valid for tensors of t's shape (None for a 0-d tensor)."""
        rng = self.rng
        if t.dim() == 1:
            n = t.shape[0]
            if n == 0:
                return lambda x: x[0:0]
            a = rng.randrange(n)
            b = rng.randint(a + 1, n)
            step = rng.randint(1, 4)
            choices = [lambda x: x[a:b:step], lambda x: x.narrow(0, a, b - a),
                       lambda x: x.select(0, a)]
            rows = [r for r in (2, 3, 4, 8) if n % r == 0]
            if rows and t.is_contiguous():
                r = rng.choice(rows)
                choices.append(lambda x: x.view(r, n // r))
            return rng.choice(choices)
        if t.dim() == 2:
            rows, cols = t.shape
            if rows == 0 or cols == 0:
                return lambda x: x.t()
            a = rng.randrange(rows)
            b = rng.randint(a + 1, rows)
            j = rng.randrange(cols)
            step = rng.randint(1, 3)
            choices = [lambda x: x.t(), lambda x: x[a:b, ::step], lambda x: x[:, j],
                       lambda x: x.t()[j], lambda x: x.diagonal(), lambda x: x.select(0, a),
                       lambda x: x.narrow(1, j, cols - j)]
            if t.is_contiguous():
                choices.append(lambda x: x.view(-1))
            return rng.choice(choices)
        return None

    def inplace(self, dev: torch.Tensor, ref: torch.Tensor) -> str:
        """Applies one random in-place op to both `dev` and `ref` (same shape and dtype)."""
        dtype = dev.dtype
        kinds = ["fill_", "zero_", "copy_host", "copy_device"]
        kinds += ["logical_not_"] if dtype == torch.bool else ["add_", "mul_", "clamp_"]
        if dtype not in FLOATS and dtype != torch.bool:
            kinds.append("add_tensor")
        kind = self.rng.choice(kinds)
        if kind == "fill_":
            k = self.scalar(dtype)
            dev.fill_(k)
            ref.fill_(k)
        elif kind == "zero_":
            dev.zero_()
            ref.zero_()
        elif kind == "logical_not_":
            dev.logical_not_()
            ref.logical_not_()
        elif kind == "add_":
            k = self.rng.randint(-3, 3)
            dev.add_(k)
            ref.add_(k)
        elif kind == "mul_":
            k = self.rng.choice([-1, 2])
            dev.mul_(k)
            ref.mul_(k)
        elif kind == "clamp_":
            low, high = (0, 200) if dtype == torch.uint8 else (-50, 50)
            dev.clamp_(low, high)
            ref.clamp_(low, high)
        elif kind == "copy_host":  # host -> strided device destination, maybe converting
            source = self.values(tuple(ref.shape), self.rng.choice([dtype, torch.int32]))
            dev.copy_(source)
            ref.copy_(source)
        else:  # device -> strided device destination, maybe from the other device
            source_ref = self.values(tuple(ref.shape), dtype)
            device = self.other_device(dev) if self.devices > 1 and self.rng.random() < 0.3 \
                else str(dev.device)
            source = source_ref.to(device)
            if kind == "copy_device":
                dev.copy_(source)
                ref.copy_(source_ref)
            else:
                dev.add_(source) if device == str(dev.device) else dev.add_(source.to(dev.device))
                ref.add_(source_ref)
        return kind

    def op_view(self) -> None:
        family, entry = self.pick()
        if entry is None:
            return self.op_create()
        make = self.view_fn(entry.dev)
        if make is None:  # a 0-d tensor: change it in place
            kind = self.inplace(entry.dev, entry.ref)
            self.history.append(f"view 0-d {kind}")
            return
        dev, ref = make(entry.dev), make(entry.ref)
        assert dev.shape == ref.shape and dev.stride() == ref.stride(), "view metadata differs"
        assert dev.untyped_storage().data_ptr() == entry.dev.untyped_storage().data_ptr()
        kind = self.inplace(dev, ref)
        self.history.append(f"view {tuple(entry.dev.shape)}->{tuple(dev.shape)} "
                            f"stride {dev.stride()} {dev.dtype} {kind}")
        if self.rng.random() < 0.5 and len(family) < MAX_FAMILY:
            family.append(Entry(dev, ref))  # the view outlives this op, next to its base
        if self.rng.random() < 0.3:
            assert_same(entry, entry.dev.cpu(), f"base after view {kind}")

    def op_clone(self) -> None:
        _, entry = self.pick()
        if entry is None:
            return self.op_create()
        self.history.append(f"clone {tuple(entry.dev.shape)} stride {entry.dev.stride()}")
        dev = entry.dev.clone()
        assert dev.untyped_storage().data_ptr() != entry.dev.untyped_storage().data_ptr() \
            or dev.numel() == 0
        self.add_family(dev, entry.ref.clone())

    def op_resize(self) -> None:
        _, entry = self.pick()
        if entry is None:
            return self.op_create()
        dev, ref = entry.dev, entry.ref
        n = int(2 ** self.rng.uniform(0, MAX_LOG2_ELEMENTS))
        shape = (n,) if self.rng.random() < 0.5 else (max(1, n // 4), 4)
        elements = dev.element_size()
        # Storage elements initialised in both storages: past them the grown storage is
        # uninitialised on both sides and is filled below.
        known = min(dev.untyped_storage().nbytes(), ref.untyped_storage().nbytes()) // elements
        self.history.append(f"resize {tuple(dev.shape)} offset {dev.storage_offset()} -> {shape} "
                            f"{dev.dtype}")
        try:
            ref.resize_(shape)
        except RuntimeError:
            return  # not resizable on the CPU either (e.g. a view of a view); nothing changed
        dev.resize_(shape)
        assert dev.shape == ref.shape and dev.stride() == ref.stride(), "resize_ metadata differs"
        assert dev.storage_offset() == ref.storage_offset()
        fresh = max(0, known - dev.storage_offset())
        if fresh < dev.numel():
            k = self.scalar(dev.dtype)
            dev.view(-1)[fresh:].fill_(k)
            ref.view(-1)[fresh:].fill_(k)

    def op_convert(self) -> None:
        _, entry = self.pick()
        if entry is None:
            return self.op_create()
        source = entry.dev.dtype
        # Float -> integer conversions of infinities (a mul_ may overflow) are undefined.
        targets = [d for d in DTYPES if d != source and (source not in FLOATS or d in FLOATS)]
        target = self.rng.choice(targets)
        self.history.append(f"convert {tuple(entry.dev.shape)} {source}->{target}")
        self.add_family(entry.dev.to(target), entry.ref.to(target))

    def op_item(self) -> None:
        _, entry = self.pick()
        if entry is None or entry.dev.numel() == 0:
            return self.op_create()
        index = tuple(self.rng.randrange(s) for s in entry.dev.shape)
        self.history.append(f"item {index} of {tuple(entry.dev.shape)} {entry.dev.dtype}")
        got, expected = entry.dev[index].item(), entry.ref[index].item()
        assert got == expected or (got != got and expected != expected), (
            f"item {index}: expected {expected}, but got {got}")

    def op_unfold(self) -> None:
        _, entry = self.pick()
        if entry is None or entry.dev.dim() != 1 or entry.dev.numel() < 2:
            return self.op_create()
        n = entry.dev.shape[0]
        size, step = self.rng.randint(1, min(n, 64)), self.rng.randint(1, 3)
        self.history.append(f"unfold {n} size {size} step {step}")
        view = entry.dev.unfold(0, size, step)
        assert view.untyped_storage().data_ptr() == entry.dev.untyped_storage().data_ptr()
        assert_same(Entry(view, entry.ref.unfold(0, size, step)), view.cpu(), "unfold")

    def op_stream(self) -> None:
        d = self.rng.randrange(self.devices)
        s = self.rng.choice(self.streams[d])
        inner = self.rng.choice(["create", "upload", "view", "clone", "device_copy", "check",
                                 "resize", "delete"])
        self.history.append(f"stream {s.stream_id} of opencl:{d}: {inner}")
        used = [entry for family in self.families for entry in family]
        with torch.opencl.stream(s):
            assert torch.opencl.current_stream(d) == s
            getattr(self, "op_" + inner)()
        # The caching-allocator rule: a tensor allocated on another stream and used on s.
        for entry in used:
            if entry.dev.device.index == d and self.rng.random() < 0.2:
                entry.dev.record_stream(s)
        self.counts["stream." + inner] += 1

    def op_event(self) -> None:
        d = self.rng.randrange(self.devices)
        first, second = self.streams[d]
        if self.rng.random() < 0.5:
            first, second = second, first
        timing = self.rng.random() < 0.3
        start = torch.opencl.Event(enable_timing=timing)
        done = torch.opencl.Event(enable_timing=timing)
        how = self.rng.choice(["wait_event", "current_waits", "synchronize", "wait_stream"])
        self.history.append(f"event {how} timing={timing} on opencl:{d}")
        with torch.opencl.stream(first):
            start.record()
            dev = torch.full((self.rng.randint(1, 1 << 14),), 3, dtype=torch.int32,
                             device=f"{DEV}:{d}")
            dev.add_(4)
            done.record(first)
        reader = second
        if how == "wait_event":
            second.wait_event(done)
        elif how == "current_waits":
            reader = torch.opencl.current_stream(d)
            reader.wait_event(done)
        elif how == "wait_stream":
            second.wait_stream(first)
        else:
            done.synchronize()
            assert done.query()
        with torch.opencl.stream(reader):
            got = dev.cpu()
        dev.record_stream(reader)
        assert got.eq(7).all(), "work ordered by an event read a stale value"
        if timing:
            done.synchronize()
            assert start.elapsed_time(done) >= 0.0
        if self.rng.random() < 0.5:
            self.add_family(dev, got)

    def op_delete(self) -> None:
        family, entry = self.pick()
        if entry is None:
            return
        if self.rng.random() < 0.3:
            self.families.remove(family)
            self.history.append(f"delete family of {len(family)}")
            return
        family.remove(entry)
        self.history.append(f"delete {tuple(entry.dev.shape)} {entry.dev.dtype}")
        if not family:
            self.families.remove(family)

    def op_handoff(self) -> None:
        if self.rng.random() < 0.5 and self.families:
            family = self.families.pop(self.rng.randrange(len(self.families)))
            try:
                self.mailbox.put_nowait(family)
                self.history.append(f"handoff give {len(family)}")
            except queue.Full:
                self.families.append(family)
            return
        try:
            family = self.mailbox.get_nowait()
        except queue.Empty:
            return
        self.history.append(f"handoff take {len(family)}")
        for entry in family:
            assert_same(entry, entry.dev.cpu(), "handed-off tensor")
        self.families.append(family)

    def op_stats(self) -> None:
        d = self.rng.randrange(self.devices)
        self.history.append(f"stats opencl:{d}")
        stats = torch.opencl.memory_stats(d)
        assert stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"] >= 0
        free, total = torch.opencl.mem_get_info(d)
        assert 0 <= free <= total
        assert torch.opencl.memory_allocated(d) >= 0

    def op_empty_cache(self) -> None:
        self.history.append("empty_cache")
        torch.opencl.empty_cache()

    def op_synchronize(self) -> None:
        d = self.rng.randrange(self.devices)
        kind = self.rng.choice(["device", "stream", "query"])
        self.history.append(f"synchronize {kind} opencl:{d}")
        if kind == "device":
            torch.opencl.synchronize(d)
        elif kind == "stream":
            self.rng.choice(self.streams[d]).synchronize()
        else:
            s = self.rng.choice(self.streams[d])
            s.synchronize()
            assert s.query()

    # -- the thread ------------------------------------------------------------------------

    def verify_all(self) -> None:
        for family in self.families:
            for entry in family:
                assert_same(entry, entry.dev.cpu(), "final check")

    def run(self) -> None:
        try:
            self.streams = [[torch.opencl.Stream(d), torch.opencl.Stream(d)]
                            for d in range(self.devices)]
            while not self.stop.is_set() and time.monotonic() < self.deadline:
                name = self.rng.choices(self.names, self.weights)[0]
                getattr(self, "op_" + name)()
                self.counts[name] += 1
            self.verify_all()
        except BaseException:  # noqa: BLE001 (every failure of every thread fails the test)
            self.error = (f"thread {self.index} (seed {self.seed}; OCLVM_TORCH_STRESS_SEED={SEED})"
                          f", last operations:\n  " + "\n  ".join(self.history) + "\n"
                          + traceback.format_exc())
            self.stop.set()
        finally:
            self.families.clear()
            self.streams = []


def test_threads_create_copy_view_and_free_tensors():
    devices = torch.opencl.device_count()
    print(f"\ntorch stress: OCLVM_TORCH_STRESS_SEED={SEED}, {THREADS} threads, {devices} "
          f"device(s), {SECONDS:g} s", flush=True)
    gc.collect()
    blocks_before = oclvm._C.live_blocks()
    allocated_before = [torch.opencl.memory_allocated(d) for d in range(devices)]

    mailbox: queue.Queue = queue.Queue(maxsize=2 * THREADS)
    stop = threading.Event()
    start = time.monotonic()
    workers = [Worker(i, devices, mailbox, stop, start + SECONDS) for i in range(THREADS)]
    threads = [threading.Thread(target=w.run, name=f"stress-{w.index}", daemon=True)
               for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, start + SECONDS + JOIN_MARGIN - time.monotonic()))
    elapsed = time.monotonic() - start
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running {JOIN_MARGIN} s past the end: {hung} (seed {SEED})"
    errors = [w.error for w in workers if w.error is not None]
    assert not errors, f"{len(errors)} of {THREADS} threads failed:\n\n" + "\n\n".join(errors)

    # Families still in the mailbox: check them, then drop them with the rest.
    left = 0
    while True:
        try:
            family = mailbox.get_nowait()
        except queue.Empty:
            break
        for entry in family:
            assert_same(entry, entry.dev.cpu(), "family left in the mailbox")
            left += 1
        del family, entry

    counts = collections.Counter()
    for w in workers:
        counts.update(w.counts)
    total = sum(n for name, n in counts.items() if "." not in name)
    print(f"torch stress: {total} operations in {elapsed:.1f} s ({total / elapsed:.0f}/s; "
          f"{left} tensors left in the mailbox)")
    print("  " + ", ".join(f"{name} {n}" for name, n in sorted(counts.items())))
    for name in ("create", "check", "view", "stream", "delete"):
        assert counts[name] > 0, f"no {name} operation ran in {elapsed:.1f} s"

    gc.collect()
    assert oclvm._C.live_blocks() == blocks_before, f"seed {SEED}"
    assert [torch.opencl.memory_allocated(d) for d in range(devices)] == allocated_before, \
        f"seed {SEED}"
    torch.opencl.empty_cache()
    if blocks_before == 0:  # nothing else is live: the cache gave every segment back
        assert [torch.opencl.memory_reserved(d) for d in range(devices)] == [0] * devices, \
            f"seed {SEED}"
