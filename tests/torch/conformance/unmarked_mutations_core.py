"""The empirical method of find_unmarked_mutations.py: schema helpers, tensor snapshots, and the
TorchDispatchMode (Audit) that compares every tensor argument the schema leaves unmarked before and
after each operator call, recording what changed in a Recorder.
"""
import collections
import contextlib
import os
import warnings

# Judge torch itself, not whatever device backend an installed package would autoload.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

# --------------------------------------------------------------------------------------------
# Schema helpers


def op_name(func):
    s = func._schema
    return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


def is_write(arg):
    return arg.alias_info is not None and arg.alias_info.is_write


def is_tensor_type(arg):
    return "Tensor" in str(arg.type)


def bind(schema, args, kwargs):
    """Schema argument name -> value for one call (absent arguments are None)."""
    bound = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif i < len(args):
            bound[a.name] = args[i]
        else:
            bound[a.name] = None
    return bound


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)


def storage_ptr(t):
    try:
        if (t.is_sparse or t.layout != torch.strided or t.is_mkldnn or t.is_nested
                or t._is_zerotensor()):
            return None
        s = t.untyped_storage()
        return s.data_ptr() if s.nbytes() else None
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# Bit-exact snapshots

_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def snapshot(t):
    """A comparable record of everything a kernel could change in `t`, or None if unsupported."""
    if t.is_sparse:
        return ("coo", tuple(t.shape), t.is_coalesced(), t.dtype,
                snapshot(t._indices()), snapshot(t._values()))
    if t.layout in _COMPRESSED:
        if t.layout in (torch.sparse_csr, torch.sparse_bsr):
            ci, pi = t.crow_indices(), t.col_indices()
        else:
            ci, pi = t.ccol_indices(), t.row_indices()
        return ("compressed", tuple(t.shape), t.dtype, snapshot(ci), snapshot(pi),
                snapshot(t.values()))
    if t.is_mkldnn:
        return ("mkldnn", tuple(t.shape), t.dtype, t.to_dense().clone())
    if t.is_nested:
        return None
    if t.device.type == "meta":
        return ("meta", tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)
    meta = (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.is_conj(),
            t.is_neg())
    if t.is_quantized:
        if t.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            q = (t.q_scale(), t.q_zero_point())
        else:
            q = (t.q_per_channel_scales().clone(), t.q_per_channel_zero_points().clone(),
                 t.q_per_channel_axis())
        meta = meta + (t.qscheme(),) + tuple(
            x if not isinstance(x, torch.Tensor) else ("t", x) for x in q)
    if t._is_zerotensor():  # autograd's storage-less zeros: nothing to read
        return ("zerotensor", meta)
    st = t.untyped_storage()
    if st.nbytes() and not st.data_ptr():
        return ("nodata", meta)
    raw = torch.empty(0, dtype=torch.uint8).set_(st).clone() if st.nbytes() else None
    return ("dense", meta, st.data_ptr(), st.nbytes(), raw)


def same(a, b):
    if a is None or b is None:
        return a is b
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype in (torch.uint8, torch.int8, torch.bool, torch.int16, torch.int32, torch.int64):
            return torch.equal(a, b)
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                           b.contiguous().reshape(-1).view(torch.uint8))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def what_changed(before, after):
    """'data' or 'metadata' for a dense snapshot pair, 'parts' for sparse ones."""
    if before[0] == "dense" and after[0] == "dense":
        return "data" if before[1:4] == after[1:4] else "metadata"
    return "parts"


# --------------------------------------------------------------------------------------------
# Recording


def features(schema, bound):
    """The bool arguments and the None-ness of optional tensors of one call: used to infer the
    condition under which an argument is written."""
    f = {}
    for a in schema.arguments:
        t = str(a.type)
        v = bound.get(a.name)
        if t in ("bool", "Optional[bool]"):
            f[a.name] = None if v is None else bool(v)
        elif t == "Optional[Tensor]":
            f[a.name + " given"] = v is not None
    return f


