"""Finds aten operators whose CPU kernel writes to a tensor argument that the schema leaves unmarked.

Why: the `opencl` adapter sends most operators to `at::native::cpu_fallback`, which copies the
device arguments to the host, runs the CPU kernel and copies back only the arguments whose schema
says `Tensor(a!)`. A kernel that writes anything else (native_batch_norm's running_mean and
running_var in training) loses that write on the device. This script lists every such operator it
can reach, so the adapter can give them a kernel or a wrapper of their own.

How (two methods, cross-checked):
  1. Empirical. A TorchDispatchMode sees every operator call below autograd. Before each call it
     snapshots every tensor argument that the schema does not mark as written (tensors inside lists
     too): sizes, strides, storage offset, dtype, conj/neg bits, storage pointer and the bytes of the
     whole storage (sparse and quantized tensors by their parts); after the call it compares them
     bit for bit. Arguments sharing storage with a written argument are left out. The calls come
     from: every OpInfo in op_db and the foreach databases (function, method and in-place
     variants, float32 and one integer dtype, forward and backward); every ModuleInfo in
     module_db in training and eval mode with a backward; every OptimizerInfo in optim_db (for-loop,
     foreach and fused, with and without GradScaler's grad_scale/found_inf); hand-written module and
     operator calls (batch-norm family, RNN/LSTM/GRU and cells, dropout/rrelu/random, quantization
     observers and fake-quant, _amp_*, _fused_*, embedding, histogram, sort/unique, index ops,
     Sobol); and a schema-driven fuzzer that builds arguments for every remaining aten overload
     with a CPU or composite kernel (run in a child process that is restarted past any crash).
  2. Static. Every aten schema argument of tensor type without a write annotation whose name
     suggests state (running_*, noise, state, buffer, seed/offset, found_inf, growth_tracker,
     workspace, reserve, dst, out, ...) is listed with what the empirical run saw for it and where
     its kernels are registered.
For every finding the table gives the condition under which the write happens (inferred from the
bool / None arguments of the calls that wrote versus those that did not), whether the operator has
a CPU kernel, and which kernel a PrivateUse1 tensor reaches (found by registering a throwaway
Python fallback for PrivateUse1 in this process and reading the dispatch table). Device backend
autoloading is switched off (TORCH_DEVICE_BACKEND_AUTOLOAD=0), so an installed `oclvm` package
does not change what is measured.

Usage: .venv/bin/python tests/torch/conformance/find_unmarked_mutations.py [--write] [--no-fuzz]
It writes no file unless --write is given, and then only unmarked_mutations.md beside itself.
"""
import argparse
import collections
import contextlib
import copy
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import traceback
import warnings

# Judge torch itself, not whatever device backend an installed package would autoload.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

HERE = pathlib.Path(__file__).resolve().parent
MARK = "@@UNMARKED@@ "

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


# --------------------------------------------------------------------------------------------
# Drivers 1: the OpInfo databases


def opinfo_items():
    from torch.testing._internal import common_methods_invocations as cmi
    dbs = list(cmi.op_db)
    for n in ("foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db",
              "foreach_reduce_op_db", "foreach_other_op_db"):
        dbs += list(getattr(cmi, n, []))
    return [(f"{i.name}{'.' + i.variant_test_name if i.variant_test_name else ''}", i) for i in dbs]


def run_opinfo(info, rec, errors, max_samples=12):
    wanted = [torch.float32, torch.int64, torch.bool, torch.complex64, torch.float64]
    try:
        supported = info.supported_dtypes("cpu")
    except Exception:
        return
    dtypes = [d for d in wanted if d in supported][:2]
    if torch.float32 in supported and torch.float32 not in dtypes:
        dtypes.insert(0, torch.float32)
    for dtype in dtypes:
        grads = [False]
        if (dtype.is_floating_point or dtype.is_complex) and info.supports_autograd:
            grads.append(True)
        for rg in grads:
            src = f"op_db:{info.name}:{dtype}:{'grad' if rg else 'nograd'}"
            try:
                with quiet():
                    samples = list(info.sample_inputs("cpu", dtype, requires_grad=rg))
            except Exception as e:
                errors[src] = f"samples: {e}"[:160]
                continue
            for k, s in enumerate(samples[:max_samples]):
                variants = [("op", info.op)]
                if not rg:
                    if getattr(info, "method_variant", None) is not None:
                        variants.append(("method", info.method_variant))
                    if getattr(info, "inplace_variant", None) is not None:
                        variants.append(("inplace", info.inplace_variant))
                if not rg and k < 4 and getattr(info, "supports_out", False):
                    variants.append(("out", None))
                for vname, fn in variants:
                    if vname == "out":
                        # as OpInfo's out= tests: the expected results' dtypes, empty, as out=
                        try:
                            with quiet():
                                ss = clone_tree(s)
                                expected = info.op(ss.input, *ss.args, **ss.kwargs)
                            outs = pytree.tree_map(
                                lambda t: torch.empty(0, dtype=t.dtype)
                                if isinstance(t, torch.Tensor) else t, expected)
                            if isinstance(outs, list):
                                outs = tuple(outs)
                        except Exception:
                            continue
                        ss = clone_tree(s)

                        def call_out(ss=ss, outs=outs):
                            info.op(ss.input, *ss.args, **ss.kwargs, out=outs)
                        torch.manual_seed(0)
                        attempt(rec, f"{src}:out:{k}", call_out, errors)
                        continue
                    if fn is None:
                        continue
                    ss = clone_tree(s)

                    def call(fn=fn, ss=ss, rg=rg):
                        out = fn(ss.input, *ss.args, **ss.kwargs)
                        if rg:
                            backward_of(out)
                    torch.manual_seed(0)
                    attempt(rec, f"{src}:{vname}:{k}", call, errors)


# --------------------------------------------------------------------------------------------
# Drivers 2: module_db and optim_db


def module_items():
    from torch.testing._internal.common_modules import module_db
    return [(i.name, i) for i in module_db]


def run_module(info, rec, errors):
    for training in (True, False):
        try:
            with quiet():
                inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                                 requires_grad=True, training=training)
        except Exception as e:
            errors[f"module_db:{info.name}"] = f"inputs: {e}"[:160]
            continue
        for k, mi in enumerate(inputs[:10]):
            if mi.forward_input is None:
                continue
            src = f"module_db:{info.module_cls.__name__}:{'train' if training else 'eval'}:{k}"

            def call(mi=mi, training=training):
                c = mi.constructor_input
                m = info.module_cls(*c.args, **c.kwargs)
                m.train(training)
                fa, fk = clone_tree((mi.forward_input.args, mi.forward_input.kwargs))
                m(*fa, **fk)
                out = m(*clone_tree(fa), **clone_tree(fk))  # a second step on updated state
                backward_of(out)
            torch.manual_seed(0)
            attempt(rec, src, call, errors)


def optim_items():
    from torch.testing._internal.common_optimizers import optim_db
    return [(i.name, i) for i in optim_db]


def run_optim(info, rec, errors):
    try:
        base = info.optim_inputs_func("cpu")
    except Exception as e:
        errors[f"optim_db:{info.name}"] = f"inputs: {e}"[:160]
        return
    impls = [{}]
    for flag in ("foreach", "fused"):
        if flag in info.supported_impls and (flag != "fused" or "cpu" in info.supports_fused_on):
            impls.append({flag: True})
    for k, oi in enumerate(base[:8]):
        for impl in impls:
            for scaled in (False, True):
                if scaled and not impl.get("fused"):
                    continue
                src = f"optim_db:{info.name}:{k}:{impl}:{'scaler' if scaled else ''}"

                def call(oi=oi, impl=impl, scaled=scaled):
                    torch.manual_seed(0)
                    ps = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(4))]
                    kw = {**oi.kwargs, **impl}
                    opt = info.optim_cls(ps, **kw)
                    scaler = torch.amp.GradScaler("cpu", init_scale=4.0) if scaled else None
                    for _ in range(3):
                        opt.zero_grad()
                        loss = sum((p * p).sum() for p in ps)
                        if scaler:
                            scaler.scale(loss).backward()
                            scaler.step(opt)
                            scaler.update()
                        elif info.step_requires_closure:
                            loss.backward()
                            opt.step(lambda: sum((p * p).sum() for p in ps))
                        else:
                            loss.backward()
                            opt.step()
                attempt(rec, src, call, errors)


# --------------------------------------------------------------------------------------------
# Drivers 3: hand-written calls for state-carrying operators


