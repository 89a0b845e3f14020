"""torch.cuda's names on torch.opencl (issue 33 item 9): libraries call torch.cuda's functions on
whatever device module they are given, so torch.opencl has each public name of torch.cuda, or
lists it in oclvm._CUDA_NAMES_LEFT_OUT with the reason, which design/torch.md mirrors.

What is checked: that comparison both ways (a name a future torch adds to torch.cuda makes the
first test fail and name it); the answer of each name added: is_bf16_supported after a bfloat16
operator has run on the device, is_tf32_supported, can_device_access_peer (no pair, one device
or two), StreamContext, device_of, OutOfMemoryError from a real out-of-memory allocation,
caching_allocator_alloc / caching_allocator_delete (counted as allocated, on the stream asked
for, refused addresses and arguments), device_memory_used against mem_get_info, the nested
statistics, the deprecated aliases and their warnings, graph capture and sync debug mode; and
the NVML readings (utilization, memory_usage, temperature, power_draw, clock_rate,
list_gpu_processes) refused with a NotImplementedError that says why.

transformers (is_torch_bf16_gpu_available) and accelerate (is_bf16_available) ask torch.cuda and
a fixed list of other device modules, never the current accelerator's, so no library path reaches
torch.opencl.is_bf16_supported yet (checked with transformers 5.23 and accelerate 1.15).
"""
import fnmatch
import pathlib
import re
import types

import pytest
import torch

import oclvm

DEV = "opencl"
_REPO = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("nothing_leaks", "device_zero_and_default_streams")


def _public_cuda_names() -> set:
    """torch.cuda's public names: its __all__, its submodules and its exception classes (not in
    its __all__: OutOfMemoryError, AcceleratorError); not what it imports (os, typing's names)."""
    names = set(torch.cuda.__all__)
    for name in dir(torch.cuda):
        if name.startswith("_"):
            continue
        value = getattr(torch.cuda, name)
        if isinstance(value, types.ModuleType) and value.__name__.startswith("torch.cuda."):
            names.add(name)
        elif isinstance(value, type) and issubclass(value, BaseException):
            names.add(name)
    return names


def test_every_public_cuda_name_is_on_opencl_or_left_out_with_a_reason():
    unaccounted = sorted(name for name in _public_cuda_names()
                         if not hasattr(torch.opencl, name)
                         and name not in oclvm._CUDA_NAMES_LEFT_OUT)
    assert not unaccounted, ("torch.cuda names neither on torch.opencl nor in "
                             f"oclvm._CUDA_NAMES_LEFT_OUT (and design/torch.md): {unaccounted}")


def test_left_out_names_are_cuda_names_that_opencl_has_not():
    left_out = oclvm._CUDA_NAMES_LEFT_OUT
    assert sorted(set(left_out) - _public_cuda_names()) == []  # gone from torch.cuda: drop them
    assert sorted(name for name in left_out if hasattr(torch.opencl, name)) == []
    assert all(isinstance(reason, str) and reason.strip() for reason in left_out.values())


def test_design_note_lists_every_left_out_name():
    text = (_REPO / "design" / "torch.md").read_text()
    section = text.split("## torch.cuda's names on torch.opencl", 1)[1].split("\n#", 1)[0]
    listed = re.findall(r"`([^`]+)`", section)
    unlisted = sorted(name for name in oclvm._CUDA_NAMES_LEFT_OUT
                      if not any(fnmatch.fnmatchcase(name, pattern) for pattern in listed))
    assert unlisted == []


def test_every_name_of_all_exists():
    assert sorted(name for name in oclvm.__all__ if not hasattr(oclvm, name)) == []


def test_bf16_is_supported_by_running_it_and_only_through_float32():
    assert torch.opencl.is_bf16_supported() is True
    assert torch.opencl.is_bf16_supported(including_emulation=True) is True
    assert torch.opencl.is_bf16_supported(including_emulation=False) is False
    assert torch.opencl.is_tf32_supported() is False
    x = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16, device=DEV)
    assert torch.equal((x * x).cpu(), torch.tensor([2.25, 4.0, 10.5625], dtype=torch.bfloat16))
    assert torch.opencl.has_half is True and torch.opencl.has_magma is False


