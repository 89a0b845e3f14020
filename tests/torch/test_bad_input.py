"""Bad input to the `opencl` PyTorch device: every call gets a clear error and changes nothing.

design/reliability.md ("Bad input") lists each case with the error it gives. Covered here: device
strings and indices that do not exist ("opencl:7", -1, "cpu" where an opencl device is expected)
for tensor creation, copies and every torch.opencl function; negative, overflowing and too large
sizes (torch.empty, empty_strided, resize_, storage resize, as_strided, view); layouts and dtypes
the backend has no kernel for (quantized, sparse) and values a dtype cannot hold; copies between
wrong devices, shapes and overlapping ranges; bad memory fractions; stream ids that name no stream,
streams and events of another device; and malformed environment variables (in a subprocess).

Each in-process case checks the exception type and the start of its message, and that the
statistics of every device, the live blocks, the memory limits, the current device and the current
streams are exactly what they were (`refused`), on top of the `nothing_leaks` fixture.
"""
import gc
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import oclvm

DEV = "opencl"
COUNT = torch.opencl.device_count()
NO_SUCH = COUNT + 6          # an index past the last device ("opencl:7" with one device)
INDEX_ERROR = f"^Expected an opencl device index in [0, {COUNT}), but got "

pytestmark = pytest.mark.usefixtures("nothing_leaks")


def device_state():
    """Everything a bad call must leave alone: the statistics of every device (all keys of
    memory_stats), the live blocks, the memory limits, the current device and current streams."""
    return {
        "stats": [torch.opencl.memory_stats(i) for i in range(COUNT)],
        "live_blocks": oclvm._C.live_blocks(),
        "limits": [oclvm._C.memory_limit(i) for i in range(COUNT)],
        "device": torch.opencl.current_device(),
        "streams": [torch.opencl.current_stream(i).stream_id for i in range(COUNT)],
    }


def refused(error, message_start, call):
    """`call()` raises `error` whose message starts with `message_start` (a literal, or a compiled
    regular expression), and device_state() is the same after as before."""
    before = device_state()
    if isinstance(message_start, re.Pattern):
        pattern = message_start
    elif message_start == "":
        pattern = None  # Python's own message (argument parsing): the type is what is checked
    elif message_start.startswith("^"):
        pattern = "^" + re.escape(message_start[1:])
    else:
        pattern = re.escape(message_start)
    with pytest.raises(error, match=pattern):
        call()
    after = device_state()
    if after != before:  # a cycle may still hold what the call made (gc.collect is slow: only then)
        gc.collect()
        after = device_state()
    assert after == before


def run_python(script: str, **env) -> subprocess.CompletedProcess:
    """Runs `script` in a fresh interpreter with `env` added to the environment."""
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full_env,
                          capture_output=True, text=True, timeout=180)


# ---------------------------------------------------------------------------------------------
# Devices that do not exist, and devices of the wrong type.

@pytest.mark.parametrize("make", [
    lambda d: torch.empty(4, device=d),
    lambda d: torch.zeros(4, device=d),
    lambda d: torch.tensor([1.0], device=d),
    lambda d: torch.randn(3, device=d),
    lambda d: torch.ones(4).to(d),
    lambda d: torch.ones(4).to(d, non_blocking=True),
    lambda d: torch.Generator(device=d),
    lambda d: torch.Stream(device=d),
], ids=["empty", "zeros", "tensor", "randn", "to", "to_non_blocking", "generator", "stream"])
def test_missing_device_index(make):
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}", lambda: make(f"{DEV}:{NO_SUCH}"))
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}", lambda: make(torch.device(DEV, NO_SUCH)))


def test_copy_to_or_from_a_missing_device():
    x = torch.ones(4, device=DEV)
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}", lambda: x.to(f"{DEV}:{NO_SUCH}"))
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}", lambda: torch.ones(3).opencl(NO_SUCH))
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}",
            lambda: x.copy_(torch.ones(4, device=f"{DEV}:{NO_SUCH}")))
    assert x.cpu().tolist() == [1.0] * 4


