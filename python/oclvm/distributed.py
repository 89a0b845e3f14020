"""torch.distributed on opencl tensors: the c10d backend ``oclvm``.

Importing oclvm registers the backend (``torch.distributed.Backend.register_backend``) for the
``opencl`` and ``cpu`` devices, so every usual way of starting a group works:

- ``init_process_group("cpu:gloo,opencl:oclvm")``: gloo for CPU tensors, oclvm for device tensors;
- ``init_process_group("oclvm")``: oclvm for both (CPU tensors go to its gloo untouched);
- ``init_process_group()``: torch picks the backend of the accelerator, which is ``opencl``
  with this package loaded, so oclvm serves opencl tensors (and barrier and the object
  collectives, which then use the current device); CPU tensors have no backend in such a group,
  as with CUDA and NCCL.

Each group's backend wraps a gloo backend of the same group (same store, rank, size, timeout):
gloo runs every collective on host twins of the device tensors, which the device's copy
instructions fill and empty in stream order (adapters/torch/c10d_backend.h, design/distributed.md).
Across machines it is gloo's TCP transport: set ``GLOO_SOCKET_IFNAME`` as for gloo.
"""
import torch
import torch.distributed as dist

NAME = "oclvm"
DEVICES = ("opencl", "cpu")


def _create_backend(store, rank: int, world_size: int, timeout):
    """The creator torch.distributed calls for each group that uses ``oclvm`` (on any device)."""
    from ._c10d import StagingBackend  # links libtorch_python: loaded only when a group is made

    gloo = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    gloo._set_sequence_number_for_group()  # as torch does for the gloo groups it makes itself
    return StagingBackend(gloo, rank, world_size)


def register() -> None:
    """Registers ``oclvm`` with torch.distributed, once per process; nothing when torch was built
    without distributed support."""
    if not dist.is_available() or NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(NAME, _create_backend, devices=list(DEVICES))