def test_no_device_accesses_a_peer():
    assert torch.opencl.can_device_access_peer(0, 0) is False
    assert torch.opencl.can_device_access_peer("opencl:0", torch.device(DEV, 0)) is False
    count = torch.opencl.device_count()
    with pytest.raises(IndexError, match=rf"Expected an opencl device index in \[0, {count}\)"):
        torch.opencl.can_device_access_peer(0, count)
    with pytest.raises(ValueError, match="Expected an opencl device, but got cpu"):
        torch.opencl.can_device_access_peer("cpu", 0)


@pytest.mark.two_devices
def test_two_devices_are_not_peers():
    assert torch.opencl.can_device_access_peer(0, 1) is False
    assert torch.opencl.can_device_access_peer(1, 0) is False
    # What peer access would allow: an operator of one device reading the other's tensor.
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(2, device="opencl:0") + torch.ones(2, device="opencl:1")


def test_stream_context_is_what_stream_returns():
    s = torch.opencl.Stream()
    context = torch.opencl.stream(s)
    assert isinstance(context, torch.opencl.StreamContext)
    with context as entered:
        assert entered is s
        assert torch.opencl.current_stream() == s
    assert torch.opencl.current_stream() == torch.opencl.default_stream()
    with torch.opencl.StreamContext(None) as entered:
        assert entered is None
        assert torch.opencl.current_stream() == torch.opencl.default_stream()


def test_device_of_a_tensor_and_of_a_cpu_tensor():
    x = torch.ones(2, device=DEV)
    with torch.opencl.device_of(x):
        assert torch.opencl.current_device() == 0
    with torch.opencl.device_of(x.untyped_storage()):
        assert torch.opencl.current_device() == 0
    with torch.opencl.device_of(torch.ones(2)):
        assert torch.opencl.current_device() == 0


@pytest.mark.two_devices
def test_device_of_switches_and_restores():
    x = torch.ones(2, device="opencl:1")
    with torch.opencl.device_of(x):
        assert torch.opencl.current_device() == 1
        assert torch.ones(1, device=DEV).device == torch.device(DEV, 1)
    assert torch.opencl.current_device() == 0


def test_out_of_memory_error_is_what_the_device_raises():
    assert torch.opencl.OutOfMemoryError is torch.OutOfMemoryError
    too_big = torch.opencl.get_device_properties().max_allocation + 1
    with pytest.raises(torch.opencl.OutOfMemoryError, match="^OpenCL out of memory. "):
        torch.empty(too_big, dtype=torch.uint8, device=DEV)


def test_caching_allocator_alloc_and_delete():
    before = torch.opencl.memory_allocated()
    address = torch.opencl.caching_allocator_alloc(1000)
    assert address != 0
    assert oclvm._C.device_of_address(address) == 0
    assert torch.opencl.memory_allocated() >= before + 1000
    other = torch.opencl.memory.caching_allocator_alloc(24, device="opencl:0")
    assert other not in (0, address)
    torch.opencl.caching_allocator_delete(address)
    torch.opencl.memory.caching_allocator_delete(other)
    assert torch.opencl.memory_allocated() == before
    with pytest.raises(ValueError, match="Expected an address that caching_allocator_alloc "
                                         "returned and that was not deleted yet, but got 0x"):
        torch.opencl.caching_allocator_delete(address)
    assert torch.opencl.caching_allocator_alloc(0) == 0
    torch.opencl.caching_allocator_delete(0)
    assert torch.opencl.memory_allocated() == before


def test_caching_allocator_alloc_on_a_stream():
    s = torch.opencl.Stream()
    address = torch.opencl.caching_allocator_alloc(512, stream=s)
    assert torch.opencl.current_stream() == torch.opencl.default_stream()  # restored
    torch.opencl.caching_allocator_delete(address)


