"""Random numbers on torch.opencl: each device's default generator (adapters/torch/generator.h).

As torch.cuda.random: manual_seed, manual_seed_all, seed, seed_all, initial_seed, get_rng_state,
set_rng_state, get_rng_state_all, set_rng_state_all, all also names of ``torch.opencl``. A
generator holds a CPU Mersenne Twister (the host path's random operators run CPU kernels) and a
Philox offset (the native path's kernels compute from the seed and it); its state is the CPU
generator's bytes followed by the offset's 8, and one seed sets both.
"""
import torch

from . import _C
from ._device import _index, _native

_SEED_MIN = -(1 << 63)
_SEED_MASK = (1 << 64) - 1


def _checked_seed(seed) -> int:
    """`seed` read as torch.Generator.manual_seed reads it: int(seed) in [-2**63, 2**64), negative
    values taken modulo 2**64 (torch.manual_seed(-1) seeds 2**64 - 1)."""
    seed = int(seed)
    if not _SEED_MIN <= seed <= _SEED_MASK:
        raise ValueError(f"Expected a seed in [-2**63, 2**64), but got {seed}")
    return seed & _SEED_MASK


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    seed = _checked_seed(seed)
    _native("manual_seed")(_C.current_device(), seed)


def manual_seed_all(seed: int) -> None:
    """Seeds the default generator of every opencl device (torch.manual_seed calls this)."""
    seed = _checked_seed(seed)
    for index in range(_C.device_count()):
        _native("manual_seed")(index, seed)


def seed() -> None:
    """Seeds the current device's default generator with a nondeterministic number."""
    _native("seed")(_C.current_device())


def seed_all() -> None:
    """Seeds every device's default generator with one nondeterministic number (as torch.cuda:
    the first device draws it, the others take the same)."""
    if _C.device_count() == 0:
        return
    shared = _native("seed")(0)
    for index in range(1, _C.device_count()):
        _native("manual_seed")(index, shared)


def initial_seed() -> int:
    """The seed of the current device's default generator."""
    return _native("initial_seed")(_C.current_device())


def get_rng_state(device="opencl") -> torch.Tensor:
    """The state of the device's default generator (int, str or torch.device; "opencl": the
    current device) as a new 1-D uint8 CPU tensor: the CPU generator's bytes, then the Philox
    offset's 8, little-endian."""
    state = _native("get_rng_state")(_index(device))
    return torch.frombuffer(bytearray(state), dtype=torch.uint8)


def _state_bytes(new_state) -> bytes:
    """The bytes of an RNG state tensor; TypeError / ValueError for anything but a 1-D uint8
    tensor (its length is the native side's to check)."""
    if not isinstance(new_state, torch.Tensor):
        raise TypeError(f"Expected the RNG state as a torch.uint8 tensor, but got "
                        f"{type(new_state).__name__}")
    if new_state.dtype != torch.uint8:
        raise TypeError(f"Expected the RNG state as a torch.uint8 tensor, but got a tensor of "
                        f"{new_state.dtype}")
    if new_state.dim() != 1:
        raise ValueError(f"Expected a 1-D RNG state (what get_rng_state returns), but got shape "
                         f"{tuple(new_state.shape)}")
    return bytes(new_state.detach().cpu().tolist())


def set_rng_state(new_state: torch.Tensor, device="opencl") -> None:
    """Sets the state of the device's default generator to `new_state` (from get_rng_state, or
    torch.get_rng_state(), the CPU generator's bytes alone, which sets the Philox offset to 0). A
    state of the wrong type, shape or length is refused and changes nothing."""
    index = _index(device)
    _native("set_rng_state")(index, _state_bytes(new_state))


def get_rng_state_all() -> list:
    """get_rng_state of every device, in index order."""
    return [get_rng_state(index) for index in range(_C.device_count())]


def set_rng_state_all(new_states) -> None:
    """set_rng_state(state, i) for the i-th of `new_states`."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)
