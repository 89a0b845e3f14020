"""What tests/torch/test_direct_path.py and test_unboxed_kernels.py share: the device, a CPU
tensor with its device copy, and the mark of the tests that need device memory with a host
address (host sections)."""
import pytest
import torch

import oclvm  # noqa: F401  (registers torch.opencl)

DEVICE = "opencl"


def pair(*shape):
    """A seeded random CPU tensor of `shape` and its copy on the device."""
    torch.manual_seed(sum(shape))
    x = torch.randn(*shape)
    return x, x.to(DEVICE)


needs_host_sections = pytest.mark.skipif(
    not torch.opencl.get_device_properties(0).host_sections,
    reason="the device's memory has no host address here (OCLVM_ZERO_COPY set)")