@pytest.mark.parametrize("text", ["opencl:-1", "opencl:x", "opencl:1:2", "opencl0"])
def test_malformed_device_strings(text):
    refused(RuntimeError, re.compile("Invalid device string|Expected one of .* device type"),
            lambda: torch.empty(4, device=text))


@pytest.mark.parametrize("call", [
    torch.opencl.set_device, torch.opencl.memory_stats, torch.opencl.memory_allocated,
    torch.opencl.max_memory_allocated, torch.opencl.memory_reserved,
    torch.opencl.max_memory_reserved, torch.opencl.reset_peak_memory_stats,
    torch.opencl.reset_accumulated_memory_stats, torch.opencl.mem_get_info,
    torch.opencl.memory_summary, torch.opencl.synchronize, torch.opencl.Stream,
    torch.opencl.current_stream, torch.opencl.default_stream,
    torch.opencl.get_per_process_memory_fraction,
    lambda d: torch.opencl.device(d).__enter__(),
    lambda d: torch.opencl.set_per_process_memory_fraction(0.5, d),
], ids=lambda f: getattr(f, "__name__", "lambda"))
def test_device_module_functions_refuse_missing_and_non_opencl_devices(call):
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}", lambda: call(NO_SUCH))
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}", lambda: call(f"{DEV}:{NO_SUCH}"))
    refused(ValueError, "Expected an opencl device, but got cpu", lambda: call("cpu"))
    refused(TypeError, "", lambda: call(1.5))


def test_negative_index_is_refused_by_set_device_and_means_current_for_statistics():
    refused(IndexError, f"{INDEX_ERROR}-1", lambda: torch.opencl.set_device(-1))
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}",
            lambda: torch.accelerator.set_device_index(NO_SUCH))
    # torch.accelerator's convention (as torch.cuda's): a negative index is the current device.
    assert torch.opencl.memory_stats(-1) == torch.opencl.memory_stats()


def test_native_module_refuses_missing_devices_and_bad_numbers():
    for call in (oclvm._C.set_device, oclvm._C.memory_limit, oclvm._C.global_memory):
        refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}", lambda: call(NO_SUCH))
        refused(IndexError, f"{INDEX_ERROR}-1", lambda: call(-1))
        refused(TypeError, "", lambda: call("0"))
        refused(OverflowError, "", lambda: call(1 << 70))
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}", lambda: oclvm._C.set_memory_limit(NO_SUCH, 1))
    refused(RuntimeError, "Expected an address of opencl memory, but got ",
            lambda: oclvm._C.device_of_address(0))
    refused(OverflowError, "", lambda: oclvm._C.device_of_address(-1))


# ---------------------------------------------------------------------------------------------
# Sizes.

def test_negative_and_overflowing_sizes():
    refused(RuntimeError, "Trying to create tensor with negative dimension -1",
            lambda: torch.empty(-1, device=DEV))
    refused(RuntimeError, "Trying to create tensor with negative dimension -5",
            lambda: torch.ones(-5, device=DEV))
    refused(RuntimeError, "Storage size calculation overflowed",
            lambda: torch.empty(1 << 62, 1 << 62, device=DEV))
    refused(RuntimeError, "Storage size calculation overflowed",
            lambda: torch.empty_strided((4,), (-1,), device=DEV))
    refused(RuntimeError, "Storage size calculation overflowed",
            lambda: torch.empty_strided((1 << 40,), (1 << 40,), device=DEV))


@pytest.mark.parametrize("nbytes", [1 << 40, 1 << 62])
def test_more_than_the_largest_allocation_is_out_of_memory_and_counts_nothing(nbytes):
    # As on CUDA, out of memory; refused before the allocator, so num_ooms does not move either.
    refused(torch.OutOfMemoryError,
            f"OpenCL out of memory. opencl:0: tried to allocate {nbytes} bytes, more than the device's "
            "largest single allocation (",
            lambda: torch.empty(nbytes, dtype=torch.uint8, device=DEV))
    refused(torch.OutOfMemoryError,
            f"OpenCL out of memory. opencl:0: tried to allocate {nbytes} bytes",
            lambda: torch.full((nbytes,), 1, dtype=torch.uint8, device=DEV))