class Recorder:
    def __init__(self):
        self.calls = collections.Counter()          # op -> calls that returned
        self.sources = collections.defaultdict(set)  # op -> where the calls came from
        self.args = {}                               # (op, arg) -> dict
        self.source = "?"
        self.skipped_alias = collections.Counter()
        self.uncomparable = collections.Counter()

    def arg_entry(self, op, arg):
        return self.args.setdefault((op, arg), {"checked": 0, "written": 0, "how": set(),
                                                "wf": [], "cf": [], "sources": set()})

    def merge(self, other):
        self.calls.update(other["calls"])
        for k, v in other.get("alias", []):
            self.skipped_alias[tuple(k)] += v
        for k, v in other.get("uncomparable", []):
            self.uncomparable[tuple(k)] += v
        for op, srcs in other["sources"].items():
            self.sources[op].update(srcs)
        for key, e in other["args"]:
            mine = self.arg_entry(*key)
            mine["checked"] += e["checked"]
            mine["written"] += e["written"]
            mine["how"].update(e["how"])
            mine["sources"].update(e["sources"])
            for k in ("wf", "cf"):
                for f in e[k]:
                    if len(mine[k]) < 40 and f not in mine[k]:
                        mine[k].append(f)

    def to_json(self):
        return {"alias": [[list(k), v] for k, v in self.skipped_alias.items()],
                "uncomparable": [[list(k), v] for k, v in self.uncomparable.items()],
                "calls": dict(self.calls),
                "sources": {k: sorted(v) for k, v in self.sources.items()},
                "args": [[list(k), {**v, "how": sorted(v["how"]), "sources": sorted(v["sources"])}]
                         for k, v in self.args.items()]}


class Audit(TorchDispatchMode):
    """Checks every operator call for writes to arguments the schema does not mark."""

    def __init__(self, rec):
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        schema = func._schema
        name = op_name(func)
        try:
            bound = bind(schema, args, kwargs)
        except Exception:
            return func(*args, **kwargs)
        written_ptrs = set()
        for a in schema.arguments:
            if is_write(a):
                for t in tensors_in(bound.get(a.name)):
                    p = storage_ptr(t)
                    if p:
                        written_ptrs.add(p)
        watched = []
        for a in schema.arguments:
            if is_write(a) or not is_tensor_type(a):
                continue
            for idx, t in enumerate(tensors_in(bound.get(a.name))):
                p = storage_ptr(t)
                if p and p in written_ptrs:
                    self.rec.skipped_alias[(name, a.name)] += 1
                    continue
                try:
                    snap = snapshot(t)
                except Exception:
                    snap = None
                if snap is None:
                    self.rec.uncomparable[(name, a.name)] += 1
                    continue
                watched.append((a.name, idx, t, snap))
        out = func(*args, **kwargs)
        self.rec.calls[name] += 1
        self.rec.sources[name].add(self.rec.source)
        if not watched:
            return out
        feats = features(schema, bound)
        changed = {}
        per_arg = set()
        for arg, idx, t, snap in watched:
            per_arg.add(arg)
            try:
                now = snapshot(t)
            except Exception:
                continue
            if not same(snap, now):
                changed.setdefault(arg, set()).add(what_changed(snap, now))
        for arg in per_arg:
            e = self.rec.arg_entry(name, arg)
            e["checked"] += 1
            e["sources"].add(self.rec.source)
            if arg in changed:
                e["written"] += 1
                e["how"].update(changed[arg])
                if len(e["wf"]) < 40 and feats not in e["wf"]:
                    e["wf"].append(feats)
            elif len(e["cf"]) < 40 and feats not in e["cf"]:
                e["cf"].append(feats)
        return out


@contextlib.contextmanager
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def attempt(rec, source, fn, errors):
    rec.source = source
    try:
        with quiet(), Audit(rec):
            fn()
        return True
    except Exception as e:  # noqa: BLE001 - every failure is only counted
        errors[source] = f"{type(e).__name__}: {str(e)[:800]}"
        return False


def clone_tree(x):
    def c(t):
        if isinstance(t, torch.Tensor):
            r = t.detach().clone()
            if t.requires_grad:
                r.requires_grad_(True)
            return r
        return t
    return pytree.tree_map(c, x)


def backward_of(out):
    leaves = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)
              and o.requires_grad and (o.is_floating_point() or o.is_complex())]
    if not leaves:
        return
    loss = sum((torch.view_as_real(o).sum() if o.is_complex() else o.sum()) for o in leaves)
    loss.backward()