def hand_written_calls():
    aten = torch.ops.aten
    r = torch.randn
    calls = []

    def add(name, fn):
        fn.label = name
        calls.append((name, fn))

    # --- real modules
    def bn_module(cls, shape, **kw):
        def f():
            for training in (True, False):
                m = cls(shape[1], **kw).train(training)
                x = r(*shape, requires_grad=True)
                m(x).sum().backward()
                m(r(*shape))
        return f
    for cls, shape in ((torch.nn.BatchNorm1d, (4, 3)), (torch.nn.BatchNorm1d, (4, 3, 5)),
                       (torch.nn.BatchNorm2d, (2, 3, 4, 4)), (torch.nn.BatchNorm3d, (2, 3, 2, 2, 2))):
        add(f"module:{cls.__name__}{shape}", bn_module(cls, shape))
        add(f"module:{cls.__name__}{shape}:momentum=None", bn_module(cls, shape, momentum=None))
        add(f"module:{cls.__name__}{shape}:no-affine", bn_module(cls, shape, affine=False))
    add("module:InstanceNorm2d(track)", bn_module(torch.nn.InstanceNorm2d, (2, 3, 4, 4),
                                                  track_running_stats=True, affine=True))
    add("module:InstanceNorm1d(track)", bn_module(torch.nn.InstanceNorm1d, (2, 3, 5),
                                                  track_running_stats=True))

    def bn_channels_last():
        m = torch.nn.BatchNorm2d(3).train()
        m(r(2, 3, 4, 4).contiguous(memory_format=torch.channels_last)).sum().backward()
    add("module:BatchNorm2d(channels_last)", bn_channels_last)

    def bn_bf16():
        m = torch.nn.BatchNorm2d(3).train()
        m(r(2, 3, 4, 4).bfloat16()).float().sum()
    add("module:BatchNorm2d(bf16 input, fp32 stats)", bn_bf16)

    def rnn_modules():
        for cls in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN):
            for kw in ({}, {"num_layers": 2, "dropout": 0.5}, {"bidirectional": True},
                       {"batch_first": True}, {"proj_size": 2} if cls is torch.nn.LSTM else {}):
                for training in (True, False):
                    m = cls(4, 3, **kw).train(training)
                    x = r(5, 2, 4, requires_grad=True)
                    out = m(x)
                    backward_of(out)
                    packed = torch.nn.utils.rnn.pack_padded_sequence(r(5, 2, 4), [5, 3])
                    out = m(packed)
                    backward_of(torch.nn.utils.rnn.pad_packed_sequence(out[0])[0])
        for cls in (torch.nn.LSTMCell, torch.nn.GRUCell, torch.nn.RNNCell):
            m = cls(4, 3)
            backward_of(m(r(2, 4, requires_grad=True)))
    add("module:LSTM/GRU/RNN and cells", rnn_modules)

    def dropouts():
        for cls, shape in ((torch.nn.Dropout, (2, 3, 4)), (torch.nn.Dropout1d, (2, 3, 4)),
                           (torch.nn.Dropout2d, (2, 3, 4, 4)), (torch.nn.Dropout3d, (2, 3, 2, 2, 2)),
                           (torch.nn.AlphaDropout, (2, 3, 4)),
                           (torch.nn.FeatureAlphaDropout, (2, 3, 4, 4))):
            for training in (True, False):
                m = cls(0.5).train(training)
                x = r(*shape, requires_grad=True)
                backward_of(m(x))
        for inplace in (False, True):
            m = torch.nn.RReLU(inplace=inplace).train()
            x = r(3, 4)
            y = m(x)
            m.eval()(r(3, 4))
        x = r(3, 4, requires_grad=True)
        torch.nn.functional.rrelu(x, training=True).sum().backward()
    add("module:Dropout*/RReLU", dropouts)

    def embeddings():
        e = torch.nn.Embedding(10, 3, max_norm=1.0)
        e.weight.data.mul_(5)
        e(torch.tensor([1, 2, 2, 5])).sum().backward()
        e = torch.nn.Embedding(10, 3, padding_idx=0, scale_grad_by_freq=True)
        e(torch.tensor([0, 2, 2, 5])).sum().backward()
        e = torch.nn.Embedding(10, 3, sparse=True)
        e(torch.tensor([0, 2, 2, 5])).sum().backward()
        for mode in ("sum", "mean", "max"):
            b = torch.nn.EmbeddingBag(10, 3, mode=mode, max_norm=1.0)
            b.weight.data.mul_(5)
            b(torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 3])).sum().backward()
        b = torch.nn.EmbeddingBag(10, 3, mode="sum")
        b(torch.tensor([1, 2, 4, 5]), torch.tensor([0, 2]),
          per_sample_weights=r(4, requires_grad=True)).sum().backward()
    add("module:Embedding/EmbeddingBag", embeddings)

    def quant_observers():
        from torch.ao.quantization import (FakeQuantize, FusedMovingAvgObsFakeQuantize,
                                           HistogramObserver, MinMaxObserver,
                                           MovingAverageMinMaxObserver,
                                           MovingAveragePerChannelMinMaxObserver,
                                           PerChannelMinMaxObserver)
        for cls in (MinMaxObserver, MovingAverageMinMaxObserver, PerChannelMinMaxObserver,
                    MovingAveragePerChannelMinMaxObserver, HistogramObserver):
            o = cls()
            for _ in range(2):
                o(r(4, 3))
            o.calculate_qparams()
        for fq in (FakeQuantize(), FusedMovingAvgObsFakeQuantize(),
                   FakeQuantize(observer=MovingAveragePerChannelMinMaxObserver,
                                qscheme=torch.per_channel_symmetric, dtype=torch.qint8,
                                quant_min=-128, quant_max=127),
                   FusedMovingAvgObsFakeQuantize(observer=MovingAveragePerChannelMinMaxObserver,
                                                 qscheme=torch.per_channel_symmetric,
                                                 dtype=torch.qint8, quant_min=-128, quant_max=127)):
            for _ in range(2):
                x = r(4, 3, requires_grad=True)
                fq(x).sum().backward()
        try:
            from torch.ao.quantization._learnable_fake_quantize import _LearnableFakeQuantize
            lfq = _LearnableFakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=0,
                                         quant_max=255)
            x = r(4, 3, requires_grad=True)
            lfq(x).sum().backward()
        except ImportError:
            pass
    add("module:quantization observers/fake-quant", quant_observers)

    def grad_scaler():
        m = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        s = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=1)
        for bad in (False, True, False):
            opt.zero_grad()
            loss = m(r(4, 3)).sum()
            if bad:
                loss = loss * float("inf")
            s.scale(loss).backward()
            s.unscale_(opt)
            s.step(opt)
            s.update()
    add("module:GradScaler(cpu)", grad_scaler)

    def autocast_cpu():
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            m(r(5, 3)).sum()
    add("module:autocast(cpu)", autocast_cpu)

    def transformer():
        for training in (True, False):
            layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True)
            layer.train(training)
            with torch.no_grad() if not training else contextlib.nullcontext():
                layer(r(2, 3, 8))
            mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).train(training)
            with torch.no_grad() if not training else contextlib.nullcontext():
                x = r(2, 3, 8)
                mha(x, x, x)
        torch.nn.functional.scaled_dot_product_attention(r(2, 2, 3, 4), r(2, 2, 3, 4),
                                                         r(2, 2, 3, 4), dropout_p=0.5)
    add("module:Transformer/MHA/SDPA", transformer)

    def sobol():
        for scramble in (False, True):
            e = torch.quasirandom.SobolEngine(3, scramble=scramble, seed=1)
            e.draw_base2(2)
            e.draw(4)
            e.fast_forward(3)
            e.draw(2)
            e.reset()
    add("module:SobolEngine", sobol)

    def norms_misc():
        lin = torch.nn.utils.parametrizations.spectral_norm(torch.nn.Linear(4, 3))
        lin(r(2, 4)).sum().backward()
        lin = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 3))
        lin(r(2, 4)).sum().backward()
        torch.nn.utils.clip_grad_norm_(lin.parameters(), 0.1)
        torch.nn.utils.clip_grad_value_(lin.parameters(), 0.1)
    add("module:spectral/weight norm, clip_grad", norms_misc)

    # --- direct operator calls
    def bn_direct():
        x = r(4, 3, 5)
        w, b = r(3), r(3)
        for training in (True, False):
            for stats in (True, False) if training else (True,):
                # training=False without running statistics dereferences a null pointer in the
                # CPU kernel (segmentation fault), so that combination is not called
                rm, rv = (r(3), r(3).abs()) if stats else (None, None)
                aten.native_batch_norm.default(x, w, b, rm, rv, training, 0.1, 1e-5)
                o = [torch.empty(0) for _ in range(3)]
                aten.native_batch_norm.out(x, w, b, rm, rv, training, 0.1, 1e-5, out=o[0],
                                           save_mean=o[1], save_invstd=o[2])
            rm, rv = r(3), r(3).abs()
            aten._native_batch_norm_legit.default(x, w, b, rm, rv, training, 0.1, 1e-5)
            if training:  # no_stats with training=False crashes the same way
                aten._native_batch_norm_legit.no_stats(x, w, b, training, 0.1, 1e-5)
            aten._native_batch_norm_legit_functional.default(x, w, b, rm, rv, training, 0.1, 1e-5)
            o = [torch.empty(0) for _ in range(3)]
            aten._native_batch_norm_legit.out(x, w, b, rm, rv, training, 0.1, 1e-5, out=o[0],
                                              save_mean=o[1], save_invstd=o[2])
            if training:
                o = [torch.empty(0) for _ in range(3)]
                aten._native_batch_norm_legit.no_stats_out(x, w, b, training, 0.1, 1e-5,
                                                           out=o[0], save_mean=o[1],
                                                           save_invstd=o[2])
            torch.batch_norm(x, w, b, r(3), r(3).abs(), training, 0.1, 1e-5, False)
            torch.instance_norm(x, w, b, r(3), r(3).abs(), training, 0.1, 1e-5, False)
            torch._batch_norm_impl_index(x, w, b, r(3), r(3).abs(), training, 0.1, 1e-5, False)
        rm, rv = r(3), r(3).abs()
        aten._native_batch_norm_legit_no_training.default(x, w, b, rm, rv, 0.1, 1e-5)
        o = [torch.empty(0) for _ in range(3)]
        aten._native_batch_norm_legit_no_training.out(x, w, b, rm, rv, 0.1, 1e-5, out0=o[0],
                                                      out1=o[1], out2=o[2])
        aten._batch_norm_with_update.default(x, w, b, rm, rv, 0.1, 1e-5)
        o = [torch.empty(0) for _ in range(4)]
        aten._batch_norm_with_update.out(x, w, b, rm, rv, 0.1, 1e-5, out=o[0], save_mean=o[1],
                                         save_invstd=o[2],
                                         reserve=torch.empty(0, dtype=torch.uint8))
        aten._batch_norm_with_update_functional.default(x, w, b, rm, rv, 0.1, 1e-5)
        aten._batch_norm_no_update.default(x, w, b, rm, rv, 0.1, 1e-5)
        o = [torch.empty(0) for _ in range(4)]
        aten._batch_norm_no_update.out(x, w, b, rm, rv, 0.1, 1e-5, out0=o[0], out1=o[1],
                                       out2=o[2], out3=torch.empty(0, dtype=torch.uint8))
        for stats in (True, False):
            rm, rv = (r(3), r(3).abs()) if stats else (None, None)
            aten.batch_norm_update_stats.default(x, rm, rv, 0.1)
            aten.batch_norm_update_stats.out(x, rm, rv, 0.1, out0=torch.empty(0),
                                             out1=torch.empty(0))
        # backward kernels, with saved statistics from a training forward
        rm, rv = r(3), r(3).abs()
        _, sm, si = aten.native_batch_norm.default(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
        g = r(4, 3, 5)
        for train in (True, False):
            aten.native_batch_norm_backward.default(g, x, w, rm, rv, sm, si, train, 1e-5,
                                                    [True, True, True])
            aten.batch_norm_backward.default(g, x, w, rm, rv, sm, si, train, 1e-5,
                                             [True, True, True], torch.empty(0))
        aten._batch_norm_impl_index_backward.default(0, x, g, w, rm, rv, sm, si, True, 1e-5,
                                                     [True, True, True], torch.empty(0))
    add("direct:batch-norm family", bn_direct)

    def dropout_random_direct():
        x = r(4, 5)
        for train in (True, False, None):
            aten.native_dropout.default(x, 0.5, train)
        aten.native_dropout_backward.default(r(4, 5), torch.ones(4, 5, dtype=torch.bool), 2.0)
        for training in (True, False):
            noise = torch.empty(4, 5)
            aten.rrelu_with_noise.default(x, noise, 0.1, 0.3, training)
            # (an out= of the wrong size is not resized in training mode: segmentation fault)
            aten.rrelu_with_noise.out(x, noise, 0.1, 0.3, training, out=torch.empty(4, 5))
            aten.rrelu_with_noise_functional.default(x, noise, 0.1, 0.3, training)
            aten.rrelu_with_noise_backward.default(r(4, 5), x, noise, 0.1, 0.3, training, False)
            aten.rrelu_with_noise_.default(x.clone(), noise, 0.1, 0.3, training)
        p = torch.rand(4, 5)
        aten.bernoulli.default(p)
        aten.bernoulli.p(x, 0.3)
        aten.bernoulli.Tensor(x, p)
        aten.bernoulli.float_out(x, 0.5, out=torch.empty(0)) if hasattr(aten.bernoulli, "float_out") else None
        aten.normal.Tensor_Tensor(x, p)
        aten.normal_functional.default(x)
        aten.multinomial.default(p, 3)
        aten.multinomial.default(p, 3, True)
        aten.poisson.default(p)
        aten.binomial.default(torch.full((4,), 5.0), torch.rand(4))
        aten._standard_gamma.default(p + 0.5)
        aten._sample_dirichlet.default(p + 0.5)
        aten.randperm.default(5)
        aten.randint_like.default(x, 10)
        aten.rand_like.default(x)
        aten.randn_like.default(x)
        for f in ("uniform", "exponential", "geometric", "cauchy", "log_normal", "random",
                  "normal"):
            op = getattr(aten, f, None)
            if op is not None and hasattr(op, "default"):
                try:
                    op.default(p.clone(), **({"p": 0.5} if f == "geometric" else {}))
                except Exception:
                    pass
    add("direct:dropout/rrelu/random", dropout_random_direct)

    def rnn_direct():
        inp, h, c = r(5, 2, 4), r(1, 2, 3), r(1, 2, 3)
        wih, whh, bih, bhh = r(12, 4), r(12, 3), r(12), r(12)
        params = [wih, whh, bih, bhh]
        for train in (True, False):
            torch.lstm(inp, [h, c], params, True, 1, 0.5, train, False, False)
            g_params = [r(9, 4), r(9, 3), r(9), r(9)]
            torch.gru(inp, h, g_params, True, 1, 0.5, train, False, False)
            r_params = [r(3, 4), r(3, 3), r(3), r(3)]
            torch.rnn_tanh(inp, h, r_params, True, 1, 0.5, train, False, False)
            torch.rnn_relu(inp, h, r_params, True, 1, 0.5, train, False, False)
            aten.mkldnn_rnn_layer.default(inp, wih, whh, bih, bhh, h[0], c[0], False, [], 2, 3, 1,
                                          True, False, False, train)
        torch.lstm_cell(r(2, 4), [h[0], c[0]], wih, whh, bih, bhh)
        torch.gru_cell(r(2, 4), h[0], r(9, 4), r(9, 3), r(9), r(9))
        torch.rnn_tanh_cell(r(2, 4), h[0], r(3, 4), r(3, 3), r(3), r(3))
        torch.rnn_relu_cell(r(2, 4), h[0], r(3, 4), r(3, 3), r(3), r(3))
    add("direct:rnn/lstm/gru", rnn_direct)

    def quant_direct():
        x = r(4, 3)
        for obs in (True, False):
            for fq in (True, False):
                rmin, rmax = torch.tensor([float("inf")]), torch.tensor([float("-inf")])
                scale, zp = torch.tensor([1.0]), torch.tensor([0], dtype=torch.int32)
                on = torch.tensor([int(obs)]), torch.tensor([int(fq)])
                aten.fused_moving_avg_obs_fake_quant.default(x, on[0], on[1], rmin, rmax, scale,
                                                             zp, 0.01, 0, 255, 0)
                aten._fused_moving_avg_obs_fq_helper.default(x, on[0], on[1], rmin, rmax, scale,
                                                             zp, 0.01, 0, 255, 0)
                aten._fused_moving_avg_obs_fq_helper_functional.default(
                    x, on[0], on[1], rmin, rmax, scale, zp, 0.01, 0, 255, 0)
                rmin, rmax = torch.full((4,), float("inf")), torch.full((4,), float("-inf"))
                scale, zp = torch.ones(4), torch.zeros(4, dtype=torch.int32)
                aten._fused_moving_avg_obs_fq_helper.default(x, on[0], on[1], rmin, rmax, scale,
                                                             zp, 0.01, -128, 127, 0, True, True)
        s, z = torch.tensor([0.1]), torch.tensor([0], dtype=torch.int32)
        en = torch.tensor([1], dtype=torch.long)
        aten.fake_quantize_per_tensor_affine.default(x, 0.1, 0, 0, 255)
        aten.fake_quantize_per_tensor_affine.tensor_qparams(x, s, z, 0, 255)
        aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default(x, s, z, en, 0, 255)
        aten.fake_quantize_per_channel_affine.default(x, torch.ones(4) * 0.1,
                                                      torch.zeros(4, dtype=torch.int32), 0, 0, 255)
        aten._fake_quantize_learnable_per_tensor_affine.default(x, s, z.float(), 0, 255)
        aten._choose_qparams_per_tensor.default(x)
        aten.choose_qparams_optimized.default(x.reshape(-1), 12, 20, 0.16, 8)
        q = aten.quantize_per_tensor.default(x, 0.1, 0, torch.quint8)
        aten.dequantize.self(q)
        aten.quantize_per_tensor_dynamic.default(x, torch.quint8, False)
        aten.quantize_per_channel.default(x, torch.ones(4) * 0.1, torch.zeros(4, dtype=torch.long),
                                          0, torch.qint8)
        aten._saturate_weight_to_fp16.default(x)
        aten.int_repr.default(q)
        aten._make_per_tensor_quantized_tensor.default(torch.randint(0, 10, (3,), dtype=torch.uint8),
                                                       0.1, 0)
    add("direct:quantization", quant_direct)

    def amp_direct():
        for bad in (False, True):
            gs = [r(3), r(2, 2)]
            if bad:
                gs[1][0, 0] = float("nan")
            found = torch.zeros(1)
            inv = torch.tensor([0.5])
            aten._amp_foreach_non_finite_check_and_unscale_.default(gs, found, inv)
            aten._amp_foreach_non_finite_check_and_unscale.default([g.clone() for g in gs],
                                                                   torch.zeros(1), inv)
            aten._amp_foreach_non_finite_check_and_unscale.out(
                [g.clone() for g in gs], torch.zeros(1), inv, out=[torch.empty(0), torch.empty(0)])
            for found_v in (0.0, 1.0):
                for tracker in (0, 1):
                    scale = torch.tensor([4.0])
                    gt = torch.tensor([tracker], dtype=torch.int32)
                    fi = torch.tensor([found_v])
                    aten._amp_update_scale_.default(scale, gt, fi, 2.0, 0.5, 2)
                    aten._amp_update_scale.default(torch.tensor([4.0]),
                                                   torch.tensor([tracker], dtype=torch.int32),
                                                   fi, 2.0, 0.5, 2)
                    aten._amp_update_scale.out(torch.tensor([4.0]),
                                               torch.tensor([tracker], dtype=torch.int32), fi,
                                               2.0, 0.5, 2, out=torch.empty(0))
    add("direct:_amp_*", amp_direct)

    def fused_optim_direct():
        def lists(n):
            return [[r(3), r(2)] for _ in range(n)]
        for scaled in (False, True):
            gsc = torch.tensor([2.0]) if scaled else None
            fi = torch.tensor([0.0]) if scaled else None
            for amsgrad in (False, True):
                for op in ("_fused_adam", "_fused_adamw"):
                    pk = getattr(aten, op + "_")
                    ps, gr, ea, es, ms = lists(5)
                    if not amsgrad:
                        ms = []
                    steps = [torch.tensor(1.0), torch.tensor(1.0)]
                    pk.default(ps, gr, ea, es, ms, steps, lr=0.1, beta1=0.9, beta2=0.99,
                               weight_decay=0.01, eps=1e-8, amsgrad=amsgrad, maximize=False,
                               grad_scale=gsc, found_inf=fi)
                    pk.tensor_lr(ps, gr, ea, es, ms, steps, lr=torch.tensor(0.1), beta1=0.9,
                                 beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=amsgrad,
                                 maximize=False, grad_scale=gsc, found_inf=fi)
                    fn = getattr(aten, op)
                    fn.default(ps, gr, ea, es, ms, steps, lr=0.1, beta1=0.9, beta2=0.99,
                               weight_decay=0.01, eps=1e-8, amsgrad=amsgrad, maximize=False,
                               grad_scale=gsc, found_inf=fi)
                    fn.tensor_lr(ps, gr, ea, es, ms, steps, lr=torch.tensor(0.1), beta1=0.9,
                                 beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=amsgrad,
                                 maximize=False, grad_scale=gsc, found_inf=fi)
                    fn.out(ps, gr, ea, es, ms, steps, lr=0.1, beta1=0.9, beta2=0.99,
                           weight_decay=0.01, eps=1e-8, amsgrad=amsgrad, maximize=False,
                           grad_scale=gsc, found_inf=fi, out=[torch.empty(0), torch.empty(0)])
                    fn.tensor_lr_out(ps, gr, ea, es, ms, steps, lr=torch.tensor(0.1), beta1=0.9,
                                     beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=amsgrad,
                                     maximize=False, grad_scale=gsc, found_inf=fi,
                                     out=[torch.empty(0), torch.empty(0)])
            for first in (False, True):
                ps, gr, mb = lists(3)
                aten._fused_sgd_.default(ps, gr, mb, weight_decay=0.01, momentum=0.9, lr=0.1,
                                         dampening=0.0, nesterov=False, maximize=False,
                                         is_first_step=first, grad_scale=gsc, found_inf=fi)
                aten._fused_sgd_.tensor_lr(ps, gr, mb, weight_decay=0.01, momentum=0.9,
                                           lr=torch.tensor(0.1), dampening=0.0, nesterov=True,
                                           maximize=False, is_first_step=first, grad_scale=gsc,
                                           found_inf=fi)
                aten._fused_sgd.default(ps, gr, mb, weight_decay=0.01, momentum=0.9, lr=0.1,
                                        dampening=0.0, nesterov=False, maximize=False,
                                        is_first_step=first, grad_scale=gsc, found_inf=fi)
                aten._fused_sgd.out(ps, gr, mb, weight_decay=0.01, momentum=0.9, lr=0.1,
                                    dampening=0.0, nesterov=False, maximize=False,
                                    is_first_step=first, grad_scale=gsc, found_inf=fi,
                                    out=[torch.empty(0), torch.empty(0)])
            ps, gr, ss = lists(3)
            steps = [torch.tensor(1.0), torch.tensor(1.0)]
            aten._fused_adagrad_.default(ps, gr, ss, steps, lr=0.1, lr_decay=0.0,
                                         weight_decay=0.01, eps=1e-10, maximize=False,
                                         grad_scale=gsc, found_inf=fi)
            aten._fused_adagrad_.tensor_lr(ps, gr, ss, steps, lr=torch.tensor(0.1), lr_decay=0.0,
                                           weight_decay=0.01, eps=1e-10, maximize=False,
                                           grad_scale=gsc, found_inf=fi)
            aten._fused_adagrad.default(ps, gr, ss, steps, lr=0.1, lr_decay=0.0,
                                        weight_decay=0.01, eps=1e-10, maximize=False,
                                        grad_scale=gsc, found_inf=fi)
            aten._fused_adagrad.tensor_lr(ps, gr, ss, steps, lr=torch.tensor(0.1), lr_decay=0.0,
                                          weight_decay=0.01, eps=1e-10, maximize=False,
                                          grad_scale=gsc, found_inf=fi)
    add("direct:_fused_* optimizers", fused_optim_direct)

    def embedding_direct():
        w = r(10, 3) * 5
        idx = torch.tensor([1, 2, 2, 7])
        aten.embedding_renorm_.default(w.clone(), idx, 1.0, 2.0)
        aten.embedding_renorm.default(w, idx, 1.0, 2.0)
        aten.embedding.default(w, idx, 0, True, False)
        aten.embedding_dense_backward.default(r(4, 3), idx, 10, 0, True)
        aten.embedding_backward.default(r(4, 3), idx, 10, 0, False, True)
        aten.embedding_backward.default(r(4, 3), idx, 10, 0, True, False)
        off = torch.tensor([0, 2])
        for mode in (0, 1, 2):
            aten._embedding_bag.default(w, idx, off, False, mode, False, None, True)
            aten._embedding_bag_forward_only.default(w, idx, off, False, mode, False, None, False)
            aten.embedding_bag.default(w, idx, off, False, mode, False, None, True)
        psw = r(4)
        aten._embedding_bag.default(w, idx, off, False, 0, False, psw, True)
    add("direct:embedding", embedding_direct)

    def hist_sort_index_direct():
        x = r(20)
        torch.histc(x, 5)
        torch.histogram(x, 5)
        torch.histogram(x, torch.linspace(-2, 2, 6))
        torch.histogramdd(r(10, 2), [3, 3])
        torch.histogramdd(r(10, 2), [torch.linspace(-2, 2, 4), torch.linspace(-2, 2, 4)])
        torch.bincount(torch.tensor([1, 2, 2, 5]), weights=r(4))
        y = r(4, 6)
        for stable in (False, True):
            torch.sort(y, stable=stable, dim=1)
            torch.sort(y, stable=stable, dim=0, descending=True)
        torch.argsort(y), torch.msort(y), torch.topk(y, 2), torch.kthvalue(y, 2)
        torch.median(y), torch.median(y, 1), torch.nanmedian(y), torch.mode(y, 1)
        z = torch.tensor([3, 1, 2, 3, 3, 1])
        torch.unique(z, return_inverse=True, return_counts=True)
        torch.unique(z, sorted=False, return_inverse=True)
        torch.unique(y.round(), dim=1, return_inverse=True, return_counts=True)
        torch.unique_consecutive(z, return_inverse=True, return_counts=True)
        torch.unique_consecutive(y.round(), dim=0, return_inverse=True, return_counts=True)
        aten._unique.default(z, True, True)
        torch.searchsorted(torch.tensor([1, 3, 5, 7]), torch.tensor([2, 6]))
        torch.searchsorted(torch.tensor([7, 1, 5, 3]), torch.tensor([2, 6]),
                           sorter=torch.tensor([1, 3, 2, 0]))
        torch.bucketize(torch.tensor([2, 6]), torch.tensor([1, 3, 5, 7]))
        a = r(5, 3)
        i = torch.tensor([0, 2, 2])
        a.index_put((i,), r(3, 3), accumulate=True)
        aten._index_put_impl_.default(a.clone(), (i,), r(3, 3), True, False)
        aten._unsafe_index_put.default(a, [i], r(3, 3), True)
        aten._unsafe_index.Tensor(a, [i])
        a.index_add(0, i, r(3, 3)), a.index_copy(0, torch.tensor([0, 1, 4]), r(3, 3))
        a.index_fill(0, i, 1.0), a.index_reduce(0, i, r(3, 3), "prod")
        a.scatter_reduce(0, torch.tensor([[0, 1, 2]]), r(1, 3), "amax")
        a.put(torch.tensor([0, 3]), r(2), accumulate=True)
        a.masked_scatter(a > 0, r(15))
        torch.take_along_dim(a, torch.tensor([[0], [1], [2], [0], [1]]), 1)
        torch.nonzero(a > 0), torch.nonzero_static(a > 0, size=4)
        torch.segment_reduce(r(6), "sum", lengths=torch.tensor([2, 4]))
    add("direct:histogram/sort/unique/index", hist_sort_index_direct)

    def sobol_direct():
        sv, _ = torch._sobol_engine_initialize_state_(torch.zeros(3, 30, dtype=torch.long), 3), None
        quasi = torch.zeros(3, dtype=torch.long)
        torch._sobol_engine_draw(quasi, 4, sv, 3, 0, torch.float32)
        torch._sobol_engine_ff_(quasi.clone(), 3, sv, 3, 0)
        torch._sobol_engine_scramble_(sv.clone(), torch.randint(0, 2, (3, 30, 30)), 3)
    add("direct:sobol", sobol_direct)

    def sparse_direct():
        i = torch.tensor([[0, 1, 1, 0], [2, 0, 0, 2]])
        v = r(4)
        s = torch.sparse_coo_tensor(i, v, (2, 3))  # uncoalesced, with duplicates
        for f in (lambda t: t.coalesce(), lambda t: t.to_dense(), lambda t: torch.sparse.sum(t),
                  lambda t: t + t, lambda t: t * 2, lambda t: torch.mm(t, r(3, 2)),
                  lambda t: torch.sparse.mm(t, r(3, 2)), lambda t: t.t(),
                  lambda t: torch.addmm(r(2, 2), t, r(3, 2)), lambda t: t.to_sparse_csr(),
                  lambda t: torch.sparse.softmax(t, 1), lambda t: t.sum(1),
                  lambda t: torch.sparse.log_softmax(t, 1), lambda t: torch.sparse.sampled_addmm(
                      t.to_dense().to_sparse_csr(), r(2, 4), r(4, 3))):
            try:
                f(s.clone() if f is not None else s)
            except Exception:
                pass
        csr = r(3, 4).relu().to_sparse_csr()
        csr @ r(4, 2), csr.to_dense(), csr.to_sparse_coo(), csr + csr
    add("direct:sparse", sparse_direct)

    def linalg_direct():
        a = r(4, 4)
        spd = a @ a.T + 4 * torch.eye(4)
        b = r(4, 2)
        for f in (torch.linalg.lstsq, torch.linalg.solve, torch.linalg.solve_ex):
            f(a, b)
        torch.linalg.lstsq(r(5, 3), r(5, 2), driver="gelsd")
        torch.linalg.lstsq(r(5, 3), r(5, 2), driver="gelsy")
        torch.linalg.lstsq(r(5, 3), r(5, 2), driver="gelss")
        lu, piv = torch.linalg.lu_factor(a)
        torch.linalg.lu_solve(lu, piv, b), torch.lu_unpack(lu, piv)
        torch.linalg.cholesky_ex(spd), torch.cholesky_solve(b, torch.linalg.cholesky(spd))
        torch.linalg.ldl_factor(spd), torch.linalg.eigh(spd), torch.linalg.eig(a)
        torch.linalg.svd(a), torch.linalg.qr(a), torch.geqrf(a)
        qr, tau = torch.geqrf(a)
        torch.ormqr(qr, tau, b), torch.linalg.householder_product(qr, tau)
        torch.linalg.solve_triangular(torch.triu(spd), b, upper=True, left=True)
        torch.triangular_solve(b, torch.triu(spd))
        torch.linalg.inv_ex(a), torch.linalg.det(a), torch.linalg.slogdet(a), torch.linalg.pinv(a)
        torch.linalg.matrix_exp(a), torch.linalg.matrix_rank(a)
        torch.fft.irfft(torch.randn(5, dtype=torch.complex64)), torch.fft.hfft(torch.randn(5, dtype=torch.complex64))
        torch.fft.irfftn(torch.randn(4, 5, dtype=torch.complex64))
    add("direct:linalg/fft", linalg_direct)

    def soft(*fns):
        """Runs each call on its own, so that one unsupported call does not hide the rest."""
        failed = []
        for fn in fns:
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                failed.append(f"{fn.__code__.co_firstlineno}: {type(e).__name__}: {str(e)[:80]}")
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(fns)} calls failed: " + " | ".join(failed))

    def gaps():
        # overloads that op_db, module_db and the fuzzer do not reach with valid arguments
        x4 = r(2, 3, 4, 4)
        i8a = torch.randint(-8, 8, (32, 64), dtype=torch.int8)
        i8b = torch.randint(-8, 8, (64, 32), dtype=torch.int8)
        soft(
            lambda: aten._int_mm.default(i8a, i8b),
            lambda: aten._int_mm.out(i8a, i8b, out=torch.empty(32, 32, dtype=torch.int32)),
            lambda: aten._weight_int8pack_mm.default(r(4, 64).bfloat16(),
                                                     torch.randint(-8, 8, (8, 64), dtype=torch.int8),
                                                     r(8).bfloat16()),
            lambda: aten._weight_int4pack_mm_for_cpu.default(
                r(4, 64).bfloat16(),
                aten._convert_weight_to_int4pack_for_cpu.default(
                    torch.randint(0, 16, (16, 64), dtype=torch.int32), 2),
                32, r(2, 16, 2).bfloat16()),
            lambda: aten._embedding_bag_dense_backward.default(
                r(2, 3), torch.tensor([1, 2, 4, 5]), torch.tensor([0, 0, 1, 1]),
                torch.tensor([2, 2]), torch.tensor([0, 0]), 10, False, 0, None, -1),
            lambda: aten._fake_quantize_learnable_per_channel_affine.default(
                r(4, 3), torch.ones(4) * 0.1, torch.zeros(4), 0, 0, 255, 1.0),
            lambda: aten._fake_quantize_learnable_per_channel_affine_backward.default(
                r(4, 3), r(4, 3), torch.ones(4) * 0.1, torch.zeros(4), 0, 0, 255, 1.0),
            lambda: aten._make_per_channel_quantized_tensor.default(
                torch.randint(0, 10, (4, 3), dtype=torch.uint8), torch.ones(4) * 0.1,
                torch.zeros(4, dtype=torch.long), 0),
            lambda: aten.quantize_per_tensor.tensor_qparams(r(4, 3), torch.tensor(0.1),
                                                            torch.tensor(0), torch.quint8),
            lambda: aten.quantize_per_tensor.tensors([r(4, 3), r(2)], torch.tensor([0.1, 0.2]),
                                                     torch.tensor([0, 1]), torch.quint8),
            lambda: aten._masked_softmax_backward.default(r(2, 3), torch.softmax(r(2, 3), 1),
                                                          torch.rand(2, 3) > 0.5, 1),
            lambda: aten._transform_bias_rescale_qkv.default(r(2, 3, 12), r(12), 2),
            lambda: torch.sparse.spdiags(r(2, 4), torch.tensor([0, 1]), (4, 4)),
            lambda: aten.glu_jvp.default(torch.sigmoid(r(2, 2)), r(2, 4), r(2, 4), 1),
            lambda: aten.glu_backward_jvp.default(r(2, 4), r(2, 2), r(2, 4), r(2, 2), r(2, 4), 1),
            lambda: aten.bernoulli_.Tensor(r(3, 4), torch.rand(3, 4)),
            lambda: aten._slow_conv2d_forward.default(x4, r(2, 3, 3, 3), [3, 3], r(2), [1, 1],
                                                      [1, 1]),
            lambda: aten._slow_conv2d_backward.output_mask(
                r(2, 2, 4, 4), x4, r(2, 3, 3, 3), [3, 3], [1, 1], [1, 1], [True, True, True]),
            lambda: aten.slow_conv3d_forward.default(r(1, 3, 4, 4, 4), r(2, 3, 3, 3, 3),
                                                     [3, 3, 3], r(2), [1, 1, 1], [1, 1, 1]),
            lambda: aten.slow_conv_dilated2d.default(x4, r(2, 3, 3, 3), [3, 3], r(2), [1, 1],
                                                     [2, 2], [2, 2]),
            lambda: aten.slow_conv_dilated3d.default(r(1, 3, 4, 4, 4), r(2, 3, 3, 3, 3),
                                                     [3, 3, 3], r(2), [1, 1, 1], [2, 2, 2],
                                                     [2, 2, 2]),
            lambda: aten.slow_conv_transpose3d.default(r(1, 3, 4, 4, 4), r(3, 2, 3, 3, 3),
                                                       [3, 3, 3], r(2)),
            lambda: aten.multilabel_margin_loss_backward.default(
                r(2, 4), r(2, 4), torch.tensor([[1, 3, -1, 0], [0, -1, 0, 0]]), 1,
                *aten.multilabel_margin_loss_forward.default(
                    r(2, 4), torch.tensor([[1, 3, -1, 0], [0, -1, 0, 0]]), 1)[1:]),
            lambda: aten._assert_async.msg(torch.tensor(True), "never"),
            lambda: aten._validate_compressed_sparse_indices.default(
                True, torch.tensor([0, 1, 2]), torch.tensor([0, 1]), 2, 2, 2),
            lambda: aten._fused_sdp_choice.default(r(1, 2, 3, 4), r(1, 2, 3, 4), r(1, 2, 3, 4)),
            lambda: aten.sspaddmm.out(r(3, 3).relu().to_sparse(), r(3, 3).relu().to_sparse(),
                                      r(3, 3), out=torch.empty(0).to_sparse()),
            lambda: aten._scaled_mm.default(r(16, 32).to(torch.float8_e4m3fn),
                                            r(32, 16).to(torch.float8_e4m3fn).t().contiguous().t(),
                                            torch.tensor(1.0), torch.tensor(1.0),
                                            out_dtype=torch.float32),
            lambda: torch.sparse.softmax(r(3, 3).relu().to_sparse().requires_grad_(), 1)
            .to_dense().sum().backward(),
            lambda: torch.sparse.log_softmax(r(3, 3).relu().to_sparse().requires_grad_(), 1)
            .to_dense().sum().backward(),
            lambda: torch.nn.functional.max_unpool2d(*torch.nn.functional.max_pool2d(
                x4, 2, return_indices=True), 2),
            lambda: torch.nn.functional.fractional_max_pool2d(x4, 2, output_ratio=(0.5, 0.5),
                                                              return_indices=True),
        )
    add("direct:overloads the other drivers miss", gaps)

    return calls