def test_bad_resizes_and_views():
    x = torch.arange(4.0, device=DEV)
    refused(RuntimeError, "Expected non-negative sizes for resize_, but got [-1]",
            lambda: x.resize_(-1))
    refused(RuntimeError, "Expected a memory format other than preserve_format for resize_",
            lambda: x.resize_(4, memory_format=torch.preserve_format))
    refused(RuntimeError, "shape '[5]' is invalid for input of size 4", lambda: x.view(5))
    refused(RuntimeError, "setStorage: sizes [100], strides [1], storage offset 0, and itemsize 4 "
            "requiring a storage size of 400 are out of bounds for storage of size 16",
            lambda: x.as_strided((100,), (1,)))
    refused(RuntimeError, "Tensor: invalid storage offset -1", lambda: x.as_strided((1,), (1,), -1))
    refused(RuntimeError, "as_strided: Negative strides are not supported",
            lambda: x.as_strided((2,), (-1,)))
    refused(RuntimeError, "maximum size for tensor at dimension 0 is 4 but size is 5",
            lambda: x.unfold(0, 5, 1))
    refused(RuntimeError, "step is 0 but must be > 0", lambda: x.unfold(0, 2, 0))
    refused(RuntimeError, "a Tensor with 4 elements cannot be converted to Scalar", x.item)
    refused(RuntimeError, "a Tensor with 0 elements cannot be converted to Scalar",
            torch.empty(0, device=DEV).item)
    storage = x.untyped_storage()
    refused(torch.OutOfMemoryError, "OpenCL out of memory. opencl:0: tried to allocate "
            "4611686018427387904 bytes", lambda: storage.resize_(1 << 62))
    assert storage.nbytes() == 16
    assert x.shape == (4,) and x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("size, error", [(1 << 40, torch.OutOfMemoryError),
                                         (1 << 62, RuntimeError)])
def test_failed_resize_leaves_the_tensor_as_it_was(size, error):
    x = torch.arange(4.0, device=DEV)
    with pytest.raises(error):
        x.resize_(size)
    assert x.shape == (4,)


# ---------------------------------------------------------------------------------------------
# Layouts and dtypes.

def test_layouts_without_kernels():
    refused(NotImplementedError, "Could not run 'aten::_empty_affine_quantized' with arguments "
            "from the 'Quantizedopencl' backend",
            lambda: torch._empty_affine_quantized([4], scale=1.0, zero_point=0, dtype=torch.qint8,
                                                  device=DEV))


def test_sparse_tensors_with_bad_indices_are_refused_and_hold_nothing():
    """Sparse layouts work on the device (tests/torch/test_sparse.py); bad indices are refused
    with the CPU's message. torch's constructor moves indices and values to the device before it
    checks them (as on CUDA), so the accumulated allocation counters move; nothing stays held."""
    def held():
        gc.collect()
        return (oclvm._C.live_blocks(), torch.opencl.memory_allocated(),
                torch.opencl.memory_reserved(), oclvm._C.memory_limit(0))
    cases = [
        ("found negative index -1 for dim 0",
         lambda: torch.sparse_coo_tensor(torch.tensor([[-1]]), torch.ones(1), (3,), device=DEV,
                                         check_invariants=True)),
        ("size is inconsistent with indices: for dim 0, size is 3 but found index 5",
         lambda: torch.sparse_coo_tensor(torch.tensor([[5]]), torch.ones(1), (3,), device=DEV,
                                         check_invariants=True)),
        ("indices and values must have same nnz",
         lambda: torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.ones(3), (3,), device=DEV)),
    ]
    for message, call in cases:
        before = held()
        with pytest.raises(RuntimeError, match=re.escape(message)):
            call()
        assert held() == before, message


