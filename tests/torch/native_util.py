"""What the native path's test files share (test_native_*.py): whether this process runs on the
native path, the mark of the tests that need it, the test that runs a whole file there in a
subprocess, the counts of native launches and copies, operands of every dtype and layout, and the
check that a call the native path leaves raises the CPU's error.

PoCL's devices take the host path by default, so each file's native tests run in a subprocess with
OCLVM_KERNELS=native (run_file_natively); run directly with OCLVM_KERNELS=native, they run in the
test process."""
import os
import subprocess
import sys

import pytest

NATIVE = os.environ.get("OCLVM_KERNELS") == "native"
native_only = pytest.mark.skipif(not NATIVE, reason="runs with OCLVM_KERNELS=native")


def run_file_natively(path, staged_too=True):
    """Runs the pytest file `path` with OCLVM_KERNELS=native and asserts that it passed and that no
    native test was skipped for want of the native path (-rs lists each skip with its reason).
    staged_too=False skips it in a run with operands staged (OCLVM_ZERO_COPY=0), where it would
    repeat the run in host sections: native kernels never stage operands."""
    if NATIVE:
        pytest.skip("already on the native path")
    if not staged_too and os.environ.get("OCLVM_ZERO_COPY") == "0":
        pytest.skip("native kernels never stage operands: the run with host sections covers them")
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", path],
        env=dict(os.environ, OCLVM_KERNELS="native"), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
    assert " passed" in completed.stdout, completed.stdout[-2000:]
    assert "runs with OCLVM_KERNELS=native" not in completed.stdout, completed.stdout[-2000:]


def launches():
    """How many launches the native operators issued in this process, copies aside."""
    import oclvm
    return oclvm._C.native_kernel_calls()


def copies():
    """How many strided copies between device tensors ran natively in this process."""
    import oclvm
    return oclvm._C.native_copy_calls()


def on_device_as(t, device="opencl"):
    """`t` on the device with its own strides (a view keeps its layout)."""
    import torch
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device).copy_(t)


def random_tensor(shape, dtype, generator):
    """Random values of `dtype`: normal for floating and complex types, both truth values for
    bool, and for integer types values across much of their range (signed ones negative too)."""
    import torch
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=generator, dtype=dtype)
    return torch.randint(-100, 100, shape, generator=generator, dtype=dtype)


_error_words_made = False


def make_device_error_words():
    """Makes the error word of every device that takes the native path, once per process: 32
    bytes (one 512-byte block of memory_allocated()) that the first kernel checking indices on a
    device allocates and keeps until exit (Note [Errors found on the device] in
    adapters/torch/native_launches.cc). The leak checks call it before they take their baseline,
    so that they see only what the test itself allocates."""
    global _error_words_made
    if _error_words_made:
        return
    _error_words_made = True
    import torch
    import oclvm  # noqa: F401  (torch.opencl)
    for i in range(torch.opencl.device_count()):
        if torch.opencl.get_device_properties(i).native_kernels:
            device = f"opencl:{i}"
            index = torch.zeros(1, dtype=torch.long, device=device)
            torch.zeros(1, device=device).index_select(0, index)
    torch.opencl.synchronize()


def assert_the_cpus_error(call):
    """`call(to)` raises a RuntimeError with the first line of the CPU's message both with `to`
    the identity (on the CPU) and with `to` moving a tensor to the device."""
    with pytest.raises(RuntimeError) as cpu_error:
        call(lambda t: t)
    with pytest.raises(RuntimeError) as device_error:
        call(lambda t: t.to("opencl"))
    assert str(device_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]