def hand_items():
    return hand_written_calls()


def run_hand(fn, rec, errors):
    name = fn.__name__
    attempt(rec, "hand:" + getattr(fn, "label", name), fn, errors)


# --------------------------------------------------------------------------------------------
# Driver 4: schema-driven fuzzing of every remaining overload (child process)

FUZZ_SKIP = re.compile(
    r"cuda|cudnn|miopen|_mps|mps_|xpu|vulkan|metal|mkldnn_|_nnpack|fbgemm|_cufft|"
    r"_cslt|_cutlass|_flash_attention|_efficient_attention|_scaled_dot_product_(cudnn|efficient|"
    r"flash_attention\.)|_fused_sdp|_test_|_print|_assert|sym_constrain|_functionalize|"
    r"_nested_view_from_buffer|_unsafe_view|as_strided|set_\.|_fake_quant|"
    r"_sparse_coo_tensor_unsafe|_sparse_compressed_tensor_unsafe|_sparse_(csr|csc|bsr|bsc)_tensor_unsafe|"
    r"_index_put_impl_|_unsafe_index_put|_local_scalar|_make_dep_token|record_stream|"
    r"_backward\b|^aten::_backward|resize|_copy_from|_reshape_alias|_to_cpu|lift|"
    r"_lazy_clone|_pin_memory|is_pinned|_unsafe_masked_index")