@pytest.mark.parametrize("make, message", [
    (lambda: torch.empty((2, 3), device=DEV, memory_format=torch.channels_last),
     "required rank 4 tensor to use channels_last format"),
    (lambda: torch.empty(4, device=DEV, memory_format=torch.preserve_format),
     "unsupported memory format Preserve"),
], ids=["channels_last_2d", "preserve_format"])
def test_bad_memory_format_is_refused_and_holds_nothing(make, message):
    gc.collect()
    live = (oclvm._C.live_blocks(), torch.opencl.memory_allocated(), torch.opencl.memory_reserved())
    with pytest.raises(RuntimeError, match=re.escape(message)):
        make()
    gc.collect()
    assert (oclvm._C.live_blocks(), torch.opencl.memory_allocated(),
            torch.opencl.memory_reserved()) == live


@pytest.mark.parametrize("memory_format, shape", [(torch.channels_last, (2, 3)),
                                                  (torch.preserve_format, (4,))],
                         ids=["channels_last_2d", "preserve_format"])
def test_bad_memory_format_changes_no_statistic(memory_format, shape):
    refused(RuntimeError, "", lambda: torch.empty(shape, device=DEV, memory_format=memory_format))


def test_values_and_views_a_dtype_cannot_hold():
    x = torch.zeros(4, dtype=torch.uint8, device=DEV)
    i = torch.zeros(4, dtype=torch.int32, device=DEV)
    b = torch.zeros(3, dtype=torch.uint8, device=DEV)
    f = torch.zeros(3, device=DEV)
    refused(RuntimeError, "value cannot be converted to type uint8_t without overflow",
            lambda: x.fill_(1000))
    refused(RuntimeError, "value cannot be converted to type int without overflow",
            lambda: i.fill_(float("nan")))
    refused(RuntimeError, "fill_ only supports 0-dimension value tensor",
            lambda: x.fill_(torch.ones(2)))
    refused(TypeError, "fill_() received an invalid combination of arguments",
            lambda: x.fill_("a"))
    refused(RuntimeError, "self.size(-1) must be divisible by 4 to view Byte as Float",
            lambda: b.view(torch.float32))
    refused(RuntimeError, "Tensor must have a last dimension of size 2",
            lambda: torch.view_as_complex(f))
    refused(RuntimeError, "view_as_real is only supported for complex tensors",
            lambda: torch.view_as_real(f))
    assert x.cpu().tolist() == [0, 0, 0, 0] and i.cpu().tolist() == [0, 0, 0, 0]


# ---------------------------------------------------------------------------------------------
# Copies between wrong devices, shapes and ranges.

