"""Random numbers of the `opencl` device, checked the way PyTorch's OpenReg backend tests check a
PrivateUse1 backend (its test_rng.py), rewritten for our device and extended.

What is checked: torch.opencl's RNG functions, with torch.cuda's names, signatures and argument
forms (int, str, torch.device), act on each device's default generator; explicit
torch.Generator("opencl") objects seed, save and restore their own state and leave the default
alone; the same seed gives the same numbers; torch.manual_seed, torch.seed,
torch.random.fork_rng and torch.utils.checkpoint reach the device; bad seeds and bad states are
refused and change nothing; a generator of the other device type is refused.

On the host path the device's random operators run CPU kernels with a CPU Mersenne Twister owned
by the device (adapters/torch/generator.h), so a seed gives the device the same numbers as the CPU;
on the native path they draw from a Philox stream under the same seed, whose numbers are the
device's own (test_native_random.py checks them), so there the tests that compare with the CPU
compare with the device's own draws after the same seed. The state is the CPU generator's bytes
and the Philox offset's 8, and the device's numbers never advance the CPU's generator (nor the
reverse). The native side is oclvm._C.manual_seed / seed / initial_seed / get_rng_state /
set_rng_state.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

DEV = "opencl"
CPU_BYTES = torch.get_rng_state().numel()  # the CPU generator's state: 5056 bytes in 2.13
STATE_BYTES = CPU_BYTES + 8                 # and the Philox offset
# Whether the device's random operators give the CPU's numbers (the host path).
CPU_STREAM = not torch.opencl.get_device_properties(0).native_kernels


def seeded_draws(draw, seed, device=DEV):
    """What `draw(device, generator)` gives on the device, and what it must equal: the CPU's
    draw with a CPU generator of the same seed on the host path, the device's own again on the
    native path."""
    got = draw(device, torch.Generator(device).manual_seed(seed))
    if CPU_STREAM:
        return got, draw("cpu", torch.Generator().manual_seed(seed))
    return got, draw(device, torch.Generator(device).manual_seed(seed)).cpu()

pytestmark = pytest.mark.usefixtures("nothing_leaks", "device_zero_and_default_streams")


def test_generator_of_the_device():
    g = torch.Generator(device=DEV)
    assert g.device == torch.device(DEV, 0)
    assert torch.Generator(DEV).device.type == DEV


@pytest.mark.two_devices
def test_generator_of_the_second_device():
    g = torch.Generator(device=f"{DEV}:1")
    assert g.device == torch.device(DEV, 1)
    x, expected = seeded_draws(lambda d, g: torch.randn(8, device=d, generator=g), 3, f"{DEV}:1")
    assert x.device == torch.device(DEV, 1)
    assert torch.equal(x.cpu(), expected)


def test_generator_seed_state_round_trip():
    g = torch.Generator(DEV)
    g.manual_seed(42)
    assert g.initial_seed() == 42
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert state.numel() == STATE_BYTES
    first = torch.randn(16, device=DEV, generator=g)
    second = torch.randn(16, device=DEV, generator=g)
    assert not torch.equal(first.cpu(), second.cpu())
    g.set_state(state)
    again = torch.randn(16, device=DEV, generator=g)
    assert torch.equal(first.cpu(), again.cpu())


def test_explicit_generator_gives_the_cpu_numbers_and_leaves_the_default_alone():
    device_state = torch.opencl.get_rng_state()
    cpu_state = torch.get_rng_state()
    x, expected = seeded_draws(lambda d, g: torch.randn(32, device=d, generator=g), 11)
    assert x.device == torch.device(DEV, 0)
    assert torch.equal(x.cpu(), expected)
    assert torch.equal(torch.opencl.get_rng_state(), device_state)
    assert torch.equal(torch.get_rng_state(), cpu_state)


def test_same_seed_same_numbers_other_seed_other_numbers():
    torch.opencl.manual_seed(7)
    a = torch.randn(100, device=DEV).cpu()
    torch.randn(100)  # advancing the CPU generator must not matter
    torch.opencl.manual_seed(7)
    b = torch.randn(100, device=DEV).cpu()
    torch.opencl.manual_seed(8)
    c = torch.randn(100, device=DEV).cpu()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_device_and_cpu_generators_are_independent():
    torch.opencl.manual_seed(1)
    cpu_before = torch.get_rng_state()
    device_before = torch.opencl.get_rng_state()
    torch.rand(1000, device=DEV)
    assert torch.equal(torch.get_rng_state(), cpu_before), "a device op advanced the CPU generator"
    assert not torch.equal(torch.opencl.get_rng_state(), device_before)
    device_after = torch.opencl.get_rng_state()
    torch.rand(1000)
    assert torch.equal(torch.opencl.get_rng_state(), device_after), \
        "a CPU op advanced the device generator"


@pytest.mark.parametrize("draw", [
    pytest.param(lambda d, g: torch.rand(50, device=d, generator=g), id="rand"),
    pytest.param(lambda d, g: torch.randn(5, 7, device=d, generator=g), id="randn"),
    pytest.param(lambda d, g: torch.randint(0, 1000, (40,), device=d, generator=g), id="randint"),
    pytest.param(lambda d, g: torch.randperm(20, device=d, generator=g), id="randperm"),
    pytest.param(lambda d, g: torch.empty(30, device=d).normal_(2.0, 3.0, generator=g),
                 id="normal_"),
    pytest.param(lambda d, g: torch.empty(30, device=d).uniform_(-1, 1, generator=g),
                 id="uniform_"),
    pytest.param(lambda d, g: torch.full((64,), 0.3, device=d).bernoulli(generator=g),
                 id="bernoulli"),
    pytest.param(lambda d, g: torch.multinomial(torch.ones(10, device=d), 5, generator=g),
                 id="multinomial"),
])
def test_random_operators_match_the_cpu_with_the_same_seed(draw):
    on_device, expected = seeded_draws(draw, 123)
    assert on_device.device.type == DEV
    assert torch.equal(on_device.cpu(), expected)


def test_dropout_draws_from_the_device_generator():
    x = torch.ones(256, device=DEV)
    torch.opencl.manual_seed(5)
    a = F.dropout(x, 0.5, training=True).cpu()
    torch.opencl.manual_seed(5)
    b = F.dropout(x, 0.5, training=True).cpu()
    assert torch.equal(a, b)
    assert set(a.unique().tolist()) == {0.0, 2.0}


def test_manual_seed_all_and_initial_seed():
    torch.opencl.manual_seed_all(42)
    assert torch.opencl.initial_seed() == 42
    torch.opencl.manual_seed(5)
    assert torch.opencl.initial_seed() == 5
    torch.opencl.manual_seed(3.9)  # torch.cuda's int(seed)
    assert torch.opencl.initial_seed() == 3


def test_seed_and_seed_all_draw_fresh_seeds():
    torch.opencl.seed_all()
    first = torch.opencl.initial_seed()
    torch.opencl.seed_all()
    second = torch.opencl.initial_seed()
    assert first != second
    assert torch.opencl.seed() is None  # torch.cuda.seed's signature
    assert torch.opencl.initial_seed() not in (first, second)


@pytest.mark.parametrize("device", [0, DEV, f"{DEV}:0", torch.device(DEV), torch.device(DEV, 0)])
def test_rng_state_round_trip(device):
    torch.opencl.manual_seed(99)
    state = torch.opencl.get_rng_state(device)
    assert state.dtype == torch.uint8 and state.dim() == 1 and state.device.type == "cpu"
    assert state.numel() == STATE_BYTES
    a = torch.randn(64, device=DEV).cpu()
    torch.opencl.set_rng_state(state, device)
    b = torch.randn(64, device=DEV).cpu()
    assert torch.equal(a, b)
    state[0] ^= 0xFF  # the returned tensor is a copy: writing it changes nothing
    assert not torch.equal(torch.opencl.get_rng_state(device), state)


def test_rng_state_all_round_trip():
    states = torch.opencl.get_rng_state_all()
    assert len(states) == torch.opencl.device_count()
    draws = [torch.rand(10, device=f"{DEV}:{i}").cpu() for i in range(len(states))]
    torch.opencl.set_rng_state_all(states)
    again = [torch.rand(10, device=f"{DEV}:{i}").cpu() for i in range(len(states))]
    assert all(torch.equal(a, b) for a, b in zip(draws, again))


def test_state_has_the_cpu_generator_layout():
    torch.manual_seed(2024)
    cpu_state = torch.get_rng_state()
    torch.opencl.manual_seed(1)
    torch.randn(20, device=DEV)
    torch.opencl.set_rng_state(cpu_state)  # the CPU's layout alone: its seed, Philox offset 0
    assert torch.opencl.get_rng_state()[CPU_BYTES:].eq(0).all()
    on_device = torch.randn(20, device=DEV).cpu()
    if CPU_STREAM:
        expected = torch.randn(20)
    else:
        torch.opencl.manual_seed(2024)
        expected = torch.randn(20, device=DEV).cpu()
    assert torch.equal(on_device, expected)
    torch.opencl.set_rng_state(torch.opencl.get_rng_state().to(DEV))  # a state on the device


@pytest.mark.parametrize("bad, error", [
    pytest.param([1, 2, 3], TypeError, id="a list"),
    pytest.param(b"\0" * STATE_BYTES, TypeError, id="bytes"),
    pytest.param(torch.zeros(STATE_BYTES, dtype=torch.float32), TypeError, id="float32"),
    pytest.param(torch.zeros(2, STATE_BYTES // 2, dtype=torch.uint8), ValueError, id="2-D"),
    pytest.param(torch.zeros(5, dtype=torch.uint8), ValueError, id="too short"),
    pytest.param(torch.zeros(STATE_BYTES + 1, dtype=torch.uint8), ValueError, id="too long"),
])
def test_bad_states_are_refused_and_change_nothing(bad, error):
    torch.opencl.manual_seed(17)
    before = torch.opencl.get_rng_state()
    with pytest.raises(error):
        torch.opencl.set_rng_state(bad)
    assert torch.equal(torch.opencl.get_rng_state(), before)
    assert torch.opencl.initial_seed() == 17


def test_bad_devices_are_refused():
    state = torch.opencl.get_rng_state()
    with pytest.raises(ValueError, match="opencl device"):
        torch.opencl.get_rng_state("cpu")
    with pytest.raises(ValueError, match="opencl device"):
        torch.opencl.set_rng_state(state, torch.device("cpu"))
    with pytest.raises(IndexError):
        torch.opencl.get_rng_state(99)
    with pytest.raises(IndexError):
        torch.opencl.set_rng_state(state, f"{DEV}:99")


def test_seeds_are_read_as_torch_reads_them():
    torch.opencl.manual_seed(-1)  # negative seeds wrap modulo 2**64, as torch.Generator's
    assert torch.opencl.initial_seed() == torch.Generator().manual_seed(-1).initial_seed()
    assert torch.opencl.initial_seed() == 2**64 - 1
    torch.opencl.manual_seed(2**64 - 1)
    assert torch.opencl.initial_seed() == 2**64 - 1
    torch.opencl.manual_seed(10)
    for bad in (2**64, -2**63 - 1):
        with pytest.raises(ValueError, match="seed"):
            torch.opencl.manual_seed(bad)
        with pytest.raises(ValueError, match="seed"):
            torch.opencl.manual_seed_all(bad)
    with pytest.raises(ValueError):
        torch.opencl.manual_seed("ten")
    assert torch.opencl.initial_seed() == 10, "refused seeds change nothing"


def test_torch_manual_seed_seeds_every_device():
    # torch.random._seed_custom_device calls torch.opencl.manual_seed_all when the module has
    # both _is_in_bad_fork and manual_seed_all; otherwise it only warns.
    assert callable(torch.opencl._is_in_bad_fork) and not torch.opencl._is_in_bad_fork()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.manual_seed(123)
    assert [torch.opencl.get_rng_state(i).tolist() for i in range(torch.opencl.device_count())] \
        == [torch.get_rng_state().tolist() + [0] * 8] * torch.opencl.device_count()
    with torch.opencl.device(torch.opencl.device_count() - 1):
        assert torch.opencl.initial_seed() == 123
    a = torch.randn(50, device=DEV).cpu()
    torch.manual_seed(123)
    b = torch.randn(50, device=DEV).cpu()
    assert torch.equal(a, b)


def test_torch_seed_reaches_the_device():
    drawn = torch.seed()
    assert torch.opencl.initial_seed() == drawn == torch.initial_seed()


def test_fork_rng_restores_the_device_state():
    torch.opencl.manual_seed(31)
    before = torch.opencl.get_rng_state()
    with torch.random.fork_rng(device_type=DEV):
        torch.opencl.manual_seed(0)
        torch.randn(100, device=DEV)
    assert torch.equal(torch.opencl.get_rng_state(), before)


@pytest.mark.two_devices
def test_seeds_and_states_are_per_device():
    torch.opencl.manual_seed_all(1)
    torch.opencl.manual_seed(2)  # the current device only
    assert torch.opencl.initial_seed() == 2
    with torch.opencl.device(1):
        assert torch.opencl.initial_seed() == 1
        torch.opencl.manual_seed(3)
    assert torch.opencl.initial_seed() == 2
    torch.opencl.set_device(1)
    assert torch.opencl.initial_seed() == 3
    torch.opencl.set_device(0)

    torch.opencl.manual_seed_all(4)
    state1 = torch.opencl.get_rng_state(1)
    torch.rand(100, device=f"{DEV}:0")  # device 0's numbers do not move device 1's generator
    assert torch.equal(torch.opencl.get_rng_state(1), state1)
    assert not torch.equal(torch.opencl.get_rng_state(0), state1)
    torch.opencl.set_rng_state(torch.opencl.get_rng_state(0), torch.device(DEV, 1))
    assert torch.equal(torch.opencl.get_rng_state(1), torch.opencl.get_rng_state(0))

    torch.opencl.seed_all()
    seeds = []
    for i in range(2):
        with torch.opencl.device(i):
            seeds.append(torch.opencl.initial_seed())
    assert seeds[0] == seeds[1], "seed_all gives every device the same fresh seed"


def test_checkpoint_recomputes_dropout_with_the_saved_device_state():
    # torch.utils.checkpoint saves torch.opencl.get_rng_state() before the forward and sets it
    # back before recomputing: the backward must see the forward's dropout mask.
    import torch.utils.checkpoint as checkpoint

    x = torch.ones(512, device=DEV, requires_grad=True)
    torch.opencl.manual_seed(12)
    out = checkpoint.checkpoint(lambda t: F.dropout(t, 0.5, training=True), x,
                                use_reentrant=False)
    out.sum().backward()
    kept = out.detach().cpu() != 0
    assert 0 < int(kept.sum()) < 512
    assert torch.equal(x.grad.cpu(), kept.float() * 2)


def test_a_device_generator_is_refused_by_cpu_operators():
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but "
                                           "found 'opencl'"):
        torch.randn(3, generator=torch.Generator(DEV))


def test_a_cpu_generator_is_refused_by_device_operators():
    # As CUDA refuses a generator of another device type.
    with pytest.raises(RuntimeError, match="Expected a 'opencl' device type for generator but "
                                           "found 'cpu'"):
        torch.randn(3, device=DEV, generator=torch.Generator())