INT_NAMES = re.compile(r"^(indices|index|idx|target|targets|offsets|lengths|batch_sizes|counts|"
                       r"state_steps|repeats|sorted_sequence_idx|bag_size|offset2bag|"
                       r"maximum_indices|input_lengths|target_lengths|crow_indices|col_indices|"
                       r"row_indices|ccol_indices|compressed_indices|plain_indices|pivots|"
                       r"LU_pivots|growth_tracker|zero_point|zero_points|observer_on|"
                       r"fake_quant_on|fake_quant_enabled|sorter|tensor_indices_or_sections|"
                       r"cu_seqlens_q|cu_seqlens_k|seqlen_k|offs)$")


def fuzz_candidates():
    out = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        if not name.startswith("aten::") or FUZZ_SKIP.search(name):
            continue
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        if not any(has(name, k) for k in ("CPU", "CompositeExplicitAutograd",
                                          "CompositeExplicitAutogradNonFunctional")):
            continue
        try:
            func = resolve(name)
        except Exception:
            continue
        if any(is_tensor_type(a) and not is_write(a) for a in func._schema.arguments):
            out.append(name)
    return out


def resolve(name):
    base, _, ov = name[len("aten::"):].partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


SHAPES = [(4,), (3, 3), (2, 3, 4), (2, 3, 4, 4), (1, 3, 2, 2, 2), ()]