def test_caching_allocator_refuses_bad_arguments():
    before = torch.opencl.memory_allocated()
    with pytest.raises(ValueError, match="Expected a size >= 0 in bytes, but got -1"):
        torch.opencl.caching_allocator_alloc(-1)
    with pytest.raises(TypeError):
        torch.opencl.caching_allocator_alloc(1.5)
    with pytest.raises(TypeError, match="Expected a torch.opencl.Stream or None, but got int"):
        torch.opencl.caching_allocator_alloc(8, stream=12345)
    with pytest.raises(IndexError, match="Expected an opencl device index"):
        torch.opencl.caching_allocator_alloc(8, device=torch.opencl.device_count())
    with pytest.raises(TypeError):
        torch.opencl.caching_allocator_delete("0x10")
    assert torch.opencl.memory_allocated() == before


@pytest.mark.two_devices
def test_caching_allocator_refuses_a_stream_of_another_device():
    with pytest.raises(ValueError, match="Expected a stream of opencl:0 .* got one of opencl:1"):
        torch.opencl.caching_allocator_alloc(8, device=0, stream=torch.opencl.Stream(1))
    address = torch.opencl.caching_allocator_alloc(8, stream=torch.opencl.Stream(1))
    assert oclvm._C.device_of_address(address) == 1
    torch.opencl.caching_allocator_delete(address)


def test_device_memory_used_is_what_mem_get_info_does_not_count_free():
    x = torch.ones(4096, device=DEV)
    free, total = torch.opencl.mem_get_info()
    assert torch.opencl.device_memory_used() == total - free
    assert torch.opencl.device_memory_used(0) == torch.opencl.memory_reserved(0) > 0
    del x


@pytest.mark.parametrize("name", ["utilization", "memory_usage", "temperature", "power_draw",
                                  "clock_rate", "list_gpu_processes"])
def test_nvml_readings_are_refused_with_the_reason(name):
    reading = getattr(torch.opencl, name)
    with pytest.raises(NotImplementedError, match=r"^opencl:0 has no .*: .*NVML"):
        reading()
    with pytest.raises(RuntimeError, match="OpenCL"):  # NotImplementedError is a RuntimeError
        reading("opencl:0")
    with pytest.raises(IndexError, match="Expected an opencl device index"):
        reading(torch.opencl.device_count())


def test_nested_statistics():
    x = torch.ones(256, device=DEV)
    flat = torch.opencl.memory_stats()
    nested = torch.opencl.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"] > 0
    assert nested["num_ooms"] == flat["num_ooms"]
    host = torch.opencl.host_memory_stats_as_nested_dict()
    assert host["allocated_bytes"]["current"] == torch.opencl.host_memory_stats()[
        "allocated_bytes.current"]
    assert host["num_host_alloc"] == torch.opencl.host_memory_stats()["num_host_alloc"]
    del x


def test_deprecated_memory_names():
    x = torch.ones(256, device=DEV)
    assert torch.opencl.memory_cached() == torch.opencl.memory_reserved()
    with pytest.warns(FutureWarning, match="max_memory_reserved"):
        assert torch.opencl.max_memory_cached() == torch.opencl.max_memory_reserved()
    del x
    with pytest.warns(FutureWarning, match="resets /all/ peak memory stats"):
        torch.opencl.reset_max_memory_allocated()
    assert torch.opencl.max_memory_allocated() == torch.opencl.memory_allocated()
    with pytest.warns(FutureWarning, match="resets /all/ peak memory stats"):
        torch.opencl.reset_max_memory_cached()
    assert torch.opencl.max_memory_reserved() == torch.opencl.memory_reserved()


def test_no_graph_capture_and_one_sync_debug_mode():
    assert torch.opencl.is_current_stream_capturing() is False
    assert torch.opencl.get_sync_debug_mode() == 0
    torch.opencl.set_sync_debug_mode("default")
    torch.opencl.set_sync_debug_mode(0)
    for mode in ("warn", "error", 1, 2):
        with pytest.raises(NotImplementedError, match="does not report the operators that "
                                                      "synchronise"):
            torch.opencl.set_sync_debug_mode(mode)
    for mode in ("loud", 3, True, None):
        with pytest.raises(ValueError, match="Expected a debug mode of"):
            torch.opencl.set_sync_debug_mode(mode)
    assert torch.opencl.get_sync_debug_mode() == 0
