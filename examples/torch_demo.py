"""`make demo`: train a small torch.nn model on the `opencl` device and on the CPU, compare.

The same model (same seed, same initial weights) is trained for a few SGD steps on a fixed
synthetic classification problem twice: once with every tensor on "opencl" (oclvm's PyTorch
backend) and once on "cpu". The per-step losses of both runs are printed side by side and must
agree (torch.testing.assert_close); the final weights must agree too. Then the opencl device's
memory summary is printed. Exit status 0 when the runs agree, 1 when they diverge.

Time is reported in three parts: torch's own start-up (the process's first optimizer imports
torch._dynamo, about a second, whichever device comes first), the warm-up (a throwaway copy of
the model trained for WARMUP_STEPS on each device first: what each device's first use costs,
which says nothing about its speed afterwards) and the steady state (the median step of the
compared runs, and the ratio opencl / cpu).

Run: `make demo`, or with the package built in place:
    PYTHONPATH=build-torch/python .venv/bin/python examples/torch_demo.py
"""
import copy
import statistics
import sys
import time

import torch
from torch import nn

import oclvm  # noqa: F401  (registers the `opencl` device; a no-op when torch autoloaded it)

SEED = 1234
STEPS = 8
WARMUP_STEPS = 2
BATCH = 64
FEATURES = 32
HIDDEN = 64
CLASSES = 4
LEARNING_RATE = 0.1
RTOL = 1e-4
ATOL = 1e-5


def make_data() -> tuple:
    """A fixed synthetic problem: labels come from a random linear teacher."""
    generator = torch.Generator().manual_seed(SEED)
    inputs = torch.randn(STEPS, BATCH, FEATURES, generator=generator)
    teacher = torch.randn(FEATURES, CLASSES, generator=generator)
    labels = (inputs @ teacher).argmax(dim=-1)
    return inputs, labels


def make_model() -> nn.Module:
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def train(model: nn.Module, device: str, inputs, labels, steps: int = STEPS) -> tuple:
    """Trains `model` in place on `device`; returns the per-step losses, the final weights and
    the seconds each step took (loss read back included)."""
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    losses, seconds = [], []
    for step in range(steps):
        start = time.perf_counter()
        x = inputs[step].to(device)
        y = labels[step].to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().to("cpu"))
        seconds.append(time.perf_counter() - start)
    weights = {name: p.detach().to("cpu") for name, p in model.named_parameters()}
    return torch.stack(losses), weights, seconds


def warm_up(model: nn.Module, device: str, inputs, labels) -> float:
    """Seconds to train a throwaway copy of `model` for WARMUP_STEPS on `device`."""
    start = time.perf_counter()
    train(copy.deepcopy(model), device, inputs, labels, WARMUP_STEPS)
    return time.perf_counter() - start


def torch_start_up() -> float:
    """Seconds of the process's first optimizer: torch imports torch._dynamo then (the optimizer
    wraps add_param_group with it), on no device in particular."""
    start = time.perf_counter()
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LEARNING_RATE)
    return time.perf_counter() - start


def main() -> int:
    if not torch.opencl.is_available():
        print("no opencl device found", file=sys.stderr)
        return 1
    inputs, labels = make_data()
    model = make_model()
    cpu_model = copy.deepcopy(model)

    start_up = torch_start_up()
    opencl_warmup = warm_up(model, "opencl", inputs, labels)
    cpu_warmup = warm_up(model, "cpu", inputs, labels)
    opencl_losses, opencl_weights, opencl_steps = train(model, "opencl", inputs, labels)
    cpu_losses, cpu_weights, cpu_steps = train(cpu_model, "cpu", inputs, labels)
    opencl_step = statistics.median(opencl_steps)
    cpu_step = statistics.median(cpu_steps)

    print(f"MLP {FEATURES}-{HIDDEN}-{CLASSES}, SGD(lr={LEARNING_RATE}, momentum=0.9), "
          f"batch {BATCH}, {STEPS} steps, seed {SEED}")
    print(f"{'step':>4}  {'opencl loss':>12}  {'cpu loss':>12}  {'|diff|':>10}")
    for step in range(STEPS):
        a, b = opencl_losses[step].item(), cpu_losses[step].item()
        print(f"{step:>4}  {a:>12.6f}  {b:>12.6f}  {abs(a - b):>10.2e}")
    print(f"torch's start-up (its first optimizer imports torch._dynamo): {start_up:.2f} s")
    print(f"warm-up ({WARMUP_STEPS} steps, first use of each device): opencl "
          f"{opencl_warmup * 1e3:.0f} ms, cpu {cpu_warmup * 1e3:.0f} ms")
    print(f"steady state (median of {STEPS} steps): opencl {opencl_step * 1e3:.2f} ms/step, "
          f"cpu {cpu_step * 1e3:.2f} ms/step, ratio opencl/cpu {opencl_step / cpu_step:.2f}x")

    try:
        torch.testing.assert_close(opencl_losses, cpu_losses, rtol=RTOL, atol=ATOL)
        for name in cpu_weights:
            torch.testing.assert_close(opencl_weights[name], cpu_weights[name],
                                       rtol=RTOL, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}")
    except AssertionError as error:
        print(f"FAILED: the opencl run diverged from the cpu run:\n{error}", file=sys.stderr)
        return 1
    if not opencl_losses[-1] < opencl_losses[0]:
        print(f"FAILED: the loss did not go down ({opencl_losses[0].item():.6f} -> "
              f"{opencl_losses[-1].item():.6f})", file=sys.stderr)
        return 1
    print(f"OK: opencl and cpu losses and final weights agree (rtol={RTOL}, atol={ATOL})")
    print()
    print(torch.opencl.memory_summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