def fuzz_value(arg, shape, flag, dtype, out_dtype):
    """One argument for a schema-driven call. flag 0: defaults and no optional tensors; 1: bools
    True and optional tensors given; 2: bools False and optional tensors given."""
    t = str(arg.type)
    name = arg.name
    opt = t.startswith("Optional[")
    base = t[len("Optional["):-1] if opt else t

    def tensor(shp):
        if dtype.is_floating_point:
            return torch.randn(shp, dtype=dtype)
        if dtype == torch.bool:
            return torch.rand(shp) > 0.5
        return torch.randint(-3, 4, shp, dtype=dtype)

    if arg.has_default_value() and "Tensor" not in base and base != "bool":
        return arg.default_value
    if base == "Tensor":
        if opt and flag == 0:
            return None
        if is_write(arg) and arg.kwarg_only:
            return torch.empty(0, dtype=out_dtype)
        if INT_NAMES.match(name):
            n = shape[0] if shape else 1
            return torch.randint(0, max(1, min(n, 2)), shape if shape else (), dtype=torch.long)
        if "mask" in name:
            return torch.rand(shape) > 0.5
        return tensor(shape)
    if base in ("List[Tensor]", "List[Optional[Tensor]]"):
        if is_write(arg) and arg.kwarg_only:
            return [torch.empty(0, dtype=out_dtype), torch.empty(0, dtype=out_dtype)]
        if "Optional" in base or INT_NAMES.match(name):
            n = shape[0] if shape else 1
            return [torch.randint(0, max(1, min(n, 2)), (2,), dtype=torch.long)]
        return [tensor(shape), tensor(shape)]
    if base == "bool":
        if flag == 0:
            return arg.default_value if arg.has_default_value() else False
        return flag == 1
    if base in ("int", "SymInt"):
        if "dim" in name or "axis" in name:
            return 0
        return 1
    if base in ("float",):
        return 0.5
    if base in ("number", "Scalar"):
        return 1
    if base in ("List[int]", "List[SymInt]") or base.startswith("List[int]"):
        if "size" in name or "shape" in name:
            return list(shape) or [1]
        if "dim" in name:
            return [0]
        return [1] * max(1, len(shape) - 2)
    if base == "List[float]":
        return [1.0]
    if base == "List[bool]":
        return [True, True, True]
    if base == "str":
        return {"reduce": "sum", "reduction": "sum", "mode": "reduced", "approximate": "none",
                "rounding_mode": "trunc", "padding_mode": "zeros"}.get(name, "sum")
    if base == "ScalarType":
        return torch.float32
    if base == "Layout":
        return torch.strided
    if base == "Device":
        return torch.device("cpu")
    if base == "MemoryFormat":
        return torch.contiguous_format
    if opt:
        return None
    raise TypeError(f"cannot build {t}")


