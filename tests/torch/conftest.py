"""pytest setup for the torch adapter tests: makes the built `oclvm` package importable, and
gives them the `two_devices` mark (skipped on fewer than two opencl devices) and the fixtures
`nothing_leaks` and `device_zero_and_default_streams`.

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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "two_devices: needs two opencl devices (POCL_DEVICES='pthread pthread'); "
        "skipped with fewer")


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("two_devices")]
    if not marked:
        return
    import torch
    import oclvm  # noqa: F401  (torch.opencl, when the package is not autoloaded)
    if torch.opencl.device_count() >= 2:
        return
    skip = pytest.mark.skip(reason="needs two opencl devices (POCL_DEVICES='pthread pthread')")
    for item in marked:
        item.add_marker(skip)


@pytest.fixture
def device_zero_and_default_streams():
    """After the test, device 0 is current and every device is on its default stream (for test
    files that switch devices and streams: `pytestmark = pytest.mark.usefixtures(...)`)."""
    yield
    import torch
    for i in range(torch.opencl.device_count()):
        torch.opencl.set_stream(torch.opencl.default_stream(i))
    torch.opencl.set_device(0)


@pytest.fixture
def nothing_leaks(request):
    """Device memory of every device after each passing test equals before. A failed test's
    traceback keeps its tensors alive, so the check is skipped there instead of reporting a second
    error. Test files opt in with `pytestmark = pytest.mark.usefixtures("nothing_leaks")`."""
    import torch
    import oclvm

    from native_util import make_device_error_words
    make_device_error_words()  # a device's one-time buffer, not the test's
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
