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

The empirical method (schema helpers, snapshots, the dispatch mode) is in
unmarked_mutations_core.py, the hand-written calls in unmarked_mutations_calls.py; the drivers,
the static scan and the report are here.

Usage: .venv/bin/python tests/torch/conformance/find_unmarked_mutations.py [--write] [--no-fuzz]
It writes no file unless --write is given, and then only unmarked_mutations.md beside itself.
"""
import argparse
import collections
import json
import os
import pathlib
import re
import subprocess
import sys
import time

# Judge torch itself, not whatever device backend an installed package would autoload.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

from unmarked_mutations_calls import hand_written_calls  # noqa: E402
from unmarked_mutations_core import (  # noqa: E402
    Recorder, attempt, backward_of, clone_tree, is_tensor_type, is_write, quiet)

HERE = pathlib.Path(__file__).resolve().parent
MARK = "@@UNMARKED@@ "


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
# Drivers 3: hand-written calls for state-carrying operators (unmarked_mutations_calls.py)


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
