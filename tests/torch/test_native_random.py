"""Random numbers on the native path (adapters/torch/native_random.cc, Note [Native random
numbers]): uniform_, normal_, bernoulli_, random_ and dropout computed on the device by
Philox4x32-10 of the counter (element, offset) under the seed.

The kernel's numbers are checked bit for bit against this file's own Philox, itself checked against
Random123's published answers; then what users rely on: manual_seed and the RNG state replay the
stream, a checkpointed segment's recomputation sees its forward's mask, CPU draws and device draws
do not move each other, the distributions have their moments, every dtype the kernels take, the
CPU's errors for bad arguments, and no call falls back.

PoCL's devices take the host path by default, so these tests run in a subprocess with
OCLVM_KERNELS=native; run directly with OCLVM_KERNELS=native, they run in this process.
"""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from native_util import native_only, run_file_natively

DEV = "opencl"
MASK32 = 0xFFFFFFFF


def test_native_random_in_a_subprocess():
    run_file_natively(__file__, staged_too=False)


def philox(counter, key):
    """Philox4x32-10 of four 32-bit counter words under two key words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32)
    return c0, c1, c2, c3


def words(index, offset, seed):
    """The four words element `index` of the call at `offset` gets under `seed`."""
    return philox((index & MASK32, index >> 32, offset & MASK32, offset >> 32),
                  (seed & MASK32, seed >> 32))


def test_philox_matches_random123s_answers():
    assert philox((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox((MASK32,) * 4, (MASK32, MASK32)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6,
                                                       0x6D5451FD)
    assert philox((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) \
        == (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


@native_only
@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_kernel_numbers_are_philox(seed):
    g = torch.Generator(DEV).manual_seed(seed)
    first = torch.rand(70, device=DEV, generator=g).cpu()
    second = torch.empty(70, device=DEV, dtype=torch.int64).random_(-5, 1000, generator=g).cpu()
    coins = torch.empty(70, device=DEV).bernoulli_(0.3, generator=g).cpu()
    assert g.get_offset() == 3  # one offset per call
    for i in range(70):
        assert first[i].item() == (words(i, 0, seed)[0] >> 8) * 2.0**-24
        assert second[i].item() == -5 + words(i, 1, seed)[0] % 1005
        assert coins[i].item() == float(words(i, 2, seed)[0] < int(0.3 * 2**32))


@native_only
def test_wide_ranges_and_float64_use_two_words():
    seed = 11
    g = torch.Generator(DEV).manual_seed(seed)
    wide = torch.empty(20, device=DEV, dtype=torch.int64).random_(0, 2**40, generator=g).cpu()
    doubles = torch.rand(20, device=DEV, dtype=torch.float64, generator=g).cpu()
    for i in range(20):
        r = words(i, 0, seed)
        assert wide[i].item() == ((r[0] << 32) | r[1]) % 2**40
        r = words(i, 1, seed)
        assert doubles[i].item() == (((r[0] << 32) | r[1]) >> 11) * 2.0**-53


@native_only
def test_seed_and_state_replay_the_stream():
    torch.manual_seed(5)
    first = torch.randn(100, device=DEV).cpu()
    torch.opencl.manual_seed(5)
    assert torch.equal(torch.randn(100, device=DEV).cpu(), first)
    state = torch.opencl.get_rng_state()
    assert state.numel() == torch.get_rng_state().numel() + 8  # the Philox offset follows
    drawn = [torch.rand(10, device=DEV).cpu(), torch.randint(0, 9, (10,), device=DEV).cpu()]
    torch.opencl.set_rng_state(state)
    assert torch.equal(torch.rand(10, device=DEV).cpu(), drawn[0])
    assert torch.equal(torch.randint(0, 9, (10,), device=DEV).cpu(), drawn[1])
    # The CPU generator's layout alone (torch.get_rng_state()) sets offset 0.
    torch.opencl.set_rng_state(torch.get_rng_state())
    assert torch.opencl.get_rng_state()[-8:].eq(0).all()


@native_only
def test_cpu_and_device_streams_do_not_move_each_other():
    torch.manual_seed(3)
    cpu_state, device_state = torch.get_rng_state(), torch.opencl.get_rng_state()
    torch.rand(100, device=DEV)
    F.dropout(torch.ones(100, device=DEV), 0.5, True)
    assert torch.equal(torch.get_rng_state(), cpu_state), "a device draw advanced the CPU's"
    torch.opencl.set_rng_state(device_state)
    expected = torch.rand(100, device=DEV).cpu()
    torch.opencl.set_rng_state(device_state)
    torch.rand(100)                                   # a CPU draw in between
    assert torch.equal(torch.rand(100, device=DEV).cpu(), expected)


@native_only
def test_a_generator_object_keeps_its_own_stream():
    g = torch.Generator(DEV).manual_seed(1)
    expected = torch.randn(6, device=DEV, generator=g).cpu()
    clone = torch.Generator(DEV)
    clone.set_state(torch.Generator(DEV).manual_seed(1).get_state())
    torch.manual_seed(99)  # the default generator is another
    assert torch.equal(torch.randn(6, device=DEV, generator=clone).cpu(), expected)
    g.set_offset(0)
    assert torch.equal(torch.randn(6, device=DEV, generator=g).cpu(), expected)


class DropoutBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.b(F.dropout(torch.relu(self.a(x)), 0.4, True))


@native_only
def test_checkpoint_recomputation_sees_the_forwards_mask():
    torch.manual_seed(0)
    block = DropoutBlock().to(DEV)
    x = torch.randn(8, 16, device=DEV)
    grads = []
    for checkpointed in (False, True):
        block.zero_grad()
        torch.opencl.manual_seed(21)
        out = checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
        torch.rand(50, device=DEV)  # a draw between the forward and the recomputation
        out.square().sum().backward()
        grads.append([p.grad.cpu() for p in block.parameters()])
    for plain, recomputed in zip(*grads):
        assert torch.equal(plain, recomputed)


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=str)
def test_distributions_have_their_moments(dtype):
    torch.opencl.reset_fallback_counts()
    g = torch.Generator(DEV).manual_seed(123)
    n = 200_000
    u = torch.empty(n, device=DEV, dtype=dtype).uniform_(-2, 3, generator=g).cpu().double()
    assert u.min() >= -2 and u.max() < 3
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 25 / 12) < 0.03
    z = torch.empty(n, device=DEV, dtype=dtype).normal_(1.5, 2, generator=g).cpu().double()
    assert abs(z.mean() - 1.5) < 0.02 and abs(z.std() - 2) < 0.02
    assert abs((z - 1.5).div(2).pow(4).mean() - 3) < 0.1  # the normal's kurtosis
    b = torch.empty(n, device=DEV, dtype=dtype).bernoulli_(0.2, generator=g).cpu().double()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.2) < 0.005
    x = torch.randn(n, device=DEV, dtype=dtype, generator=g)
    torch.opencl.manual_seed(7)  # dropout draws from the default generator
    out, mask = torch.native_dropout(x, 0.25, True)
    assert mask.dtype == torch.bool and abs(mask.cpu().double().mean() - 0.75) < 0.005
    scale = torch.tensor(1 / 0.75, dtype=dtype)
    expected = torch.where(mask.cpu(), x.cpu() * scale, x.cpu() * 0)
    assert torch.equal(out.cpu(), expected)
    assert not torch.opencl.fallback_counts()


@native_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_dropout_gradient_is_the_masked_scaled_gradient(dtype):
    torch.opencl.manual_seed(8)
    x = torch.randn(64, 33, device=DEV, dtype=dtype, requires_grad=True)
    grad = torch.randn(64, 33, device=DEV, dtype=dtype)
    out, mask = torch.native_dropout(x, 0.3, True)
    out.backward(grad)
    expected = grad.cpu() * mask.cpu() * (1 / 0.7)
    torch.testing.assert_close(x.grad.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(out.cpu(), x.detach().cpu() * mask.cpu() * (1 / 0.7), rtol=0,
                               atol=0)


@native_only
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool, torch.float32, torch.float64],
                         ids=str)
def test_random_covers_the_dtypes_range(dtype):
    torch.opencl.reset_fallback_counts()
    g = torch.Generator(DEV).manual_seed(4)
    values = torch.empty(50_000, device=DEV, dtype=dtype).random_(generator=g).cpu()
    # torch's random_() range: [0, 2^digits] for floating dtypes, [0, max] for integers
    digits = {torch.float32: 24, torch.float64: 53}
    high = 1 if dtype == torch.bool else (2 ** digits[dtype] if dtype.is_floating_point
                                          else torch.iinfo(dtype).max)
    assert values.min() >= 0 and values.double().max() <= high
    assert values.double().max() > high * 0.99  # the whole range is reached
    if dtype != torch.bool:
        low = torch.empty(1000, device=DEV, dtype=dtype).random_(3, generator=g).cpu()
        assert set(low.tolist()) == {0, 1, 2}
    assert not torch.opencl.fallback_counts()


@native_only
def test_a_layout_that_is_not_contiguous_is_filled_whole():
    t = torch.full((40, 30), 7.0, device=DEV).t()
    t.uniform_(0, 1)
    host = t.cpu()
    assert host.min() >= 0 and host.max() < 1 and host.unique().numel() > 1100
    base = torch.zeros(10, 10, device=DEV)
    base[:, ::2].bernoulli_(1.0)
    assert torch.equal(base.cpu()[:, ::2], torch.ones(10, 5))
    assert torch.equal(base.cpu()[:, 1::2], torch.zeros(10, 5))


@native_only
def test_bad_arguments_get_the_cpus_errors_and_change_nothing():
    t = torch.zeros(4, device=DEV)
    offset = torch.opencl.get_rng_state()
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
        t.uniform_(2, 1)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
        t.normal_(0, -1)
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\]"):
        t.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        t.random_(5, 5)
    with pytest.raises(RuntimeError, match="Expected a 'opencl' device type for generator"):
        t.uniform_(0, 1, generator=torch.Generator())
    with pytest.raises(RuntimeError, match="from is out of bounds for"):
        torch.zeros(4, device=DEV, dtype=torch.half).uniform_(70000, 70001)
    with pytest.raises(RuntimeError, match="random_ expects 'from' casted to dtype"):
        t.random_(2**24, None)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.zeros(1, device=DEV).expand(4).uniform_()  # elements that share memory
    assert torch.equal(t.cpu(), torch.zeros(4))
    assert torch.equal(torch.opencl.get_rng_state(), offset)


@native_only
def test_factories_and_training_draw_on_the_device():
    torch.opencl.reset_fallback_counts()
    torch.manual_seed(0)
    torch.rand(3, 4, device=DEV)
    torch.randn(3, 4, device=DEV, dtype=torch.float16)
    torch.randint(0, 10, (5,), device=DEV)
    torch.rand_like(torch.empty(2, 2, device=DEV))
    layer = torch.nn.Linear(8, 8, device=DEV)  # kaiming_uniform_ and uniform_ on the device
    F.dropout2d(torch.ones(2, 3, 4, 4, device=DEV), 0.5, True)  # a bernoulli_ feature mask
    model = torch.nn.Sequential(layer, torch.nn.Dropout(0.1))
    model(torch.randn(4, 8, device=DEV)).sum().backward()
    assert not torch.opencl.fallback_counts()