def test_copies_between_wrong_devices_and_shapes():
    x = torch.arange(4.0, device=DEV)
    refused(RuntimeError, "Expected all tensors to be on the same device, but found at least two "
            "devices, opencl:0 and cpu!", lambda: x + torch.ones(4))
    refused(RuntimeError, "The size of tensor a (4) must match the size of tensor b (5)",
            lambda: x.copy_(torch.ones(5)))
    refused(RuntimeError, "The size of tensor a (3) must match the size of tensor b (4)",
            lambda: torch.empty(3).copy_(x))
    refused(NotImplementedError, "Cannot copy out of meta tensor; no data!",
            lambda: x.copy_(torch.empty(4, device="meta")))
    refused(RuntimeError, "size does not match, self was 16 bytes but src was 8 bytes",
            lambda: x.untyped_storage().copy_(torch.ones(2).untyped_storage()))
    refused(RuntimeError, 'Attempted to set the storage of a tensor on device "opencl:0" to a '
            'storage on different device "cpu"',
            lambda: torch.empty(0, device=DEV).set_(torch.ones(4).untyped_storage()))
    refused(RuntimeError, 'Attempted to set the storage of a tensor on device "cpu" to a storage '
            'on different device "opencl:0"', lambda: torch.empty(0).set_(x.untyped_storage()))
    refused(TypeError, "can't convert opencl:0 device type tensor to numpy", x.numpy)
    # Overlapping ranges of one storage: in a host section ATen's CPU copy refuses it as on the
    # CPU (the two operands share one host storage); otherwise oclvm's builder refuses the copy.
    if torch.opencl.get_device_properties(0).host_sections:
        refused(RuntimeError, "some elements of the input tensor and the written-to tensor refer "
                "to a single memory location", lambda: x[1:].copy_(x[:-1]))
        refused(RuntimeError, "some elements of the input tensor and the written-to tensor refer "
                "to a single memory location", lambda: x[1:].add_(x[:-1]))
    else:
        refused(ValueError, "Expected non-overlapping ranges for a copy within one blob, but got "
                "[0, 0 + 12) -> [4, 4 + 12) of u8[16] on opencl:0", lambda: x[1:].copy_(x[:-1]))
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("args", ["0, (100,), (1,)", "0, (4,), (2,)", "3, (4,), (1,)"])
def test_set_past_the_storage_does_not_crash(args):
    out = run_python(f"""
        import torch
        x = torch.ones(4, device="opencl")
        try:
            y = torch.empty(0, device="opencl").set_(x.untyped_storage(), {args})
            print("GREW", x.untyped_storage().nbytes())
        except RuntimeError as e:
            print("REFUSED", e)
    """)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.startswith("GREW 28") or out.stdout.startswith("GREW 400"), out.stdout


@pytest.mark.parametrize("kernels", ["host", "native"])
def test_batch_norm_without_its_statistics_is_refused(kernels):
    """native_batch_norm and its backward called directly without the statistics their mode reads,
    or with vectors of another length than the channels: torch 2.13's CPU kernel crashes or reads
    past them; on the device both paths refuse (in a subprocess, since a crash is the failure)."""
    out = run_python("""
        import torch, oclvm
        x = torch.randn(10, 8, device="opencl")
        ones, empty = torch.ones(8, device="opencl"), torch.ones(0, device="opencl")
        aten = torch.ops.aten
        calls = [
            lambda: aten.native_batch_norm(x, None, None, None, None, False, 0.1, 1e-5),
            lambda: aten.native_batch_norm(x, ones, None, ones, empty, True, 0.1, 1e-5),
            lambda: aten.native_batch_norm(x, ones[:3], None, None, None, True, 0.1, 1e-5),
            lambda: aten.native_batch_norm_backward(x, x, None, None, None, None, None, False,
                                                    1e-5, [True, True, True]),
            lambda: aten.native_batch_norm_backward(x, x, None, None, None, None, None, True,
                                                    1e-5, [True, True, True]),
        ]
        for call in calls:
            try:
                call()
                print("RAN")
            except RuntimeError as e:
                print("REFUSED", str(e).splitlines()[0])
    """, OCLVM_KERNELS=kernels)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.splitlines() == [
        "REFUSED running_mean must be defined in evaluation mode",
        "REFUSED running_var should contain 8 elements not 0",
        "REFUSED weight should contain 8 elements not 3",
        "REFUSED running_mean must be defined in evaluation mode",
        "REFUSED save_mean must be defined in training mode",
    ], out.stdout


# ---------------------------------------------------------------------------------------------
# set_per_process_memory_fraction.