def fuzz_items():
    return [(n, n) for n in fuzz_candidates()]


def run_fuzz(name, rec, errors):
    func = resolve(name)
    schema = func._schema
    has_out = any(is_write(a) and a.kwarg_only for a in schema.arguments)
    out_dtypes = (torch.float32, torch.int64, torch.bool) if has_out else (torch.float32,)
    for dtype in (torch.float32, torch.int64):
        for out_dtype in out_dtypes:
            if has_out and dtype == torch.int64 and out_dtype == torch.float32:
                out_dtype = torch.int64
            for shape in SHAPES:
                for flag in (0, 1, 2):
                    try:
                        kw = {a.name: fuzz_value(a, shape, flag, dtype, out_dtype)
                              for a in schema.arguments}
                    except Exception:
                        continue
                    pos, kwo = [], {}
                    for a in schema.arguments:
                        if a.kwarg_only:
                            kwo[a.name] = kw[a.name]
                        else:
                            pos.append(kw[a.name])
                    torch.manual_seed(0)
                    attempt(rec, "fuzz", lambda: func(*pos, **kwo), errors)


# --------------------------------------------------------------------------------------------
# Child processes: each driver runs item by item in a child; a crash ends only that item.

KINDS = {
    "opinfo": (opinfo_items, run_opinfo),
    "modules": (module_items, run_module),
    "optim": (optim_items, run_optim),
    "hand": (hand_items, run_hand),
    "fuzz": (fuzz_items, run_fuzz),
}


