"""Devices of the `opencl` backend, checked the way PyTorch's OpenReg backend tests check a
PrivateUse1 backend (its test_device.py), rewritten for our device, plus torch.opencl's device
information (get_device_name, get_device_properties, get_device_capability).

What is checked: device count and switching (torch.accelerator and torch.opencl), the device
context managers (nested, after exceptions), refused indices, tensors landing on the current
device, the current device being per thread (threads switching devices concurrently), a spawned
process using the device, a failing operator leaving the device usable, and the properties the
OpenCL driver reports (name, platform, version, OpenCL version as the capability, memory sizes,
buffer alignment).
"""
import dataclasses
import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import oclvm

DEV = "opencl"
LAST = torch.opencl.device_count() - 1  # device 1 on two devices, else device 0

pytestmark = pytest.mark.usefixtures("nothing_leaks", "device_zero_and_default_streams")


def test_device_count():
    count = torch.accelerator.device_count()
    assert count == torch.opencl.device_count() == oclvm._C.device_count() >= 1
    assert torch.opencl.is_available()


def test_device_switch():
    for index in (LAST, 0):
        torch.accelerator.set_device_index(index)
        assert torch.accelerator.current_device_index() == index == torch.opencl.current_device()
    for form in (LAST, f"{DEV}:{LAST}", torch.device(DEV, LAST)):
        torch.opencl.set_device(form)
        assert torch.opencl.current_device() == LAST
        torch.opencl.set_device(0)


def test_device_contexts():
    original = torch.accelerator.current_device_index()
    with torch.accelerator.device_index(None):
        assert torch.accelerator.current_device_index() == original
    with torch.accelerator.device_index(LAST):
        assert torch.accelerator.current_device_index() == LAST
    assert torch.accelerator.current_device_index() == original
    with torch.opencl.device(f"{DEV}:{LAST}"):
        assert torch.opencl.current_device() == LAST
    with torch.opencl.device(None):
        assert torch.opencl.current_device() == original
    assert torch.opencl.current_device() == original


def test_invalid_device_index():
    count = torch.accelerator.device_count()
    with pytest.raises(IndexError, match=f"Expected an opencl device index in \\[0, {count}\\)"):
        torch.accelerator.set_device_index(count)
    with pytest.raises(IndexError):
        torch.opencl.set_device(count)
    with pytest.raises(ValueError, match="opencl device"):
        torch.opencl.set_device("cpu")
    assert torch.accelerator.current_device_index() == 0


def test_tensor_device():
    x = torch.randn(2, 3, device=DEV)
    assert x.device == torch.device(DEV, 0)
    y = torch.randn(2, 3, device=f"{DEV}:{LAST}")
    assert y.device == torch.device(DEV, LAST)


@pytest.mark.two_devices
def test_device_switch_persists_across_operations():
    torch.accelerator.set_device_index(1)
    x = torch.randn(2, 3, device=DEV)
    y = torch.randn(3, 3, device=DEV)
    z = (x @ y).sum()
    assert x.device.index == y.device.index == z.device.index == 1
    assert torch.accelerator.current_device_index() == 1
    torch.accelerator.set_device_index(0)
    a = torch.randn(5, 5, device=DEV)
    assert (a @ a).device.index == 0


def test_device_count_consistency():
    for index in range(torch.accelerator.device_count()):
        torch.accelerator.set_device_index(index)
        assert torch.accelerator.current_device_index() == index


def test_context_restores_the_device_after_exceptions():
    original = torch.accelerator.current_device_index()
    with pytest.raises(ValueError):
        with torch.accelerator.device_index(LAST):
            assert torch.randn(2, 2, device=DEV).device.index == LAST
            raise ValueError("leaves the block")
    assert torch.accelerator.current_device_index() == original
    with pytest.raises(RuntimeError):
        with torch.accelerator.device_index(LAST):
            with torch.opencl.device(0):
                assert torch.accelerator.current_device_index() == 0
                raise RuntimeError("nested")
    assert torch.accelerator.current_device_index() == original


def test_current_device_is_per_thread_under_concurrency():
    count = torch.accelerator.device_count()
    threads, operations = 4, 20
    errors = []
    barrier = threading.Barrier(threads)

    def worker(thread_id):
        try:
            barrier.wait()
            index = thread_id % count
            for _ in range(operations):
                torch.accelerator.set_device_index(index)
                x = torch.randn(10, 10, device=DEV)
                total = (x @ x).sum()
                if (torch.accelerator.current_device_index(), x.device.index,
                        total.device.index) != (index, index, index):
                    errors.append(f"thread {thread_id}: device moved")
        except Exception as e:  # reported below with the thread that raised
            errors.append(f"thread {thread_id}: {e!r}")

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for future in [pool.submit(worker, i) for i in range(threads)]:
            future.result()
    assert errors == []
    assert torch.accelerator.current_device_index() == 0, "other threads left this one alone"


