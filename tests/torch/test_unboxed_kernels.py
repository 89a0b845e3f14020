"""The unboxed host kernels of adapters/torch/host_kernels.cc (Note [Unboxed host kernels], Note
[Foreach operators without boxing]): hot operators, their backward operators, in-place arithmetic
and the optimizers' _foreach_ operators run the CPU's kernels on the device's memory without the
boxed fallback, and the SGD steps run the device's own loops. Each is compared with the CPU
(bit for bit where the kernels are the same), counted through oclvm._C.host_kernel_calls() so
that a test fails when its operator falls back, and checked to leave what it cannot take to the
fallback, to change nothing when it raises, and to hold nothing afterwards.
"""
import gc

import pytest
import torch

import oclvm
from direct_path_util import DEVICE, needs_host_sections, pair

pytestmark = pytest.mark.usefixtures("nothing_leaks")


# ---------------------------------------------------------------------------------------------
# Unboxed host kernels (host_kernels.cc, Note [Unboxed host kernels]).

def _unboxed_calls():
    return oclvm._C.host_kernel_calls()


@needs_host_sections
def test_hot_operators_take_the_unboxed_kernels_and_equal_the_cpu_exactly():
    x, xd = pair(64, 32)
    y, yd = pair(64, 33)
    y, yd = y[:, :32], yd[:, :32]  # a view: strided, its span compact
    w, wd = pair(16, 32)
    bias, bias_d = pair(16)
    batch, batch_d = pair(3, 8, 8)
    functional = torch.nn.functional
    cases = {
        "add": lambda x, y, w, b, m: x + y,
        "sub with alpha": lambda x, y, w, b, m: torch.sub(x, y, alpha=2),
        "mul by a cpu scalar tensor": lambda x, y, w, b, m: x * torch.tensor(1.5),
        "div": lambda x, y, w, b, m: x / (y.abs() + 1),
        "mm": lambda x, y, w, b, m: x @ w.t(),
        "addmm": lambda x, y, w, b, m: torch.addmm(b, x, w.t()),
        "bmm": lambda x, y, w, b, m: torch.bmm(m, m),
        "relu": lambda x, y, w, b, m: torch.relu(x),
        "gelu tanh": lambda x, y, w, b, m: functional.gelu(x, approximate="tanh"),
        "tanh": lambda x, y, w, b, m: torch.tanh(x),
        "sigmoid": lambda x, y, w, b, m: torch.sigmoid(x),
        "log_softmax": lambda x, y, w, b, m: torch.log_softmax(x, dim=1),
        "softmax": lambda x, y, w, b, m: torch.softmax(x, dim=0),
        "sum over a dim": lambda x, y, w, b, m: x.sum(dim=1, keepdim=True),
        "sum to a dtype": lambda x, y, w, b, m: x.sum(dim=0, dtype=torch.float64),
    }
    for name, case in cases.items():
        expected = case(x, y, w, bias, batch)
        before = _unboxed_calls()
        got = case(xd, yd, wd, bias_d, batch_d)
        assert _unboxed_calls() - before >= 1, name
        assert got.device.type == DEVICE and got.dtype == expected.dtype, name
        assert got.shape == expected.shape and got.stride() == expected.stride(), name
        assert torch.equal(got.cpu(), expected), name


@needs_host_sections
def test_backward_operators_take_the_unboxed_kernels_and_equal_the_cpu():
    x, xd = pair(32, 16)
    grads = {}
    for device, t in (("cpu", x), (DEVICE, xd)):
        leaf = t.clone().requires_grad_(True)
        before = _unboxed_calls()
        loss = (torch.relu(leaf) + torch.tanh(leaf) + torch.sigmoid(leaf)).log_softmax(dim=1).sum()
        loss.backward()
        grads[device] = (leaf.grad.cpu(), _unboxed_calls() - before)
    assert torch.equal(grads[DEVICE][0], grads["cpu"][0])
    # relu, tanh, sigmoid, 2 adds, log_softmax, sum and the backward of each activation.
    assert grads[DEVICE][1] >= 10