def worker(kind, start):
    items_fn, run = KINDS[kind]
    items = items_fn()
    print(MARK + json.dumps({"count": len(items)}), flush=True)
    for i in range(start, len(items)):
        label, item = items[i]
        print(MARK + json.dumps({"start": i, "label": label}), flush=True)
        rec = Recorder()
        errors = {}
        torch.manual_seed(0)
        run(item, rec, errors)
        print(MARK + json.dumps({"done": i, "rec": rec.to_json(),
                                 "errors": errors if kind == "hand" else len(errors)}), flush=True)


def drive(kind, rec, log, crashed, failed):
    start, total = 0, None
    while True:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", kind, str(start)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        current, label = start, None
        for line in proc.stdout:
            if not line.startswith(MARK):
                continue
            msg = json.loads(line[len(MARK):])
            if "count" in msg:
                total = msg["count"]
            elif "start" in msg:
                current, label = msg["start"], msg["label"]
            else:
                rec.merge(msg["rec"])
                if isinstance(msg["errors"], dict):
                    failed.update(msg["errors"])
                current, label = msg["done"] + 1, None
        proc.wait()
        if total is None or current >= total:
            break
        if label is None:
            log(f"{kind}: child ended (rc {proc.returncode}) between items; stopping this driver")
            break
        crashed.append((kind, label))
        log(f"{kind}: child ended (rc {proc.returncode}) in {label}; going on after it")
        start = current + 1
    return total


# --------------------------------------------------------------------------------------------
# Static scan

STATIC_NAMES = re.compile(
    r"running|noise|state|buffer|seed|offset$|philox|found_inf|growth|tracker|workspace|"
    r"reserve|^dst$|^out$|^output$|^out\d|quasi|observer|fake_quant|momentum|exp_avg|steps|"
    r"sums|^grads$|^params$|^cx|^hx|dropout|rng|cache|counter|^dummy$|^dep_token$|^scale$|"
    r"^zero_point$|^total$|^weight_buf$|^new_data$|^source$")


def static_scan():
    rows = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        if not name.startswith("aten::"):
            continue
        try:
            func = resolve(name)
        except Exception:
            continue
        for a in func._schema.arguments:
            if is_tensor_type(a) and not is_write(a) and STATIC_NAMES.search(a.name):
                rows.append((name, a.name))
    return rows


def kernels_of(name):
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    ks = [k for k in ("CPU", "CUDA", "MkldnnCPU", "CompositeExplicitAutograd",
                      "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd")
          if has(name, k)]
    return ks


_FALLBACK_LIB = None


def privateuse1_route(name):
    """Which kernel a PrivateUse1 tensor reaches, with a throwaway Python fallback registered."""
    global _FALLBACK_LIB
    if _FALLBACK_LIB is None:
        _FALLBACK_LIB = torch.library.Library("_", "IMPL")  # noqa: TOR901 - process-local only

        def never(*a, **k):
            raise RuntimeError("inspection only")
        _FALLBACK_LIB.fallback(never, dispatch_key="PrivateUse1", with_keyset=True)
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith("PrivateUse1:"):
            if "[backend fallback]" in line:
                return "cpu_fallback"
            if "[math kernel]" in line:
                return "decomposes (CompositeImplicit)"
            if "CompositeExplicitAutogradNonFunctional" in line:
                return "composite (ExplicitNonFunctional)"
            if "CompositeExplicitAutograd" in line:
                return "composite (Explicit)"
            return line.split("[")[-1].rstrip("]")
    return "none"


# --------------------------------------------------------------------------------------------
# Conditions and notes


NOTES = {
    "aten::native_batch_norm": "in training with running statistics the kernel does "
    "running_mean = (1-momentum)*running_mean + momentum*batch_mean and the same for running_var "
    "with the unbiased batch variance. nn.BatchNorm*d, F.batch_norm and instance_norm with "
    "track_running_stats all end here (batch_norm -> _batch_norm_impl_index -> native_batch_norm)",
    "aten::native_batch_norm.out": "the same kernel as native_batch_norm",
    "aten::batch_norm_update_stats": "updates the running statistics it is given and returns "
    "the batch mean and variance; there is no training flag (the op exists to do this)",
    "aten::batch_norm_update_stats.out": "a composite that calls batch_norm_update_stats, so on "
    "the CPU it writes too; on PrivateUse1 the inner batch_norm_update_stats is the call "
    "that reaches the fallback",
    "aten::mkldnn_rnn_layer_backward": "oneDNN uses the forward's workspace as scratch in the "
    "backward (a few hundred bytes change). A second backward through the same graph still gives "
    "identical gradients, so losing this write is harmless; only CPU tensors take the oneDNN "
    "RNN path",
}


def infer_condition(e):
    wf, cf = e["wf"], e["cf"]
    if not wf:
        return ""
    if not cf:
        return "every call seen"
    keys = set(wf[0])
    parts = []
    for k in sorted(keys):
        vals = {f.get(k) for f in wf}
        if len(vals) == 1:
            v = next(iter(vals))
            if any(f.get(k) != v for f in cf):
                parts.append(f"{k}={v}")
    return " and ".join(parts) if parts else "some inputs (no bool/None argument separates them)"


def schema_info_special_cases():
    """Arguments that torch's own SchemaInfo (used by SchemaCheckMode and the JIT) treats as
    written although the schema does not say so."""
    SA, ST = torch._C._SchemaArgument, torch._C._SchemaArgType
    out = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        if not name.startswith("aten::"):
            continue
        try:
            func = resolve(name)
        except Exception:
            continue
        info = torch._C._SchemaInfo(func._schema)
        for i, a in enumerate(func._schema.arguments):
            if not is_write(a) and info.is_mutable(SA(ST.input, i)):
                out.append((name, a.name))
    return out


def short_source(s):
    parts = s.split(":")
    if parts[0] == "hand":
        return ":".join(parts[:3])
    return ":".join(parts[:2])


def route_text(op):
    route = privateuse1_route(op)
    if route == "cpu_fallback" and not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU"):
        return "cpu_fallback, which fails (no CPU kernel)"
    return route


def has_unmarked_tensor_arg(op):
    try:
        return any(is_tensor_type(a) and not is_write(a) for a in resolve(op)._schema.arguments)
    except Exception:
        return True


def cpu_text(ks):
    if "CPU" in ks:
        return "yes"
    return "no (" + ", ".join(ks) + ")" if ks else "no kernel at all"


# --------------------------------------------------------------------------------------------
# Report


