"""The device's random stream on the host path: its own generator, the CPU's algorithm.

On the host path random operators on the device run CPU kernels with the host generator of the
device's generator (adapters/torch/generator.h; native_dropout, whose CPU kernel takes no
generator, has a kernel of its own in dropout.cc). So: an equal seed gives the device the CPU's
numbers, bit for bit; draws on the CPU do not move the device's stream; an explicit opencl
generator is honoured. On the native path the numbers are the device's own Philox stream
(test_native_random.py), and the tests that compare with the CPU's numbers are skipped.
"""
import pytest
import torch
import torch.nn.functional as F

import oclvm

DEVICE = "opencl"
host_stream = pytest.mark.skipif(torch.opencl.get_device_properties(0).native_kernels,
                                 reason="the native path draws from Philox: "
                                        "test_native_random.py")

RANDOM_OPS = {
    "rand": lambda d: torch.rand(6, device=d),
    "randn": lambda d: torch.randn(6, device=d),
    "randint": lambda d: torch.randint(0, 100, (6,), device=d),
    "randperm": lambda d: torch.randperm(10, device=d),
    "normal_": lambda d: torch.empty(6, device=d).normal_(),
    "bernoulli": lambda d: torch.bernoulli(torch.full((16,), 0.5, device=d)),
    "multinomial": lambda d: torch.multinomial(torch.ones(8, device=d), 4),
    "dropout": lambda d: F.dropout(torch.ones(32, device=d), 0.4),
}


def _seed_device_only(seed):
    oclvm._C.manual_seed(0, seed)


@host_stream
@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_equal_seed_gives_the_cpus_numbers(name):
    op = RANDOM_OPS[name]
    torch.manual_seed(11)
    on_cpu = op("cpu")
    torch.manual_seed(11)
    on_device = op(DEVICE).cpu()
    assert torch.equal(on_cpu, on_device)


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_cpu_draws_do_not_move_the_device_stream(name):
    op = RANDOM_OPS[name]
    _seed_device_only(5)
    torch.default_generator.manual_seed(1)
    first = op(DEVICE).cpu()
    _seed_device_only(5)
    torch.default_generator.manual_seed(2)
    torch.rand(100)  # a CPU draw between
    second = op(DEVICE).cpu()
    assert torch.equal(first, second)


@host_stream
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_native_dropout_equals_the_cpu_bit_for_bit(dtype, p):
    x = torch.randn(9, 31, dtype=dtype)
    torch.manual_seed(3)
    out_cpu, mask_cpu = torch.ops.aten.native_dropout(x, p, True)
    torch.manual_seed(3)
    out_dev, mask_dev = torch.ops.aten.native_dropout(x.to(DEVICE), p, True)
    assert mask_dev.dtype == mask_cpu.dtype == torch.bool
    assert torch.equal(out_cpu, out_dev.cpu()) and torch.equal(mask_cpu, mask_dev.cpu())


def test_native_dropout_in_eval_mode_and_on_empty_inputs():
    x = torch.randn(4, 4, device=DEVICE)
    out, mask = torch.ops.aten.native_dropout(x, 0.5, False)
    assert torch.equal(out.cpu(), x.cpu()) and bool(mask.all())
    empty = torch.empty(0, 3, device=DEVICE)
    out, mask = torch.ops.aten.native_dropout(empty, 0.5, True)
    assert out.shape == (0, 3) and out.device.type == DEVICE


@host_stream
def test_explicit_device_generator_is_honoured():
    g = torch.Generator(DEVICE)
    g.manual_seed(21)
    first = torch.rand(5, device=DEVICE, generator=g).cpu()
    g.manual_seed(21)
    torch.rand(50, device=DEVICE)  # the default generator moves, g does not
    second = torch.rand(5, device=DEVICE, generator=g).cpu()
    assert torch.equal(first, second)
    assert torch.equal(first, torch.rand(5, generator=torch.Generator().manual_seed(21)))


def test_state_round_trip_replays_the_stream():
    state = oclvm._C.get_rng_state(0)
    first = torch.randn(8, device=DEVICE).cpu()
    oclvm._C.set_rng_state(0, state)
    assert torch.equal(first, torch.randn(8, device=DEVICE).cpu())


def test_bad_state_is_refused_and_changes_nothing():
    state = oclvm._C.get_rng_state(0)
    with pytest.raises(ValueError, match="Expected an RNG state of"):
        oclvm._C.set_rng_state(0, b"short")
    with pytest.raises(TypeError, match="Expected the state as bytes"):
        oclvm._C.set_rng_state(0, "not bytes")
    assert oclvm._C.get_rng_state(0) == state