def test_initialization_state():
    torch.opencl.init()
    assert torch.opencl.is_initialized()
    assert torch.accelerator.device_count() > 0


def _spawned_worker(index, results):
    try:
        torch.accelerator.set_device_index(index)
        x = torch.ones(10, 10, device=DEV)
        results.put(("success", index, (x @ x).sum().item()))
    except Exception as e:  # the parent reports it
        results.put(("error", index, repr(e)))


def test_device_in_a_spawned_process():
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_spawned_worker, args=(LAST, results))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 0
    assert results.get(timeout=10) == ("success", LAST, 1000.0)


def test_device_usable_after_a_failing_operator():
    x = torch.randn(5, 5, device=DEV)
    y = torch.randn(3, 3, device=DEV)
    with pytest.raises(RuntimeError):
        x @ y  # shapes do not match
    assert torch.accelerator.current_device_index() == 0
    z = torch.randn(5, 5, device=DEV)
    assert (z @ x).shape == (5, 5)


# ---------------------------------------------------------------------------------------------
# Device information


@pytest.mark.parametrize("form", [None, 0, f"{DEV}:0", torch.device(DEV, 0), torch.device(DEV)])
def test_device_properties(form):
    properties = torch.opencl.get_device_properties(form)
    assert isinstance(properties, torch.opencl.DeviceProperties)
    assert properties.name and properties.platform
    assert properties.version.startswith("OpenCL ")
    assert properties.version.startswith(f"OpenCL {properties.major}.{properties.minor}")
    assert properties.total_memory == oclvm._C.global_memory(0)
    assert 0 < properties.max_allocation <= properties.total_memory
    align = properties.base_addr_align
    assert align > 0 and align & (align - 1) == 0, "a power of two"
    assert torch.opencl.get_device_name(form) == properties.name
    assert torch.opencl.get_device_capability(form) == (properties.major, properties.minor)
    assert properties.major >= 1


def test_device_properties_read_well_and_are_frozen():
    properties = torch.opencl.get_device_properties()
    text = repr(properties)
    assert text.startswith("DeviceProperties(name=")
    assert repr(properties.name) in text and f"major={properties.major}" in text
    assert f"total_memory={properties.total_memory >> 20}MB" in text
    with pytest.raises(dataclasses.FrozenInstanceError):
        properties.name = "other"
    assert properties == torch.opencl.get_device_properties(0)


def test_total_memory_is_what_mem_get_info_reports_without_a_limit():
    if oclvm._C.memory_limit(0) != 0:
        pytest.skip("OCLVM_MEMORY_LIMIT is set")
    assert torch.opencl.mem_get_info(0)[1] == torch.opencl.get_device_properties(0).total_memory


def test_storages_start_at_the_device_buffer_alignment():
    align = torch.opencl.get_device_properties().base_addr_align
    tensors = [torch.empty(n, dtype=torch.uint8, device=DEV) for n in (1, 100, 513, 4096, 1 << 20)]
    assert all(t.data_ptr() % align == 0 for t in tensors)


def test_device_information_of_bad_devices_is_refused():
    with pytest.raises(ValueError, match="opencl device"):
        torch.opencl.get_device_properties("cpu")
    with pytest.raises(IndexError):
        torch.opencl.get_device_properties(torch.opencl.device_count())
    with pytest.raises(IndexError):
        torch.opencl.get_device_capability(f"{DEV}:99")


@pytest.mark.parametrize("version, capability", [
    ("OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, LLVM 15.0.6", (3, 0)),
    ("OpenCL 1.2 CUDA", (1, 2)),
    ("OpenCL 2.1 ", (2, 1)),
    ("OpenCL 12.34", (12, 34)),
])
def test_capability_is_parsed_from_the_version(version, capability):
    assert oclvm._opencl_version(version) == capability


@pytest.mark.parametrize("version", ["", "OpenCL", "OpenCL C 1.2", "Vulkan 1.3", "opencl 3.0"])
def test_malformed_versions_are_refused(version):
    with pytest.raises(RuntimeError, match="Expected a device version"):
        oclvm._opencl_version(version)


@pytest.mark.two_devices
def test_both_devices_report_properties():
    first, second = (torch.opencl.get_device_properties(i) for i in (0, 1))
    assert first.platform == second.platform
    assert torch.opencl.get_device_capability(1) == (second.major, second.minor)
    with torch.opencl.device(1):
        assert torch.opencl.get_device_properties() == second
