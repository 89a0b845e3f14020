"""pytest setup for the torch adapter tests: makes the built `oclvm` package importable.

The package is looked for, in order: already importable (installed with pip), the directory named
by OCLVM_TORCH_PYTHONPATH, then <repo>/build-torch/python (what adapters/torch/CMakeLists.txt
writes). Autoloading through the entry point is left to torch when the package is installed.
"""
import gc
import importlib.util
import os
import pathlib
import sys

_REPO = pathlib.Path(__file__).resolve().parents[2]

if importlib.util.find_spec("oclvm") is None:
    _candidates = [os.environ.get("OCLVM_TORCH_PYTHONPATH"), str(_REPO / "build-torch" / "python")]
    for _path in _candidates:
        if _path and (pathlib.Path(_path) / "oclvm").is_dir():
            sys.path.insert(0, _path)
            break


import pytest  # noqa: E402  (after the path set-up above, so that oclvm is importable)


@pytest.fixture
def nothing_leaks(request):
    """Device memory of every device after each passing test equals before. A failed test's
    traceback keeps its tensors alive, so the check is skipped there instead of reporting a second
    error. Test files opt in with `pytestmark = pytest.mark.usefixtures("nothing_leaks")`."""
    import torch
    import oclvm

    failed_before = request.session.testsfailed
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):  # pytest keeps the last failure's frames here
            delattr(sys, name)
    gc.collect()
    blocks_before = oclvm._C.live_blocks()
    allocated_before = [torch.opencl.memory_allocated(i) for i in range(torch.opencl.device_count())]
    yield
    if request.session.testsfailed != failed_before:
        return
    gc.collect()
    assert oclvm._C.live_blocks() == blocks_before
    assert [torch.opencl.memory_allocated(i)
            for i in range(torch.opencl.device_count())] == allocated_before