@pytest.mark.parametrize("bad, error, message", [
    (-0.1, ValueError, "Expected a fraction in [0, 1], but got -0.1"),
    (1.5, ValueError, "Expected a fraction in [0, 1], but got 1.5"),
    (float("nan"), ValueError, "Expected a fraction in [0, 1], but got nan"),
    (float("inf"), ValueError, "Expected a fraction in [0, 1], but got inf"),
    (-float("inf"), ValueError, "Expected a fraction in [0, 1], but got -inf"),
    (None, TypeError, "Expected a float fraction, but got NoneType"),
    ("0.5", TypeError, "Expected a float fraction, but got str"),
    (True, TypeError, "Expected a float fraction, but got bool"),
    (torch.tensor(0.5), TypeError, "Expected a float fraction, but got Tensor"),
])
def test_bad_memory_fractions_change_nothing(bad, error, message):
    refused(error, message, lambda: torch.opencl.set_per_process_memory_fraction(bad))
    assert torch.opencl.get_per_process_memory_fraction() == 1.0


# ---------------------------------------------------------------------------------------------
# Streams and events.

def _stream(stream_id, device_index=0):
    device_type = torch.opencl.current_stream().device_type
    return torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


@pytest.mark.parametrize("stream_id", [123456, -5, 1 << 40])
def test_stream_ids_that_name_no_stream(stream_id):
    bogus = _stream(stream_id)
    names_none = f"Expected a stream of opencl:0, but got stream id {stream_id}, which names none"
    x = torch.ones(4, device=DEV)
    event = torch.opencl.Event()
    refused(RuntimeError, names_none, lambda: torch.accelerator.set_stream(bogus))
    refused(RuntimeError, names_none, lambda: torch.opencl.stream(bogus).__enter__())
    refused(RuntimeError, names_none, bogus.synchronize)
    refused(RuntimeError, names_none, bogus.query)
    refused(RuntimeError, names_none, lambda: torch.opencl.current_stream().wait_stream(bogus))
    refused(RuntimeError, names_none, lambda: x.record_stream(bogus))
    refused(RuntimeError, names_none, lambda: event.record(bogus))
    assert event.query()  # still never recorded: query() is True, as CUDA's


def test_streams_of_the_wrong_device_type_or_index():
    x = torch.ones(4, device=DEV)
    cpu_stream = torch.Stream(device="cpu")
    refused(IndexError, f"{INDEX_ERROR}{NO_SUCH}",
            lambda: torch.accelerator.set_stream(_stream(0, NO_SUCH)))
    refused(RuntimeError, "stream's device type CPU doesn't match the current accelerator OPENCL",
            lambda: torch.opencl.set_stream(cpu_stream))
    refused(TypeError, "_accelerator_setStream(): incompatible function arguments",
            lambda: torch.opencl.set_stream(None))
    refused(RuntimeError, "Expected a stream of an opencl device, but got one of cpu",
            lambda: x.record_stream(cpu_stream))
    refused(RuntimeError, "Event device type OPENCL does not match recording stream's device "
            "type CPU", lambda: torch.opencl.Event().record(cpu_stream))
    refused(ValueError, "Expected interprocess=False: opencl events cannot be shared between "
            "processes", lambda: torch.opencl.Event(interprocess=True))
    refused(ValueError, "Both events must be recorded before calculating elapsed time",
            lambda: torch.opencl.Event(enable_timing=True).elapsed_time(
                torch.opencl.Event(enable_timing=True)))
    refused(NotImplementedError, "Could not run 'aten::record_stream' with arguments from the "
            "'CPU' backend", lambda: torch.ones(3).record_stream(torch.opencl.Stream()))


@pytest.mark.two_devices
def test_streams_and_events_of_another_opencl_device():
    x0 = torch.ones(4, device=f"{DEV}:0")
    x1 = torch.ones(4, device=f"{DEV}:1")
    s0 = torch.opencl.Stream(device=0)
    s1 = torch.opencl.Stream(device=1)
    refused(ValueError, "Expected a stream on opencl:0 (the blob's device), but got opencl:1/user",
            lambda: x0.record_stream(s1))
    # s1's id names a stream of opencl:1: on opencl:0 it names none.
    refused(RuntimeError, f"Expected a stream of opencl:0, but got stream id {s1.stream_id}, which "
            "names none", lambda: torch.accelerator.set_stream(_stream(s1.stream_id, 0)))
    event = torch.opencl.Event()
    event.record(s0)
    refused(RuntimeError, "Expected an event of opencl:1, but got one of opencl:0",
            lambda: event.record(s1))
    refused(RuntimeError, "Expected all tensors to be on the same device, but found at least two "
            "devices, opencl:0 and opencl:1!", lambda: x0 + x1)


