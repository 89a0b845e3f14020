"""How the package's modules name a device and reach the native module.

``_index(device)`` reads a device argument as torch.cuda's functions do (None: the current
device; an int, a str or a torch.device of the opencl type), ``_checked_index`` also refuses an
index no device has, and ``_native(name)`` is ``oclvm._C``'s function with a clear error when the
installed native module predates it. Imported by the package after it has loaded ``oclvm._C``.
"""
import torch

from . import BACKEND, _C


def _index(device=None) -> int:
    """The device index of `device` (None: the current device; int, str or torch.device)."""
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != BACKEND:
        raise ValueError(f"Expected an {BACKEND} device, but got {device}")
    return _C.current_device() if device.index is None else device.index


def _checked_index(device=None) -> int:
    """_index(device), refused with IndexError when no opencl device has that index."""
    index = _index(device)
    count = _C.device_count()
    if not 0 <= index < count:
        raise IndexError(f"Expected an opencl device index in [0, {count}), but got {index}")
    return index


def _native(name: str):
    """oclvm._C's function `name`; a clear error when the installed native module predates it."""
    function = getattr(_C, name, None)
    if function is None:
        raise RuntimeError(f"Expected oclvm._C.{name}, but the installed native module has none: "
                           "reinstall the oclvm package")
    return function
