"""Shared machinery of tests/torch/test_model_families.py: train a model on the CPU and a copy of it
on the `opencl` device, step for step, and compare.

A `Family` says how to build a small random-initialised model on the CPU (with a fixed seed), the
batches it trains on (CPU tensors, made from their own generator so that building them draws
nothing from the global one) and how to get a scalar loss from a model and a batch.
`train_both_and_compare` is the scenario every training test runs:

  1. build the CPU model, deep-copy it, and move the copy with `model.to("opencl")` — the user's
     path; the optimizer of the device model is made before the move or after it;
  2. `torch.manual_seed(seed)` right before each side's loop, then the same steps on each side;
  3. the losses (and gradient norms when clipping) equal, every parameter and buffer equals the
     CPU's, tied parameters are still one Parameter object with one data_ptr on the device;
  4. after the scenario has dropped everything, `torch.opencl.memory_allocated()` is back where it
     started.

What "equal" means: on the host path every operator runs the CPU's kernel (through the device's
CPU fallback), so the device should give the CPU's bits; comparisons allow rtol 1e-5 / atol 1e-6
(`EXACT`) for kernels that the device path picks differently, and `BF16` (rtol 2e-2, atol 2e-2: a
few units in bfloat16's 8-bit mantissa) under autocast. On the native path (a device whose
properties say native_kernels) the matrix products are CLBlast's, which sums in its own order, so
`EXACT` there is Inductor's float32 tolerance (rtol 1e-4, atol 1e-5): float32 rounding apart, and
still far below what a wrong kernel gives. `assert_state_close` names the worst tensor and its
largest difference when they are not close.

Random numbers: on the host path the device draws the CPU's numbers from the same seed, so
dropout stays on. On the native path the device draws from its own Philox stream (as CUDA's are
not the CPU's), so the scenario first turns every dropout of the model off (`without_dropout`),
on both sides (test_model_families.seeded builds every family so), and checks that the device's
training drew nothing; a loss that draws noise draws it on the CPU and moves it. The native
random kernels have their own tests (test_native_random.py).
"""
import contextlib
import copy
import dataclasses
import gc
from typing import Any, Callable

import torch
from torch.testing import assert_close

from native_util import make_device_error_words

DEV = "opencl"

NATIVE_PATH = torch.opencl.get_device_properties(0).native_kernels
EXACT = dict(rtol=1e-4, atol=1e-5) if NATIVE_PATH else dict(rtol=1e-5, atol=1e-6)
BF16 = dict(rtol=2e-2, atol=2e-2)


@dataclasses.dataclass(frozen=True)
class Family:
    """A model to train: `build()` returns it on the CPU, initialised from a fixed seed;
    `batches(n)` returns n batches of CPU tensors (any nesting of dict / tuple / list);
    `loss(model, batch)` returns a scalar loss tensor."""
    name: str
    build: Callable[[], torch.nn.Module]
    batches: Callable[[int], list]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]


def to_device(data, device):
    """`data` with every tensor in it moved to `device` (dicts, tuples and lists are rebuilt)."""
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, dict):
        return {k: to_device(v, device) for k, v in data.items()}
    if isinstance(data, (tuple, list)):
        return type(data)(to_device(v, device) for v in data)
    return data


def tie_groups(model: torch.nn.Module) -> list[list[str]]:
    """The names of parameters that are one Parameter object, for every object with two or more."""
    by_object: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_object.setdefault(id(p), []).append(name)
    return [names for names in by_object.values() if len(names) > 1]


def assert_ties_kept(model: torch.nn.Module, groups: list[list[str]]) -> None:
    """Every group of names of `groups` is still one Parameter object, with one data_ptr."""
    params = dict(model.named_parameters(remove_duplicate=False))
    for names in groups:
        objects = {id(params[n]) for n in names}
        pointers = {params[n].data_ptr() for n in names}
        assert len(objects) == 1 and len(pointers) == 1, (
            f"Expected {names} to stay one tied Parameter, but got {len(objects)} objects at "
            f"{len(pointers)} addresses")


def move_to_device(model: torch.nn.Module) -> torch.nn.Module:
    """`model.to(DEV)` as a user writes it; checks that every parameter and buffer is on the
    device and that tied parameters stayed tied."""
    groups = tie_groups(model)
    moved = model.to(DEV)
    assert moved is model
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        assert t.device.type == DEV, f"Expected {name} on {DEV}, but got {t.device}"
    assert_ties_kept(model, groups)
    return model


def max_difference(got: torch.Tensor, expected: torch.Tensor) -> float:
    if got.dtype == torch.bool or not got.dtype.is_floating_point:
        return float((got.cpu().long() - expected.long()).abs().max()) if got.numel() else 0.0
    if got.numel() == 0:
        return 0.0
    return float((got.detach().cpu().double() - expected.detach().double()).abs().max())


def elements_outside(got: torch.Tensor, expected: torch.Tensor, tolerance) -> torch.Tensor:
    """The mask of the elements of `got` that assert_close(got, expected, **tolerance) rejects."""
    got, expected = got.detach().cpu().double(), expected.detach().double()
    allowed = tolerance["atol"] + tolerance["rtol"] * expected.abs()
    return ~((got - expected).abs() <= allowed) & ~(got.isnan() & expected.isnan())