# ---------------------------------------------------------------------------------------------
# The environment (read once per process, so each case runs in a fresh interpreter).

_CREATE = """
    import torch
    try:
        torch.ones(3, device="opencl")
        print("CREATED")
    except Exception as e:
        print("ERROR", type(e).__name__, e)
"""


def test_unknown_allocator_in_the_environment():
    out = run_python(_CREATE, OCLVM_ALLOCATOR="bfc")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        "ERROR ValueError Expected the allocator (Options::allocator, OCLVM_ALLOCATOR) to be one "
        "of caching, buddy, system, but got 'bfc'"), out.stdout + out.stderr


# A malformed variable leaves torch with no opencl device; the first use says why (the reason is
# kept since 9280d28: before, the message was only "... in [0, 0), but got 0").
@pytest.mark.parametrize("variable, value, reason", [
    ("OCLVM_MEMORY_LIMIT", "12Q", "Expected OCLVM_MEMORY_LIMIT to be a byte count such as "
                                  "1048576, 512K, 64M or 2G, but got '12Q' (unknown suffix)"),
    ("OCLVM_MEMORY_LIMIT", "", "Expected OCLVM_MEMORY_LIMIT to be a byte count such as 1048576, "
                               "512K, 64M or 2G, but got '' (no digits)"),
    ("OCLVM_PLATFORM", "no_such_platform", "Expected OCLVM_PLATFORM='no_such_platform' to match "
                                           "an OpenCL platform with devices"),
    ("OCLVM_FAULTS", "copy:often", "Expected nth=N, every=N or p=X after the fault point in "
                                   "OCLVM_FAULTS, but got \"copy:often\""),
    ("PYTORCH_ALLOC_CONF", "max_split_mb:64",
     "Expected PYTORCH_ALLOC_CONF to be key:value pairs separated by commas, with the keys "
     "max_split_size_mb, roundup_power2_divisions and garbage_collection_threshold, but got "
     "'max_split_mb:64' in 'max_split_mb:64' (unknown key 'max_split_mb')"),
    ("OCLVM_LAUNCH_BLOCKING", "yes", "Expected OCLVM_LAUNCH_BLOCKING to be '1' or '0', but got "
                                     "'yes'"),
], ids=["memory_limit", "empty_memory_limit", "platform", "faults", "alloc_conf",
        "launch_blocking"])
def test_malformed_environment_is_named_in_the_error(variable, value, reason):
    out = run_python(_CREATE, **{variable: value})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERROR IndexError Expected an opencl device index in [0, 0), but "
                                 "got 0 (no opencl device: " + reason), out.stdout + out.stderr


# PoCL with POCL_DEVICES set to nothing exposes no device: the first use says what was found and
# what to change (issue 33: the message was only "Expected an opencl device index in [0, 0), but
# got 0").
def test_no_device_says_what_was_found_and_what_to_change():
    out = run_python(_CREATE, POCL_DEVICES="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        "ERROR IndexError Expected an opencl device index in [0, 0), but got 0 (no opencl device: "
        "no OpenCL platform has a device (platforms: 'Portable Computing Language' with 0 "
        "devices; environment: POCL_DEVICES=''); PoCL exposes the drivers POCL_DEVICES names: "
        "unset it, or set it to 'basic', 'pthread' or 'basic basic'"), out.stdout + out.stderr


def test_private_memory_limit_refuses_negative_bytes():
    before = oclvm._C.memory_limit(0)
    for bad in (-1, 1 << 64):
        with pytest.raises(OverflowError):
            oclvm._C.set_memory_limit(0, bad)
    assert oclvm._C.memory_limit(0) == before