def build_report(rec, args_used, totals, crashed, failed, elapsed):
    findings = sorted((k, e) for k, e in rec.args.items() if e["written"])
    by_op = collections.OrderedDict()
    for (op, arg), e in findings:
        by_op.setdefault(op, []).append((arg, e))
    lines = []
    w = lines.append
    w("# aten operators whose CPU kernel writes to an argument the schema does not mark")
    w("")
    w("What this is for: the `opencl` adapter runs most operators through "
      "`at::native::cpu_fallback`, which copies back to the device only the arguments whose "
      "schema says `Tensor(a!)`. Each operator in the first table writes to some other argument on "
      "the CPU, so that write is lost on the device unless the adapter handles the operator "
      "itself. Generated by `find_unmarked_mutations.py` beside this file, on torch "
      f"{torch.__version__}; do not edit by hand, rerun the script.")
    w("")
    w("Method (the script's docstring has the detail):")
    w("")
    w("1. Empirical: a `TorchDispatchMode` sees every operator call below autograd. Before each "
      "call it snapshots every tensor argument (and every tensor inside a list argument) that "
      "the schema does not mark as written: sizes, strides, storage offset, dtype, conj/neg bits, "
      "the storage pointer and the bytes of the whole storage (sparse: indices, values and the "
      "coalesced flag; quantized: the quantizer parameters too). After the call it compares bit "
      "for bit. An argument that shares storage with a written argument is not judged. The calls "
      "come from every OpInfo in `op_db` and the `foreach_*_op_db` lists (function, method, "
      "in-place and out= variants; float32 and one other dtype; forward and backward), every "
      "ModuleInfo in `module_db` (train and eval, two forward steps and a backward), every "
      "OptimizerInfo in `optim_db` (for-loop, foreach and fused; fused also under GradScaler), "
      "hand-written module and operator calls (BatchNorm1d/2d/3d and InstanceNorm in train mode, "
      "the whole batch-norm operator family, LSTM/GRU/RNN and their cells, dropout/RReLU/random "
      "ops, quantization observers and fake-quant, `_amp_*`, `_fused_*`, embedding with max_norm, "
      "histogram, sort/unique, index ops, Sobol, sparse, linalg/fft, GradScaler, "
      "transformer/SDPA) and a schema-driven fuzzer over every other aten overload with a CPU or "
      "composite kernel. Each driver runs in a child process, restarted after the item it "
      "crashed in.")
    w("2. Static: every aten schema argument of tensor type without a write annotation whose name "
      "suggests state (`running_*`, `noise`, `*state*`, `buffer`, `seed`/`offset`/`philox`, "
      "`found_inf`, `growth_tracker`, `workspace`, `reserve`, `dst`, `out`/`output`, `momentum*`, "
      "`exp_avg*`, `*steps`, `hx`/`cx`, ...), listed at the end with what the empirical run saw "
      "for it. Also cross-checked against torch's own `SchemaInfo` special cases.")
    w("")
    w(f"Command: `{args_used}` from the repository root ({elapsed:.0f} s on 2 cores). Without "
      "`--write` the same report goes to standard output and nothing is written.")
    w("")
    w("## Findings")
    w("")
    w("Condition: inferred from the bool and None-or-not arguments of the calls that wrote versus "
      "those that did not. Route: the kernel a PrivateUse1 tensor reaches in stock torch "
      "(`cpu_fallback` = the write is lost there).")
    w("")
    w("| operator overload | written without annotation | condition | CPU kernel | "
      "PrivateUse1 route | calls that wrote / checked | seen from |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for op, items in by_op.items():
        argtxt = ", ".join(f"`{a}`" + (" (" + "/".join(sorted(e["how"])) + ")"
                                        if set(e["how"]) != {"data"} else "") for a, e in items)
        conds = []
        for a, e in items:
            c = infer_condition(e)
            if c not in conds:
                conds.append(c)
        counts = ", ".join(f"{e['written']}/{e['checked']}" for a, e in items)
        srcs = sorted({short_source(x) for a, e in items for x in e["sources"]})
        w(f"| `{op}` | {argtxt} | {'; '.join(conds)} | {cpu_text(kernels_of(op))} | "
          f"{privateuse1_route(op)} | {counts} | {', '.join(srcs[:4])}"
          f"{' and more' if len(srcs) > 4 else ''} |")
    notes = [(op, NOTES[op]) for op in by_op if op in NOTES]
    if notes:
        w("")
        for op, n in notes:
            w(f"- `{op}`: {n}.")
    w("")
    w("### Cross-check with torch's SchemaInfo")
    w("")
    special = schema_info_special_cases()
    w("torch's `SchemaInfo` (used by `SchemaCheckMode` and the TorchScript alias analysis) "
      "hard-codes these arguments as written in training although their schemas do not mark them:")
    w("")
    w(", ".join(f"`{op}`:`{a}`" for op, a in special) + ".")
    w("")
    found = {(op, a) for (op, a), e in findings}
    missing_there = sorted(found - set(special))
    only_there = sorted(set(special) - found)
    w(f"Found here but not in that list: {', '.join(f'`{o}`:`{a}`' for o, a in missing_there) or 'none'}. "
      f"In that list but not found here: {', '.join(f'`{o}`:`{a}`' for o, a in only_there) or 'none'} "
      "(composite operators, which reach native_batch_norm, or operators with no CPU kernel).")
    w("")
    w("## Static candidates and what the empirical run saw")
    w("")
    w("Every aten overload with an unannotated tensor argument whose name suggests state. "
      "`WRITTEN` = a write was caught; `ok(N)` = checked in N calls, never written; `aliased(N)` = "
      "in N calls it shared storage with a written argument, so it was not judged; `ran(N)` = the "
      "overload ran N times but the argument was absent; `-` = the overload never ran here (most "
      "have no CPU kernel, so the CPU fallback cannot run them either).")
    w("")
    w("| operator overload | arguments | kernels | PrivateUse1 route |")
    w("| --- | --- | --- | --- |")
    grouped = collections.OrderedDict()
    for op, arg in static_scan():
        grouped.setdefault(op, []).append(arg)
    for op, args in grouped.items():
        cells = []
        for arg in args:
            e = rec.args.get((op, arg))
            al = rec.skipped_alias.get((op, arg), 0)
            if e and e["written"]:
                v = f"**WRITTEN**({e['written']}/{e['checked']})"
            elif e and e["checked"]:
                v = f"ok({e['checked']})"
            elif al:
                v = f"aliased({al})"
            elif rec.calls.get(op):
                v = f"ran({rec.calls[op]})"
            else:
                v = "-"
            cells.append(f"`{arg}` {v}")
        w(f"| `{op}` | {', '.join(cells)} | {', '.join(kernels_of(op)) or 'none'} | "
          f"{route_text(op)} |")
    w("")
    w("## Coverage")
    w("")
    aten_ops = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")]
    with_cpu = [n for n in aten_ops if torch._C._dispatch_has_kernel_for_dispatch_key(n, "CPU")]
    fb = [n for n in with_cpu if privateuse1_route(n) == "cpu_fallback"]
    ran = {n for n in rec.calls if n.startswith("aten::")}
    w(f"- aten overloads registered: {len(aten_ops)}; with a CPU kernel: {len(with_cpu)}; of "
      f"those, reaching the CPU fallback from a PrivateUse1 tensor: {len(fb)}.")
    w(f"- overloads called at least once: {len(ran)}; of the CPU-kernel ones: "
      f"{len(ran & set(with_cpu))}; of the fallback-routed ones: {len(ran & set(fb))}.")
    w("- items per driver: " + ", ".join(f"{k}: {v}" for k, v in totals.items()) + ".")
    w("- items in which the child process died (a crash inside a CPU kernel on the fuzzer's odd "
      "arguments, not a finding about writes; the driver went on after them): "
      + (", ".join(f"{k} `{l}`" for k, l in crashed) or "none") + ". Two of these are worth "
      "knowing because a direct aten call (and so the CPU fallback) can hit them: "
      "`native_batch_norm` and `_native_batch_norm_legit.no_stats` (and their out= overloads) "
      "with `training=False` and no running statistics dereference a null pointer on the CPU "
      "(`F.batch_norm` refuses that case before dispatch), and "
      "`rrelu_with_noise.out` with `training=True` and an out= tensor of the wrong size is not "
      "resized and crashes; the hand-written calls avoid both.")
    if failed:
        w("- hand-written blocks that raised (the calls before the failure were checked): "
          + "; ".join(f"`{k}`: {v[:300]}" for k, v in failed.items()) + ".")
    missing_all = sorted(set(fb) - ran)
    missing = [m for m in missing_all if has_unmarked_tensor_arg(m)]
    w(f"- fallback-routed overloads with a CPU kernel that never ran here: {len(missing_all)}; "
      f"{len(missing_all) - len(missing)} of them have no unannotated tensor argument, so there "
      "is nothing to check: " + ", ".join(f"`{m[6:]}`" for m in missing_all if m not in missing)
      + ".")
    base_ran = {n.split(".")[0] for n in ran}
    sibling = [m for m in missing if m.split(".")[0] in base_ran]
    alone = [m for m in missing if m.split(".")[0] not in base_ran]
    w(f"- of the other {len(missing)}, "
      f"{len(sibling)} are out=/grad_input= or other overloads of an operator whose other "
      "overload ran (structured kernels share one implementation): "
      + ", ".join(f"`{m[6:]}`" for m in sibling) + ".")
    w(f"- and {len(alone)} with no overload run at all (their state-like arguments, if any, are in "
      "the static table): " + ", ".join(f"`{m[6:]}`" for m in alone) + ".")
    w("")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true",
                   help="write unmarked_mutations.md beside this file (else print it)")
    p.add_argument("--no-fuzz", action="store_true", help="skip the schema-driven fuzzer")
    p.add_argument("--only", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.worker is not None:
        worker(a.worker[0], int(a.worker[1]))
        return
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    rec = Recorder()
    crashed, failed, totals = [], {}, {}
    kinds = ["opinfo", "modules", "optim", "hand"] + ([] if a.no_fuzz else ["fuzz"])
    if a.only:
        kinds = a.only.split(",")
    for kind in kinds:
        log(f"driver {kind}")
        totals[kind] = drive(kind, rec, log, crashed, failed)
    for name, err in failed.items():
        log(f"hand-written block failed: {name}: {err}")
    cmd = ".venv/bin/python tests/torch/conformance/find_unmarked_mutations.py" + \
        (" --write" if a.write else "") + (" --no-fuzz" if a.no_fuzz else "")
    report = build_report(rec, cmd, totals, crashed, failed, time.time() - t0)
    if a.write:
        (HERE / "unmarked_mutations.md").write_text(report)
        log(f"wrote {HERE / 'unmarked_mutations.md'}")
    else:
        sys.stdout.write(report)


if __name__ == "__main__":
    main()