@needs_host_sections
def test_unboxed_kernels_leave_what_they_cannot_take_to_the_fallback():
    x, xd = pair(64, 64)
    before = _unboxed_calls()
    sparse_columns = xd[:, ::16]  # a view whose span is 16 times its elements: not aliased
    assert torch.equal((sparse_columns + 1).cpu(), x[:, ::16] + 1)
    empty = torch.empty(0, 3, device=DEVICE)
    assert (empty + empty).shape == (0, 3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        xd + torch.ones(64, 64)
    with pytest.raises(RuntimeError):
        torch.mm(xd, torch.ones(3, 3, device=DEVICE))  # a shape error: nothing leaked
    assert _unboxed_calls() - before <= 1  # only the shape error got as far as the CPU kernel


def test_operators_that_check_every_device_refuse_a_cpu_scalar():
    """nll_loss checks every tensor's device (CUDA's kernel refuses a 0-dim CPU target); the
    unboxed kernels take 0-dim CPU tensors only for TensorIterator's operators, which do."""
    log_probs = torch.randn(3).log_softmax(0)
    on_device = log_probs.to(DEVICE)
    for call in (lambda: torch.nn.functional.nll_loss(on_device, torch.tensor(1)),
                 lambda: torch.ops.aten.native_dropout_backward(on_device, torch.tensor(True),
                                                                2.0)):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            call()
    got = torch.nn.functional.nll_loss(on_device, torch.tensor(1).to(DEVICE))
    assert torch.equal(got.cpu(), torch.nn.functional.nll_loss(log_probs, torch.tensor(1)))
    assert torch.equal((on_device * torch.tensor(2.0)).cpu(), log_probs * 2)  # a TensorIterator op


@needs_host_sections
def test_unboxed_kernels_with_optional_tensors_and_several_results_equal_the_cpu():
    """nll_loss (an optional weight, two results) and native_layer_norm (optional weight and
    bias, three results; its backward with an output mask) through the unboxed kernels."""
    x, xd = pair(16, 10)
    target = torch.randint(0, 10, (16,))
    class_weight, class_weight_d = pair(10)
    norm_weight, norm_weight_d = pair(10)
    results = {}
    for device, (inp, cw, nw) in (("cpu", (x, class_weight, norm_weight)),
                                  (DEVICE, (xd, class_weight_d, norm_weight_d))):
        leaf = inp.clone().requires_grad_(True)
        weight = nw.clone().requires_grad_(True)
        before = _unboxed_calls()
        normed = torch.nn.functional.layer_norm(leaf, (10,), weight=weight)
        plain = torch.nn.functional.layer_norm(leaf, (10,))  # no weight, no bias: None arguments
        loss = (torch.nn.functional.cross_entropy(normed, target.to(device), weight=cw)
                + torch.nn.functional.cross_entropy(plain, target.to(device)))
        loss.backward()
        results[device] = (loss.detach().cpu(), leaf.grad.cpu(), weight.grad.cpu(),
                           _unboxed_calls() - before)
    for got, expected in zip(results[DEVICE][:3], results["cpu"][:3]):
        assert torch.equal(got, expected)
    # Two layer norms, two nll_loss forwards and backwards, two layer-norm backwards at least.
    assert results[DEVICE][3] >= 8


@needs_host_sections
def test_in_place_arithmetic_takes_the_unboxed_kernels_and_equals_the_cpu():
    """add_, sub_, mul_ and div_ of a tensor or a Python number (Note [In-place operators without
    boxing]): the caller's own tensor, bumped once, the CPU's bits, one unboxed call each; and
    what the fast path leaves alone gives the CPU's answer."""
    cases = {
        "add_ alpha": lambda x, y: x.add_(y, alpha=-0.1),
        "sub_": lambda x, y: x.sub_(y),
        "mul_ broadcast": lambda x, y: x.mul_(y[0]),
        "div_": lambda x, y: x.div_(y.abs() + 1),
        "mul_ a number": lambda x, y: x.mul_(0.9),
        "add_ itself": lambda x, y: x.add_(x),
    }
    for name, case in cases.items():
        x, xd = pair(6, 5)
        y = torch.randn(6, 5, generator=torch.Generator().manual_seed(21))
        yd = y.to(DEVICE)
        version, ptr = xd._version, xd.data_ptr()
        expected = case(x, y)
        before = _unboxed_calls()
        got = case(xd, yd)
        assert _unboxed_calls() - before >= 1, name
        assert got is xd and xd.data_ptr() == ptr and xd._version == version + 1, name
        assert torch.equal(xd.cpu(), expected), name
    # Left to the boxed fallback, with the CPU's answers: a CPU scalar written in place, integers
    # given a float, shapes that do not broadcast into self.
    outcomes = {}
    for device in ("cpu", DEVICE):
        answers = []
        for case in (lambda: torch.tensor(2.0).add_(torch.ones((), device=device)),
                     lambda: torch.arange(4, device=device).add_(0.5),
                     lambda: torch.ones(3, device=device).mul_(torch.ones(2, 3, device=device))):
            try:
                answers.append(case().cpu())
            except RuntimeError as error:
                answers.append(str(error).split("\n")[0])
        outcomes[device] = answers
    for got, expected in zip(outcomes[DEVICE], outcomes["cpu"]):
        assert got == expected if isinstance(expected, str) else torch.equal(got, expected)


# ---------------------------------------------------------------------------------------------
# Unboxed _foreach_ kernels (host_kernels.cc, Note [Foreach operators without boxing]).

def _lists(seed, sizes=((3, 4), (5,), (2, 2))):
    torch.manual_seed(seed)
    cpu = [torch.randn(*s) for s in sizes]
    return cpu, [t.to(DEVICE) for t in cpu]


@needs_host_sections
def test_the_optimizers_foreach_operators_take_the_unboxed_kernels_and_equal_the_cpu():
    """Each _foreach_ operator SGD, Adam and AdamW call, in place on the device lists, against
    the same on the CPU: equal bits, the caller's own tensors, one unboxed call each."""
    cases = {
        "add_ a list, alpha": lambda a, b, c: torch._foreach_add_(a, b, alpha=0.5),
        "add_ a scalar": lambda a, b, c: torch._foreach_add_(a, 2.0),
        "mul_ a scalar": lambda a, b, c: torch._foreach_mul_(a, 0.9),
        "mul_ a list": lambda a, b, c: torch._foreach_mul_(a, b),
        "div_ a scalar": lambda a, b, c: torch._foreach_div_(a, 3.0),
        "div_ scalars": lambda a, b, c: torch._foreach_div_(a, [1.0, 2.0, 3.0]),
        "lerp_": lambda a, b, c: torch._foreach_lerp_(a, b, 0.1),
        "addcmul_": lambda a, b, c: torch._foreach_addcmul_(a, b, c, value=0.3),
        "addcdiv_ a scalar": lambda a, b, c: torch._foreach_addcdiv_(a, b, c, value=0.3),
        "addcdiv_ scalars": lambda a, b, c: torch._foreach_addcdiv_(a, b, c, [0.1, 0.2, 0.3]),
        "maximum_": lambda a, b, c: torch._foreach_maximum_(a, b),
    }
    for name, case in cases.items():
        (a, ad), (b, bd), (c, cd) = _lists(1), _lists(2), _lists(3)
        c, cd = [t.abs() + 1 for t in c], [t.abs() + 1 for t in cd]  # divisors
        ptrs = [t.data_ptr() for t in ad]
        case(a, b, c)
        before = _unboxed_calls()
        case(ad, bd, cd)
        assert _unboxed_calls() - before == 1, name
        assert [t.data_ptr() for t in ad] == ptrs, name
        for got, expected in zip(ad, a):
            assert torch.equal(got.cpu(), expected), name


@needs_host_sections
def test_functional_foreach_kernels_write_their_results_in_device_memory():
    (a, ad), (b, bd) = _lists(4), _lists(5)
    allocated = torch.opencl.memory_allocated()  # _foreach_sqrt, _foreach_add, _foreach_norm
    for op, args, dev_args in ((torch._foreach_sqrt, ([t.abs() for t in a],),
                                ([t.abs() for t in ad],)),
                               (torch._foreach_add, (a, b), (ad, bd)),
                               (torch._foreach_norm, (a,), (ad,))):
        before, adopted = _unboxed_calls(), oclvm._C.adopted_results()
        got = op(*dev_args)
        assert _unboxed_calls() - before == 1, op
        assert oclvm._C.adopted_results() - adopted == 3, op  # every result: no copies
        expected = op(*args)
        assert all(g.device.type == DEVICE and torch.equal(g.cpu(), e)
                   for g, e in zip(got, expected)), op
        del got
    gc.collect()
    assert torch.opencl.memory_allocated() == allocated


@needs_host_sections
def test_foreach_kernels_alias_a_tensor_named_twice_as_the_cpu_does():
    (a, ad), (b, bd) = _lists(6), _lists(7)
    torch._foreach_add_([a[0], a[0]], [b[0], a[0]])
    before = _unboxed_calls()
    torch._foreach_add_([ad[0], ad[0]], [bd[0], ad[0]])
    assert _unboxed_calls() - before == 1
    assert torch.equal(ad[0].cpu(), a[0])
    # The scale as a device scalar tensor (clip_grad_norm_'s coefficient), then as a CPU one.
    for scale in (torch.tensor(0.5, device=DEVICE), torch.tensor(0.25)):
        torch._foreach_mul_(a, scale.cpu())
        before = _unboxed_calls()
        torch._foreach_mul_(ad, scale)
        assert _unboxed_calls() - before == 1
        for got, expected in zip(ad, a):
            assert torch.equal(got.cpu(), expected)


@needs_host_sections
def test_foreach_kernels_leave_bad_and_unusual_lists_to_the_fallback():
    (a, ad), (b, bd) = _lists(8), _lists(9)
    snapshot = [t.cpu() for t in ad]
    stats = torch.opencl.memory_stats()
    # Lists of two lengths: refused (by torch's autograd layer, before any kernel of the device),
    # with nothing written or held, and the next operator runs.
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_(ad, bd[:2])
    for got, expected in zip(ad, snapshot):
        assert torch.equal(got.cpu(), expected)  # nothing written
    assert torch.opencl.memory_stats()["allocated_bytes.all.current"] == \
        stats["allocated_bytes.all.current"]
    torch._foreach_add_(ad, 1.0)
    for got, expected in zip(ad, snapshot):
        assert torch.equal(got.cpu(), expected + 1.0)
    # Empty tensors and scattered views take the boxed fallback, with the CPU's results (the
    # device's own add_ loop, which takes an empty tensor, is not asked: the list is of halves).
    before = _unboxed_calls()
    columns = [torch.randn(8, 64)]
    columns_d = [columns[0].to(DEVICE)]
    torch._foreach_add_([columns[0][:, ::16]], 1.0)
    torch._foreach_add_([columns_d[0][:, ::16]], 1.0)
    assert torch.equal(columns_d[0].cpu(), columns[0])
    empty = [torch.empty(0, device=DEVICE, dtype=torch.half)]
    torch._foreach_add_(empty, 1.0)
    assert _unboxed_calls() == before


# The device's own loops for SGD's operators (foreach_loops.cc, Note [Fused foreach loops]).

def _fused_calls():
    return oclvm._C.fused_foreach_calls()


@needs_host_sections
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sgds_foreach_operators_run_the_devices_loops_and_equal_the_cpu_bit_for_bit(dtype):
    """Lengths that end inside and on a vector, one past the intra-op grain (split over the
    threads), an empty tensor; alphas and scalars of every kind the loops take."""
    torch.manual_seed(11)
    sizes = [(1,), (7,), (3, 11), (64, 32), (40000,), (0,)]
    cases = {
        "add_ a list, alpha -0.1": lambda a, b: torch._foreach_add_(a, b, alpha=-0.1),
        "add_ a list, alpha 1": lambda a, b: torch._foreach_add_(a, b),
        "add_ a list, integer alpha": lambda a, b: torch._foreach_add_(a, b, alpha=3),
        "add_ a scalar": lambda a, b: torch._foreach_add_(a, 1e-8),
        "add_ an integer": lambda a, b: torch._foreach_add_(a, -2),
        "mul_ a scalar": lambda a, b: torch._foreach_mul_(a, 0.9),
        "mul_ an integer": lambda a, b: torch._foreach_mul_(a, 3),
        "mul_ by infinity": lambda a, b: torch._foreach_mul_(a, float("inf")),
    }
    for name, case in cases.items():
        a = [torch.randn(s, dtype=dtype) for s in sizes]
        b = [torch.randn(s, dtype=dtype) for s in sizes]
        ad, bd = [t.to(DEVICE) for t in a], [t.to(DEVICE) for t in b]
        ptrs = [t.data_ptr() for t in ad]
        case(a, b)
        before = _fused_calls()
        case(ad, bd)
        assert _fused_calls() - before == 1, name
        assert [t.data_ptr() for t in ad] == ptrs, name
        for got, expected in zip(ad, a):
            assert torch.equal(got.cpu(), expected), name
        for got, expected in zip(bd, b):
            assert torch.equal(got.cpu(), expected), name  # read, not written


@needs_host_sections
def test_sgd_with_momentum_steps_on_the_devices_loops_as_the_cpu_steps():
    """torch's foreach SGD on the device (its default there) against the CPU's per-tensor SGD
    (its default): the same parameters, bit for bit, after each step."""
    def steps(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                                    weight_decay=1e-4)
        x, y = torch.randn(64, 32).to(device), torch.randint(0, 4, (64,)).to(device)
        for _ in range(4):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            yield [p.detach().cpu() for p in model.parameters()]
    before = _fused_calls()
    for got, expected in zip(steps(DEVICE), steps("cpu")):
        for g, e in zip(got, expected):
            assert torch.equal(g, e)
    assert _fused_calls() - before >= 8  # two add_ a step at least, after the first


@needs_host_sections
def test_what_the_devices_loops_do_not_take_runs_as_before_with_the_cpus_answer():
    """Each list or value the loops leave alone: the result, or the error, is the CPU's, and
    the loops ran nothing."""
    torch.manual_seed(12)
    base = torch.arange(9.0)
    base_d = base.to(DEVICE)
    overlapping = ([base[1:5]], [base[0:4]]), ([base_d[1:5]], [base_d[0:4]])
    # Contiguous both, and at one address, but a size-1 dimension's stride differs: ATen calls
    # that a partial overlap.
    same_address = tuple(([t[:4].view(1, 4)], [t.as_strided((1, 4), (1, 1))])
                         for t in (base, base_d))
    cases = {
        "halves": ([torch.randn(5, dtype=torch.half)], [torch.randn(5, dtype=torch.half)], 0.5),
        "a transposed tensor": ([torch.randn(4, 6).t()], [torch.randn(6, 4)], 0.5),
        "other broadcast": ([torch.randn(2, 5)], [torch.randn(5)], 0.5),
        "other of another dtype": ([torch.randn(5)], [torch.randn(5, dtype=torch.float64)], 0.5),
        "a boolean alpha": ([torch.randn(5)], [torch.randn(5)], True),
        "a complex alpha": ([torch.randn(5)], [torch.randn(5)], 1j),
        "an alpha beyond float": ([torch.randn(5)], [torch.randn(5)], 1e300),
        "integers": ([torch.arange(5)], [torch.arange(5)], 2),
        "a pair that partly overlaps": (*overlapping[0], 0.5),
        "one address, two layouts": (*same_address[0], 0.5),
    }
    for name, (a, b, alpha) in cases.items():
        if name == "a pair that partly overlaps":
            lists = {"cpu": overlapping[0], DEVICE: overlapping[1]}
        elif name == "one address, two layouts":
            lists = {"cpu": same_address[0], DEVICE: same_address[1]}
        else:
            lists = {"cpu": ([t.clone() for t in a], b),
                     DEVICE: ([t.to(DEVICE) for t in a], [t.to(DEVICE) for t in b])}
        outcomes = {}
        for device, (x, y) in lists.items():
            before = _fused_calls()
            try:
                torch._foreach_add_(x, y, alpha=alpha)
                outcomes[device] = [t.cpu() for t in x]
            except RuntimeError as error:
                outcomes[device] = str(error).split("\n")[0]
            if device == DEVICE:
                assert _fused_calls() == before, name
        if isinstance(outcomes["cpu"], str):
            assert outcomes[DEVICE] == outcomes["cpu"], name
        else:
            assert all(torch.equal(g, e) for g, e in zip(outcomes[DEVICE], outcomes["cpu"])), name
    assert torch.equal(base_d.cpu(), base)
    # A scale beyond float's range: the CPU's answer, whatever it is, and no loop.
    x = [torch.randn(5)]
    xd = [x[0].to(DEVICE)]
    outcomes = []
    before = _fused_calls()
    for lst in (x, xd):
        try:
            torch._foreach_mul_(lst, 1e300)
            outcomes.append(lst[0].cpu())
        except RuntimeError as error:
            outcomes.append(str(error))
    assert _fused_calls() == before
    assert type(outcomes[0]) is type(outcomes[1])
    assert outcomes[0] == outcomes[1] if isinstance(outcomes[0], str) else \
        torch.equal(outcomes[0], outcomes[1])


FUSED_UNDER_DEFAULT_KERNELS = """
import torch, oclvm
assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
torch.manual_seed(13)
for dtype in (torch.float32, torch.float64):
    a, b = [torch.randn(1000, dtype=dtype)], [torch.randn(1000, dtype=dtype)]
    ad, bd = [a[0].to("opencl")], [b[0].to("opencl")]
    before = oclvm._C.fused_foreach_calls()
    torch._foreach_add_(a, b, alpha=-0.1)
    torch._foreach_add_(ad, bd, alpha=-0.1)
    assert oclvm._C.fused_foreach_calls() - before == 1
    assert torch.equal(ad[0].cpu(), a[0]), dtype
print("equal")
"""


@needs_host_sections
def test_add_with_alpha_rounds_as_the_cpus_default_kernels_round():
    """ATen's DEFAULT kernels (no AVX2) round alpha's product and the sum apart; the device's
    loop follows the kernels ATen chose (Note [Fused foreach loops])."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    done = subprocess.run([sys.executable, "-c", FUSED_UNDER_DEFAULT_KERNELS], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "equal"


@needs_host_sections
@pytest.mark.parametrize("op", [
    pytest.param(lambda t: torch._foreach_mul_(t, 2.0), id="mul_ (the device's loop)"),
    pytest.param(lambda t: torch._foreach_div_(t, 2.0), id="div_ (host aliases)"),
    pytest.param(lambda t: torch._foreach_clamp_min_(t, 0.0), id="clamp_min_ (boxed)"),
])
def test_foreach_operators_in_place_bump_versions_and_refuse_inference_tensors(op):
    """As the CPU's per-tensor operators do: autograd then sees a saved tensor changed, and an
    inference tensor is refused outside inference mode (before anything is written, where the
    CPU writes first)."""
    outcomes = {}
    for device in ("cpu", DEVICE):
        torch.manual_seed(14)
        w = torch.randn(3, device=device)
        x = torch.randn(3, device=device, requires_grad=True)
        y = (x * w).sum()
        op([w])
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
        with torch.inference_mode():
            frozen = torch.ones(3, device=device)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor") as error:
            op([frozen])
        outcomes[device] = (w._version, str(error.value))
        if device == DEVICE:
            assert torch.equal(frozen.cpu(), torch.ones(3))  # nothing written
    assert outcomes[DEVICE] == outcomes["cpu"]


@needs_host_sections
def test_foreach_kernels_over_hundreds_of_parameters_equal_the_cpu():
    """Long lists (an optimizer over a large model) past host_aliases' linear search, with views
    of one storage at several places in them."""
    torch.manual_seed(10)
    base = torch.randn(40)
    cpu = [torch.randn(3) for _ in range(300)] + [base[i * 8:(i + 1) * 8] for i in range(5)]
    other = [torch.randn_like(t) for t in cpu]
    base_d = base.to(DEVICE)
    dev = [t.to(DEVICE) for t in cpu[:300]] + [base_d[i * 8:(i + 1) * 8] for i in range(5)]
    other_d = [t.to(DEVICE) for t in other]
    torch._foreach_addcmul_(cpu, other, other, value=0.5)
    before = _unboxed_calls()
    torch._foreach_addcmul_(dev, other_d, other_d, value=0.5)
    assert _unboxed_calls() - before == 1
    for got, expected in zip(dev, cpu):
        assert torch.equal(got.cpu(), expected)
    assert torch.equal(base_d.cpu(), base)


@needs_host_sections
def test_a_foreach_kernel_that_raises_in_its_section_changes_nothing_and_holds_nothing():
    """Integer lists added floats in place: the CPU kernel refuses the cast inside the section, as
    on the CPU; the section ends, nothing is written or held, and the next operator runs."""
    ints = [torch.arange(4), torch.arange(3)]
    ints_d = [t.to(DEVICE) for t in ints]
    floats_d = [torch.rand(4, device=DEVICE), torch.rand(3, device=DEVICE)]
    with pytest.raises(RuntimeError, match="can't be cast") as on_cpu:
        torch._foreach_add_(ints, [t.cpu() for t in floats_d])
    allocated = torch.opencl.memory_allocated()
    before = _unboxed_calls()
    with pytest.raises(RuntimeError) as on_device:
        torch._foreach_add_(ints_d, floats_d)
    assert _unboxed_calls() - before == 1
    assert str(on_device.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    assert torch.opencl.memory_allocated() == allocated
    for got, expected in zip(ints_d, ints):
        assert torch.equal(got.cpu(), expected)
    torch._foreach_add_(ints_d, 1)
    assert torch.equal(ints_d[0].cpu(), ints[0] + 1)