def assert_state_close(device_model, cpu_model, tolerance=EXACT, outliers=None) -> None:
    """Every parameter and buffer of `device_model` is on the device and close to `cpu_model`'s;
    on failure the message lists every tensor that differs with its largest difference.
    `outliers=(fraction, atol)` lets at most that fraction of a floating tensor's elements (at
    least one) differ by up to `atol` instead."""
    expected = dict(cpu_model.named_parameters())
    expected.update(cpu_model.named_buffers())
    got = dict(device_model.named_parameters())
    got.update(device_model.named_buffers())
    assert got.keys() == expected.keys()
    differing = []
    for name, t in got.items():
        assert t.device.type == DEV, f"Expected {name} on {DEV}, but got {t.device}"
        try:
            assert_close(t.detach().cpu(), expected[name].detach(), **tolerance)
        except AssertionError:
            worst = max_difference(t.detach(), expected[name])
            if outliers is not None and t.dtype.is_floating_point:
                fraction, atol = outliers
                count = int(elements_outside(t, expected[name], tolerance).sum())
                if count <= max(1, int(fraction * t.numel())) and worst <= atol:
                    continue
                differing.append(f"{name}: {count} of {t.numel()} elements differ, "
                                 f"max |diff| {worst:.3g}")
                continue
            differing.append(f"{name}: max |diff| {worst:.3g}")
    assert not differing, ("Parameters and buffers differ from the CPU's:\n  "
                           + "\n  ".join(differing))


@dataclasses.dataclass
class Run:
    """What one side's training produced, on the CPU: the loss and (when clipping) the total
    gradient norm of every step."""
    losses: list
    grad_norms: list


def train(model, optimizer, family: Family, batches, device, *, seed: int, clip=None,
          autocast_dtype=None, after_step=None) -> Run:
    """`len(batches)` steps of `optimizer` on `model` in train mode, seeded with
    `torch.manual_seed(seed)` right before the loop. `clip`: clip_grad_norm_ to that norm;
    `autocast_dtype`: the forward runs under torch.autocast of the device's type;
    `after_step(i)`: called after step i (0-based)."""
    model.train()
    device_type = torch.device(device).type
    run = Run([], [])
    torch.manual_seed(seed)
    for i, batch in enumerate(batches):
        batch = to_device(batch, device)
        optimizer.zero_grad(set_to_none=True)
        autocast = (torch.autocast(device_type=device_type, dtype=autocast_dtype)
                    if autocast_dtype is not None else contextlib.nullcontext())
        with autocast:
            loss = family.loss(model, batch)
        loss.backward()
        if clip is not None:
            run.grad_norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                                  .detach().cpu())
        optimizer.step()
        run.losses.append(loss.detach().cpu())
        del loss, batch
        if after_step is not None:
            after_step(i)
    return run


def assert_memory_returns(scenario: Callable[[], Any]) -> Any:
    """Runs `scenario()` (which must return nothing that holds device memory) and checks that
    the device's allocated bytes after a garbage collection equal those before it."""
    make_device_error_words()  # a device's one-time buffer, not the scenario's
    gc.collect()
    before = torch.opencl.memory_allocated()
    result = scenario()
    gc.collect()
    after = torch.opencl.memory_allocated()
    assert after == before, f"Expected memory_allocated() back at {before} bytes, but got {after}"
    return result


# The attributes in which transformers' attention modules and torch.nn's recurrent layers keep a
# dropout probability as a float (T5's `dropout`, BERT's and ViT's `dropout_prob`, Llama's
# `attention_dropout`, nn.LSTM's `dropout`).
DROPOUT_ATTRIBUTES = ("dropout", "dropout_prob", "attention_dropout", "dropout_rate")


def without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with every dropout probability set to 0: nn.Dropout modules and the float
    attributes of DROPOUT_ATTRIBUTES. Returns the model."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for name in DROPOUT_ATTRIBUTES:
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)
    return model


def train_both_and_compare(family: Family, make_optimizer, *, steps=3, seed=0,
                           optimizer_before_move=False, clip=None, autocast_dtype=None,
                           tolerance=EXACT, outliers=None, check=None) -> None:
    """The whole scenario of the module docstring. `make_optimizer(params)` builds each side's
    optimizer; `outliers` is assert_state_close's; `check(cpu_model, device_model)` adds
    family-specific checks at the end."""

    def scenario():
        cpu = family.build()
        device_model = copy.deepcopy(cpu)
        groups = tie_groups(cpu)
        opt_cpu = make_optimizer(cpu.parameters())
        if optimizer_before_move:
            opt_dev = make_optimizer(device_model.parameters())
            move_to_device(device_model)
            for group in opt_dev.param_groups:
                for p in group["params"]:
                    assert p.device.type == DEV, (
                        "Expected the optimizer made before .to() to hold the moved Parameters, "
                        f"but one is on {p.device}")
        else:
            move_to_device(device_model)
            opt_dev = make_optimizer(device_model.parameters())
        batches = family.batches(steps)
        kwargs = dict(seed=seed, clip=clip, autocast_dtype=autocast_dtype)
        expected = train(cpu, opt_cpu, family, batches, "cpu", **kwargs)
        got = train(device_model, opt_dev, family, batches, DEV, **kwargs)
        if NATIVE_PATH:  # train() seeds first, which sets the Philox offset (the last 8 bytes) to 0
            assert torch.opencl.get_rng_state()[-8:].eq(0).all(), (
                "the device drew random numbers in training with every dropout off")
        assert_close(torch.stack(got.losses), torch.stack(expected.losses), **tolerance,
                     msg=lambda m: f"losses differ: {got.losses} vs {expected.losses}\n{m}")
        if clip is not None:
            assert_close(torch.stack(got.grad_norms), torch.stack(expected.grad_norms),
                         **tolerance)
        assert_state_close(device_model, cpu, tolerance, outliers)
        assert_ties_kept(device_model, groups)
        for state in opt_dev.state.values():
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and value.dim() > 0:
                    assert value.device.type == DEV, f"optimizer state {name} on {value.device}"
        if check is not None:
            check(cpu, device_model)

    assert_memory_returns(scenario)
